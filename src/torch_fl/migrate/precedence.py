"""Operator precedence for the rewriter: a fix may replace a call with a looser expression (an autocast
call becomes ``A if torch.fl.is_accelerator() else contextlib.nullcontext()``), and where the call was the
receiver of an attribute, a call or a subscript (``torch.autocast("cuda").__enter__()``), the new
expression must be parenthesised or ``.__enter__()`` binds to the ``else`` branch alone: a file that
parses, passes pyflakes, and never enters autocast.

:func:`needs` reads, from the scanner's ``ast``, how tightly each finding's place binds; a fix's
replacement that binds more loosely is parenthesised there (:func:`keep_precedence`), and so is every
operand inside the replacement that binds more loosely than its operator (a fix that and-s a user's
``a if b else c`` into ``enabled=``). Parentheses around an expression never change its value, so the
rule is: parenthesise whenever the grammar would otherwise regroup.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterable, Iterator
from typing import Any

# How tightly an expression binds, loosest first (the Python reference's precedence table).
LAMBDA, IFEXP, OR, AND, NOT, COMPARE, BIT_OR, BIT_XOR, BIT_AND, SHIFT, ARITH, TERM, UNARY, POWER, AWAIT, \
    PRIMARY = range(16)

_AST_BINOP = {
    ast.BitOr: BIT_OR, ast.BitXor: BIT_XOR, ast.BitAnd: BIT_AND, ast.LShift: SHIFT, ast.RShift: SHIFT,
    ast.Add: ARITH, ast.Sub: ARITH, ast.Mult: TERM, ast.Div: TERM, ast.FloorDiv: TERM, ast.Mod: TERM,
    ast.MatMult: TERM, ast.Pow: POWER,
}
_CST_BINOP = {
    "BitOr": BIT_OR, "BitXor": BIT_XOR, "BitAnd": BIT_AND, "LeftShift": SHIFT, "RightShift": SHIFT,
    "Add": ARITH, "Subtract": ARITH, "Multiply": TERM, "Divide": TERM, "FloorDivide": TERM, "Modulo": TERM,
    "MatrixMultiply": TERM, "Power": POWER,
}

# A finding's place: (line, 1-based column, end line, 1-based end column), in characters.
Span = tuple[int, int, int, int]


def _child_need(parent: ast.AST, field: str, index: int) -> int:
    """The loosest binding an expression may have in `parent`'s `field` without parentheses."""
    kind = type(parent)
    if (kind is ast.Attribute and field == "value") or (kind is ast.Call and field == "func") \
            or (kind is ast.Subscript and field == "value"):
        return PRIMARY
    if kind is ast.Await:
        return PRIMARY
    if kind is ast.BinOp:
        level = _AST_BINOP[type(parent.op)]  # type: ignore[attr-defined]
        if level == POWER:
            return AWAIT if field == "left" else UNARY
        return level if field == "left" else level + 1
    if kind is ast.UnaryOp:
        return NOT if type(parent.op) is ast.Not else UNARY  # type: ignore[attr-defined]
    if kind is ast.BoolOp:
        return NOT if type(parent.op) is ast.And else AND  # type: ignore[attr-defined]
    if kind is ast.Compare:
        return BIT_OR
    if kind is ast.IfExp:
        return IFEXP if field == "orelse" else OR
    if kind is ast.Starred:
        return BIT_OR
    if kind is ast.comprehension:
        return OR if field in ("iter", "ifs") else PRIMARY
    return IFEXP


def _children(node: ast.AST) -> Iterator[tuple[str, int, ast.AST]]:
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield field, index, item
        elif isinstance(value, ast.AST):
            yield field, 0, value


def needs(tree: ast.Module, lines: list[str], spans: Iterable[Span]) -> dict[Span, int]:
    """For each span that is an expression of `tree`, the loosest binding a replacement may have there.
    Only the top-level statements holding a span are walked (the rewrite touches few)."""
    return {span: need for span, (_, need) in places(tree, lines, spans).items()}


