"""A call's argument list as text, edited the way the libcst fixes edit it (textfix.py's half for calls, issue
37 item 3): the arguments keep their own text and the separators between them keep theirs (line breaks,
indentation, comments), so a call over several lines is rewritten in place too.

The model is libcst's: each argument is its text, then its comma (the blanks before and after it) if it
has one, then the blanks before ``)`` (the last one only). ``commas`` is fix_rewriter.py's ``_commas``: an argument
that gains a follower gets ``", "``, or a comma followed by the blanks after ``(`` where those hold a line
break (one argument per line); a one-line trailing comma goes where the list changed. Anything this
cannot read the same way libcst would (a line continuation, ``f (x)``) raises textfix's Unsure.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

_BLANKS = re.compile(r"[ \t\f\r\n]*(?:#[^\n]*\n[ \t\f\r\n]*)*")  # blanks and whole comment lines
_COMMA = re.compile(r"([ \t\f\r\n]*(?:#[^\n]*\n[ \t\f\r\n]*)*),(.*)", re.S)


class Unsure(Exception):
    """textfix.Unsure's base: a layout this module does not read as libcst does."""


@dataclass
class Arg:
    keyword: str | None  # None: positional; "**": **kwargs; "*": *args
    text: str  # as written, `name=` included
    value: ast.expr | None  # None for an argument a fix adds
    comma: tuple[str, str] | None = None  # blanks before and after its comma
    after: str = ""  # blanks before `)` (the last argument)

    def code(self) -> str:
        comma = "" if self.comma is None else f"{self.comma[0]},{self.comma[1]}"
        return f"{self.text}{comma}{self.after}"


class ArgList:
    """The arguments of `call` (an ast.Call) in `source`, with the text around them."""

    def __init__(self, source: str, call: ast.Call, offsets: Any) -> None:
        start, end = offsets(call)
        func_end = offsets(call.func)[1]
        if source[func_end:func_end + 1] != "(":
            raise Unsure  # `f (x)` or parentheses around the callee: libcst splits those blanks otherwise
        self.head = source[start:func_end]
        spans: list[tuple[int, int, str | None, ast.expr]] = []
        for arg in call.args:
            a, b = offsets(arg)
            spans.append((a, b, "*" if type(arg) is ast.Starred else None, arg))
        for kw in call.keywords:
            a, b = offsets(kw)
            spans.append((a, b, "**" if kw.arg is None else kw.arg, kw.value))
        spans.sort(key=lambda s: s[0])
        cursor = func_end + 1
        self.args: list[Arg] = []
        gaps: list[str] = []
        for a, b, keyword, value in spans:
            if a < cursor:
                raise Unsure  # a lone generator argument: ast counts the call's parentheses as its own
            gaps.append(source[cursor:a])
            self.args.append(Arg(keyword, source[a:b], value))
            cursor = b
        gaps.append(source[cursor:end - 1])
        if any("\\" in gap for gap in gaps):
            raise Unsure  # a line continuation between arguments
        self.pre = gaps[0]
        if not _BLANKS.fullmatch(self.pre):
            raise Unsure
        for i, (arg, gap) in enumerate(zip(self.args, gaps[1:], strict=True)):
            match = _COMMA.fullmatch(gap)
            if match is None and i == len(self.args) - 1 and _BLANKS.fullmatch(gap):
                arg.after = gap  # the last argument, no trailing comma
                continue
            if match is None or not _BLANKS.fullmatch(match.group(2)):
                raise Unsure
            arg.comma = (match.group(1), match.group(2))

    def commas(self) -> None:
        """fix_rewriter._commas on the current list."""
        after = self.pre if "\n" in self.pre else " "
        last = len(self.args) - 1
        for i, arg in enumerate(self.args):
            if i < last and arg.comma is None:
                arg.comma = ("", after)
            elif i == last and arg.comma is not None and i > 0 and "\n" not in arg.comma[1]:
                arg.comma = None

    def insert_first(self, text: str) -> None:
        self.args.insert(0, Arg(None, text, None))

    def append(self, text: str) -> None:
        self.args.append(Arg(None, text, None))

    def code(self) -> str:
        return f"{self.head}({self.pre}{''.join(arg.code() for arg in self.args)})"
