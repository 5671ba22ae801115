"""`torchfl fix`: rewrite CUDA-coupled code to the torch.fl API, keeping formatting and comments.

This is the engine: each rule's fix lives with the rule (``migrate/rules/*.py``, registered with
``@fixes(code, node types)``); what a ``torch.cuda`` name becomes is the table in ``migrate/cuda_api.py``.

The scanner decides *what* to fix: `scan_source` (``ast``, fast) runs first on every file, and only files
with a fixable finding at the allowed safety level are parsed with libcst (~4x slower than ``ast``, see
DESIGN.md "Parsing speed"). The rewriter then edits exactly the nodes those findings point at, so a
``# noqa``'d finding is never fixed and, after a fix, the scanner reports no fixable finding left.

Writes are atomic: a temp file in the same directory, fsync, ``os.replace``; a failure at any point
leaves the original untouched and no temp file behind.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import errno
import hashlib
import io
import os
import re
import stat
import tempfile
import tokenize
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FileChanged, TorchFLError
from . import textfix
from .deep import call_deep
from .namerefs import _ast_name_refs, _Fallback, _segment_refs
from .precedence import keep_precedence, needs, parenthesize
from .rules import HOOKS, Finding
from .scan import enabled_codes, is_python, targets
from .scan.detector import parse, scan_text

if TYPE_CHECKING:
    import libcst as cst

__all__ = [
    "LIBCST_MISSING", "TORCH_FL_IMPORT", "FileChanged", "FileFix", "FixReport", "FixResult", "fix_paths", "fix_source", "have_libcst",
    "write_atomic",
]

LIBCST_MISSING = "torchfl fix needs libcst: pip install 'torch-fl[migrate]'"
TORCH_FL_IMPORT = "import torch_fl  # noqa: F401  (installs torch.fl)"



def have_libcst() -> bool:
    import importlib.util

    return importlib.util.find_spec("libcst") is not None


# ---------------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class FixResult:
    """What `fix_source` did. `applied` and `skipped_unsafe` are (code, line) pairs, line 1-based, in
    the original source; `not_applied` lists fixable findings whose code shape the rewriter does not
    handle (left as they were, so a later scan still reports them)."""

    new_source: str
    applied: list[tuple[str, int]] = field(default_factory=list)
    skipped_unsafe: list[tuple[str, int]] = field(default_factory=list)
    not_applied: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class FileFix:
    """One file's outcome in `fix_paths`: `changed` is True once written (or, with diff, when it would
    change); `error` says why a file was skipped (does not parse, cannot be read or written)."""

    path: Path
    applied: list[tuple[str, int]] = field(default_factory=list)
    skipped_unsafe: list[tuple[str, int]] = field(default_factory=list)
    not_applied: list[tuple[str, int]] = field(default_factory=list)
    changed: bool = False
    diff: str = ""
    error: str | None = None


@dataclass
class FixReport:
    """What `fix_paths` did, file by file, with totals."""

    files: list[FileFix] = field(default_factory=list)
    # Paths never opened, with why: FIFOs, devices, symlink loops (fix reads only regular files).
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def applied(self) -> int:
        return sum(len(f.applied) for f in self.files)

    @property
    def changed_files(self) -> list[FileFix]:
        return [f for f in self.files if f.changed]

    @property
    def skipped_unsafe(self) -> int:
        return sum(len(f.skipped_unsafe) for f in self.files)

    @property
    def errors(self) -> list[FileFix]:
        return [f for f in self.files if f.error]

    @property
    def diff(self) -> str:
        return "".join(f.diff for f in self.files)


# ---------------------------------------------------------------------------------------------------
# the rewriter (libcst)


@dataclass
class _Target:
    """A finding to fix, with its range in libcst coordinates (1-based lines, 0-based columns)."""

    finding: Finding
    start: tuple[int, int]
    end: tuple[int, int]
    # How tightly the place the finding sits in binds (see _needs): a replacement that binds less
    # loosely is parenthesised there.
    need: int = 1
    used: bool = False


def _bindings(module: cst.Module) -> tuple[dict[str, str], bool]:
    """Local name -> qualified name for every import in the module (scope-blind, as the scanner's),
    and whether torch_fl is imported."""
    import libcst as cst
    from libcst.helpers import get_full_name_for_node

    names: dict[str, str] = {}
    has_torch_fl = False

    class Collect(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> bool:
            nonlocal has_torch_fl
            for alias in node.names:
                full = get_full_name_for_node(alias.name) or ""
                has_torch_fl |= full.split(".")[0] == "torch_fl"
                if alias.asname is not None:
                    names[get_full_name_for_node(alias.asname.name) or ""] = full
                else:
                    head = full.split(".")[0]
                    names[head] = head
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            nonlocal has_torch_fl
            if node.relative or node.module is None:
                return False
            module_name = get_full_name_for_node(node.module) or ""
            has_torch_fl |= module_name.split(".")[0] == "torch_fl"
            if isinstance(node.names, cst.ImportStar):
                return False
            for alias in node.names:
                names[alias.evaluated_alias or alias.evaluated_name] = f"{module_name}.{alias.evaluated_name}"
            return False

    module.visit(Collect())
    return names, has_torch_fl


def _name_refs(node: cst.CSTNode) -> dict[str, int]:
    """How often each bare name is used outside import statements."""
    import libcst as cst

    counts: dict[str, int] = {}

    class Count(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            # Only the head of a dotted name is a reference; `x.attr` does not use a name `attr`.
            node.value.visit(self)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            counts[node.value] = counts.get(node.value, 0) + 1

    node.visit(Count())
    return counts


def _fixes_by_node() -> dict[str, tuple[str, ...]]:
    """libcst node class name -> codes whose fix rewrites that kind of node (the rules' @fixes)."""
    by_node: dict[str, tuple[str, ...]] = {}
    for code, (node_types, _) in HOOKS.fixes.items():
        for node_type in node_types:
            by_node[node_type] = (*by_node.get(node_type, ()), code)
    return by_node


class _Matching:
    """The rewriter's half that matches findings to nodes and applies the rule's fix. A plain mixin
    (listed before libcst's CSTTransformer, whose own `on_leave` it replaces) so that this module imports
    without libcst; the attributes it reads are set by the Rewriter class `_make_rewriter` builds."""

    BY_NODE: dict[str, tuple[str, ...]]
    targets: list[_Target]
    applied: list[_Target]
    get_metadata: Callable[..., Any]

    def _match(self, codes: Iterable[str], node: cst.CSTNode) -> _Target | None:
        from libcst.metadata import PositionProvider

        pos = self.get_metadata(PositionProvider, node)
        start = (pos.start.line, pos.start.column)
        end = (pos.end.line, pos.end.column)
        best: tuple[tuple[int, ...], _Target] | None = None
        for target in self.targets:
            if target.used or target.finding.code not in codes:
                continue
            if not (start <= target.start and target.end <= end):
                continue
            # The finding spanning most of the node is the node's own (the rest are inner nodes).
            key = (target.start[0] - start[0], target.start[1] - start[1] if target.start[0] == start[0]
                   else 0, end[0] - target.end[0], end[1] - target.end[1] if target.end[0] == end[0] else 0)
            if best is None or key < best[0]:
                best = (key, target)
        return None if best is None else best[1]

    def on_leave(self, original: cst.CSTNode, updated: Any) -> Any:
        codes = self.BY_NODE.get(type(original).__name__)
        if not codes or not self.targets:
            return updated
        target = self._match(codes, original)
        if target is None:
            return updated
        replacement = HOOKS.fixes[target.finding.code][1](self, original, updated, target.finding)
        if replacement is None:  # a shape the rewrite does not handle: left for a human
            return updated
        replacement = keep_precedence(replacement, target.need)
        target.used = True
        self.applied.append(target)
        return replacement


class _FixHelpers:
    """The rewriter's half that the rules' fixes call (rules/*.py get the rewriter as `rw`): names in
    this module's spelling of torch and quotes, torch.fl calls, the imports the fixed code needs."""

    names: dict[str, str]
    torch_name: str
    quote: str
    imports: set[str]

    def need_import(self, module: str) -> None:
        """The fixed code names `module`: import it unless the file binds that name to it."""
        if self.names.get(module) != module:
            self.imports.add(module)

    def qual(self, node: cst.BaseExpression) -> str | None:
        import libcst as cst

        if isinstance(node, cst.Name):
            return self.names.get(node.value)
        if isinstance(node, cst.Attribute):
            head = self.qual(node.value)
            return f"{head}.{node.attr.value}" if head else None
        return None

    def fl(self, attr: str) -> cst.Attribute:
        import libcst as cst

        return cst.Attribute(cst.Attribute(cst.Name(self.torch_name), cst.Name("fl")), cst.Name(attr))

    def fl_call(self, attr: str, *args: cst.BaseExpression) -> cst.Call:
        import libcst as cst

        return cst.Call(self.fl(attr), [cst.Arg(a) for a in args])

    def string(self, text: str, like: cst.BaseExpression | None) -> cst.SimpleString:
        import libcst as cst

        quote = like.quote if isinstance(like, cst.SimpleString) and len(like.quote) == 1 else self.quote
        return cst.SimpleString(f"{quote}{text}{quote}")

    def device(self, index: int | None, like: cst.BaseExpression | None = None) -> cst.Call:
        """torch.fl.device() for "cuda"; torch.fl.device("accN") for "cuda:N" / .cuda(N)."""
        if index is None:
            return self.fl_call("device")
        return self.fl_call("device", self.string(f"acc{index}", like))

    def str_device(self, index: int, like: cst.BaseExpression) -> cst.Call:
        import libcst as cst

        return cst.Call(cst.Name("str"), [cst.Arg(self.device(index, like))])

    def expr(self, text: str) -> cst.BaseExpression:
        """A replacement computed by the scanner (``torch.fl.device("acc0")``), in this module's
        spelling of torch and quotes."""
        import libcst as cst

        text = re.sub(r"\btorch\.", f"{self.torch_name}.", text)
        if self.quote == "'" and "'" not in text:
            text = text.replace('"', "'")
        return cst.parse_expression(text)

    def commas(self, args: list[cst.Arg], call: cst.Call) -> list[cst.Arg]:
        return _commas(args, call)


def _make_rewriter() -> type:
    """Built on first use so that importing this module does not need libcst: the class joins the two
    halves above to libcst's transformer."""
    import libcst as cst
    from libcst.metadata import PositionProvider

    class Rewriter(_Matching, _FixHelpers, cst.CSTTransformer):
        """Edits the nodes the findings point at, with each rule's fix (rules/*.py). The scanner reports
        each fixable finding on exactly one AST node (rules.Finding); the node here is the libcst node
        whose range contains it (libcst counts a node's parentheses, ast does not) and is the closest
        such node. A fix returns None for a shape it does not handle: the finding is left for a person
        (and an enclosing node may not take it: fixes check their node's shape)."""

        METADATA_DEPENDENCIES = (PositionProvider,)
        BY_NODE = _fixes_by_node()
        no_space = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                   whitespace_after=cst.SimpleWhitespace(""))

        def __init__(self, targets: list[_Target], names: dict[str, str], torch_name: str,
                     quote: str) -> None:
            super().__init__()
            self.targets = targets
            self.names = names
            self.torch_name = torch_name
            self.quote = quote
            self.applied: list[_Target] = []
            self.imports: set[str] = set()  # modules a fix's code names (`contextlib`)

        # Imports name modules, they are not uses: their names are not walked.
        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

    for node_type in Rewriter.BY_NODE:
        setattr(Rewriter, f"leave_{node_type}", Rewriter.on_leave)
    return Rewriter


def _commas(args: list[cst.Arg], call: cst.Call) -> list[cst.Arg]:
    """Commas between arguments: keep existing ones; an inserted argument gets ", ", or a line break
    where the call puts its first argument on a line of its own (one argument per line)."""
    import libcst as cst

    layout = call.whitespace_before_args
    after = layout if isinstance(layout, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" ")
    out: list[cst.Arg] = []
    for i, arg in enumerate(args):
        last = i == len(args) - 1
        if not last and isinstance(arg.comma, cst.MaybeSentinel):
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=after))
        elif last and not isinstance(arg.comma, cst.MaybeSentinel) and i > 0 and not _multiline(arg.comma):
            # `f(a, )` -> `f(a)`: a trailing comma only survives in a one-argument-per-line layout.
            arg = arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        out.append(arg)
    return out


