"""``torchfl bugreport``: a Markdown issue report in the four parts of a good one: environment (every
framework's version, how torch-fl was installed, emulation named as such), the log around the last error,
expected vs actual (actual filled from the log's last exception), and a reproduction.

Secrets stay out (`torch_fl.redact`, docs/cli.md "Redaction"), over the whole report: every rule finds
secrets (environment variables by name and by value shape, vendors' token formats, key names and
assignment shapes, URL credentials), each value found is replaced wherever it occurs, then every token of
a random form left is masked (default deny). A secret pasted into FL_DEVICE is redacted in the variable
list, the device line and doctor's problem text alike. The home directory is written as ``~`` and the user
name as ``<user>``. The report is always produced (rc 0), also when doctor finds problems: they are listed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import sys
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import _toml
from ..description import registry
from ..errors import TorchFLError
from ..redact import REDACTED, SECRET_WORDS, USER, is_secret, redact, redact_value, secret_name, secret_values
from ..report import plural
from .args import add_json, positive_int


class _Doctor:
    """torch_fl.analysis.doctor, imported on first use: it imports torch, and `torchfl bugreport --help`
    needs none."""

    def __getattr__(self, name: str) -> Any:
        from ..analysis import doctor as module

        return getattr(module, name)


doctor = _Doctor()

__all__ = ["REDACTED", "SECRET_WORDS", "USER", "build_report", "is_secret", "redact", "relevant_env",
           "secret_name"]

DEFAULT_LINES = 30
# The frameworks whose versions decide most reports (installed ones are listed, by distribution name).
FRAMEWORKS = ("numpy", "transformers", "accelerate", "lightning", "pytorch-lightning", "lightning-fabric",
              "deepspeed", "peft", "datasets", "diffusers", "timm", "torchvision", "torchaudio", "triton",
              "safetensors", "tokenizers", "huggingface-hub", "bitsandbytes", "flash-attn", "xformers", "vllm",
              "onnx", "onnxruntime", "torchmetrics", "megatron-core", "apex")
# Always worth seeing: they decide which shared libraries and Python modules load.
_FIXED_VARS = ("LD_LIBRARY_PATH", "PYTHONPATH")


# Environment --------------------------------------------------------------------------------------
def relevant_env(environ: Mapping[str, str], visible_env: str = "") -> dict[str, str]:
    """FL_* plus the variables of every device stack torch-fl knows, values of secrets redacted (by name,
    and by the shape of the value: FL_CONFIG=https://host/c.toml?token=... is still a token)."""
    return {name: redact_value(name, environ[name]) for name in _relevant_names(environ, visible_env)}


def _relevant_names(environ: Mapping[str, str], visible_env: str = "") -> list[str]:
    prefixes = ("FL_", *_stack_prefixes())
    return sorted(name for name in environ if name.startswith(prefixes) or name in (*_FIXED_VARS, visible_env))


def _stack_prefixes() -> tuple[str, ...]:
    # CUDA_VISIBLE_DEVICES -> CUDA_, ASCEND_RT_VISIBLE_DEVICES -> ASCEND_: each stack's variables share
    # the prefix of its visible-devices variable, and the descriptions know every stack.
    try:
        known = registry.descriptions().values()
    except TorchFLError:
        return ()
    return tuple(sorted({d.visible_devices_env.split("_")[0] + "_" for d in known if d.visible_devices_env}))


# Log ----------------------------------------------------------------------------------------------
def tail(path: Path, lines: int) -> str:
    with path.open(encoding="utf-8", errors="replace") as handle:
        return "".join(deque(handle, maxlen=lines)).rstrip("\n")


# An exception line as Python prints it (`RuntimeError: ...`, `torch.OutOfMemoryError: ...`), and the lines
# of other tools that say something failed.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Fault)\b(?::.*)?$")
_ERROR = re.compile(r"\b(?:ERROR|FATAL|CRITICAL|Segmentation fault|core dumped|Killed|Aborted)\b")
_TRACEBACK = "Traceback (most recent call last):"
_BEFORE = 5  # lines of context kept before the traceback (what the program was doing)


def excerpt(lines: list[str], budget: int, skipped: int = 0) -> tuple[list[str], str]:
    """About `budget` lines around the last error of a log: the last traceback (from a few lines before it
    to its exception line and a few after) or the last error line; the lines of a longer traceback's middle
    are cut, and the note says what was left out. Without an error, the last `budget` lines. `skipped`:
    lines of the log before `lines` (not kept in memory)."""
    n = len(lines)
    last = next((i for i in range(n - 1, -1, -1) if _EXCEPTION.match(lines[i].strip())
                 or _ERROR.search(lines[i])), None)
    if last is None:
        kept = lines[-budget:]
        return kept, (f"the last {len(kept)} of {n + skipped} lines (no error or traceback found)"
                      if n + skipped > len(kept) else f"all {n} lines (no error or traceback found)")
    start = next((i for i in range(last, max(-1, last - 2000), -1) if lines[i].strip() == _TRACEBACK), last)
    first, end = max(0, start - _BEFORE), min(n, last + 1 + _BEFORE)
    spare = budget - (end - first)
    if spare > 0:  # a short traceback: more of what led to it (two thirds) and of what followed
        first = max(0, first - spare * 2 // 3)
        end = min(n, end + budget - (end - first))
        first = max(0, first - (budget - (end - first)))
    if end - first > budget:  # fewer lines after the error first
        end = min(end, last + 1 + min(_BEFORE, budget // 6))
    span = lines[first:end]
    cut_middle = 0
    if len(span) > budget:
        # a long traceback: its head (what ran) and its tail (where it failed), the frames between cut;
        # a lone error line: the lines that led to it
        head = budget // 3 if start < last else 0
        cut_middle = len(span) - budget
        if head:
            span = [*span[:head], f"[... {cut_middle} lines of the traceback cut ...]", *span[head + cut_middle:]]
        else:
            first += cut_middle
            span, cut_middle = span[cut_middle:], 0
    parts = [f"lines {first + 1 + skipped}-{end + skipped} of {n + skipped}, around the last "
             + ("traceback" if start < last else "error line")]
    if first + skipped:
        parts.append(f"{_lines(first + skipped)} before cut")
    if cut_middle:
        parts.append(f"{_lines(cut_middle)} of the traceback cut")
    if n - end:
        parts.append(f"{_lines(n - end)} after cut")
    return span, "; ".join(parts)


def _lines(n: int) -> str:
    return plural(n, "line")


def last_exception(lines: list[str]) -> str:
    """The log's last exception line (`RuntimeError: ...`), '' when it has none."""
    return next((line.strip() for line in reversed(lines) if _EXCEPTION.match(line.strip())), "")


def _fence(text: str, lang: str = "") -> str:
    # A fence longer than any backtick run inside keeps a pasted log from closing the block early.
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


# Report -------------------------------------------------------------------------------------------
def build_report(log: Path | None, lines: int, environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    try:
        data = doctor.collect()
    except Exception as exc:  # the report is how a broken setup gets reported: never let doctor stop it
        data = doctor._skeleton()
        data["errors"].append({"stage": "doctor", "type": type(exc).__name__, "message": str(exc)})
    log_lines, skipped = _read(log) if log is not None else ([], 0)
    actual = last_exception(log_lines)
    sections = [
        "# torch-fl bug report",
        "<!-- Generated by `torchfl bugreport`. Secrets (variables named *TOKEN*, *KEY*, *SECRET*, "
        "*PASSWORD*; vendors' token formats, URL credentials, bearer and API tokens, secret-named keys; each "
        "value found redacted everywhere; every other random-looking token) are redacted, the home "
        "folder is ~ and the user name <user>; check the rest before posting. -->",
        "## Environment and versions", _environment(data, environ),
        "## Error log", _log_section(log, log_lines, lines, skipped),
        "## Expected vs actual behaviour",
        "**Expected:** <!-- what should happen -->\n\n"
        + (f"**Actual:** `{actual}` (the log's last exception; say so if it is not the problem)" if actual else
           "**Actual:** <!-- what happens instead; the full error message belongs in the log above -->"),
        "## Minimal reproduction",
        "<!-- The smallest script that shows the problem; run it with FL_LOG=DEBUG for details. -->\n\n"
        + _fence("import torch\nimport torch_fl\n\ndev = torch.fl.device()\n"
                 "# ... the few lines that fail ...", "python"),
    ]
    # One value redacted everywhere: a secret in a listed variable (FL_DEVICE=<a token> by mistake) is
    # also the device line and doctor's problem text, so the secret parts of every listed value are
    # replaced wherever they occur, with every secret the text rules find anywhere in the report.
    known = set().union(*(secret_values(name, environ[name])
                          for name in _relevant_names(environ, data["visible_devices"]["env"])))
    # torch-fl's own digests stay readable (a description's sha256 names the exact file)
    safe = {data["description"]["sha256"]} - {""}
    return redact("\n\n".join(sections) + "\n", environ, known=known, safe=safe)


# The log lines kept in memory: the last error is looked for among them (a log of gigabytes stays cheap).
_SCAN_LINES = 20_000


def _read(log: Path) -> tuple[list[str], int]:
    """The log's last _SCAN_LINES lines, and how many lines came before them."""
    total = 0
    kept: deque[str] = deque(maxlen=_SCAN_LINES)
    with log.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            kept.append(line.rstrip("\r\n"))
            total += 1
    return list(kept), total - len(kept)


def _environment(data: dict[str, Any], environ: Mapping[str, str]) -> str:
    bullets = "\n".join(f"- **{key}**: {value}" for key, value in _facts(data))
    variables = relevant_env(environ, data["visible_devices"]["env"])
    listing = "\n".join(f"{k}={v}" for k, v in variables.items()) or "(none of the relevant variables set)"
    problems = doctor.diagnose(data)
    verdict = "\n".join(f"{i}. {p}" for i, p in enumerate(problems, 1)) or "none (healthy)"
    return (f"{bullets}\n\n**Environment variables** (FL_*, device stacks, library paths):\n\n"
            f"{_fence(listing)}\n\n**Problems found by `torchfl doctor`:**\n\n{verdict}")


def _facts(data: dict[str, Any]) -> Iterable[tuple[str, str]]:
    desc, dev, check = data["description"], data["device"], data["self_check"]
    routes = ", ".join(f"{k} {v}" for k, v in data["routes"].items()) or "not computed"
    emulated = _emulated(data)
    yield from (
        ("torch-fl", f"{data['torch_fl_version']} ({installed_as()})"),
        ("torch", data["torch_version"]),
        ("frameworks", frameworks() or "none of " + ", ".join(FRAMEWORKS[:4]) + ", ... installed"),
        ("python", f"{data['python']['version']} ({data['python']['executable']})"),
        ("OS", data["platform"]),
        ("runs on", data["environment"]),
        ("plugin", _plugin(data, emulated)),
        ("runtime", data["runtime_version"] or "none reported"),
        ("device", f"{dev['requested'] or '?'} -> {dev['resolved'] or 'not resolved'} "
                   f"({data['device_name'] or 'unknown name'}, vendor {data['vendor'] or '?'})"
                   + (f", EMULATED on the CPU by torch-fl: no {data['vendor'] or 'vendor'} hardware" if emulated
                      else "")),
        ("backend", f"{data['backend']['name'] or '?'} ({data['backend']['source'] or 'not loaded'})"),
        ("device map", f"{doctor.map_text(data['device_map'])} ({data['device_map_source'] or 'not built'})"),
        ("description", f"{desc['name'] or '?'} ({desc['path'] or '?'}, sha256 {desc['sha256'][:12] or '?'})"),
        ("routes", f"{routes} (other ops follow ops.default = {data['route_default'] or '?'})"),
        ("self-check", f"{'ok' if check['ok'] else 'FAILED'}: {check['detail']}"),
    )


def _emulated(data: dict[str, Any]) -> bool:
    """The device is torch-fl's emulation of a chip (FL_DEVICE=emu:NAME), not the chip."""
    # an emulator loaded earlier in this process does not make a cpu device emulated
    return bool((data["emulation"].get("emulator") and data["device_type"] not in ("", "cpu"))
                or data.get("plugin_emulated") or (data["device"]["requested"] or "").startswith("emu:"))


def _plugin(data: dict[str, Any], emulated: bool) -> str:
    plugin = data["plugin"]
    if not plugin:
        return "none (the backend is built into torch)"
    if emulated:
        answers = (f"; torch-fl's emulation {data['plugin_emulated']} answers `import {plugin}`"
                   if data.get("plugin_emulated") else "")
        return f"{plugin} is EMULATED by torch-fl (no real {plugin} is loaded{answers})"
    if data["plugin_installed"] is False:
        return f"{plugin} NOT INSTALLED"
    return f"{plugin} {data['plugin_version'] or '(version unknown)'}"


def frameworks() -> str:
    """'numpy 2.4.6, transformers 5.25.0, ...' for the FRAMEWORKS installed (from metadata: nothing imported)."""
    found = []
    for name in FRAMEWORKS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def installed_as(name: str = "torch-fl") -> str:
    """How a distribution was installed, from its metadata (PEP 610's direct_url.json): an editable
    install, a local directory, a wheel or sdist file, a VCS URL, or from an index."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed: imported from a source tree on sys.path"
    installer = (dist.read_text("INSTALLER") or "").strip() or "an unknown installer"
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except json.JSONDecodeError:
        direct = None
    if not isinstance(direct, dict):
        return f"from a package index by {installer}"
    url = direct.get("url", "?")
    if "dir_info" in direct:
        editable = direct["dir_info"].get("editable")
        return f"{'editable' if editable else 'from a local directory'} install of {url} by {installer}"
    if "vcs_info" in direct:
        vcs = direct["vcs_info"]
        return f"from {vcs.get('vcs', 'vcs')} {url}@{vcs.get('commit_id', '?')[:12]} by {installer}"
    kind = "wheel" if url.endswith(".whl") else "sdist" if url.endswith((".tar.gz", ".zip")) else "archive"
    return f"{kind} {url} by {installer}"


def _log_section(log: Path | None, log_lines: list[str], lines: int, skipped: int = 0) -> str:
    if log is None:
        return ("No log attached. Capture one and run bugreport again:\n\n"
                + _fence("FL_LOG=DEBUG python train.py 2> err.log\n"
                         "torchfl bugreport --log err.log", "sh"))
    if not log_lines:
        return f"From `{log}`: the file is empty."
    kept, note = excerpt(log_lines, lines, skipped)
    return f"From `{log}`: {note}.\n\n" + _fence("\n".join(kept), "text")


# Command ------------------------------------------------------------------------------------------
def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name, help=help_text,
        description="Print a Markdown issue report: environment, framework versions and how torch-fl was "
                    "installed (from `torchfl doctor`), the lines of an error log around its last error, the "
                    "actual behaviour from its last exception, and a reproduction placeholder. Secrets and "
                    "every random-looking token are redacted.")
    parser.add_argument("--log", metavar="FILE", type=Path, default=None,
                        help="error log; the lines around its last error or traceback go into the report")
    parser.add_argument("--lines", metavar="N", type=positive_int, default=DEFAULT_LINES,
                        help=f"about how many log lines to include (default {DEFAULT_LINES})")
    parser.add_argument("-o", "--output", metavar="FILE", type=Path, default=None,
                        help="write the report to FILE instead of stdout")
    add_json(parser, what="the report (its Markdown in one object)")


def run(args: argparse.Namespace) -> int:
    from ..report import Report
    from .exits import CommandError
    from .output import emit

    if args.log is not None and not args.log.is_file():
        # say what it is: a FIFO or /dev/zero would be read forever, a folder is not "missing"
        try:
            what = f"it is {_toml.file_kind(os.stat(args.log).st_mode)}, not a log file"
        except FileNotFoundError:
            what = "no such file"
        except OSError as exc:
            what = exc.strerror or str(exc)
        raise CommandError(f"--log {args.log}: {what}")  # bad input (cli/exits)
    markdown = build_report(args.log, args.lines)
    data = {"log": None if args.log is None else str(args.log), "markdown": markdown}
    emit(Report("torch-fl bug report", data, text=markdown), json_path=args.json, output=args.output)
    if args.output is not None:
        print(f"wrote {args.output}; review it, then paste it into a new issue", file=sys.stderr)
    return 0
