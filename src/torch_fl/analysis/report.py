"""Reports of the analysis commands: one structure, three renderings.

Every analysis command builds a :class:`Report`: ``data`` is the machine-readable result (what
``--json FILE`` writes, a stable documented schema), the sections are what a person reads (terminal
tables, and ``--html FILE``: a self-contained page with charts, see html.py).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value == 0:
            return "0"
        return f"{value:.3g}" if abs(value) < 1e-3 or abs(value) >= 1e5 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def render_table(table: Table, max_width: int = 60) -> str:
    cells = [[_cell(v) for v in row] for row in table.rows]
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


def emit(report: Report, *, json_path: str | None = None, html_path: str | None = None,
         stream=None) -> None:
    """Print the report and write the requested files."""
    stream = stream or sys.stdout
    stream.write(render_text(report))
    if json_path:
        write_json(report, json_path)
        progress(f"wrote {json_path}")
    if html_path:
        from .html import write_html

        write_html(report, html_path)
        progress(f"wrote {html_path}")


def progress(message: str) -> None:
    """Progress output on stderr (stdout stays the report)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
