"""FL107 and FL504: config defaults that name CUDA or NCCL, in Python (attribute assignments and fields of
config classes) and in YAML, JSON and TOML config files. The two codes live in one module because they
share their detection: a key whose name says device (FL107) or backend (FL504) set to ``"cuda"`` or
``"nccl"``, where no device or backend argument of the same module takes it (that is FL105 / FL501)."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

from ..configfiles import CONFIG_SUFFIXES, MAX_CONFIG_BYTES, config_values
from ..cuda_api import CUDA_DEVICE, NCCL
from .base import OTHER_VENDORS, RuleContext, fixes, on, on_file, rule, str_value, terminal_name

# Calls that declare a field with a default: dataclasses.field(default=), attr.ib(default) / attrs.field
# (default=), pydantic.Field(default).
_FIELD_CALLS = frozenset({"field", "ib", "attrib", "Field"})
_POSITIONAL_DEFAULT = frozenset({"ib", "attrib", "Field"})
# CI and tool settings, not the program's config: their `device: cuda` picks a build matrix or a runner.
_CI_DIRS = frozenset({".github", ".gitlab", ".circleci", ".buildkite", ".azure-pipelines"})
_FILE_NOTE = "no automatic fix: code elsewhere reads the file's string"
_PYTHON_NOTE = "unsafe: code elsewhere may compare it with \"{value}\" or save it, and the replacement runs at import"

rule(
        "FL107", "cuda-config-default",
        "Config key `{target}` is set to the CUDA device {text}", "{remedy}", "unsafe",
        what="A `\"cuda\"` or `\"cuda:N\"` default of a config key whose name says device (`device`, "
             "`eval_device`, `MODEL.DEVICE`), where no device argument of the same module takes it: an "
             "attribute or key assignment (`_C.MODEL.DEVICE = \"cuda\"`, `cfg.device = \"cuda\"`, "
             "`config[\"device\"] = \"cuda\"`), a field of a config class (dataclass, attrs, pydantic, or a plain "
             "class attribute: `device: str = \"cuda\"`, `field(default=\"cuda\")`, `Field(\"cuda\")`), or a key "
             "of a YAML, JSON or TOML file in the scanned tree (`device: cuda`, `\"device\": \"cuda\"`). Keys "
             "under a section named for a vendor (`cuda:`, `npu:`) are a per-vendor table and not reported.",
        why="The default decides the device wherever the config is used (another module, a recipe that "
            "does not set it), so every run off CUDA fails with \"Torch not compiled with CUDA enabled\" "
            "unless someone overrides the key; detectron2's defaults and torchtune's 195 recipes do this.",
        example="""
_C.MODEL.DEVICE = "cuda"

@dataclass
class TrainConfig:
    device: str = "cuda"

# recipe.yaml
device: cuda
""",
        use_instead="""
_C.MODEL.DEVICE = torch.fl.device_type()

@dataclass
class TrainConfig:
    device: str = torch.fl.device_type()   # or field(default_factory=torch.fl.device_type)

# recipe.yaml: leave `device` out (or null) and default it in code to torch.fl.device_type(),
# or run the unchanged code under the CUDA alias (`torchfl run`), which sends "cuda" to torch.fl.device()
""",
        fix_notes="In Python the literal becomes `torch.fl.device_type()` (`\"cuda:0\"`: "
                  "`str(torch.fl.device(\"acc0\"))`; `\"cuda:N\"` with N > 0 is not fixed, since it would raise "
                  "at import on a host with fewer devices). Unsafe: the default is a string that code elsewhere "
                  "may compare with \"cuda\", save or print, and the replacement runs when the module is "
                  "imported. A config file gets no fix: its value is read by code the scanner does not see, "
                  "and the file cannot call torch.fl. Config files are `*.yaml`, `*.yml`, `*.json` and `*.toml` "
                  "under the scanned tree, up to 1 MiB (bigger ones are data), except CI and tool settings "
                  "(under `.github/`, `.gitlab/`, `.circleci/`, and dotfiles such as `.pre-commit-config.yaml`); "
                  "`# noqa: FL107` works in YAML and TOML comments.",

)

rule(
        "FL504", "nccl-config-default",
        "Config key `{target}` is set to the NCCL backend", "{remedy}", "unsafe",
        what="A `\"nccl\"` default of a config key whose name says backend (`backend`, `dist_backend`, "
             "`distributed_backend`), where no backend argument of the same module takes it: an attribute or "
             "key assignment (`cfg.backend = \"nccl\"`), a field of a config class (`distributed_backend: str = "
             "\"nccl\"` in fairseq and gpt-neox), or a key of a YAML, JSON or TOML file in the scanned tree "
             "(`dist_backend: nccl`).",
        why="The process group is created from the config elsewhere, so every multi-device run off NVIDIA "
            "GPUs fails (\"Distributed package doesn't have NCCL built in\") unless someone overrides the key.",
        example="""
@dataclass
class DistributedConfig:
    distributed_backend: str = "nccl"
""",
        use_instead="""
@dataclass
class DistributedConfig:
    distributed_backend: str = torch.fl.dist_backend()
