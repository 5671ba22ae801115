"""Which names a piece of Python uses, read with ``ast`` (fix_segments.py's import check and textfix.py's dead-import
check both ask): the counts of uses outside import statements, for a module or a cut-out expression."""

from __future__ import annotations

import ast


class _Fallback(Exception):
    """The segment rewrite cannot handle this file (a segment does not parse alone, statements share
    a line at a region's edge): the whole module is rewritten instead."""


def ast_name_refs(tree: ast.AST, wanted: set[str]) -> dict[str, int]:
    """`fix_rewriter.name_refs` from ``ast``, for the names in `wanted`: uses outside import statements (names,
    definitions, parameters, keyword arguments, global/nonlocal, except ... as, match captures)."""
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        kind = type(node)
        if kind is ast.Name:
            found: list[str | None] = [node.id]  # type: ignore[attr-defined]
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            found = [node.name]  # type: ignore[attr-defined]
        elif kind is ast.arg or kind is ast.keyword:
            found = [node.arg]  # type: ignore[attr-defined]
        elif kind in (ast.Global, ast.Nonlocal):
            found = list(node.names)  # type: ignore[attr-defined]
        elif kind is ast.ExceptHandler or kind.__name__ in ("MatchAs", "MatchStar"):
            found = [getattr(node, "name", None)]
        elif kind.__name__ == "MatchMapping":
            found = [getattr(node, "rest", None)]
        else:
            continue
        for name in found:
            if name in wanted:
                counts[name] = counts.get(name, 0) + 1  # type: ignore[index]
    return counts


def segment_refs(text: str, wanted: set[str]) -> dict[str, int]:
    try:
        return ast_name_refs(ast.parse(f"({text})", mode="eval"), wanted)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _Fallback from None
