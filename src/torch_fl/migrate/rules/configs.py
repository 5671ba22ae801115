"""FL107 and FL504: config defaults that name CUDA or NCCL, in Python (attribute assignments and fields of
config classes) and in YAML, JSON and TOML config files. The two codes live in one module because they
share their detection: a key whose name says device (FL107) or backend (FL504) set to ``"cuda"`` or
``"nccl"``, where no device or backend argument of the same module takes it (that is FL105 / FL501)."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..configfiles import CONFIG_SUFFIXES, MAX_CONFIG_BYTES, config_values
from ..cuda_api import CUDA_DEVICE, NCCL
from .base import OTHER_VENDORS, RuleContext, alternatives, fixes, on, on_file, rule, str_value, terminal_name

if TYPE_CHECKING:
    import libcst as cst

    from .base import Finding, FixContext

# Calls that declare a field with a default: dataclasses.field(default=), attr.ib(default) / attrs.field
# (default=), pydantic.Field(default).
_FIELD_CALLS = frozenset({"field", "ib", "attrib", "Field"})
_POSITIONAL_DEFAULT = frozenset({"ib", "attrib", "Field"})
# CI and tool settings, not the program's config: their `device: cuda` picks a build matrix or a runner.
_CI_DIRS = frozenset({".github", ".gitlab", ".circleci", ".buildkite", ".azure-pipelines"})
_FILE_NOTE = "no automatic fix: code elsewhere reads the file's string"
_PYTHON_NOTE = "unsafe: code elsewhere may compare it with \"{value}\" or save it"

rule(
        "FL107", "cuda-config-default",
        "Config key `{target}` is set to the CUDA device {text}", "{remedy}", "unsafe",
        what="A `\"cuda\"` or `\"cuda:N\"` default of a config key whose name says device (`device`, "
             "`eval_device`, `MODEL.DEVICE`), where no device argument of the same module takes it: an "
             "attribute or key assignment (`_C.MODEL.DEVICE = \"cuda\"`, `cfg.device = \"cuda\"`, "
             "`config[\"device\"] = \"cuda\"`), a field of a config class (dataclass, attrs, pydantic, or a plain "
             "class attribute: `device: str = \"cuda\"`, `field(default=\"cuda\")`, `Field(\"cuda\")`), a "
             "parameter default (`def __init__(self, device=\"cuda\")`, handed on where the scanner cannot follow "
             "it), the one literal a device-named function returns (`def device_type(self): return \"cuda\"`), "
             "a keyword whose name says device or placement beyond `device=` (`placement_policy=\"cuda\"`), or a "
             "key of a YAML, JSON or TOML file in the scanned tree (`device: cuda`, `\"device\": \"cuda\"`). Keys "
             "under a section named for a vendor (`cuda:`, `npu:`) are a per-vendor table and not reported. Also "
             "each arm of a conditional default (`cfg.MODEL.DEVICE = \"cuda:{}\".format(i) if n > 0 else "
             "\"cpu\"`; a device string built at run time gets no fix), and an `accelerator` key set to "
             "`\"cuda\"` or `\"gpu\"` (Lightning-style trainers and their YAML: unsafe fix to `\"auto\"`).",
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
                  "may compare with \"cuda\", save or print (a class field's or parameter's replacement runs "
                  "when the module is imported). A config file gets no fix: its value is read by code the scanner does not see, "
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
             "\"nccl\"` in fairseq and gpt-neox), a parameter default (`def setup(launcher, backend=\"nccl\")`, "
             "handed to another module's `init_dist`), a keyword whose name says backend or process group "
             "beyond `backend=` (torchft's `process_group=\"nccl\"`), or a key of a YAML, JSON or TOML file in "
             "the scanned tree (`dist_backend: nccl`).",
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


# Words of a key's name that say it holds a device ("placement": ColossalAI's `placement_policy="cuda"`)
# or a process-group backend (torchft's `process_group="nccl"`).
_DEVICE_WORDS = ("device", "placement")
_BACKEND_WORDS = ("backend", "process_group")


def key_kind(name: str, value: str) -> str | None:
    """"device", "accelerator" or "backend" when a key called `name` set to `value` names CUDA or NCCL as a
    default (Lightning's `accelerator` takes "cuda" or "gpu")."""
    lowered = name.lower()
    if "accelerator" in lowered and value in ("cuda", "gpu"):
        return "accelerator"
    if any(word in lowered for word in _DEVICE_WORDS) and CUDA_DEVICE.fullmatch(value):
        return "device"
    if any(word in lowered for word in _BACKEND_WORDS) and value == NCCL:
        return "backend"
    return None


def _remember(det: RuleContext, name: str, literal: ast.expr | None, target: str, line: int | None = None) -> None:
    text = str_value(literal) if literal is not None else None
    kind = key_kind(name, text) if text is not None else None
    if kind is not None:
        # (kind, literal, target, statement line): settled at the end of the file (config_defaults_settled)
        det.state(__name__).setdefault("defaults", []).append((kind, literal, target, line or det.stmt_line))


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
    if not name:
        return
    default = _field_default(value)
    if type(default) is not ast.IfExp:
        _remember(det, name, default, ast.unparse(target))
        return
    # `cfg.MODEL.DEVICE = "cuda:{}".format(i) if n > 0 else "cpu"`: each arm is a default of the key.
    for alt in alternatives(default):
        computed = _computed_cuda(alt)
        if computed and any(word in name.lower() for word in _DEVICE_WORDS):
            det.report("FL107", alt, None, target=ast.unparse(target), text=f"`{computed}`",
                       remedy="Default it to `torch.fl.device_type()` (the device's index is torch.fl's to pick)",
                       note="no automatic fix: the device's index is computed")
            det.claim(alt)
        else:
            _remember(det, name, alt, ast.unparse(target))


def _computed_cuda(node: ast.expr) -> str | None:
    """`"cuda:{}".format(i)`, `"cuda:%d" % i`, `f"cuda:{i}"`: a CUDA device string built at run time."""
    if type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr == "format":
        head = str_value(node.func.value)
    elif type(node) is ast.BinOp and type(node.op) is ast.Mod:
        head = str_value(node.left)
    elif type(node) is ast.JoinedStr and node.values:
        head = str_value(node.values[0])
    else:
        return None
    return ast.unparse(node) if head is not None and head.startswith("cuda") else None


@on("function")
def parameter_defaults(det: RuleContext, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """`def setup(backend: str = "nccl")`, `def __init__(self, device="cuda")`: the default of a parameter
    whose name says device or backend, wherever the value goes (another module's `init_dist`, a class
    it is handed to positionally); and `def device_type(self): return "cuda"`, a device-named function
    that returns one CUDA literal. Reported at the end unless the data flow (FL105 / FL501) took it."""
    if det.quiet:
        return
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True),
             *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None)]
    for arg, default in pairs:
        _remember(det, arg.arg, default, f"{node.name}({arg.arg}=...)")
    returns = [r for r in _returns(node.body) if r.value is not None]
    # One literal returned, every time (a function that picks among several is a dispatch, not a default).
    if len({str_value(r.value) for r in returns}) == 1:
        for r in returns:
            _remember(det, node.name, r.value, f"{node.name}()", r.lineno)


