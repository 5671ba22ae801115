"""What a scan returns: :class:`ScanError` and :class:`ScanResult`, and the step from a detector's raw
record (rules.base.Raw) to a :class:`Finding` (columns in characters, ``# noqa``, the rule's text)."""

from __future__ import annotations

import ast
import re
from typing import Any, NamedTuple

from ..rules import RULES, Finding, FixSafety
from ..rules.base import Pos, Raw

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


class ScanError(NamedTuple):
    """A file that could not be scanned. ``code`` is "E999" (does not parse) or "E902" (cannot be
    read or decoded); positions as in :class:`Finding`."""

    code: str
    path: str
    line: int
    col: int
    message: str

    @property
    def name(self) -> str:
        return "syntax-error" if self.code == "E999" else "io-error"

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "name": self.name, "path": self.path, "line": self.line,
                "col": self.col, "end_line": self.line, "end_col": self.col, "message": self.message,
                "fix_title": None, "fixable": False, "safety": None}


class ScanResult:
    """What :func:`scan_paths` found: findings and errors sorted by (path, line, col), how many files
    and Python lines were scanned, and the paths skipped on purpose (a FIFO, a symlink loop) with why."""

    def __init__(self, findings: list[Finding] | None = None, errors: list[ScanError] | None = None,
                 files: int = 0, lines: int = 0) -> None:
        self.findings: list[Finding] = [] if findings is None else findings
        self.errors: list[ScanError] = [] if errors is None else errors
        self.files = files
        self.lines = lines
        self.skipped: list[tuple[str, str]] = []

    def __repr__(self) -> str:
        return (f"ScanResult({len(self.findings)} findings, {len(self.errors)} errors, {self.files} files, "
                f"{self.lines} lines)")


def pos(node: ast.AST) -> Pos:
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


def char_col(lines: list[str], lineno: int, byte_col: int) -> int:
    """1-based character column of a UTF-8 byte offset (what ast reports)."""
    line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
    if line.isascii():
        return byte_col + 1
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace")) + 1


def suppressed(lines: list[str], lineno: int, code: str) -> bool:
    if not 0 < lineno <= len(lines) or "noqa" not in lines[lineno - 1].lower():
        return False
    match = _NOQA.search(lines[lineno - 1])
    if match is None:
        return False
    codes = match.group("codes")
    return codes is None or code in re.split(r"[\s,]+", codes.upper())


def finding(code: str, path: str, where: Pos, lines: list[str], safety: FixSafety,
            fields: dict[str, Any], unsafe_fixes: bool, replacement: str | None) -> Finding:
    rule = RULES[code]
    line, col, end_line, end_col = where
    fixable = safety == "safe" or (unsafe_fixes and safety == "unsafe")
    message = rule.message_template.format(**fields)
    if fields.get("note"):  # why this finding's fix differs from the rule's (a guard around CUDA-only code)
        message = f"{message} ({fields['note']})"
    return Finding(code, rule.name, path, line, char_col(lines, line, col), end_line,
                   char_col(lines, end_line, end_col), message,
                   rule.fix_title.format(**fields), fixable, safety, replacement)


def from_raw(raw: list[Raw], path: str, lines: list[str], codes: frozenset[str],
             unsafe_fixes: bool) -> list[Finding]:
    """Selected, un-silenced findings of `raw`, sorted by position."""
    found = []
    for code, where, stmt_line, safety, fields, replacement in raw:
        if code not in codes or suppressed(lines, where[0], code) or suppressed(lines, stmt_line, code):
            continue
        found.append(finding(code, path, where, lines, safety, fields, unsafe_fixes, replacement))
    found.sort(key=lambda f: f.sort_key)
    return found
