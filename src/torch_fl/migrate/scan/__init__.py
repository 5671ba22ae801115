"""`torchfl scan`'s engine: find CUDA-coupled code with the stdlib ``ast`` module.

Detection uses ``ast`` only (about 4x faster than libcst; see DESIGN.md "Parsing speed"); libcst is
for the fixer, on the files it rewrites. The rules live in ``migrate/rules/`` (one module per family,
each rule's detection and fix together, with the words a file needs for it to fire and whether its
findings claim their site); this package is the one pass over each module that they hook into, split
along its seams:

* ``dispatch.py``: walking the tree, handing nodes to the rules' hooks, recording findings;
* ``scopes.py``: import aliases (``import torch as th``, ``from torch.cuda.amp import autocast``),
  functions, classes and loop depth;
* ``guards.py``: CUDA-only tests and guards (findings inside them are intended), assembled from
  ``guards_checks.py`` (recognising a CUDA check), ``guards_tests.py`` (CUDA-only tests and skips),
  ``guards_vendors.py`` (multi-vendor dispatch) and ``guards_settle.py`` (the fix safety of a guard's
  test, from the code it guards);
* ``flow.py``: the small data flow of values reaching device and backend arguments, across modules too;
* ``files.py``: walking directories, reading files, the scan table of each path;
* ``detector.py`` assembles the detector; ``results.py`` turns its records into findings;
* ``sarif.py``: a scan result as a SARIF 2.1.0 log (``torchfl scan --format sarif``).

No torch import anywhere on this path: ``torchfl scan`` runs in hook environments without torch.

Suppression: ``# noqa`` on a line silences every finding on it, ``# noqa: FL101, FL202`` only those
codes. The line of the finding counts, and so does the first line of the statement containing it, so
one comment covers a multi-line call. The comment is found by a regex on the line, so the text
``# noqa`` inside a string on that line also counts.

Configuration: the nearest ``pyproject.toml`` with a ``[tool.torch_fl.scan]`` table (or the deprecated
``[tool.torchfl]``), searched from each scanned path upwards (as ruff does), may set ``select``,
``extend-select``, ``ignore`` (codes or prefixes such as "FL1") and ``extend-exclude`` (globs, relative
to that file, also matched against bare file and directory names); see ``torch_fl/config.py``.
Command-line ``--select`` replaces the file's selection; ``--ignore`` adds to it. Exclusions apply while
walking directories; a file named on the command line is always scanned. Performance hints are off
unless selected.

Files that cannot be scanned (a syntax error, bytes that are not in the file's encoding) are returned
as :class:`ScanError` records (code E999 or E902), separate from findings, and skipped.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ...config import ScanConfig as Config
from ...config import ScanConfigError
from ..rules import RULES, Finding
from .detector import Detector, scan_other, scan_text
from .files import (
    SKIP_DIRS,
    Unreadable,
    enabled_codes,
    is_python,
    iter_files,
    load_config,
    not_a_file,
    read_source,
    targets,
)
from .flow import ModuleFacts, cross_module
from .results import ScanError, ScanResult, from_raw


def scan_source(source: str, path: str = "<string>", *, select: Iterable[str] | None = None,
                ignore: Iterable[str] | None = None, unsafe_fixes: bool = False) -> list[Finding]:
    """Findings in one module's source, sorted by position, after ``# noqa`` and selection.

    Args:
        source: Python source text.
        path: the name findings carry.
        select, ignore: codes or prefixes ("FL1", "FL203"); default the coupling rules (performance
            hints only when selected).
        unsafe_fixes: count findings with an unsafe fix as fixable.

    Raises:
        SyntaxError: the source does not parse (null bytes and absurd nesting included).

    Example:
        >>> [f.code for f in scan_source('import torch\\nx = torch.zeros(3).cuda()\\n')]
        ['FL102']
    """
    return scan_text(source, path, enabled_codes(select, ignore), unsafe_fixes)


def scan_file(path: Path, codes: frozenset[str] | None = None, *, unsafe_fixes: bool = False,
              facts: dict[str, ModuleFacts] | None = None) -> tuple[list[Finding], ScanError | None, int]:
    """Scan one file: (findings, error or None, Python lines). Non-Python files a rule asks for (`.cu`)
    go to that rule's file hook."""
    codes = frozenset(RULES) if codes is None else codes
    name = str(path)
    if not is_python(path):
        return scan_other(name, path.suffix, codes, unsafe_fixes), None, 0
    try:
        text = read_source(path)
    except Unreadable as exc:
        return [], ScanError("E902", name, 1, 1, f"cannot decode: {exc}"), 0
    except OSError as exc:
        return [], ScanError("E902", name, 1, 1, f"cannot read: {exc.strerror or exc}"), 0
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    try:
        return scan_text(text, name, codes, unsafe_fixes, facts), None, lines
    except SyntaxError as exc:
        message = f"SyntaxError: {exc.msg} (file skipped)"
        newer = _newer_python(text)
        if newer:
            message = (f"valid Python {newer} that this Python ({sys.version_info.major}.{sys.version_info.minor}) "
                       f"cannot parse ({exc.msg}, line {exc.lineno}): file skipped; scan it with Python >= {newer}")
        return [], ScanError("E999", name, exc.lineno or 1, exc.offset or 1, message), lines


