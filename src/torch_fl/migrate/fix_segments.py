"""Rewriting with libcst: the fast path cuts each finding's expression out of the text, parses it alone,
fixes it and puts it back (:func:`rewrite_segments`); the reference path parses the whole module
(:func:`rewrite_module`). The segment path must give the module path's output exactly, and raises
:class:`_Fallback` where it cannot (then fix.py runs the module path).

libcst is ~20x slower than ``ast`` on a whole module (parse, positions, visit, codegen): parsing only
what changes keeps `torchfl fix` within a small factor of `torchfl scan`. Either path keeps a
replacement's precedence in the place it is put (precedence.py), read from the ``ast`` first
(:func:`places`).
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from .fix_imports import (
    LINE_BREAK,
    Layout,
    add_imports,
    add_in_region,
    drop_in_region,
    drop_unused_imports,
    line_starts,
    parse_new,
)
from .fix_rewriter import Spelling, Target, cst_bindings, name_refs, rewriter_class
from .namerefs import _Fallback, ast_name_refs, segment_refs
from .precedence import needs, parenthesize
from .rules import Finding

if TYPE_CHECKING:
    import libcst as cst

    from .fix_rewriter import FixHelpers

__all__ = ["ast_bindings", "keep_final_newline", "places", "rewrite_module", "rewrite_segments"]


def places(source: str, findings: list[Finding], tree: ast.Module | None = None) -> dict[int, int]:
    """id(finding) -> how tightly the place it sits in binds (precedence.needs)."""
    def span(f: Finding) -> tuple[int, int, int, int]:
        return (f.line, f.col, f.end_line, f.end_col)

    tree = ast.parse(source) if tree is None else tree
    found = needs(tree, LINE_BREAK.split(source), (span(f) for f in findings))
    return {id(f): found.get(span(f), 1) for f in findings}


def ast_bindings(tree: ast.Module) -> tuple[dict[str, str], bool]:
    """`cst_bindings` from ``ast``: local name -> qualified name for every import (source order,
    scope-blind), and whether torch_fl is imported."""
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


def keep_final_newline(source: str, code: str) -> str:
    """libcst drops a final lone "\\r" (a CR-only file, or a mixed one ending in CR): put back the line
    ending the original ended with."""
    for ending in ("\r\n", "\n", "\r"):
        if source.endswith(ending):
            return code if code.endswith(ending) else code.rstrip("\r\n") + ending
    return code


# The whole module ----------------------------------------------------------------------------------


def rewrite_module(source: str, findings: list[Finding],
                   need: dict[int, int] | None = None) -> tuple[str, list[Finding]]:
    """fix.py's rewrite on the whole module at once: the reference the segment path must equal, and
    its fallback."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    module = cst.parse_module(source)
    need = places(source, findings) if need is None else need
    spelling = Spelling.of(*cst_bindings(module), source)
    # Finding columns are 1-based characters, end exclusive; libcst's are 0-based, end exclusive.
    targets = [Target(f, (f.line, f.col - 1), (f.end_line, f.end_col - 1), need[id(f)]) for f in findings]
    rewriter = rewriter_class()(targets, spelling)
    new = MetadataWrapper(module, unsafe_skip_copy=True).visit(rewriter)
    if not rewriter.applied:
        return source, []
    new = drop_unused_imports(new, name_refs(module), name_refs(new), spelling.names)
    wanted = spelling.imports_needed(source, new.code, rewriter.imports)
    if wanted:
        torch, torch_fl, modules = wanted
        new = add_imports(new, torch=torch, torch_fl=torch_fl, modules=modules)
    return keep_final_newline(source, new.code), [t.finding for t in rewriter.applied]


# Segments ------------------------------------------------------------------------------------------


class _Segment(NamedTuple):
    """Character range [start, end) of the source holding one or more findings (nested or overlapping
    findings share a segment)."""

    start: int
    end: int
    findings: list[Finding]


class _Edit(NamedTuple):
    """One rewritten segment: its first and last line in the source, its text before and after."""

    first: int
    last: int
    old: str
    new: str


def rewrite_segments(source: str, findings: list[Finding], tree: ast.Module | None = None,
                     need: dict[int, int] | None = None) -> tuple[str, list[Finding]]:
    """The fast path of fix.py's rewrite: each finding's expression (overlapping ones together) is cut
    out, parsed alone with libcst, fixed by the same rules' fixes and put back; imports are added or
    dropped by parsing only the top-level statements around them. Raises _Fallback where it cannot
    keep the module path's output exactly."""
    tree = ast.parse(source) if tree is None else tree
    need = places(source, findings, tree) if need is None else need
    spelling = Spelling.of(*ast_bindings(tree), source)
    starts = line_starts(source)
    new, edits, applied, imports = _rewrite_all(source, starts, _segments(findings, starts), need, spelling)
    if not applied:
        return source, []
    layout = Layout.shifted(tree, edits)
    new, layout = _drop_dead_imports(new, layout, tree, spelling.names, edits)
    wanted = spelling.imports_needed(source, new, imports)
    if wanted:
        torch, torch_fl, modules = wanted
        new = add_in_region(new, layout, torch=torch, torch_fl=torch_fl, modules=modules)
    return keep_final_newline(source, new), applied


