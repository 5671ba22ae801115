"""Printing a report from a command: the text on stdout, and the --json / --html files it asked for.

The report model (Report, Section, Table, Chart) and its text rendering live in torch_fl.report, below
every command package; they are re-exported here because the analysis commands and their tests have
always imported them from this module. The HTML page is torch_fl.analysis.html.
"""

from __future__ import annotations

import sys
from typing import IO

from ..report import (
    Chart,
    Report,
    Section,
    Table,
    format_cell,
    progress,
    render_table,
    render_text,
    write_json,
)
from .html import write_html

__all__ = ["Chart", "Report", "Section", "Table", "emit", "format_cell", "progress", "render_table",
           "render_text", "write_json"]


def emit(report: Report, *, json_path: str | None = None, html_path: str | None = None,
         stream: IO[str] | None = None) -> None:
    """Print the report and write the requested files."""
    stream = stream or sys.stdout
    stream.write(render_text(report))
    if json_path:
        write_json(report, json_path)
        progress(f"wrote {json_path}")
    if html_path:
        write_html(report, html_path)
        progress(f"wrote {html_path}")
