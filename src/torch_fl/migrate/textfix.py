"""`torchfl fix` without libcst (issue 37 item 3): importing libcst alone costs about as much CPU as scanning
a 15k-line tree, so on a small tree a fix that imports it cannot stay within 1.5x of the scan. A fix
replaces an expression with one whose text the scanner already knows (a device string, ``.cuda()``,
``torch.cuda.synchronize``, a device choice, an autocast or scaler call); the rewrite edits the source at
the positions the scan has (a call's arguments through textargs.py, which keeps their layout as libcst
does), and adds the ``torch_fl`` import after the top-of-file imports.

It is the libcst rewrite's shortcut, never a second opinion: every edit here is the text the rule's libcst
fix (rules/*.py) produces for that shape, and anything else (overlapping findings, a line continuation
inside a call, an import to drop from a shared line, mixed line endings, the unsafe device checks)
raises :class:`Unsure`, and the file goes to libcst. tests/migrate/test_fix_cost.py checks that both give
the same text on every fixture (as written, with CRLF endings, without a final newline) and on a corpus of
call layouts.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import re
from collections.abc import Sequence
from typing import Any

from .cuda_api import CUDA_DEVICE, lookup
from .namerefs import _Fallback, ast_name_refs, segment_refs
from .precedence import IFEXP, char_col, places, wrap
from .rules.distributed import VENDOR_BACKENDS
from .textargs import Arg, ArgList, Unsure

__all__ = ["TextEdits", "Unsure", "rewrite"]


_STRING = re.compile(r"(?i)[ru]?(\"|')(?!\1\1)")  # a one-quote string literal with its prefix


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

    # the texts the libcst fixes write (fix_rewriter.FixHelpers) --------------------------------------
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
    if code == "FL103" and kind is ast.Compare and finding.replacement is not None:
        return edits.expr(finding.replacement)
    if code == "FL902" and finding.replacement is not None:
        return _device_check(edits, finding, node)
    if finding.replacement is not None and ((code == "FL901" and kind is ast.IfExp) or (
            code == "FL106" and ((kind is ast.Constant and type(node.value) is int)  # type: ignore[attr-defined]
                                 or (kind is ast.Call and edits.qual(node.func) == "torch.device")))):  # type: ignore[attr-defined]
        return edits.expr(finding.replacement)
    raise Unsure


def _plain_string(edits: TextEdits, node: ast.expr) -> bool:
    """Whether `node` is what libcst calls a SimpleString: one string literal. Unsure for a string constant
    written otherwise (concatenated, triple-quoted, escaped), where the two might disagree."""
    if type(node) is not ast.Constant or type(node.value) is not str:  # type: ignore[attr-defined]
        return False
    _literal(edits, node)
    return True


def _bare(edits: TextEdits, node: ast.expr) -> str:
    """An expression's text without parentheses of its own (libcst's lpar=[]); ast's range already leaves
    them out, except for a tuple or a generator, whose parentheses are part of them."""
    if type(node) in (ast.Tuple, ast.GeneratorExp):
        raise Unsure
    start, end = edits.node_offsets(node)
    return edits.source[start:end]


def _device_check(edits: TextEdits, finding: Any, node: ast.expr) -> str:
    """FL902 as rules/control.py's fix: `torch.fl.is_accelerator(<the device>)`, `not` in front for `!=`."""
    kind = type(node)
    if kind is ast.Attribute:
        start, end = edits.node_offsets(node)
        text = edits.source[start:end]
        if node.attr != "is_cuda" or not text.endswith(".is_cuda"):  # type: ignore[attr-defined]
            raise Unsure
        subject = text[:-len(".is_cuda")] + ".device"
    elif kind is ast.Call:
        func = node.func  # type: ignore[attr-defined]
        if type(func) is not ast.Attribute or func.attr != "startswith":
            raise Unsure
        subject = _bare(edits, func.value)
    elif kind is ast.Compare:
        if len(node.ops) != 1:  # type: ignore[attr-defined]
            raise Unsure
        left, right = node.left, node.comparators[0]  # type: ignore[attr-defined]
        right_plain, left_plain = _plain_string(edits, right), _plain_string(edits, left)
        chosen = left if right_plain and not left_plain else right
        if type(node.ops[0]) in (ast.In, ast.NotIn):  # type: ignore[attr-defined]
            chosen = right
        subject = _bare(edits, chosen)
    else:
        raise Unsure
    call = edits.fl_call("is_accelerator", subject)
    return f"not {call}" if finding.replacement.startswith("not ") else call


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


