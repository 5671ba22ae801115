"""The report model every command shares: one structure, rendered as text, JSON and HTML.

A command builds a :class:`Report`: ``data`` is the machine-readable result (what ``--json FILE`` writes,
a stable documented schema), the sections are what a person reads (terminal tables here; the
self-contained HTML page in torch_fl.analysis.html). The model sits below every command package
(analysis, compiler, migrate), so any of them may build reports; torch_fl.cli.output.emit prints one
and writes the requested files.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["VERDICTS", "Chart", "Report", "Section", "Table", "format_cell", "progress", "render_table", "render_text",
           "write_json"]

# The verdicts of a measured criterion (torchfl grade's statuses). They live in the report model so that
# every renderer can show them (the HTML page colours them) without importing the tool that measures.
VERDICTS: tuple[str, str, str] = ("PASS", "FAIL", "NOT MEASURED")


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
    title: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)


@dataclass
class Report:
    title: str
    data: dict[str, Any]
    summary: list[tuple[str, str]] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def format_cell(value: Any) -> str:
    """A table cell as text: floats to 4 significant digits (3 in scientific notation), lists joined."""
    if isinstance(value, float):
        if value == 0:
            return "0"
        return f"{value:.3g}" if abs(value) < 1e-3 or abs(value) >= 1e5 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_cell(v) for v in value)
    return str(value)


def render_table(table: Table, max_width: int = 60) -> str:
    cells = [[format_cell(v) for v in row] for row in table.rows]
    cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in row] for row in cells]
    widths = [max([len(col), *(len(r[i]) for r in cells)]) for i, col in enumerate(table.columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(table.columns, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(([table.title] if table.title else []) + lines)


def render_text(report: Report) -> str:
    out = [report.title, "=" * len(report.title)]
    width = max((len(k) for k, _ in report.summary), default=0)
    out += [f"{k.ljust(width)}  {v}" for k, v in report.summary]
    for section in report.sections:
        out += ["", section.title, "-" * len(section.title)]
        out += section.text
        for table in section.tables:
            out += [render_table(table), ""]
    for warning in report.warnings:
        out.append(f"WARNING: {warning}")
    return "\n".join(out).rstrip() + "\n"


def write_json(report: Report, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report.data, indent=2, default=str) + "\n", encoding="utf-8")


def progress(message: str) -> None:
    """Progress output on stderr (stdout stays the report)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
