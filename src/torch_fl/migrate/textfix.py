"""`torchfl fix` without libcst for the common fixes (issue 37 item 3): importing libcst alone costs about
as much CPU as scanning a 15k-line tree, so on a small tree a fix that imports it cannot stay within 1.5x
of the scan. Most fixes replace one expression with another whose text the scanner already knows (a device
string, ``.cuda()``, ``torch.cuda.synchronize``, a device choice); for those the rewrite edits the source at
the positions the scan has, and adds the ``torch_fl`` import after the top-of-file imports.

It is the libcst rewrite's shortcut, never a second opinion: every edit here is the text the rule's libcst
fix (rules/*.py) produces for that shape, and anything else (autocast and scaler calls, arguments that
move, imports to drop, a file that starts with code, nested findings, CRLF files) raises :class:`Unsure`,
and the file goes to libcst. tests/migrate/test_fix_speed.py checks that both give the same text on every
fixture.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Sequence
from typing import Any

from .cuda_api import CUDA_DEVICE, lookup
from .namerefs import _ast_name_refs, _Fallback, _segment_refs
from .precedence import IFEXP, char_col, places
from .rules.distributed import VENDOR_BACKENDS


class Unsure(Exception):
    """A shape this path does not handle: libcst rewrites the file."""


_STRING = re.compile(r"(?i)[ru]?(\"|')(?!\1\1)")  # a one-quote string literal with its prefix
_CUDA_CALL = re.compile(r"\.cuda\((\d*)\)")


class TextEdits:
    """The module's spelling (torch's local name, its quote style) and the edits made so far."""

    def __init__(self, source: str, tree: ast.Module, names: dict[str, str], torch_name: str, quote: str) -> None:
        self.source = source
        self.tree = tree
        self.names = names
        self.torch = torch_name
        self.quote = quote
        self.lines = source.split("\n")
        self.modules: set[str] = set()  # modules the fixed code names (`contextlib`)
        self.starts = [0]
        for line in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def offset(self, line: int, col0: int) -> int:
        return self.starts[line - 1] + col0

    def node_offsets(self, node: ast.expr) -> tuple[int, int]:
        end_line = node.end_lineno or node.lineno
        return (self.offset(node.lineno, char_col(self.lines, node.lineno, node.col_offset)),
                self.offset(end_line, char_col(self.lines, end_line, node.end_col_offset or 0)))

    def qual(self, node: ast.expr) -> str | None:
        if type(node) is ast.Name:
            return self.names.get(node.id)  # type: ignore[attr-defined]
        if type(node) is ast.Attribute:
            head = self.qual(node.value)  # type: ignore[attr-defined]
            return f"{head}.{node.attr}" if head else None  # type: ignore[attr-defined]
        return None

    # the texts the libcst fixes write (rewriter's _FixHelpers) --------------------------------------
    def expr(self, text: str) -> str:
        text = re.sub(r"\btorch\.", f"{self.torch}.", text)
        if self.quote == "'" and "'" not in text:
            text = text.replace('"', "'")
        return text

    def fl_call(self, attr: str, argument: str = "") -> str:
        return f"{self.torch}.fl.{attr}({argument})"

    def string(self, text: str, like: str | None) -> str:
        match = _STRING.match(like) if like is not None else None
        quote = match.group(1) if match else self.quote
        return f"{quote}{text}{quote}"

    def device(self, index: int | None, like: str | None = None) -> str:
        return self.fl_call("device") if index is None else self.fl_call("device", self.string(f"acc{index}", like))


def _literal(edits: TextEdits, node: ast.expr) -> tuple[str, str]:
    """A one-quote string literal's value and text; Unsure for anything else (an implicit concatenation,
    a triple-quoted or byte string)."""
    if type(node) is not ast.Constant or type(node.value) is not str:  # type: ignore[attr-defined]
        raise Unsure
    start, end = edits.node_offsets(node)
    text = edits.source[start:end]
    match = _STRING.match(text)
    if match is None or len(text) - match.end() != len(node.value) + 1 or "\\" in text:  # type: ignore[attr-defined]
        raise Unsure
    return node.value, text  # type: ignore[attr-defined]


def _cuda_index(value: str) -> int | None:
    match = CUDA_DEVICE.fullmatch(value)
    if match is None:
        raise Unsure
    return None if match.group(1) is None else int(match.group(1))


def _int(node: ast.expr | None) -> int:
    if type(node) is not ast.Constant or type(node.value) is not int or isinstance(node.value, bool):  # type: ignore[attr-defined]
        raise Unsure
    return node.value  # type: ignore[attr-defined]


def _replace_whole(edits: TextEdits, finding: Any, node: ast.expr) -> str:
    """The new text of an expression a fix replaces whole."""
    code = finding.code
    kind = type(node)
    if code in ("FL101", "FL104", "FL105", "FL107") and kind is ast.Constant:
        value, text = _literal(edits, node)
        if code == "FL101" and finding.replacement == '"auto"':
            return edits.string("auto", text)
        index = _cuda_index(value)
        if code == "FL107":
            if finding.replacement is None:
                raise Unsure
            return edits.expr(finding.replacement)
        if code == "FL105":
            return edits.fl_call("device_type") if index is None else f"str({edits.device(index, text)})"
        if code == "FL101" and finding.replacement is not None and \
                finding.replacement.startswith(("torch.fl.device_type(", "str(")):
            return edits.expr(finding.replacement)
        return edits.device(index, text)
    if code == "FL101" and kind is ast.Call and edits.qual(node.func) == "torch.device":  # type: ignore[attr-defined]
        return _torch_device(edits, node)  # type: ignore[arg-type]
    if code in ("FL501", "FL504") and kind is ast.Constant:
        value, _ = _literal(edits, node)
        if value != "nccl" and (code != "FL501" or value not in VENDOR_BACKENDS):
            raise Unsure
        return edits.fl_call("dist_backend")
    if code == "FL303" and kind is ast.Constant:
        value, _ = _literal(edits, node)
        if value != "cuda":
            raise Unsure
        return edits.fl_call("device_type")
    if finding.replacement is not None and ((code == "FL901" and kind is ast.IfExp) or (
            code == "FL106" and ((kind is ast.Constant and type(node.value) is int)  # type: ignore[attr-defined]
                                 or (kind is ast.Call and edits.qual(node.func) == "torch.device")))):  # type: ignore[attr-defined]
        return edits.expr(finding.replacement)
    raise Unsure


def _torch_device(edits: TextEdits, node: ast.Call) -> str:
    """torch.device("cuda") / ("cuda:N") / ("cuda", N) / (type="cuda", index=N), as rules/device.py's fix."""
    kinds: dict[str, ast.expr] = {}
    for i, arg in enumerate(node.args):
        if type(arg) is ast.Starred:
            raise Unsure
        kinds[("type", "index")[min(i, 1)]] = arg
    for kw in node.keywords:
        if kw.arg is None:
            raise Unsure
        kinds[kw.arg] = kw.value
    literal = kinds.get("type")
    if literal is None:
        raise Unsure
    value, text = _literal(edits, literal)
    index = _cuda_index(value)
    if "index" not in kinds:
        return edits.device(index, text)
    if index is not None:
        raise Unsure
    return edits.device(_int(kinds["index"]), text)