def _args(edits: TextEdits, call: ast.Call) -> ArgList:
    return ArgList(edits.source, call, edits.node_offsets)


_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")
_SCALER_POSITIONAL = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
_GATED = {"torch.amp.GradScaler": 5, "torch.amp.grad_scaler.GradScaler": 5}
_SCOPED = ("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast")
# What libcst's _gate and-s into `enabled=` without parentheses (its Name covers True/False/None).
_PLAIN_ENABLED = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Compare)
_KEYWORD = re.compile(r"[A-Za-z_]\w*\s*=\s*")


def _value_text(arg: Arg) -> tuple[str, str]:
    """An argument's `name=` part (empty for a positional one) and its value as written, parentheses kept."""
    if arg.keyword is None:
        return "", arg.text
    match = _KEYWORD.match(arg.text)
    if match is None:
        raise Unsure
    return arg.text[:match.end()], arg.text[match.end():]


def _keywords(args: list[Arg], names: tuple[str, ...]) -> None:
    """Positional arguments named by `names`, in order (rules/amp.py: torch.cuda.amp's order is not torch's)."""
    positional = 0
    for arg in args:
        if arg.keyword == "*":
            raise Unsure  # *args: the scan offers no fix
        if arg.keyword is None:
            if positional >= len(names):
                raise Unsure
            arg.keyword, arg.text = names[positional], f"{names[positional]}={arg.text}"
            positional += 1


def _gate(edits: TextEdits, args: ArgList, positional_before: int) -> None:
    """rules/amp.py's _gate: `enabled=torch.fl.is_accelerator()` added, or and-ed into `enabled=`."""
    if sum(1 for arg in args.args if arg.keyword is None) > positional_before or any(
            arg.keyword in ("*", "**") for arg in args.args):
        raise Unsure
    accelerator = edits.fl_call("is_accelerator")
    for arg in args.args:
        if arg.keyword != "enabled" or arg.value is None:
            continue
        prefix, shown = _value_text(arg)
        value = arg.value
        if type(value) is ast.Constant and value.value is False:  # type: ignore[attr-defined]
            return  # off everywhere already: the argument stays
        if type(value) is ast.Constant and value.value is True:  # type: ignore[attr-defined]
            arg.text = prefix + accelerator
            return
        a, b = edits.node_offsets(value)
        own_parentheses = shown != edits.source[a:b] or (shown.startswith("(") and type(value) in (
            ast.Tuple, ast.GeneratorExp))
        plain = type(value) in _PLAIN_ENABLED or (type(value) is ast.Constant and value.value is None)  # type: ignore[attr-defined]
        arg.text = f"{prefix}{accelerator} and {shown if plain or own_parentheses else f'({shown})'}"
        return
    args.append(f"enabled={accelerator}")


def _amp(edits: TextEdits, finding: Any, node: ast.Call, need: int) -> str:
    """FL301 (torch.cuda.amp.autocast / GradScaler), FL302 and FL303 on a call, as rules/amp.py writes them."""
    if finding.replacement is not None:
        raise Unsure  # the decorator form (unsafe)
    qual = edits.qual(node.func) or ""
    args = _args(edits, node)
    device_type = edits.fl_call("device_type")
    if finding.code == "FL301":
        if not qual.endswith("autocast"):
            raise Unsure
        _keywords(args.args, _AUTOCAST_POSITIONAL)
        args.insert_first(device_type)
        args.commas()
        args.head = f"{edits.torch}.autocast"
        return _scoped(edits, args.code(), need)
    if finding.code == "FL302":
        if not qual.endswith("GradScaler"):
            raise Unsure
        _keywords(args.args, _SCALER_POSITIONAL)
        args.insert_first(device_type)
        _gate(edits, args, 1)
        args.commas()
        args.head = f"{edits.torch}.amp.GradScaler"
        return args.code()
    if qual not in _SCOPED and qual not in _GATED:
        raise Unsure
    replaced = 0
    for i, arg in enumerate(args.args):
        value = arg.value
        if ((arg.keyword is None and i == 0) or arg.keyword in ("device_type", "device")) and \
                type(value) is ast.Constant and value.value == "cuda":  # type: ignore[attr-defined]
            _literal(edits, value)  # a plain literal, as libcst's SimpleString
            arg.text = _value_text(arg)[0] + device_type
            replaced += 1
    if replaced != 1:
        raise Unsure
    if qual in _SCOPED:
        args.commas()
        return _scoped(edits, args.code(), need)
    _gate(edits, args, _GATED[qual])
    args.commas()
    return args.code()


