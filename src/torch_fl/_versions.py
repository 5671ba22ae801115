"""Version specifiers ('>=2.1,<2.10') without a dependency on `packaging` (torch does not require it)."""

from __future__ import annotations

import re

_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|~=|>|<)?\s*([0-9][0-9A-Za-z.+*-]*)\s*$")


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version: '2.13.0+cpu' -> (2, 13, 0); '2.5.0a0' -> (2, 5, 0)."""
    parts = []
    for piece in version.split("+", 1)[0].split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def check_spec(spec: str) -> str | None:
    """Return an error message if `spec` is not a valid specifier, else None."""
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        if not _CLAUSE.match(clause):
            return (f"'{clause}' is not a version clause; use forms like '>=2.1', '<2.10', '==2.5.*' "
                    f"joined by commas")
    return None


def satisfies(version: str, spec: str) -> bool:
    """Whether `version` satisfies every comma-separated clause of `spec` ('' matches everything)."""
    have = release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = _CLAUSE.match(clause)
        if not match:
            raise ValueError(check_spec(clause))
        op, text = match.group(1) or "==", match.group(2)
        if text.endswith(".*"):
            prefix = release(text[:-2])
            same = have[: len(prefix)] == prefix
            if (op == "==" and not same) or (op == "!=" and same):
                return False
            continue
        want = release(text)
        order = _cmp(have, want)
        ok = {
            ">=": order >= 0, "<=": order <= 0, ">": order > 0, "<": order < 0,
            "==": order == 0, "!=": order != 0,
            "~=": order >= 0 and have[: len(want) - 1] == want[:-1],
        }[op]
        if not ok:
            return False
    return True