""",
        fix_notes="In Python the literal becomes `torch.fl.dist_backend()`. Unsafe: the default may be "
                  "compared with \"nccl\" elsewhere, and the replacement runs when the module is imported. A "
                  "config file gets no fix (see FL107); the CUDA alias (`torchfl run`) maps \"nccl\" given to "
                  "`init_process_group` to the device's backend.",

)


def key_kind(name: str, value: str) -> str | None:
    """"device" or "backend" when a key called `name` set to `value` names CUDA or NCCL as a default."""
    lowered = name.lower()
    if "device" in lowered and CUDA_DEVICE.fullmatch(value):
        return "device"
    if "backend" in lowered and value == NCCL:
        return "backend"
    return None


def _field_default(value: ast.expr) -> ast.expr | None:
    """The default of `field(default=...)`, `attr.ib(...)`, `Field(...)`, or `value` itself."""
    if type(value) is not ast.Call:
        return value
    name = terminal_name(value.func)
    if name not in _FIELD_CALLS:
        return value
    default = next((kw.value for kw in value.keywords if kw.arg == "default"), None)
    if default is None and name in _POSITIONAL_DEFAULT and value.args:
        default = value.args[0]
    return default


@on("assign")
def config_default(det: RuleContext, target: ast.expr, value: ast.expr) -> None:
    """Remember `cfg.device = "cuda"` and `device: str = "cuda"` in a class body; reported at the end
    (config_defaults_settled) unless another rule has reported the literal by then."""
    if det.quiet:
        return
    if type(target) is ast.Name:
        name = target.id if det.in_class else None  # a variable is not a config key (FL105 follows it)
    elif type(target) is ast.Attribute:
        name = target.attr
    elif type(target) is ast.Subscript:
        name = str_value(target.slice)
    else:
        name = None
    literal = _field_default(value) if name else None
    text = str_value(literal)
    kind = key_kind(name, text) if name and text is not None else None  # type: ignore[arg-type]
    if kind is not None:
        det.config_defaults.append((kind, literal, ast.unparse(target), det.stmt_line))


@on("settled")
def config_defaults_settled(det: RuleContext) -> None:
    """After the data flow (FL105 / FL501, which follow a default to its use) and the guards (a literal
    only a CUDA check reaches is fixed with the check): what is left is a config default."""
    for kind, literal, target, stmt_line in det.config_defaults:
        if id(literal) in det.done:
            continue
        det.stmt_line = stmt_line
        if kind == "backend":
            det.report("FL504", literal, "unsafe", target=target, replacement="torch.fl.dist_backend()",
                       remedy="Replace with `torch.fl.dist_backend()`", note=_PYTHON_NOTE.format(value=NCCL))
            continue
        index = CUDA_DEVICE.fullmatch(literal.value).group(1)
        text = f'"{literal.value}"'
        if index not in (None, "0"):
            det.report("FL107", literal, None, target=target, text=text,
                       remedy=f'Default it to `str(torch.fl.device("acc{index}"))` where the device is chosen',
                       note="no automatic fix: evaluated at import, the replacement would raise on a host with "
                            f"fewer than {int(index) + 1} devices")
            continue
        replacement = "torch.fl.device_type()" if index is None else 'str(torch.fl.device("acc0"))'
        det.report("FL107", literal, "unsafe", target=target, text=text, replacement=replacement,
                   remedy=f"Replace with `{replacement}`", note=_PYTHON_NOTE.format(value="cuda"))


@on_file(*CONFIG_SUFFIXES)
def config_file(det: RuleContext, path: str) -> list[str] | None:
    """Device and backend keys of a config file. Returns the file's lines (for `# noqa` and columns), or
    None for a file that is not read: CI or tool settings (under .github/, a dotfile), too big (data),
    not text, or without "cuda" and "nccl"."""
    parts = Path(path).parts
    if parts[-1].startswith(".") or _CI_DIRS.intersection(parts):
        return None
    try:
        if os.stat(path).st_size > MAX_CONFIG_BYTES:
            return None
        data = Path(path).read_bytes()
    except OSError:
        return None
    if b"cuda" not in data and b"nccl" not in data:
        return None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    lines = text.splitlines()
    for value in config_values(text, Path(path).suffix):
        kind = key_kind(value.path[-1], value.text)
        if kind is None or any(key.lower() in OTHER_VENDORS or key.lower() == "cuda" for key in value.path[:-1]):
            continue
        line = lines[value.line - 1]
        where = (value.line, len(line[:value.start].encode()), value.line, len(line[:value.end].encode()))
        target = ".".join(value.path)
        det.stmt_line = value.line
        if kind == "backend":
            det.report("FL504", where, None, target=target, note=_FILE_NOTE,
                       remedy="Leave the key out (or null) and default it in code to `torch.fl.dist_backend()`, "
                              "or run the code under the CUDA alias (`torchfl run`)")
        else:
            det.report("FL107", where, None, target=target, text=f'"{value.text}"', note=_FILE_NOTE,
                       remedy="Leave the key out (or null) and default it in code to `torch.fl.device_type()`, "
                              "or run the code under the CUDA alias (`torchfl run`)")
    return lines


@fixes("FL107", "SimpleString")
def fix_config_device(rw: Any, original: Any, updated: Any, finding: Any) -> Any:
    if finding.replacement is None or not CUDA_DEVICE.fullmatch(str(original.evaluated_value)):
        return None
    return rw.expr(finding.replacement)


@fixes("FL504", "SimpleString")
def fix_config_backend(rw: Any, original: Any, updated: Any, finding: Any) -> Any:
    return rw.fl_call("dist_backend") if original.evaluated_value == NCCL else None
