"""The report model every command shares: one structure, rendered as text, JSON and HTML.

A command builds a :class:`Report`: ``data`` is the machine-readable result (what ``--json FILE`` writes,
a stable documented schema), the sections are what a person reads (terminal tables here; the
self-contained HTML page in torch_fl.analysis.html). The model sits below every command package
(analysis, compiler, migrate), so any of them may build reports; torch_fl.cli.output.emit prints one
and writes the requested files.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["INCONCLUSIVE", "VERDICTS", "Chart", "Report", "Section", "Stage", "Table", "end_progress", "format_cell",
           "plural", "progress", "progress_enabled", "render_table", "render_text", "set_progress", "stage"]

# The verdicts of a measured criterion (torchfl grade's statuses). They live in the report model so that
# every renderer can show them (the HTML page colours them) without importing the tool that measures.
VERDICTS: tuple[str, str, str] = ("PASS", "FAIL", "NOT MEASURED")
# A measurement too noisy to decide (its confidence interval contains the threshold): neither PASS nor FAIL,
# and coloured apart from both. Not in VERDICTS, which callers unpack as (PASS, FAIL, NOT MEASURED).
INCONCLUSIVE = "INCONCLUSIVE"


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Any]]
    title: str = ""


@dataclass
class Chart:
    """kind: 'bar' (one value per x), 'stacked-bar' (several series per x) or 'line' (series over x)."""

    kind: str
    title: str
    x: list[Any]
    series: list[dict[str, Any]]  # [{"name": str, "values": [float, ...]}]
    x_label: str = ""
    y_label: str = ""
    log_y: bool = False


@dataclass
class Section:
    """A titled part of a report: lines of text, then aligned ``key: value`` rows (``fields``: facts such as
    doctor's versions), then tables and charts."""

    title: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    fields: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Report:
    """What a command prints: ``data`` (its JSON), and for a person the title, summary, sections and warnings
    (rendered by render_text, and as HTML) or, for a command whose text has a form of its own (scan's and
    fix's compiler-style ``path:line:col: CODE message`` lines, a diff, a TOML file, a Markdown issue), that
    ``text`` verbatim. ``messages`` go to stderr, not into the report (files skipped, a fix not applied):
    a pipe of the report gets the report alone."""

    title: str
    data: Any
    summary: list[tuple[str, str]] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    text: str | None = None
    messages: list[str] = field(default_factory=list)


def plural(count: int, one: str, many: str | None = None) -> str:
    """'1 file', '3 files', '0 files' (`many` for an irregular plural: 'unsafe fixes'): every count a person
    reads in a report ("in 1 files" was issue 42's)."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def format_cell(value: Any) -> str:
    """A table cell as text: floats to 4 significant digits (3 in scientific notation), lists joined."""
    if isinstance(value, float):
        if value == 0:
            return "0"
        return f"{value:.3g}" if abs(value) < 1e-3 or abs(value) >= 1e5 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_cell(v) for v in value)
    return str(value)


def render_table(table: Table, max_width: int | None = 60, *, rule: bool = True) -> str:
    """The table as aligned columns: a header, a rule of dashes under it (unless `rule` is False), the
    rows; cells over `max_width` characters are cut with '…' (None: never, for names a reader copies)."""
    cells = [[format_cell(v) for v in row] for row in table.rows]
    if max_width is not None:
        cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in row] for row in cells]
    widths = [max([len(col), *(len(r[i]) for r in cells)]) for i, col in enumerate(table.columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(table.columns, widths, strict=True)).rstrip()]
    if rule:
        lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(([table.title] if table.title else []) + lines)


def render_text(report: Report) -> str:
    """The report for a terminal: the title, the summary rows, each section (its text, its ``key: value``
    fields, its tables), then the warnings. The fields of every section share one column, so that a
    report of facts reads as one aligned list. A report with a text form of its own is that text."""
    if report.text is not None:
        return report.text
    out = [report.title, "=" * len(report.title)]
    width = max((len(k) for k, _ in report.summary), default=0)
    out += [f"{k.ljust(width)}  {v}" for k, v in report.summary]
    key_width = max((len(k) + 1 for section in report.sections for k, _ in section.fields), default=0)
    for section in report.sections:
        out += ["", section.title, "-" * len(section.title)]
        out += section.text
        out += [f"{(k + ':').ljust(key_width)} {v}".rstrip() for k, v in section.fields]
        for table in section.tables:
            out += [render_table(table), ""]
    for warning in report.warnings:
        out.append(f"WARNING: {warning}")
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------------------------------- progress
# Stage lines for a person watching a long command: "[12:00:03] grade [3/7] coverage ...", and under the
# running stage one status line, rewritten in place every second once it has run 2 s ("... 40/60 steps,
# 12 s, about 6 s left"). They go to stderr (stdout is the report) and only to a terminal: a pipe, a CI
# log or a test gets none of them, and --quiet (torch_fl.cli) turns them off on a terminal too.
_STATUS_AFTER = 2.0  # seconds a stage runs before its status line appears
_TICK = 1.0


@dataclass
class Stage:
    """A running stage of a command: what it is, when it began, and (when known) how far it got.

    ``done`` of ``total`` ``unit`` (e.g. 40 of 60 steps) gives the status line its count and ETA; a stage
    without a total shows its count alone (op calls traced so far), or only the time."""

    message: str
    total: int | None = None
    unit: str = ""
    done: int = 0
    started: float = field(default_factory=time.monotonic)

    def advance(self, n: int = 1) -> None:
        self.done += n

    def status(self, now: float) -> str:
        elapsed = now - self.started
        parts = []
        if self.total:
            parts.append(f"{self.done:,}/{self.total:,} {self.unit}".rstrip())
        elif self.done:
            parts.append(f"{self.done:,} {self.unit}".rstrip())
        parts.append(_duration(elapsed))
        if self.total and 0 < self.done < self.total:
            parts.append(f"about {_duration(elapsed * (self.total - self.done) / self.done)} left")
        return ", ".join(parts)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class _Progress:
    """The stages on stderr: the stack of running ones (a stage may run inside another: grade's coverage
    step traces), the status line under the innermost, and the thread that rewrites it."""

    def __init__(self) -> None:
        self.forced: bool | None = None  # None: on exactly when stderr is a terminal
        self.stages: list[Stage] = []
        self.status_shown = False
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        # A forked child (a DataLoader worker) has no status thread and may have copied the lock held.
        if hasattr(os, "register_at_fork"):  # POSIX
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.stages, self.status_shown, self.thread = [], False, None
        self.lock, self.wake = threading.RLock(), threading.Event()

    def enabled(self) -> bool:
        if self.forced is not None:
            return self.forced
        try:
            return sys.stderr.isatty()
        except (AttributeError, ValueError):  # no stderr, or a closed one
            return False

    def clear_status(self) -> None:
        if self.status_shown:
            sys.stderr.write("\r\x1b[K")
            self.status_shown = False

    def line(self, message: str) -> None:
        with self.lock:
            self.clear_status()
            print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def start(self, stage: Stage, *, replace: bool) -> None:
        """Show `stage` (replace: it ends the innermost stage when that one is a progress() line)."""
        with self.lock:
            self.line(stage.message)
            if replace and self.stages and isinstance(self.stages[-1], _Line):
                self.stages.pop()
            self.stages.append(stage)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="torch_fl-progress", daemon=True)
                self.thread.start()

    def finish(self, stage: Stage) -> None:
        with self.lock:
            self.clear_status()
            if stage in self.stages:
                del self.stages[self.stages.index(stage):]

    def end(self) -> None:
        """No stage runs any more (the command prints its report, or ends)."""
        with self.lock:
            self.clear_status()
            self.stages.clear()

    def _run(self) -> None:
        while not self.wake.wait(_TICK):
            with self.lock:
                if not self.stages:
                    continue
                now = time.monotonic()
                stage = self.stages[-1]
                if now - stage.started < _STATUS_AFTER:
                    continue
                try:
                    # The cursor goes back to the line's start: whatever else writes to stderr (a warning)
                    # overwrites the status instead of running on after it.
                    sys.stderr.write(f"\r\x1b[K  ... {stage.status(now)}\r")
                    sys.stderr.flush()
                    self.status_shown = True
                except (OSError, ValueError):  # stderr went away (a closed terminal): stop showing
                    self.stages.clear()


class _Line(Stage):
    """The stage a progress() line announces: it runs until the next line."""


_progress = _Progress()


def set_progress(enabled: bool | None) -> bool | None:
    """Progress lines on (True), off (False: ``--quiet``) or back to the default (None: on exactly when
    stderr is a terminal). Returns the previous setting, to restore it."""
    previous, _progress.forced = _progress.forced, enabled
    return previous


def progress_enabled() -> bool:
    """Whether progress lines are printed now (set_progress)."""
    return _progress.enabled()


def progress(message: str) -> None:
    """A stage line on stderr (stdout stays the report): the command's next stage, which runs until the
    next line (its status line shows the time it has taken). Nothing when progress is off."""
    if _progress.enabled():
        _progress.start(_Line(message), replace=True)


@contextlib.contextmanager
def stage(message: str, *, total: int | None = None, unit: str = "") -> Iterator[Stage]:
    """A stage with an end and, optionally, a count: its status line shows ``done/total unit`` and an ETA
    (or the count alone without a total), and the stage it runs inside resumes when it ends.

    Example::

        with stage("timing 60 steps", total=60, unit="steps") as st:
            for _ in range(60):
                step()
                st.advance()
    """
    current = Stage(message, total, unit)
    if not _progress.enabled():
        yield current  # counted, but shown nowhere
        return
    _progress.start(current, replace=False)
    try:
        yield current
    finally:
        _progress.finish(current)


def end_progress() -> None:
    """Stop showing the running stage: before the report goes to stdout (the same terminal), and when
    the command ends."""
    _progress.end()