def _scoped(edits: TextEdits, call: str, need: int) -> str:
    edits.modules.add("contextlib")
    text = f"{call} if {edits.fl_call('is_accelerator')} else contextlib.nullcontext()"
    return f"({text})" if need > IFEXP else text


def _cuda_method(edits: TextEdits, node: ast.Call) -> tuple[int, int, str]:
    """FL102 as rules/device.py's fix: `.cuda(device, non_blocking, ...)` -> `.to(device, ...)`, the device
    first. The edit starts at the receiver's end, so a finding inside the receiver is edited apart."""
    func = node.func
    assert isinstance(func, ast.Attribute)
    args = _args(edits, node)
    value_end = edits.node_offsets(func.value)[1]
    end = edits.node_offsets(node)[1]
    head = edits.source[value_end:edits.node_offsets(func)[1]]
    if not head.endswith("cuda"):
        raise Unsure
    device: Arg | None = None
    rest: list[Arg] = []
    positional = 0
    for arg in args.args:
        if arg.keyword in ("*", "**"):
            raise Unsure
        if arg.keyword is None:
            if positional == 0:
                device = arg
            elif positional == 1:
                arg.keyword, arg.text = "non_blocking", f"non_blocking={arg.text}"
                rest.append(arg)
            else:
                raise Unsure
            positional += 1
        elif arg.keyword == "device":
            device = arg
        else:
            rest.append(arg)
    value = None if device is None else device.value
    if value is None or (type(value) is ast.Constant and value.value is None):  # type: ignore[attr-defined]
        new_device = edits.device(None)
    elif type(value) is ast.Constant and type(value.value) is int:  # type: ignore[attr-defined]
        new_device = edits.device(_int(value))
    else:
        raise Unsure  # the scanner gives .cuda(expr) no fix
    if device is None:
        args.args = [Arg(None, new_device, None), *rest]
    else:
        device.keyword, device.text = None, new_device
        args.args = [device, *rest]
    args.commas()
    args.head = head[:-len("cuda")] + "to"
    return value_end, end, args.code()


def _ordinal(edits: TextEdits, value: ast.expr) -> str | None:
    """runtime.py's _cst_ordinal: "keep" for an argument that stays, None for "the current device" (the
    argument goes), else the ordinal's text. Unsure where libcst reads the argument differently."""
    kind = type(value)
    if kind is ast.JoinedStr:
        raise Unsure  # Python 3.11's ast has no positions inside f-strings
    if kind is ast.Constant and type(value.value) is str:  # type: ignore[attr-defined]
        match = CUDA_DEVICE.fullmatch(_literal(edits, value)[0])
        return "keep" if match is None else match.group(1)
    if kind is not ast.Call or edits.qual(value.func) != "torch.device":  # type: ignore[attr-defined]
        return "keep"
    kinds: dict[str, ast.expr] = {}
    for i, arg in enumerate(value.args):  # type: ignore[attr-defined]
        if type(arg) is ast.Starred:
            return "keep"
        kinds[("type", "index")[min(i, 1)]] = arg
    for kw in value.keywords:  # type: ignore[attr-defined]
        if kw.arg is None:
            return "keep"
        kinds[kw.arg] = kw.value
    literal = kinds.get("type")
    if literal is None or set(kinds) - {"type", "index"}:
        return "keep"
    if "index" in kinds:
        index = kinds["index"]
        if type(literal) is not ast.Constant or literal.value != "cuda":  # type: ignore[attr-defined]
            return "keep"
        _literal(edits, literal)
        if type(index) in (ast.Tuple, ast.GeneratorExp):
            raise Unsure
        a, b = edits.node_offsets(index)
        return edits.source[a:b]  # its own parentheses dropped, as libcst's lpar=[]
    if type(literal) is ast.Call:
        return "keep"
    return _ordinal(edits, literal)