def _parts(edits: TextEdits, call: ast.Call) -> list[tuple[str | None, str, ast.expr]]:
    """A one-line call's arguments as (keyword, None for a positional, "**" for `**kwargs`; text; value), in a
    layout the libcst fix keeps as it is: `f(a, b=1)`, each comma followed by one space, no trailing comma.
    Unsure for any other layout."""
    start, end = edits.node_offsets(call)
    func_end = edits.node_offsets(call.func)[1]
    parts: list[tuple[int, str | None, str, ast.expr]] = []
    for arg in call.args:
        if type(arg) is ast.Starred:
            raise Unsure
        a, b = edits.node_offsets(arg)
        parts.append((a, None, edits.source[a:b], arg))
    for kw in call.keywords:
        a, b = edits.node_offsets(kw)  # type: ignore[arg-type]
        parts.append((a, "**" if kw.arg is None else kw.arg, edits.source[a:b], kw.value))
    parts.sort(key=lambda p: p[0])
    if edits.source[start:end] != edits.source[start:func_end] + "(" + ", ".join(p[2] for p in parts) + ")":
        raise Unsure
    return [(keyword, text, value) for _, keyword, text, value in parts]


_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")
_SCALER_POSITIONAL = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
_GATED = {"torch.amp.GradScaler": 5, "torch.amp.grad_scaler.GradScaler": 5}
_SCOPED = ("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast")
_PLAIN_ENABLED = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Compare)