def _offset(starts: list[int], line: int, col0: int) -> int:
    return starts[line - 1] + col0


def _segments(findings: list[Finding], starts: list[int]) -> list[_Segment]:
    """The findings as character ranges, nested or overlapping ranges joined into one segment."""
    spans = sorted(((_offset(starts, f.line, f.col - 1), _offset(starts, f.end_line, f.end_col - 1), f)
                    for f in findings), key=lambda s: (s[0], -s[1]))
    segments: list[_Segment] = []
    for start, end, found in spans:
        if segments and start < segments[-1].end:
            last = segments[-1]
            segments[-1] = _Segment(last.start, max(last.end, end), [*last.findings, found])
        else:
            segments.append(_Segment(start, end, [found]))
    return segments


def _rewrite_all(source: str, starts: list[int], segments: list[_Segment], need: dict[int, int],
                 spelling: Spelling) -> tuple[str, list[_Edit], list[Finding], set[str]]:
    """Every segment fixed and put back: the new text, the edits, the findings applied and the modules
    the fixed code names."""
    newline = LINE_BREAK.search(source)
    eol = newline.group() if newline else "\n"
    applied: list[Finding] = []
    imports: set[str] = set()
    pieces: list[str] = []
    edits: list[_Edit] = []
    cursor = 0
    for segment in segments:
        pieces.append(source[cursor:segment.start])
        cursor = segment.end
        text = source[segment.start:segment.end]
        done = _rewrite_one(text, segment, starts, eol, need, spelling)
        if done is None:
            pieces.append(text)
            continue
        code, rewriter = done
        pieces.append(code)
        edits.append(_Edit(bisect.bisect_right(starts, segment.start),
                           bisect.bisect_right(starts, max(segment.start, segment.end - 1)), text, code))
        applied += [t.finding for t in rewriter.applied]
        imports |= rewriter.imports
    pieces.append(source[cursor:])
    return "".join(pieces), edits, applied, imports


def _rewrite_one(text: str, segment: _Segment, starts: list[int], eol: str, need: dict[int, int],
                 spelling: Spelling) -> tuple[str, FixHelpers] | None:
    """One segment's new code and the rewriter that made it, or None where no fix applied."""
    from libcst.metadata import MetadataWrapper

    line0 = bisect.bisect_right(starts, segment.start)
    col0 = segment.start - starts[line0 - 1]
    snippet, wrapped = parse_segment(text, eol)
    shift = 1 if wrapped else 0

    def local(line: int, col: int) -> tuple[int, int]:
        # Source position -> the snippet's (its first line starts at the segment, after our "(").
        return (line - line0 + 1, col - col0 + shift if line == line0 else col)

    group = segment.findings
    targets = [Target(f, local(f.line, f.col - 1), local(f.end_line, f.end_col - 1), need[id(f)]) for f in group]
    rewriter = rewriter_class()(targets, spelling)
    root = _expression(snippet)
    new_module = MetadataWrapper(snippet, unsafe_skip_copy=True).visit(rewriter)
    if not rewriter.applied:
        return None
    expr = _expression(new_module)
    if wrapped and len(expr.lpar) == len(root.lpar) and expr.lpar:
        expr = expr.with_changes(lpar=expr.lpar[1:], rpar=expr.rpar[:-1])  # our parentheses
        first = group[0]
        if (first.line, first.col - 1) == (line0, col0) and \
                _offset(starts, first.end_line, first.end_col - 1) == segment.end:
            expr = parenthesize(expr, need[id(first)])  # where the fix's own were taken for ours
    return new_module.code_for_node(expr), rewriter


def _expression(module: cst.Module) -> cst.BaseExpression:
    """The expression of a one-expression module (what :func:`parse_segment` returns)."""
    return module.body[0].body[0].value  # type: ignore[attr-defined]


def parse_segment(text: str, eol: str) -> tuple[cst.Module, bool]:
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


def _drop_dead_imports(new: str, layout: Layout, tree: ast.Module, names: dict[str, str],
                       edits: list[_Edit]) -> tuple[str, Layout]:
    """Drop the imports of torch.cuda names whose last use a segment's fix removed; the text and its
    layout afterwards."""
    cuda_names = {local for local, qual in names.items() if qual == "torch.cuda" or qual.startswith("torch.cuda.")}
    if cuda_names:
        # Only a name a rewritten segment mentioned can have lost its last use.
        old_text = "\n".join(edit.old for edit in edits)  # apart: a name must not run into the next
        cuda_names = {n for n in cuda_names if re.search(rf"(?<![\w.]){re.escape(n)}\b", old_text)}
    if not cuda_names:
        return new, layout
    before = ast_name_refs(tree, cuda_names)
    after = dict(before)
    for edit in edits:
        for name, count in segment_refs(edit.old, cuda_names).items():
            after[name] = after.get(name, 0) - count
        for name, count in segment_refs(edit.new, cuda_names).items():
            after[name] = after.get(name, 0) + count
    if not any(before.get(n, 0) > 0 and after.get(n, 0) == 0 for n in cuda_names):
        return new, layout
    new = drop_in_region(new, layout, before, after, names)
    return new, Layout.of(parse_new(new))  # import lines went away