def places(tree: ast.Module, lines: list[str], spans: Iterable[Span]) -> dict[Span, tuple[ast.expr, int]]:
    """For each span that is an expression of `tree`: that expression (the outermost with that span) and
    the loosest binding a replacement may have there."""
    wanted = set(spans)
    if not wanted:
        return {}
    # A decorated definition starts at its first decorator (its lineno is the `def` line).
    firsts = [_first_line(stmt) for stmt in tree.body]
    statements = {bisect.bisect_right(firsts, line) - 1 for line, _, _, _ in wanted}
    found: dict[Span, tuple[ast.expr, int]] = {}
    rows = {(line, end_line) for line, _, end_line, _ in wanted}
    pending: list[tuple[ast.AST, int]] = [(tree.body[i], IFEXP) for i in sorted(statements) if i >= 0]
    while pending:
        node, need = pending.pop()
        if isinstance(node, ast.expr):
            span = (node.lineno, char_col(lines, node.lineno, node.col_offset) + 1,
                    node.end_lineno or node.lineno,
                    char_col(lines, node.end_lineno or node.lineno, node.end_col_offset or 0) + 1)
            if span in wanted and span not in found:
                found[span] = (node, IFEXP if need > IFEXP and _in_parentheses(lines, span) else need)
        for field, index, child in _children(node):
            # Only what can hold a span is walked (most of a function is not): a node's lines bound its
            # children's, and nodes without positions (arguments, comprehensions) are walked through.
            first = _first_line(child)
            if first is not None and not any(first <= line and end_line <= (child.end_lineno or first)  # type: ignore[attr-defined]
                                             for line, end_line in rows):
                continue
            pending.append((child, _child_need(node, field, index)))
    return found


def _first_line(node: ast.AST) -> Any:
    """A node's first line; a decorated definition starts at its first decorator (its lineno is the `def`
    line). None for nodes without positions."""
    first = getattr(node, "lineno", None)
    decorators = getattr(node, "decorator_list", None)
    return min(first, *(d.lineno for d in decorators)) if decorators and first is not None else first


def _in_parentheses(lines: list[str], span: Span) -> bool:
    """Whether the source puts parentheses right around the span (only blanks, line breaks and comments
    between). Where an operand is that close to a "(" and a ")", they are its own: an enclosing call's
    would need a comma or an operator in between. A "#" inside a string can only make this say False,
    which costs a redundant pair of parentheses, never a wrong grouping."""
    line, col, end_line, end_col = span
    before = lines[line - 1][:col - 1].rstrip()
    while not before and line > 1:
        line -= 1
        before = lines[line - 1].split("#", 1)[0].rstrip()
    after = lines[end_line - 1][end_col - 1:].split("#", 1)[0].strip()
    while not after and end_line < len(lines):
        end_line += 1
        after = lines[end_line - 1].split("#", 1)[0].strip()
    return before.endswith("(") and after.startswith(")")


def char_col(lines: list[str], line: int, byte_col: int) -> int:
    """ast's columns count UTF-8 bytes; findings count characters."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if text.isascii():
        return byte_col
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


_AST_LEVEL = {ast.Lambda: LAMBDA, ast.NamedExpr: LAMBDA, ast.IfExp: IFEXP, ast.Compare: COMPARE, ast.Await: AWAIT}


def _ast_level(node: ast.expr) -> int:
    """How tightly an ast expression's own operator binds."""
    kind = type(node)
    if kind is ast.BoolOp:
        return OR if type(node.op) is ast.Or else AND  # type: ignore[attr-defined]
    if kind is ast.UnaryOp:
        return NOT if type(node.op) is ast.Not else UNARY  # type: ignore[attr-defined]
    if kind is ast.BinOp:
        return _AST_BINOP[type(node.op)]  # type: ignore[attr-defined]
    if kind is ast.Tuple:
        return LAMBDA
    return _AST_LEVEL.get(kind, PRIMARY)


