"""The import editors of `torchfl fix`: drop the imports of torch.cuda names a fix left unused, and add the
imports fixed code needs (torch, torch_fl, a module such as contextlib), where they run before any use.

Two ways to the same edit: on a whole libcst module (:func:`drop_unused_imports`, :func:`add_imports`),
and on the text with only the top-level statements around the imports parsed (:func:`drop_in_region`,
:func:`add_in_region`, for the segment rewrite, which never parses the whole module with libcst); the
second runs the first on that region. The region editors raise
:class:`_Fallback` for a layout a region cannot hold (then the whole module is rewritten).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .namerefs import _Fallback

if TYPE_CHECKING:
    import libcst as cst

__all__ = ["LINE_BREAK", "TORCH_FL_IMPORT", "Layout", "add_imports", "add_in_region", "drop_in_region",
           "drop_unused_imports", "line_starts", "parse_new"]

TORCH_FL_IMPORT = "import torch_fl  # noqa: F401  (installs torch.fl)"
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def line_starts(source: str) -> list[int]:
    """Offset of each line's first character (index 0 is line 1), lines broken as ast breaks them."""
    return [0, *(m.end() for m in LINE_BREAK.finditer(source))]


# On a libcst module -------------------------------------------------------------------------------


def drop_unused_imports(module: cst.Module, before: dict[str, int], after: dict[str, int],
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


def add_imports(module: cst.Module, *, torch: bool, torch_fl: bool, modules: Sequence[str] = ()) -> cst.Module:
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


# On the text, a region of top-level statements at a time ------------------------------------------


def parse_new(text: str) -> ast.Module:
    """The rewritten text's tree (its top-level statements moved): _Fallback where it does not parse."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _Fallback from None


class Layout:
    """The module's top-level statements with their first and last lines in the text being rewritten:
    from the original tree, moved by the line count each rewritten segment added or removed (segments
    are expressions, inside one statement each), so the new text need not be parsed again."""

    def __init__(self, statements: list[ast.stmt], lines: list[tuple[int, int]]) -> None:
        self.statements = statements
        self.lines = lines

    @classmethod
    def of(cls, tree: ast.Module) -> Layout:
        return cls(list(tree.body), [(s.lineno, s.end_lineno or s.lineno) for s in tree.body])

    @classmethod
    def shifted(cls, tree: ast.Module, changed: list[tuple[int, int, str, str]]) -> Layout:
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
    return len(LINE_BREAK.findall(text))


def _region(layout: Layout, first: int, last: int, text: str) -> tuple[int, int]:
    """Character offsets of the lines holding top-level statements `first` ... `last` (the region
    starts at the file's start when first is 0 and runs to its end when last is the last statement).
    _Fallback where a neighbour shares a line with the region's edge (`import a; x = 1`)."""
    lines = layout.lines
    if first > 0 and lines[first - 1][1] >= lines[first][0]:
        raise _Fallback
    if last + 1 < len(lines) and lines[last][1] >= lines[last + 1][0]:
        raise _Fallback
    starts = line_starts(text)
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


def drop_in_region(text: str, layout: Layout, before: dict[str, int], after: dict[str, int],
                    names: dict[str, str]) -> str:
    """:func:`drop_unused_imports` on the top-level statements from the one before the first import
    that binds a dead name to the one after the last."""
    dead = {n for n in before if before[n] > 0 and after.get(n, 0) == 0}
    hits = [i for i, stmt in enumerate(layout.statements) if _binds(stmt, dead)]
    if not hits:
        return text
    first, last = max(hits[0] - 1, 0), min(hits[-1] + 1, len(layout.statements) - 1)
    begin, end = _region(layout, first, last, text)
    module = _parse_region(text[begin:end])
    module = drop_unused_imports(module, before, {n: after.get(n, 0) for n in before}, names)
    return text[:begin] + module.code + text[end:]


def add_in_region(text: str, layout: Layout, *, torch: bool, torch_fl: bool, modules: Sequence[str]) -> str:
    """:func:`add_imports` on the top-level statements it looks at: the imports at the top (and the
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
    module = add_imports(module, torch=torch, torch_fl=torch_fl, modules=modules)
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