def _runtime_call(edits: TextEdits, finding: Any, node: ast.Call) -> tuple[int, int, str]:
    """FL201 / FL202 on a call as rules/runtime.py's fixes: the function replaced, and a CUDA device spelled
    out as the device argument becomes its ordinal (or goes, for the current device)."""
    qual = edits.qual(node.func) or ""
    if not qual.startswith("torch.cuda."):
        raise Unsure
    func_start, func_end = edits.node_offsets(node.func)
    if finding.code == "FL202":
        if qual != "torch.cuda.synchronize":
            raise Unsure
        replacement, takes_device, name = f"{edits.torch}.fl.synchronize", True, False
    else:
        entry = lookup(qual)
        if entry is None or finding.replacement is None:
            raise Unsure
        replacement, takes_device = edits.expr(finding.replacement), entry.takes_device
        name = entry.short == "get_device_name"
        takes_device = takes_device and not name
    if not takes_device and not name:
        return func_start, func_end, replacement
    args = _args(edits, node)
    start, end = edits.node_offsets(node)
    if not takes_device:  # get_device_name(x) -> get_device_properties(x).name
        args.head = replacement
        return start, end, args.code() + ".name"
    for position, arg in enumerate(args.args):
        if (arg.keyword is None and position == 0) or arg.keyword == "device":
            break
    else:
        return func_start, func_end, replacement
    if arg.value is None or arg.keyword == "**":
        raise Unsure
    ordinal = _ordinal(edits, arg.value.value if type(arg.value) is ast.Starred else arg.value)  # type: ignore[attr-defined]
    if ordinal == "keep":
        return func_start, func_end, replacement
    args.head = replacement
    if ordinal is None:
        args.args.remove(arg)
        if args.args:
            args.commas()
    else:
        arg.text = _value_text(arg)[0] + ordinal
    return start, end, args.code()


def _edit(edits: TextEdits, finding: Any, node: ast.expr, need: int) -> tuple[int, int, str]:
    """(start, end, new text) of one finding's fix."""
    code = finding.code
    start, end = edits.node_offsets(node)
    if code in ("FL301", "FL302", "FL303") and type(node) is ast.Call:
        return start, end, _amp(edits, finding, node, need)
    if code == "FL102" and type(node) is ast.Call and type(node.func) is ast.Attribute \
            and node.func.attr == "cuda":
        return _cuda_method(edits, node)
    if code in ("FL201", "FL202") and type(node) is ast.Call:
        return _runtime_call(edits, finding, node)
    if code == "FL201" and type(node) is ast.Attribute:
        if finding.replacement is None or not (edits.qual(node) or "").startswith("torch.cuda."):
            raise Unsure
        return start, end, wrap(edits.expr(finding.replacement), need)
    return start, end, wrap(_replace_whole(edits, finding, node), need)


def rewrite(source: str, findings: Sequence[Any], tree: ast.Module, names: dict[str, str], has_torch_fl: bool,
            torch_aliases: list[str], torch_name: str, quote: str, import_line: str) -> str:
    """The fixed source, every finding applied; Unsure where libcst must do it."""
    if "\r" in source:
        # A file whose every line ends in CRLF is edited as LF and given its CRLFs back (the edits never
        # hold a line break of their own; libcst writes the file's line ending for the lines it adds, as
        # the comparison test checks). Mixed or CR-only endings go to libcst.
        lf = source.replace("\r\n", "\n")
        if "\r" in lf:
            raise Unsure
        return rewrite(lf, findings, tree, names, has_torch_fl, torch_aliases, torch_name, quote,
                       import_line).replace("\n", "\r\n")
    if not source.endswith("\n"):
        # No final line break: edited with one, which is taken off again (libcst keeps the file's end).
        return rewrite(source + "\n", findings, tree, names, has_torch_fl, torch_aliases, torch_name, quote,
                       import_line)[:-1]
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
        at, noqa = _import_offset(edits, removed)
        if noqa:  # after a late torch import that silences E402: ours are as late, and silenced alike
            imports = [line.replace("F401", f"{noqa}, F401") if line == import_line else f"{line}  # noqa: {noqa}"
                       for line in imports]
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
    """fix_imports.drop_unused_imports as edits: a top-level import of a torch.cuda name the fixes left unused
    loses that name, or goes with its line (blank lines above it go too; comment lines above it stay).
    Returns the edits and the indices of the statements that go."""
    cuda_names = {local for local, qual in names.items() if qual == "torch.cuda" or qual.startswith("torch.cuda.")}
    old = "\n".join(edits.source[start:end] for start, end, _ in changes)
    cuda_names = {n for n in cuda_names if re.search(rf"(?<![\w.]){re.escape(n)}\b", old)}
    if not cuda_names:
        return [], set()
    before = {} if _unused_elsewhere(edits, cuda_names, changes) else ast_name_refs(edits.tree, cuda_names)
    if not before:
        # No use outside the edited text: the counts are those of the edits' old texts.
        try:
            for start, end, _ in changes:
                for name, count in _refs(edits.source[start:end], cuda_names).items():
                    before[name] = before.get(name, 0) + count
        except _Fallback:
            raise Unsure from None
    after = dict(before)
    try:
        for start, end, text in changes:
            for name, count in _refs(edits.source[start:end], cuda_names).items():
                after[name] = after.get(name, 0) - count
            for name, count in _refs(text, cuda_names).items():
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
        own = text[char_col(edits.lines, line, stmt.col_offset):char_col(edits.lines, line, stmt.end_col_offset or 0)]
        if stmt.end_lineno != line or i == 0 or text.strip() != own \
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