def wrap(text: str, need: int) -> str:
    """`keep_precedence` for a replacement's text (textfix.py): in parentheses where its place binds tighter
    than it does. Operands inside a parsed text are grouped by the text already, so only the whole may need
    them."""
    if need <= LAMBDA or (need <= IFEXP and not any(token in text for token in ("lambda", ":=", ",", "yield"))):
        return text  # only a lambda, an assignment expression or a bare tuple binds looser than `a if b else c`
    node = ast.parse(text.strip(), mode="eval").body
    level = PRIMARY if node.col_offset > 0 or (type(node) is ast.Tuple and text.startswith("(")) else _ast_level(node)
    return text if level >= need else f"({text})"


# libcst --------------------------------------------------------------------------------------------

def binding(node: Any) -> int:
    """How tightly a libcst expression binds (parenthesised: as an atom)."""
    return PRIMARY if getattr(node, "lpar", None) else _level(node)


def _level(node: Any) -> int:
    """How tightly a libcst expression's own operator binds, whatever parentheses it is in."""
    kind = type(node).__name__
    if kind in ("Lambda", "NamedExpr"):
        return LAMBDA
    if kind == "IfExp":
        return IFEXP
    if kind == "BooleanOperation":
        return OR if type(node.operator).__name__ == "Or" else AND
    if kind == "UnaryOperation":
        return NOT if type(node.operator).__name__ == "Not" else UNARY
    if kind == "Comparison":
        return COMPARE
    if kind == "BinaryOperation":
        return _CST_BINOP[type(node.operator).__name__]
    if kind == "Await":
        return AWAIT
    return PRIMARY


def parenthesize(node: Any, need: int) -> Any:
    """`node`, in parentheses if it binds more loosely than `need`."""
    import libcst as cst

    if binding(node) >= need:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _operands(node: Any) -> Any:
    """`node` with each operand parenthesised where it binds more loosely than `node`'s operator."""
    kind = type(node).__name__
    if kind in ("Attribute", "Subscript"):
        return node.with_changes(value=parenthesize(node.value, PRIMARY))
    if kind == "Call":
        return node.with_changes(func=parenthesize(node.func, PRIMARY))
    if kind == "Await":
        return node.with_changes(expression=parenthesize(node.expression, PRIMARY))
    if kind == "UnaryOperation":
        return node.with_changes(expression=parenthesize(node.expression, _level(node)))
    if kind == "BooleanOperation":
        level = _level(node) + 1  # and/or associate: either side may be the same operator
        return node.with_changes(left=parenthesize(node.left, level), right=parenthesize(node.right, level))
    if kind == "Comparison":
        return node.with_changes(left=parenthesize(node.left, BIT_OR), comparisons=[
            target.with_changes(comparator=parenthesize(target.comparator, BIT_OR)) for target in node.comparisons])
    if kind == "BinaryOperation":
        level = _CST_BINOP[type(node.operator).__name__]
        if level == POWER:
            return node.with_changes(left=parenthesize(node.left, AWAIT), right=parenthesize(node.right, UNARY))
        return node.with_changes(left=parenthesize(node.left, level), right=parenthesize(node.right, level + 1))
    if kind == "IfExp":
        return node.with_changes(test=parenthesize(node.test, OR), body=parenthesize(node.body, OR),
                                 orelse=parenthesize(node.orelse, IFEXP))
    return node


_OPERATORS = ("Attribute", "Subscript", "Call", "Await", "UnaryOperation", "BooleanOperation", "Comparison",
              "BinaryOperation", "IfExp")


_TRANSFORMER: type | None = None


def _transformer() -> type:
    """Built on first use: importing this module does not need libcst."""
    global _TRANSFORMER
    if _TRANSFORMER is None:
        import libcst as cst

        def leave(self: Any, original: Any, updated: Any) -> Any:
            return _operands(updated)

        _TRANSFORMER = type("Operands", (cst.CSTTransformer,), {f"leave_{name}": leave for name in _OPERATORS})
    return _TRANSFORMER


def keep_precedence(replacement: Any, need: int) -> Any:
    """A fix's replacement that keeps its meaning where it is put: operands inside it that bind more
    loosely than their operator are parenthesised, and so is the whole where its place (`need`) binds
    tighter than it does."""
    import libcst as cst

    if not isinstance(replacement, cst.BaseExpression):
        return replacement
    return parenthesize(replacement.visit(_transformer()()), need)