def _returns(body: list[ast.stmt]) -> list[ast.Return]:
    """The return statements of a function body, nested functions and classes left out."""
    found: list[ast.Return] = []
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if type(node) is ast.Return:
            found.append(node)  # type: ignore[arg-type]
        elif type(node) not in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))
    return found


@on("call")
def keyword_defaults(det: RuleContext, node: ast.Call, func: str | None) -> None:
    """`GeminiPlugin(placement_policy="cuda")`, `dict(tensor_placement_policy="cuda")`,
    `FaultTolerance(process_group="nccl")`: a keyword whose name says device or backend, beyond the
    arguments the device and backend rules know (`device=`, `backend=`, which claim theirs first). Not
    torch's own calls: their device keywords are the other rules' (`torch.autocast(device_type=)`,
    FL705's kernel registrations, torch.fl's `device_type="cuda"` naming a target on purpose)."""
    if det.quiet or (func or "").startswith(("torch.", "torch_fl.")):
        return
    for keyword in node.keywords:
        if keyword.arg is not None and id(keyword.value) not in det.done:
            _remember(det, keyword.arg, keyword.value, f"{terminal_name(node.func) or 'call'}({keyword.arg}=...)")


@on("settled")
def config_defaults_settled(det: RuleContext) -> None:
    """After the data flow (FL105 / FL501, which follow a default to its use) and the guards (a literal
    only a CUDA check reaches is fixed with the check): what is left is a config default."""
    for kind, literal, target, stmt_line in det.state(__name__).get("defaults", ()):
        if id(literal) in det.done:
            continue
        det.stmt_line = stmt_line
        if kind == "backend":
            det.report("FL504", literal, "unsafe", target=target, replacement="torch.fl.dist_backend()",
                       remedy="Replace with `torch.fl.dist_backend()`", note=_PYTHON_NOTE.format(value=NCCL))
            continue
        text = f'"{literal.value}"'
        if kind == "accelerator":
            det.report("FL107", literal, "unsafe", target=target, text=text, replacement='"auto"',
                       remedy='Replace with `"auto"` (Lightning picks the device there)',
                       note="unsafe: code elsewhere may compare it with \"cuda\" or \"gpu\"")
            continue
        index = CUDA_DEVICE.fullmatch(literal.value).group(1)
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
    if b"cuda" not in data and b"nccl" not in data and b"accelerator" not in data:
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
        elif kind == "accelerator":
            det.report("FL107", where, None, target=target, text=f'"{value.text}"', note=_FILE_NOTE,
                       remedy="Set it to `auto` (Lightning picks the device there)")
        else:
            det.report("FL107", where, None, target=target, text=f'"{value.text}"', note=_FILE_NOTE,
                       remedy="Leave the key out (or null) and default it in code to `torch.fl.device_type()`, "
                              "or run the code under the CUDA alias (`torchfl run`)")
    return lines


@fixes("FL107", "SimpleString")
def fix_config_device(rw: FixContext, original: cst.SimpleString, updated: cst.SimpleString,
                      finding: Finding) -> cst.BaseExpression | None:
    if finding.replacement is None or not (CUDA_DEVICE.fullmatch(str(original.evaluated_value))
                                           or finding.replacement == '"auto"'):
        return None
    return rw.expr(finding.replacement)


@fixes("FL504", "SimpleString")
def fix_config_backend(rw: FixContext, original: cst.SimpleString, updated: cst.SimpleString,
                       finding: Finding) -> cst.BaseExpression | None:
    return rw.fl_call("dist_backend") if original.evaluated_value == NCCL else None