def _keywords(parts: list[tuple[str | None, str, ast.expr]], names: tuple[str, ...]) -> list[tuple[str | None, str, ast.expr]]:
    """Positional arguments named by `names`, in order (rules/amp.py: torch.cuda.amp's order is not torch's)."""
    out = []
    positional = 0
    for keyword, text, value in parts:
        if keyword is None:
            if positional >= len(names):
                raise Unsure
            keyword, text = names[positional], f"{names[positional]}={text}"
            positional += 1
        out.append((keyword, text, value))
    return out


def _gate(edits: TextEdits, parts: list[tuple[str | None, str, ast.expr]], positional_before: int) -> list[str]:
    """rules/amp.py's _gate: `enabled=torch.fl.is_accelerator()` added, or and-ed into `enabled=`."""
    if sum(1 for keyword, _, _ in parts if keyword is None) > positional_before or any(
            keyword == "**" for keyword, _, _ in parts):
        raise Unsure
    out = []
    found = False
    for keyword, text, value in parts:
        if keyword == "enabled":
            found = True
            if not text.startswith("enabled="):
                raise Unsure
            shown = text[len("enabled="):]
            if shown.startswith("(") or (type(value) is ast.Constant and value.value is False):  # type: ignore[attr-defined]
                raise Unsure if shown.startswith("(") else _Keep
            if type(value) is ast.Constant and value.value is True:  # type: ignore[attr-defined]
                text = f"enabled={edits.fl_call('is_accelerator')}"
            else:
                shown = shown if type(value) in _PLAIN_ENABLED else f"({shown})"
                text = f"enabled={edits.fl_call('is_accelerator')} and {shown}"
        out.append(text)
    if not found:
        out.append(f"enabled={edits.fl_call('is_accelerator')}")
    return out


class _Keep(Exception):
    """`enabled=False`: the argument stays as it is."""


def _gated(edits: TextEdits, parts: list[tuple[str | None, str, ast.expr]], positional_before: int) -> list[str]:
    try:
        return _gate(edits, parts, positional_before)
    except _Keep:
        return [text for _, text, _ in parts]


def _amp(edits: TextEdits, finding: Any, node: ast.Call, need: int) -> str:
    """FL301 (torch.cuda.amp.autocast / GradScaler), FL302 and FL303 on a call, as rules/amp.py writes them."""
    if finding.replacement is not None or node.lineno != node.end_lineno:
        raise Unsure  # the decorator form (unsafe), or a call over lines
    qual = edits.qual(node.func) or ""
    parts = _parts(edits, node)
    device_type = edits.fl_call("device_type")
    if finding.code == "FL301":
        if not qual.endswith("autocast"):
            raise Unsure
        args = [device_type, *(text for _, text, _ in _keywords(parts, _AUTOCAST_POSITIONAL))]
        return _scoped(edits, f"{edits.torch}.autocast({', '.join(args)})", need)
    if finding.code == "FL302":
        if not qual.endswith("GradScaler"):
            raise Unsure
        args = _gated(edits, [(None, device_type, node), *_keywords(parts, _SCALER_POSITIONAL)], 1)
        return f"{edits.torch}.amp.GradScaler({', '.join(args)})"
    if qual not in _SCOPED and qual not in _GATED:
        raise Unsure
    replaced = []
    for i, (keyword, text, value) in enumerate(parts):
        if ((keyword is None and i == 0) or keyword in ("device_type", "device")) and \
                type(value) is ast.Constant and value.value == "cuda":  # type: ignore[attr-defined]
            _, literal = _literal(edits, value)
            text = text[:len(text) - len(literal)] + device_type
            replaced.append(i)
        parts[i] = (keyword, text, value)
    if len(replaced) != 1:
        raise Unsure
    func = edits.source[slice(*edits.node_offsets(node.func))]
    if qual in _SCOPED:
        return _scoped(edits, f"{func}({', '.join(text for _, text, _ in parts)})", need)
    return f"{func}({', '.join(_gated(edits, parts, _GATED[qual]))})"