def _multiline(comma: Any) -> bool:
    import libcst as cst

    return isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)


_REWRITER: type | None = None


def _rewriter() -> type:
    global _REWRITER
    if _REWRITER is None:
        _REWRITER = _make_rewriter()
    return _REWRITER


def _quote_style(source: str) -> str:
    return "'" if source.count("'") > source.count('"') else '"'


def _drop_unused_imports(module: cst.Module, before: dict[str, int], after: dict[str, int],
                         names: dict[str, str]) -> cst.Module:
    """Remove imports of torch.cuda names that the fix left unused (`from torch.cuda.amp import
    autocast` once every `autocast(...)` became torch.autocast(...))."""
    import libcst as cst
    from libcst.helpers import get_full_name_for_node

    dead = {local for local, qual in names.items()
            if (qual == "torch.cuda" or qual.startswith("torch.cuda.")) and before.get(local, 0) > 0
            and after.get(local, 0) == 0}
    if not dead:
        return module

    def keep(alias: cst.ImportAlias) -> bool:
        if alias.asname is not None:
            return get_full_name_for_node(alias.asname.name) not in dead
        # `import torch.cuda` binds `torch`: never dead.
        return isinstance(alias.name, cst.Attribute) or alias.evaluated_name not in dead

    # Only top-level import lines: emptying an `if`/`try` body would leave invalid code.
    body: list[cst.BaseStatement] = []
    carried: list[cst.EmptyLine] = []  # comments above a removed line stay, on the next statement
    for stmt in module.body:
        if carried:
            stmt = stmt.with_changes(leading_lines=[*carried, *stmt.leading_lines])
            carried = []
        if not _is_import(stmt):
            body.append(stmt)
            continue
        assert isinstance(stmt, cst.SimpleStatementLine)
        small: list[cst.BaseSmallStatement] = []
        for imp in stmt.body:
            assert isinstance(imp, (cst.Import, cst.ImportFrom))
            if isinstance(imp.names, cst.ImportStar):
                small.append(imp)
                continue
            kept = [a for a in imp.names if keep(a)]
            if len(kept) == len(imp.names):
                small.append(imp)
            elif kept:
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                small.append(imp.with_changes(names=kept))
        if small:
            small[-1] = small[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            body.append(stmt.with_changes(body=small))
        else:
            carried = [line for line in stmt.leading_lines if line.comment is not None]
    return module.with_changes(body=body)


def _add_imports(module: cst.Module, *, torch: bool, torch_fl: bool, modules: Sequence[str] = ()) -> cst.Module:
    """Insert `import torch` and/or the torch_fl import after the last import at the top of the
    module: before any other code runs, so module-level uses of torch.fl already find it. Where torch
    itself is imported only after some code (a script that sets environment variables first), after
    that import instead: importing torch_fl imports torch, and must not move torch's import ahead of
    that code."""
    import libcst as cst

    body = list(module.body)
    index = 0
    noqa = ""
    for i, stmt in enumerate(body):
        if _is_import(stmt) or (i == 0 and _is_docstring(stmt)):
            index = i + 1
            continue
        # Past the top-of-file imports: only a later `import torch` moves the insertion point.
        later = next((j for j in range(i + 1, len(body))
                      if _is_import(body[j]) and _imports_torch(body[j])), None)
        if later is not None and not any(_imports_torch(b) for b in body[:index] if _is_import(b)):
            index = later + 1
            # Where the user silenced E402 on their late `import torch`, ours needs the same.
            comment = body[later].trailing_whitespace.comment  # type: ignore[attr-defined]
            noqa = "E402" if comment is not None and "E402" in comment.value else ""
        break
    lines = [f"import {name}  # noqa: {noqa}" if noqa else f"import {name}" for name in modules]
    if torch:
        lines.append(f"import torch  # noqa: {noqa}" if noqa else "import torch")
    if torch_fl:
        lines.append(TORCH_FL_IMPORT.replace("F401", f"{noqa}, F401") if noqa else TORCH_FL_IMPORT)
    new = [cst.parse_statement(line + "\n") for line in lines]
    if index == 0 and body:
        # Before the first statement: a blank line keeps it apart from the code that follows.
        first = body[0]
        body[0] = first.with_changes(leading_lines=[cst.EmptyLine(), *first.leading_lines]) \
            if not first.leading_lines else first
    return module.with_changes(body=[*body[:index], *new, *body[index:]])


def _is_import(stmt: cst.CSTNode) -> bool:
    import libcst as cst

    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def _imports_torch(stmt: cst.SimpleStatementLine) -> bool:
    import libcst as cst
    from libcst.helpers import get_full_name_for_node

    for small in stmt.body:
        if isinstance(small, cst.Import):
            modules = [get_full_name_for_node(a.name) or "" for a in small.names]
        elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
            modules = [get_full_name_for_node(small.module) or ""]
        else:
            continue
        if any(m == "torch" or m.startswith("torch.") for m in modules):
            return True
    return False


def _is_docstring(stmt: cst.CSTNode) -> bool:
    import libcst as cst

    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _rewrite(source: str, findings: list[Finding], tree: ast.Module | None = None) -> tuple[str, list[Finding]]:
    """Apply the fixes of `findings` to `source` with libcst; returns the new source and the findings
    that were applied. Only the expressions the findings point at (and, where imports change, the
    import block) are parsed with libcst (:func:`_rewrite_segments`); the whole module only where that
    cannot be done (:func:`_rewrite_module`). Either way a replacement keeps the precedence of the place
    it is put in (precedence.py): each finding's place is read from the ``ast`` first."""
    tree = ast.parse(source) if tree is None else tree
    if TEXT_EDITS:
        try:
            return _rewrite_text(source, findings, tree), list(findings)
        except textfix.Unsure:
            pass
    need = _places(source, findings, tree)
    try:
        return _rewrite_segments(source, findings, tree, need)
    except _Fallback:
        return _rewrite_module(source, findings, need)


# Whether fixes whose text the scanner knows are edited in place without libcst (textfix.py); tests turn it
# off to compare with the libcst rewrite.
TEXT_EDITS = True


def _rewrite_text(source: str, findings: list[Finding], tree: ast.Module) -> str:
    """:func:`_rewrite` without libcst, for the fixes textfix.py knows (textfix.Unsure for the others)."""
    names, has_torch_fl = _ast_bindings(tree)
    torch_aliases = [local for local, qual in names.items() if qual == "torch"]
    names.setdefault("torch", "torch")
    torch_name = "torch" if "torch" in torch_aliases else (torch_aliases[0] if torch_aliases else "torch")
    return textfix.rewrite(source, findings, tree, names, has_torch_fl, torch_aliases, torch_name,
                           _quote_style(source), TORCH_FL_IMPORT)


def _places(source: str, findings: list[Finding], tree: ast.Module | None = None) -> dict[int, int]:
    """id(finding) -> how tightly the place it sits in binds (precedence.needs)."""
    def span(f: Finding) -> tuple[int, int, int, int]:
        return (f.line, f.col, f.end_line, f.end_col)

    tree = ast.parse(source) if tree is None else tree
    places = needs(tree, _LINE_BREAK.split(source), (span(f) for f in findings))
    return {id(f): places.get(span(f), 1) for f in findings}


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _ast_bindings(tree: ast.Module) -> tuple[dict[str, str], bool]:
    """`_bindings` from ``ast``: local name -> qualified name for every import (source order, scope-blind),
    and whether torch_fl is imported."""
    names: dict[str, str] = {}
    has_torch_fl = False
    imports = [n for n in _statements(tree.body) if type(n) in (ast.Import, ast.ImportFrom)]
    imports.sort(key=lambda n: (n.lineno, n.col_offset))
    for node in imports:
        if type(node) is ast.Import:
            for alias in node.names:
                has_torch_fl |= alias.name.split(".")[0] == "torch_fl"
                if alias.asname is not None:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    names[head] = head
        else:
            assert isinstance(node, ast.ImportFrom)
            if node.level or node.module is None:
                continue
            has_torch_fl |= node.module.split(".")[0] == "torch_fl"
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names, has_torch_fl


_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in `body` and the blocks under it (imports are statements: no need to walk
    expressions, which are most of a tree)."""
    pending = list(reversed(body))
    while pending:
        stmt = pending.pop()
        yield stmt
        for name in _BLOCKS:
            block = getattr(stmt, name, None)
            if block:
                pending.extend(reversed(block))


def _line_starts(source: str) -> list[int]:
    """Offset of each line's first character (index 0 is line 1), lines broken as ast breaks them."""
    return [0, *(m.end() for m in _LINE_BREAK.finditer(source))]


def _rewrite_segments(source: str, findings: list[Finding], tree: ast.Module | None = None,
                      need: dict[int, int] | None = None) -> tuple[str, list[Finding]]:
    """The fast path of :func:`_rewrite`: each finding's expression (overlapping ones together) is cut
    out, parsed alone with libcst, fixed by the same rules' fixes and put back; imports are added or
    dropped by parsing only the top-level statements around them. libcst is ~20x slower than ``ast``
    on a whole module (parse, positions, visit, codegen): parsing what changes keeps `torchfl fix`
    within a small factor of `torchfl scan`. Raises _Fallback where it cannot keep the module path's
    output exactly."""
    from libcst.metadata import MetadataWrapper

    tree = ast.parse(source) if tree is None else tree
    need = _places(source, findings, tree) if need is None else need
    names, has_torch_fl = _ast_bindings(tree)
    torch_aliases = [local for local, qual in names.items() if qual == "torch"]
    names.setdefault("torch", "torch")
    torch_name = "torch" if "torch" in torch_aliases else (torch_aliases[0] if torch_aliases else "torch")
    quote = _quote_style(source)
    starts = _line_starts(source)
    newline = _LINE_BREAK.search(source)
    eol = newline.group() if newline else "\n"

    def offset(line: int, col0: int) -> int:
        return starts[line - 1] + col0

    # Findings as character ranges; nested or overlapping ranges form one segment.
    spans = sorted(((offset(f.line, f.col - 1), offset(f.end_line, f.end_col - 1), f) for f in findings),
                   key=lambda s: (s[0], -s[1]))
    segments: list[tuple[int, int, list[Finding]]] = []
    for start, end, found in spans:
        if segments and start < segments[-1][1]:
            last = segments[-1]
            segments[-1] = (last[0], max(last[1], end), [*last[2], found])
        else:
            segments.append((start, end, [found]))

    rewriter_cls = _rewriter()
    applied: list[Finding] = []
    imports: set[str] = set()
    pieces: list[str] = []
    changed: list[tuple[int, int, str, str]] = []  # (first line, last line, old text, new text) per rewrite
    cursor = 0
    for start, end, group in segments:
        text = source[start:end]
        line0 = bisect.bisect_right(starts, start)
        col0 = start - starts[line0 - 1]
        snippet, wrapped = _parse_segment(text, eol)
        shift = 1 if wrapped else 0

        def local(line: int, col: int, line0: int = line0, col0: int = col0, shift: int = shift) -> tuple[int, int]:
            # Source position -> the snippet's (its first line starts at the segment, after our "(").
            return (line - line0 + 1, col - col0 + shift if line == line0 else col)

        targets = [_Target(f, local(f.line, f.col - 1), local(f.end_line, f.end_col - 1), need[id(f)])
                   for f in group]
        rewriter = rewriter_cls(targets, names, torch_name, quote)
        root = snippet.body[0].body[0].value  # type: ignore[attr-defined]
        new_module = MetadataWrapper(snippet, unsafe_skip_copy=True).visit(rewriter)
        pieces.append(source[cursor:start])
        cursor = end
        if not rewriter.applied:
            pieces.append(text)
            continue
        expr = new_module.body[0].body[0].value  # type: ignore[attr-defined]
        if wrapped and len(expr.lpar) == len(root.lpar) and expr.lpar:
            expr = expr.with_changes(lpar=expr.lpar[1:], rpar=expr.rpar[:-1])  # our parentheses
            if (group[0].line, group[0].col - 1) == (line0, col0) and \
                    offset(group[0].end_line, group[0].end_col - 1) == end:
                expr = parenthesize(expr, need[id(group[0])])  # where the fix's own were taken for ours
        code = new_module.code_for_node(expr)
        pieces.append(code)
        changed.append((line0, bisect.bisect_right(starts, max(start, end - 1)), text, code))
        applied += [t.finding for t in rewriter.applied]
        imports |= rewriter.imports
    if not applied:
        return source, []
    pieces.append(source[cursor:])
    new = "".join(pieces)
    layout = _Layout.shifted(tree, changed)

    cuda_names = {local for local, qual in names.items() if qual == "torch.cuda" or qual.startswith("torch.cuda.")}
    if cuda_names:
        # Only a name a rewritten segment mentioned can have lost its last use.
        old_text = "\n".join(old for _, _, old, _ in changed)  # apart: a name must not run into the next
        cuda_names = {n for n in cuda_names if re.search(rf"(?<![\w.]){re.escape(n)}\b", old_text)}
    if cuda_names:
        before = _ast_name_refs(tree, cuda_names)
        after = dict(before)
        for _, _, old, code in changed:
            for name, count in _segment_refs(old, cuda_names).items():
                after[name] = after.get(name, 0) - count
            for name, count in _segment_refs(code, cuda_names).items():
                after[name] = after.get(name, 0) + count
        if any(before.get(n, 0) > 0 and after.get(n, 0) == 0 for n in cuda_names):
            new = _drop_in_region(new, layout, before, after, names)
            layout = _Layout.of(_parse_new(new))  # import lines went away
    uses_fl = new.count(f"{torch_name}.fl.") > source.count(f"{torch_name}.fl.")
    if (uses_fl and (not torch_aliases or not has_torch_fl)) or imports:
        new = _add_in_region(new, layout, torch=uses_fl and not torch_aliases,
                             torch_fl=uses_fl and not has_torch_fl, modules=sorted(imports))
    return _keep_final_newline(source, new), applied


def _parse_new(text: str) -> ast.Module:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _Fallback from None


class _Layout:
    """The module's top-level statements with their first and last lines in the text being rewritten:
    from the original tree, moved by the line count each rewritten segment added or removed (segments
    are expressions, inside one statement each), so the new text need not be parsed again."""

    def __init__(self, statements: list[ast.stmt], lines: list[tuple[int, int]]) -> None:
        self.statements = statements
        self.lines = lines

    @classmethod
    def of(cls, tree: ast.Module) -> _Layout:
        return cls(list(tree.body), [(s.lineno, s.end_lineno or s.lineno) for s in tree.body])

    @classmethod
    def shifted(cls, tree: ast.Module, changed: list[tuple[int, int, str, str]]) -> _Layout:
        deltas = [(first, last, _line_breaks(new) - _line_breaks(old)) for first, last, old, new in changed]
        if not any(d for _, _, d in deltas):
            return cls.of(tree)
        lines = []
        for stmt in tree.body:
            begin, end = stmt.lineno, stmt.end_lineno or stmt.lineno
            lines.append((begin + sum(d for _, last, d in deltas if last < begin),
                          end + sum(d for first, _, d in deltas if first <= end)))
        return cls(list(tree.body), lines)


def _line_breaks(text: str) -> int:
    return len(_LINE_BREAK.findall(text))


def _parse_segment(text: str, eol: str) -> tuple[cst.Module, bool]:
    """A segment as a one-expression module: as it is, or in parentheses where it spans lines that
    only the enclosing brackets join (then True)."""
    import libcst as cst

    for wrapped in (False, True):
        code = f"({text})" if wrapped else text
        try:
            module = cst.parse_module(code + eol)
        except Exception as exc:  # libcst's ParserSyntaxError
            if type(exc).__name__ != "ParserSyntaxError":
                raise
            continue
        body = module.body
        if (len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1
                and isinstance(body[0].body[0], cst.Expr) and not module.header and not body[0].leading_lines
                and module.code == code + eol):
            return module, wrapped
    raise _Fallback


def _region(layout: _Layout, first: int, last: int, text: str) -> tuple[int, int]:
    """Character offsets of the lines holding top-level statements `first` ... `last` (the region
    starts at the file's start when first is 0 and runs to its end when last is the last statement).
    _Fallback where a neighbour shares a line with the region's edge (`import a; x = 1`)."""
    lines = layout.lines
    if first > 0 and lines[first - 1][1] >= lines[first][0]:
        raise _Fallback
    if last + 1 < len(lines) and lines[last][1] >= lines[last + 1][0]:
        raise _Fallback
    starts = _line_starts(text)
    begin = 0 if first == 0 else starts[lines[first][0] - 1]
    if last + 1 >= len(lines):
        return begin, len(text)
    end_line = lines[last][1]
    return begin, (starts[end_line] if end_line < len(starts) else len(text))


def _ast_is_import(stmt: ast.stmt) -> bool:
    return type(stmt) in (ast.Import, ast.ImportFrom)


def _ast_imports_torch(stmt: ast.stmt) -> bool:
    if type(stmt) is ast.Import:
        modules = [a.name for a in stmt.names]
    elif type(stmt) is ast.ImportFrom and stmt.module is not None and not stmt.level:
        modules = [stmt.module]
    else:
        return False
    return any(m == "torch" or m.startswith("torch.") for m in modules)


def _binds(stmt: ast.stmt, dead: set[str]) -> bool:
    if type(stmt) is ast.Import:
        return any((a.asname or a.name.split(".")[0]) in dead for a in stmt.names)
    return type(stmt) is ast.ImportFrom and any((a.asname or a.name) in dead for a in stmt.names)


def _drop_in_region(text: str, layout: _Layout, before: dict[str, int], after: dict[str, int],
                    names: dict[str, str]) -> str:
    """:func:`_drop_unused_imports` on the top-level statements from the one before the first import
    that binds a dead name to the one after the last."""
    dead = {n for n in before if before[n] > 0 and after.get(n, 0) == 0}
    hits = [i for i, stmt in enumerate(layout.statements) if _binds(stmt, dead)]
    if not hits:
        return text
    first, last = max(hits[0] - 1, 0), min(hits[-1] + 1, len(layout.statements) - 1)
    begin, end = _region(layout, first, last, text)
    module = _parse_region(text[begin:end])
    module = _drop_unused_imports(module, before, {n: after.get(n, 0) for n in before}, names)
    return text[:begin] + module.code + text[end:]


def _add_in_region(text: str, layout: _Layout, *, torch: bool, torch_fl: bool, modules: Sequence[str]) -> str:
    """:func:`_add_imports` on the top-level statements it looks at: the imports at the top (and the
    docstring), up to a later `import torch` where there is one, and the first statement when nothing
    comes before it (it gets a blank line)."""
    body = layout.statements
    if not body:
        raise _Fallback
    i = 0
    while i < len(body) and (_ast_is_import(body[i]) or (i == 0 and type(body[i]) is ast.Expr
                                                          and type(body[i].value) is ast.Constant  # type: ignore[attr-defined]
                                                          and type(body[i].value.value) is str)):  # type: ignore[attr-defined]
        i += 1
    later = next((j for j in range(i + 1, len(body)) if _ast_is_import(body[j]) and _ast_imports_torch(body[j])), None)
    last = later if later is not None else max(i - 1, 0)
    begin, end = _region(layout, 0, last, text)
    module = _parse_region(text[begin:end])
    module = _add_imports(module, torch=torch, torch_fl=torch_fl, modules=modules)
    return module.code + text[end:]


def _parse_region(text: str) -> cst.Module:
    import libcst as cst

    try:
        module = cst.parse_module(text)
    except Exception as exc:
        if type(exc).__name__ != "ParserSyntaxError":
            raise
        raise _Fallback from None
    return module


def _rewrite_module(source: str, findings: list[Finding],
                    need: dict[int, int] | None = None) -> tuple[str, list[Finding]]:
    """:func:`_rewrite` on the whole module at once: the reference the segment path must equal, and
    its fallback."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    module = cst.parse_module(source)
    need = _places(source, findings) if need is None else need
    names, has_torch_fl = _bindings(module)
    torch_aliases = [local for local, qual in names.items() if qual == "torch"]
    # As the scanner does, a bare `torch` with no import is torch (snippets, exported notebooks).
    names.setdefault("torch", "torch")
    torch_name = "torch" if "torch" in torch_aliases else (torch_aliases[0] if torch_aliases else "torch")
    # Finding columns are 1-based characters, end exclusive; libcst's are 0-based, end exclusive.
    targets = [_Target(f, (f.line, f.col - 1), (f.end_line, f.end_col - 1), need[id(f)]) for f in findings]
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    rewriter = _rewriter()(targets, names, torch_name, _quote_style(source))
    new = wrapper.visit(rewriter)
    if not rewriter.applied:
        return source, []
    new = _drop_unused_imports(new, _name_refs(module), _name_refs(new), names)
    # Fixes that name torch.fl need torch_fl imported (Lightning's accelerator="auto" does not).
    uses_fl = new.code.count(f"{torch_name}.fl.") > source.count(f"{torch_name}.fl.")
    if (uses_fl and (not torch_aliases or not has_torch_fl)) or rewriter.imports:
        new = _add_imports(new, torch=uses_fl and not torch_aliases, torch_fl=uses_fl and not has_torch_fl,
                           modules=sorted(rewriter.imports))
    return _keep_final_newline(source, new.code), [t.finding for t in rewriter.applied]


def _keep_final_newline(source: str, code: str) -> str:
    """libcst drops a final lone "\r" (a CR-only file, or a mixed one ending in CR): put back the line
    ending the original ended with."""
    for ending in ("\r\n", "\n", "\r"):
        if source.endswith(ending):
            return code if code.endswith(ending) else code.rstrip("\r\n") + ending
    return code


def fix_source(source: str, *, unsafe: bool = False, select: Sequence[str] | None = None,
               ignore: Sequence[str] | None = None, path: str | os.PathLike[str] = "<string>") -> FixResult:
    """Rewrite `source`'s fixable findings to the torch.fl API.

    `select`/`ignore` take codes or prefixes as ``torchfl scan`` does. Raises SyntaxError (or libcst's
    ParserSyntaxError) when the source does not parse, ScanConfigError for a selector that names no
    rule, and ModuleNotFoundError when there is something to fix and libcst is missing.

    Example:
        >>> fix_source("import torch\\nx = torch.zeros(1).cuda()\\n").new_source.splitlines()[-1]
        'x = torch.zeros(1).to(torch.fl.device())'
    """
    return _fix_text(source, str(path), enabled_codes(select, ignore), unsafe)


def _fix_text(source: str, path: str, codes: frozenset[str], unsafe: bool) -> FixResult:
    # The scanner is the pre-filter: a file without a fixable finding is never parsed by libcst. Its
    # tree is the rewrite's too (one ast.parse per file).
    tree = parse(source, path)
    findings = scan_text(source, path, codes, False, tree=tree)
    fixable = [f for f in findings if f.safety in ("safe", "unsafe")]
    skipped = [(f.code, f.line) for f in fixable if f.safety == "unsafe" and not unsafe]
    wanted = [f for f in fixable if f.safety == "safe" or unsafe]
    if not wanted:
        return FixResult(source, [], skipped)
    # libcst's visitors recurse a few frames per level: deep valid Python is rewritten on a deep stack.
    new_source, applied = call_deep(_rewrite, source, wanted, tree)
    done = {id(f) for f in applied}
    return FixResult(new_source, sorted((f.code, f.line) for f in applied), skipped,
                     sorted((f.code, f.line) for f in wanted if id(f) not in done))


# ---------------------------------------------------------------------------------------------------
# files


@dataclass(frozen=True)
class Snapshot:
    """What a file was when it was read: size, modification time (ns) and a hash of its bytes."""

    size: int
    mtime_ns: int
    digest: bytes

    @classmethod
    def of(cls, data: bytes, st: os.stat_result) -> Snapshot:
        return cls(st.st_size, st.st_mtime_ns, hashlib.blake2b(data, digest_size=16).digest())

    def still(self, path: Path) -> bool:
        """Whether `path` still holds these bytes: the size first (cheap), then the hash, also when the
        mtime is the same (a save within the same mtime tick, or on a filesystem with coarse times). A
        new mtime over the same bytes (`touch`) is no change: overwriting it loses nothing."""
        try:
            st = path.stat()
            if st.st_size != self.size:
                return False
            data = path.read_bytes()
        except OSError:
            return False
        return hashlib.blake2b(data, digest_size=16).digest() == self.digest


def _read(path: Path) -> tuple[str, str, Snapshot]:
    """A file's text (newlines untouched), its encoding (PEP 263) and what it was when read."""
    with open(path, "rb") as handle:
        st = os.fstat(handle.fileno())
        data = handle.read()
    snapshot = Snapshot.of(data, st)
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    if encoding == "utf-8-sig":
        # Keep the BOM out of the text (libcst and ast both reject it mid-stream) and put it back on write.
        return data.decode("utf-8-sig"), encoding, snapshot
    return data.decode(encoding), encoding, snapshot


def write_atomic(path: Path, text: str, encoding: str = "utf-8", *, expect: Snapshot | None = None) -> None:
    """Replace `path`'s content with `text` so that readers see the old file or the new one, never a
    mix: temp file in the same directory (same filesystem, so os.replace is atomic), fsync, replace.
    The file's permission bits, owner and group are kept (or the file is not replaced); on any failure
    the temp file is removed.

    With `expect` (what the file was when read), the file is replaced only if it still is that, checked
    right before the replace (size, then the hash of its bytes): otherwise FileChanged, and the newer
    file (an editor's save while fix ran) is kept."""
    path = Path(os.path.realpath(path))  # a symlink keeps pointing at the file we rewrote
    data = text.encode(encoding)
    before = path.stat()
    mode = stat.S_IMODE(before.st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".torchfl-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        made = os.stat(tmp)
        if (made.st_uid, made.st_gid) != (before.st_uid, before.st_gid):
            # Written as another user (root fixing a user's tree): the file keeps its owner and group,
            # or is not replaced at all.
            try:
                os.chown(tmp, before.st_uid, before.st_gid)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot keep the file's owner and group (uid {before.st_uid}, gid "
                                         f"{before.st_gid}): {exc.strerror}; file not changed") from None
        os.chmod(tmp, mode)  # after chown, which may clear setuid/setgid bits
        if expect is not None and not expect.still(path):
            raise FileChanged(errno.ESTALE, "the file changed on disk since torchfl fix read it (saved by an editor "
                                            "or another tool?): not overwritten, the newer file is kept; run "
                                            "torchfl fix again")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename itself is durable only once the directory entry is on disk; not possible everywhere.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unified_diff(path: Path, old: str, new: str) -> str:
    name = path.as_posix()
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{name}", tofile=f"b/{name}")
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _files(paths: Iterable[str | os.PathLike[str]], select: Sequence[str] | None,
           ignore: Sequence[str] | None,
           skipped: list[tuple[str, str]]) -> Iterable[tuple[Path, frozenset[str], Path]]:
    """The Python files `torchfl scan` would scan, with their enabled codes (the other files it reads,
    CUDA sources and config files, have no fix) and the tree they were found in (a directory argument,
    or a file argument's folder), so that scan and fix see the same findings."""
    seen: set[Path] = set()
    for argument in paths:
        root = Path(argument)
        tree = Path(os.path.realpath(root if root.is_dir() else root.parent))
        for path, codes in targets([argument], select, ignore, skipped):
            resolved = Path(os.path.realpath(path))
            if resolved in seen or not is_python(path):
                continue
            seen.add(resolved)
            yield path, codes, tree


def _outside(path: Path, tree: Path) -> bool:
    """Whether `path` (a link, or inside a linked folder) resolves to a file outside `tree`."""
    try:
        Path(os.path.realpath(path)).relative_to(tree)
    except ValueError:
        return True
    return False


def _read_only(path: Path) -> bool:
    # By the permission bits, not os.access: root may write anything, and os.replace would replace
    # even a read-only file; a file the user marked read-only is theirs to unlock.
    return not stat.S_IMODE(path.stat().st_mode) & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def fix_paths(paths: Iterable[str | os.PathLike[str]], *, unsafe: bool = False, diff: bool = False,
              select: Sequence[str] | None = None, ignore: Sequence[str] | None = None,
              on_file: Callable[[FileFix], None] | None = None) -> FixReport:
    """Fix every Python file under `paths` (directories walked as `torchfl scan` walks them, with the
    same scan configuration). With `diff`, nothing is written and each changed file's unified diff is
    in its FileFix. Files that cannot be read, parsed or written are reported (their FileFix has an
    `error`) and skipped, and so are read-only files (left intact) and symlinks that lead out of the
    tree given (a directory argument, or a file argument's folder): a fix never writes outside it.

    Raises:
        TorchFLError: a file has something to fix and libcst is not installed.
        ScanConfigError: a selector that names no rule, or a bad scan table.
        FileNotFoundError: a path that does not exist.
    """
    report = FixReport()
    for path, codes, tree in _files(paths, select, ignore, report.skipped):
        entry = FileFix(path)
        report.files.append(entry)
        try:
            if _outside(path, tree):
                entry.error = (f"skipped: a symlink to {os.path.realpath(path)}, outside {tree} (torchfl fix does not "
                               f"follow links out of the tree it was given; fix that file where it lives)")
                continue
            _fix_file(entry, codes, unsafe=unsafe, diff=diff)
        finally:
            _notify(on_file, entry)
    return report


def _fix_file(entry: FileFix, codes: frozenset[str], *, unsafe: bool, diff: bool) -> None:
    path = entry.path
    try:
        source, encoding, snapshot = _read(path)
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:  # SyntaxError: a bad coding cookie
        entry.error = f"cannot read: {exc}"
        return
    try:
        result = _fix_text(source, str(path), codes, unsafe)
    except ModuleNotFoundError as exc:
        if exc.name == "libcst":
            raise TorchFLError(LIBCST_MISSING) from exc
        raise
    except SyntaxError as exc:
        entry.error = f"syntax error, skipped: line {exc.lineno}: {exc.msg}"
        return
    except Exception as exc:
        # libcst parses a little differently from ast (rare: newer syntax than the libcst build knows).
        if type(exc).__name__ != "ParserSyntaxError":
            raise
        entry.error = f"syntax error, skipped: {str(exc).splitlines()[0]}"
        return
    entry.applied, entry.skipped_unsafe = result.applied, result.skipped_unsafe
    entry.not_applied = result.not_applied
    if result.new_source == source:
        return
    if diff:
        entry.changed, entry.diff = True, _unified_diff(path, source, result.new_source)
        return
    if _read_only(path):
        entry.error, entry.applied = ("read-only file, not changed (make it writable, e.g. chmod u+w, to fix "
                                      "it)"), []
        return
    links = os.stat(path).st_nlink
    if links > 1:
        # The atomic write replaces the directory entry: the file's other names would keep the old text.
        entry.error, entry.applied = (f"hard-linked file ({links} links), not changed: rewriting it would "
                                      f"split it from its other names; fix one copy (cp --remove-destination) "
                                      f"or use --diff and apply the patch in place"), []
        return
    try:
        write_atomic(path, result.new_source, encoding, expect=snapshot)
    except FileChanged as exc:
        entry.error, entry.applied = f"not written: {exc.strerror}", []
        return
    except OSError as exc:
        entry.error, entry.applied = f"cannot write: {exc}", []
        return
    entry.changed = True


def _notify(callback: Callable[[FileFix], None] | None, entry: FileFix) -> None:
    if callback is not None:
        callback(entry)
