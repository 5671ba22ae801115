"""What `torchfl fix` did: one source's outcome (:class:`FixResult`), one file's (:class:`FileFix`) and a
run's (:class:`FixReport`), the model the CLI prints. No rewriting here (fix.py drives it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FileFix", "FixReport", "FixResult"]


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


def _total(findings: str) -> property:
    """The number of (code, line) pairs in every file's `findings` list (a FileFix field)."""
    return property(lambda report: sum(len(getattr(f, findings)) for f in report.files),
                    doc=f"How many findings every file's {findings} holds.")


def _files(flag: str) -> property:
    """The files whose `flag` (a FileFix field) is set."""
    return property(lambda report: [f for f in report.files if getattr(f, flag)], doc=f"The files with {flag} set.")


@dataclass
class FixReport:
    """What `fix_paths` did, file by file, with totals."""

    files: list[FileFix] = field(default_factory=list)
    # Paths never opened, with why: FIFOs, devices, symlink loops (fix reads only regular files).
    skipped: list[tuple[str, str]] = field(default_factory=list)

    applied = _total("applied")  # int
    skipped_unsafe = _total("skipped_unsafe")  # int
    changed_files = _files("changed")  # list[FileFix]
    errors = _files("error")  # list[FileFix]

    @property
    def diff(self) -> str:
        return "".join(f.diff for f in self.files)