def _scoped(edits: TextEdits, call: str, need: int) -> str:
    edits.modules.add("contextlib")
    text = f"{call} if {edits.fl_call('is_accelerator')} else contextlib.nullcontext()"
    return f"({text})" if need > IFEXP else text


def _edit(edits: TextEdits, finding: Any, node: ast.expr, need: int) -> tuple[int, int, str]:
    """(start, end, new text) of one finding's fix."""
    code = finding.code
    start, end = edits.node_offsets(node)
    if code in ("FL301", "FL302", "FL303") and type(node) is ast.Call:
        return start, end, _amp(edits, finding, node, need)
    if code == "FL102" and type(node) is ast.Call and type(node.func) is ast.Attribute \
            and node.func.attr == "cuda":
        value_end = edits.node_offsets(node.func.value)[1]
        match = _CUDA_CALL.fullmatch(edits.source, value_end, end)
        if match is None:
            raise Unsure
        index = int(match.group(1)) if match.group(1) else None
        return value_end, end, f".to({edits.device(index)})"
    if code in ("FL201", "FL202") and type(node) is ast.Call:
        qual = edits.qual(node.func) or ""
        if not qual.startswith("torch.cuda."):
            raise Unsure
        if code == "FL202":
            if qual != "torch.cuda.synchronize":
                raise Unsure
            replacement = f"{edits.torch}.fl.synchronize"
            takes_device = True
        else:
            entry = lookup(qual)
            if entry is None or finding.replacement is None or entry.short == "get_device_name":
                raise Unsure
            replacement = edits.expr(finding.replacement)
            takes_device = entry.takes_device
        device = node.args[0] if node.args else next((kw.value for kw in node.keywords if kw.arg == "device"), None)
        if takes_device and device is not None and type(device) in (ast.Constant, ast.JoinedStr, ast.Call):
            raise Unsure  # a CUDA device spelled out becomes its ordinal (runtime.py's _ordinal_argument)
        func_start, func_end = edits.node_offsets(node.func)
        return func_start, func_end, replacement
    if code == "FL201" and type(node) is ast.Attribute:
        if finding.replacement is None or not (edits.qual(node) or "").startswith("torch.cuda."):
            raise Unsure
        return start, end, edits.expr(finding.replacement)
    return start, end, _replace_whole(edits, finding, node)


def rewrite(source: str, findings: Sequence[Any], tree: ast.Module, names: dict[str, str], has_torch_fl: bool,
            torch_aliases: list[str], torch_name: str, quote: str, import_line: str) -> str:
    """The fixed source, every finding applied; Unsure where libcst must do it."""
    if "\r" in source or not source.endswith("\n"):
        raise Unsure
    edits = TextEdits(source, tree, names, torch_name, quote)
    spans = {(f.line, f.col, f.end_line, f.end_col): f for f in findings}
    found = places(tree, edits.lines, spans)
    if len(found) != len(spans):
        raise Unsure
    changes = sorted(_edit(edits, finding, *found[span]) for span, finding in spans.items())
    for (_, end, _), (start, _, _) in itertools.pairwise(changes):
        if start < end:
            raise Unsure  # nested or overlapping: libcst applies them inside out
    dropped, removed = _dead_imports(edits, names, changes)
    changes += dropped
    new_fl = sum(text.count(f"{torch_name}.fl.") - source[start:end].count(f"{torch_name}.fl.")
                 for start, end, text in changes)
    imports = [f"import {module}" for module in sorted(edits.modules) if names.get(module) != module]
    if new_fl > 0 and not torch_aliases:
        imports.append("import torch")
    if new_fl > 0 and not has_torch_fl:
        imports.append(import_line)
    if imports:
        at = _import_offset(edits, removed)
        changes.append((at, at, "".join(f"{line}\n" for line in imports)))
        changes.sort(key=lambda c: (c[0], c[1]))
    pieces = []
    cursor = 0
    for start, end, text in changes:
        pieces += [source[cursor:start], text]
        cursor = end
    pieces.append(source[cursor:])
    return "".join(pieces)


