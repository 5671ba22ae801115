"""`torchfl fix`: rewrite CUDA-coupled code to the torch.fl API, keeping formatting and comments.

This is the driver; each job has its module:

- ``fix_rewriter.py``: the libcst rewriter that applies each rule's fix (the fixes live with their rules,
  ``migrate/rules/*.py``, registered with ``@fixes(code, node types)``; what a ``torch.cuda`` name
  becomes is the table in ``migrate/cuda_api.py``);
- ``fix_segments.py``: libcst on the expressions that change (fast path) or on the whole module;
- ``fix_imports.py``: the import editors (drop what a fix left unused, add what fixed code needs);
- ``textfix.py``: the in-place text edits for fixes whose text the scanner knows (no libcst at all);
- ``fix_files.py``: which files, reading them, writing them atomically;
- ``fix_report.py``: what was done, the model the CLI prints.

The scanner decides *what* to fix: `scan_source` (``ast``, fast) runs first on every file, and only files
with a fixable finding at the allowed safety level are rewritten. The rewriter then edits exactly the
nodes those findings point at, so a ``# noqa``'d finding is never fixed and, after a fix, the scanner
reports no fixable finding left.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..errors import FileChanged, TorchFLError
from . import textfix
from .deep import call_deep
from .fix_files import outside_tree, python_files, read_only, read_source, unified_diff, write_atomic
from .fix_imports import TORCH_FL_IMPORT
from .fix_report import FileFix, FixReport, FixResult
from .fix_rewriter import Spelling
from .fix_segments import ast_bindings, places, rewrite_module, rewrite_segments
from .namerefs import _Fallback
from .rules import Finding
from .scan import enabled_codes
from .scan.detector import parse, scan_text

if TYPE_CHECKING:
    from pathlib import Path

    from .fix_files import Snapshot

__all__ = [
    "LIBCST_MISSING", "TORCH_FL_IMPORT", "FileChanged", "FileFix", "FixReport", "FixResult", "fix_paths", "fix_source",
    "have_libcst", "write_atomic",
]

LIBCST_MISSING = "torchfl fix needs libcst: pip install 'torch-fl[migrate]'"

# Whether fixes whose text the scanner knows are edited in place without libcst (textfix.py); tests and
# scripts/realworld_safe_sites.py turn it off to compare with the libcst rewrite.
TEXT_EDITS = True


def have_libcst() -> bool:
    import importlib.util

    return importlib.util.find_spec("libcst") is not None


# One source ----------------------------------------------------------------------------------------


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


def _rewrite(source: str, findings: list[Finding], tree: ast.Module | None = None) -> tuple[str, list[Finding]]:
    """Apply the fixes of `findings` to `source`; returns the new source and the findings that were
    applied. In place on the text where textfix.py knows every fix (no libcst); else only the
    expressions the findings point at (and, where imports change, the import block) are parsed with
    libcst (:func:`rewrite_segments`), the whole module only where that cannot be done
    (:func:`rewrite_module`). Either way a replacement keeps the precedence of the place it is put in
    (precedence.py): each finding's place is read from the ``ast`` first."""
    tree = ast.parse(source) if tree is None else tree
    if TEXT_EDITS:
        try:
            return _rewrite_text(source, findings, tree), list(findings)
        except textfix.Unsure:
            pass
    need = places(source, findings, tree)
    try:
        return rewrite_segments(source, findings, tree, need)
    except _Fallback:
        return rewrite_module(source, findings, need)


def _rewrite_text(source: str, findings: list[Finding], tree: ast.Module) -> str:
    """:func:`_rewrite` without libcst, for the fixes textfix.py knows (textfix.Unsure for the others)."""
    spelling = Spelling.of(*ast_bindings(tree), source)
    return textfix.rewrite(source, findings, tree, spelling.names, spelling.has_torch_fl,
                           list(spelling.torch_aliases), spelling.torch_name, spelling.quote, TORCH_FL_IMPORT)


# Files ---------------------------------------------------------------------------------------------


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
    for path, codes, tree in python_files(paths, select, ignore, report.skipped):
        entry = FileFix(path)
        report.files.append(entry)
        try:
            if outside_tree(path, tree):
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
        source, encoding, snapshot = read_source(path)
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
        entry.changed, entry.diff = True, unified_diff(path, source, result.new_source)
        return
    error = _write(path, result.new_source, encoding, snapshot)
    if error is not None:
        entry.error, entry.applied = error, []
        return
    entry.changed = True


def _write(path: Path, text: str, encoding: str, snapshot: Snapshot) -> str | None:
    """Write the fixed text, or say why the file is left as it was."""
    if read_only(path):
        return "read-only file, not changed (make it writable, e.g. chmod u+w, to fix it)"
    links = os.stat(path).st_nlink
    if links > 1:
        # The atomic write replaces the directory entry: the file's other names would keep the old text.
        return (f"hard-linked file ({links} links), not changed: rewriting it would split it from its other "
                f"names; fix one copy (cp --remove-destination) or use --diff and apply the patch in place")
    try:
        write_atomic(path, text, encoding, expect=snapshot)
    except FileChanged as exc:
        return f"not written: {exc.strerror}"
    except OSError as exc:
        return f"cannot write: {exc}"
    return None


def _notify(callback: Callable[[FileFix], None] | None, entry: FileFix) -> None:
    if callback is not None:
        callback(entry)