# What 3.12 added that older parsers reject: `type X = ...`, `def f[T](...)` / `class C[T]:` (PEP 695), and
# f-strings reusing their own quote inside braces (PEP 701). A file without any is not tried with libcst.
_NEWER_SYNTAX = re.compile(r"^\s*type\s+\w+\s*(\[[^\]\n]*\])?\s*=|^\s*(async\s+)?(def|class)\s+\w+\s*\[|"
                           r"\bf(\"[^\"\n]*\{[^}\n]*\"|'[^'\n]*\{[^}\n]*')", re.MULTILINE)


def _newer_python(text: str) -> str | None:
    """The newer Python version a file that this interpreter's ``ast`` rejects is written for (PEP 695
    generics, PEP 701 f-strings: 3.12), where libcst, which parses up to 3.12, accepts it; None otherwise.
    Only on this error path, and only where libcst is installed (the scan itself needs the standard
    library only)."""
    if sys.version_info >= (3, 12) or not _NEWER_SYNTAX.search(text):
        return None
    import importlib.util

    if importlib.util.find_spec("libcst") is None:
        return None
    import libcst

    try:
        libcst.parse_module(text, config=libcst.PartialParserConfig(python_version="3.12"))
    except Exception:  # libcst's ParserSyntaxError: not valid 3.12 either
        return None
    return "3.12"


def scan_paths(paths: Sequence[str | os.PathLike[str]], select: Iterable[str] | None = None,
               ignore: Iterable[str] | None = None, *, unsafe_fixes: bool = False,
               on_file: Callable[[ScanResult, int], None] | None = None) -> ScanResult:
    """Scan files and directories (recursively).

    Each path uses the scan table of the nearest config above it ([tool.torch_fl.scan]); `select` and
    `ignore` come on top of it as on the command line. Findings carry paths as given (``src`` gives
    ``src/model.py``), so relative arguments give relative, machine-independent paths.

    Raises:
        ScanConfigError: a selector that names no rule, or a bad scan table.
        FileNotFoundError: a path that does not exist.

    `on_file(result so far, number of files)` is called after each file (`torchfl scan`'s progress).

    Example:
        >>> result = scan_paths(["src"], ignore=["FL203"])  # doctest: +SKIP
        >>> result.findings[0].code, result.files, result.lines  # doctest: +SKIP
    """
    result = ScanResult()
    facts: dict[str, ModuleFacts] = {}
    files = list(targets(paths, select, ignore, result.skipped))  # the walk is quick; the count is progress
    for path, codes in files:
        findings, error, lines = scan_file(path, codes, unsafe_fixes=unsafe_fixes, facts=facts)
        result.files += 1
        result.lines += lines
        result.findings.extend(findings)
        if error is not None:
            result.errors.append(error)
        if on_file is not None:
            on_file(result, len(files))
    for exporter, fact, raw in cross_module(facts, Detector):
        result.findings.extend(from_raw(raw, exporter, fact.lines, fact.codes, fact.unsafe_fixes))
    result.findings.sort(key=lambda f: f.sort_key)
    result.errors.sort(key=lambda e: (e.path, e.line, e.col))
    return result


def findings_json(result: ScanResult) -> list[dict[str, Any]]:
    """Findings and errors as one list of JSON objects, sorted by position (`torchfl scan --format
    json`)."""
    items = [f.to_json() for f in result.findings] + [e.to_json() for e in result.errors]
    return sorted(items, key=lambda i: (i["path"], i["line"], i["col"], i["code"]))


__all__ = [
    "SKIP_DIRS",
    "Config",
    "Finding",
    "ScanConfigError",
    "ScanError",
    "ScanResult",
    "enabled_codes",
    "findings_json",
    "is_python",
    "iter_files",
    "load_config",
    "not_a_file",
    "scan_file",
    "scan_paths",
    "scan_source",
    "targets",
]