def _dead_imports(edits: TextEdits, names: dict[str, str],
                  changes: list[tuple[int, int, str]]) -> tuple[list[tuple[int, int, str]], set[int]]:
    """fix.py's _drop_unused_imports as edits: a top-level import of a torch.cuda name the fixes left unused
    loses that name, or goes with its line (blank lines above it go too; comment lines above it stay).
    Returns the edits and the indices of the statements that go."""
    cuda_names = {local for local, qual in names.items() if qual == "torch.cuda" or qual.startswith("torch.cuda.")}
    old = "\n".join(edits.source[start:end] for start, end, _ in changes)
    cuda_names = {n for n in cuda_names if re.search(rf"(?<![\w.]){re.escape(n)}\b", old)}
    if not cuda_names:
        return [], set()
    before = _ast_name_refs(edits.tree, cuda_names)
    after = dict(before)
    try:
        for start, end, text in changes:
            for name, count in _segment_refs(edits.source[start:end], cuda_names).items():
                after[name] = after.get(name, 0) - count
            for name, count in _segment_refs(text, cuda_names).items():
                after[name] = after.get(name, 0) + count
    except _Fallback:
        raise Unsure from None
    dead = {n for n in cuda_names if before.get(n, 0) > 0 and after.get(n, 0) == 0}
    out = []
    removed: set[int] = set()
    body = edits.tree.body
    for i, stmt in enumerate(body):
        if type(stmt) not in (ast.Import, ast.ImportFrom):
            continue
        aliases = stmt.names  # type: ignore[attr-defined]
        keep = [a for a in aliases if (a.asname or a.name) not in dead or (type(stmt) is ast.Import and "." in a.name
                                                                           and a.asname is None)]
        if len(keep) == len(aliases):
            continue
        line = stmt.lineno
        text = edits.lines[line - 1]
        if stmt.end_lineno != line or i == 0 or text.strip() != ast.get_source_segment(edits.source, stmt) \
                or any(a.name == "*" for a in aliases) or body[i - 1].end_lineno == line:
            raise Unsure  # over lines, sharing its line, or first in the file: libcst does it
        if keep:
            shown = [a.name if a.asname is None else f"{a.name} as {a.asname}" for a in aliases]
            head = text[:len(text) - len(text.lstrip())] + text.strip()[:-len(", ".join(shown))]
            if not text.strip().endswith(", ".join(shown)):
                raise Unsure
            kept = [a.name if a.asname is None else f"{a.name} as {a.asname}" for a in keep]
            out.append((edits.starts[line - 1], edits.starts[line - 1] + len(text), head + ", ".join(kept)))
            continue
        previous_end = body[i - 1].end_lineno or body[i - 1].lineno
        comments = "".join(edits.lines[n] + "\n" for n in range(previous_end, line - 1)
                           if edits.lines[n].lstrip().startswith("#"))
        out.append((edits.starts[previous_end], edits.starts[line], comments))
        removed.add(i)
    return out, removed


def _import_offset(edits: TextEdits, removed: set[int]) -> int:
    """Where fix.py's _add_imports puts new imports: the line after the top-of-file imports (after a leading
    docstring), those that go (`removed`) left out. Unsure where it would do otherwise (a later `import
    torch` after code, no import at the top) or where the next statement shares the last import's line."""
    body = [stmt for i, stmt in enumerate(edits.tree.body) if i not in removed]
    index = 0
    while index < len(body) and (type(body[index]) in (ast.Import, ast.ImportFrom) or (
            index == 0 and type(body[index]) is ast.Expr and type(body[index].value) is ast.Constant  # type: ignore[attr-defined]
            and type(body[index].value.value) is str)):  # type: ignore[attr-defined]
        index += 1
    if index == 0 or (not any(_imports_torch(stmt) for stmt in body[:index]) and any(
            _imports_torch(stmt) for stmt in body[index:])):
        raise Unsure
    last = body[index - 1]
    end_line = last.end_lineno or last.lineno
    if index < len(body) and body[index].lineno <= end_line:
        raise Unsure
    return edits.starts[end_line]


def _imports_torch(stmt: ast.stmt) -> bool:
    if type(stmt) is ast.Import:
        return any(a.name == "torch" or a.name.startswith("torch.") for a in stmt.names)
    return type(stmt) is ast.ImportFrom and not stmt.level and stmt.module is not None and (
        stmt.module == "torch" or stmt.module.startswith("torch."))