def _unused_elsewhere(edits: TextEdits, wanted: set[str], changes: list[tuple[int, int, str]]) -> bool:
    """Whether no name of `wanted` is written anywhere outside the edited text but in import lines: then
    the whole tree need not be walked to count its uses (a text search finds every use ast counts, and
    more; a line that starts with `import`/`from` is skipped only when it holds one statement)."""
    pattern = re.compile(r"(?<![\w.])(?:" + "|".join(re.escape(n) for n in sorted(wanted)) + r")\b")
    cursor = 0
    for start, end, _ in [*changes, (len(edits.source), len(edits.source), "")]:
        for match in pattern.finditer(edits.source, cursor, start):
            line = edits.lines[bisect.bisect_right(edits.starts, match.start()) - 1]
            if not line.lstrip().startswith(("import ", "from ")) or ";" in line:
                return False
        cursor = max(cursor, end)
    return True


def _refs(text: str, names: set[str]) -> dict[str, int]:
    """segment_refs of an edit's text; an edit that starts at a receiver's end (`.cuda()` -> `.to(...)`)
    is read after a receiver that names nothing."""
    if not any(name in text for name in names):
        return {}  # no parse for a text that cannot name them
    return segment_refs(f"None{text}" if text.startswith(".") else text, names)


def _import_offset(edits: TextEdits, removed: set[int]) -> tuple[int, str]:
    """Where fix_imports.add_imports puts new imports, and the noqa code they carry: the line after the
    top-of-file imports (after a leading docstring), those that go (`removed`) left out; where torch is
    imported only after some code (a script that sets environment variables first), the line after that
    first later `import torch`, with "E402" when that import silences it. Unsure where it would do
    otherwise (no import at the top) or where a neighbour shares the chosen line."""
    body = [stmt for i, stmt in enumerate(edits.tree.body) if i not in removed]
    index = 0
    while index < len(body) and (type(body[index]) in (ast.Import, ast.ImportFrom) or (
            index == 0 and type(body[index]) is ast.Expr and type(body[index].value) is ast.Constant  # type: ignore[attr-defined]
            and type(body[index].value.value) is str)):  # type: ignore[attr-defined]
        index += 1
    if index == 0:
        raise Unsure
    noqa = ""
    if not any(_imports_torch(stmt) for stmt in body[:index]):
        later = next((j for j in range(index + 1, len(body)) if _imports_torch(body[j])), None)
        if later is not None:
            index = later + 1
            statement = body[later]
            end_line = statement.end_lineno or statement.lineno
            if body[later - 1].end_lineno == statement.lineno:
                raise Unsure  # `x = 1; import torch`: libcst's line holds both
            after = edits.lines[end_line - 1][char_col(edits.lines, end_line, statement.end_col_offset or 0):]
            comment = after[after.find("#"):] if "#" in after else ""
            noqa = "E402" if "E402" in comment else ""
    last = body[index - 1]
    end_line = last.end_lineno or last.lineno
    if index < len(body) and body[index].lineno <= end_line:
        raise Unsure
    return edits.starts[end_line], noqa


def _imports_torch(stmt: ast.stmt) -> bool:
    if type(stmt) is ast.Import:
        return any(a.name == "torch" or a.name.startswith("torch.") for a in stmt.names)
    return type(stmt) is ast.ImportFrom and not stmt.level and stmt.module is not None and (
        stmt.module == "torch" or stmt.module.startswith("torch."))
