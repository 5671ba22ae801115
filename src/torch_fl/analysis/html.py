"""HTML rendering of a :class:`~torch_fl.report.Report`: one self-contained page.

The page must open anywhere a report is attached or archived (CI artefacts, air-gapped clusters,
e-mail), so it references nothing outside itself: CSS is inline, charts are SVG drawn here, there is
no JavaScript, and a Content-Security-Policy forbids loading anything, so a mistake cannot silently
reach the network. The report's ``data`` is embedded as a JSON island (``<script
type="application/json" id="report-data">``) so the machine-readable result travels with the page.

Public API: :func:`render_html`, :func:`write_html`, :func:`render_chart`, :func:`series_color`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .._version import __version__
from ..report import INCONCLUSIVE, VERDICTS, Report, Section, Table, format_cell
from .html_chart import (
    _NARROW_BELOW,
    _ROUTE_CANON,
    DEFAULT_PALETTE,
    ROUTE_COLORS,
    _breakable,
    _e,
    render_chart,
    series_color,
)

__all__ = ["DEFAULT_PALETTE", "MAX_VISIBLE_ROWS", "ROUTE_COLORS", "render_chart", "render_html",
           "series_color", "write_html"]

# Rows beyond this go into a closed <details>: browsers skip laying out closed content, so a table
# of thousands of ops keeps the page responsive while the full data stays in the file.
MAX_VISIBLE_ROWS = 200


# ---------------------------------------------------------------------------------------------- tables



def _verdict_class(text: str) -> str | None:
    """CSS class of a verdict (PASS, FAIL, NOT MEASURED: torch_fl.report.VERDICTS, and INCONCLUSIVE, in a
    colour of its own: a noisy measurement is neither a pass nor a failure), else None."""
    return f"verdict-{text.lower().replace(' ', '-')}" if text in (*VERDICTS, INCONCLUSIVE) else None


def _td(value: Any, label: str) -> str:
    """A cell; `label` (its column's name) heads it where a phone shows each row as a card."""
    attr = f' data-label="{_e(label)}"'
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num"{attr}>{_e(format_cell(value))}</td>'
    text = format_cell(value)
    # Only a cell that is exactly a route name or a verdict gets its chip, not text that mentions one.
    route = _ROUTE_CANON.get(text.strip().lower(), text.strip().lower())
    if route in ROUTE_COLORS:
        return f'<td{attr}><span class="route route-{route}">{_e(text)}</span></td>'
    verdict = _verdict_class(text.strip())
    if verdict:
        return f'<td{attr}><span class="verdict {verdict}">{_e(text)}</span></td>'
    return f"<td{attr}>{_breakable(text)}</td>"


def _rows(rows: Iterable[Sequence[Any]], columns: Sequence[str]) -> str:
    return "".join("<tr>" + "".join(_td(v, str(c)) for v, c in zip(row, columns, strict=False)) + "</tr>"
                   for row in rows)


def _table(table: Table) -> str:
    head = "<thead><tr>" + "".join(f'<th scope="col">{_breakable(c)}</th>' for c in table.columns) + "</tr></thead>"
    caption = f"<caption>{_breakable(table.title)}</caption>" if table.title else ""
    visible, rest = table.rows[:MAX_VISIBLE_ROWS], table.rows[MAX_VISIBLE_ROWS:]
    # class "cards": on a phone each row is a card of 'column: value' lines (see _CSS)
    out = [f'<div class="table-wrap"><table class="cards">{caption}{head}<tbody>{_rows(visible, table.columns)}'
           f"</tbody></table></div>"]
    if rest:
        out.append(f'<details class="more-rows"><summary>Show {len(rest)} more rows '
                   f"({len(table.rows)} in all)</summary>"
                   f'<div class="table-wrap"><table class="cards">{head}<tbody>{_rows(rest, table.columns)}</tbody>'
                   f"</table></div></details>")
    if not table.rows:
        out.append('<p class="note">No rows.</p>')
    return "".join(out)


# ------------------------------------------------------------------------------------------------ page

_CSS = """
:root { color-scheme: light; --fg:#1d232a; --muted:#5b6672; --line:#d8dee4; --bg:#fff; --alt:#f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 20px 8px; }
h1 { font-size: 1.7em; margin: 0 0 12px; }
h2 { font-size: 1.3em; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h1, h2, figcaption, caption, dt, nav.toc a { overflow-wrap: break-word; hyphens: manual; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0 0 16px;
  padding: 12px 16px; background: var(--alt); border: 1px solid var(--line); border-radius: 6px; }
dl.summary dt { font-weight: 600; }
dl.summary dd { margin: 0; overflow-wrap: break-word; min-width: 0; }
.warnings { margin: 16px 0; padding: 10px 16px; background: #fff4e5; border: 1px solid #f0b35a;
  border-left: 6px solid #e8590c; border-radius: 6px; }
.warnings h2 { margin: 0 0 4px; border: 0; font-size: 1.1em; color: #8a3b00; }
.warnings ul { margin: 0; padding-left: 20px; }
nav.toc ol { margin: 0; padding-left: 20px; columns: 2; }
.text { white-space: pre-wrap; overflow-wrap: break-word; margin: 6px 0; }
/* A table wider than its box scrolls in it, and says so: a shadow on each side with more columns (the
   covers scroll with the content and hide the shadow at an end: pure CSS, the page runs no script). */
.table-wrap { overflow-x: auto; margin: 8px 0 16px;
  background: linear-gradient(to right, var(--bg) 30%, rgba(255,255,255,0)),
    linear-gradient(to left, var(--bg) 30%, rgba(255,255,255,0)) 100% 0,
    radial-gradient(farthest-side at 0 50%, rgba(0,0,0,.28), rgba(0,0,0,0)),
    radial-gradient(farthest-side at 100% 50%, rgba(0,0,0,.28), rgba(0,0,0,0)) 100% 0;
  background-repeat: no-repeat; background-size: 40px 100%, 40px 100%, 16px 100%, 16px 100%;
  background-attachment: local, local, scroll, scroll; }
table { border-collapse: collapse; font-size: 13px; min-width: 40%; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top;
  max-width: 48em; overflow-wrap: normal; word-break: normal; hyphens: manual; }
thead th { background: rgba(110,130,150,.08); }  /* translucent: the scroll shadows show through */
tbody tr:nth-child(even) { background: rgba(110,130,150,.03); }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
details > summary { cursor: pointer; color: var(--muted); margin: 4px 0; }
.route, .verdict { display: inline-block; padding: 0 6px; border-radius: 8px; color: #fff; font-size: 12px;
  white-space: nowrap; }
.verdict { font-weight: 600; } .nw { white-space: nowrap; }
.verdict-pass { background: #2e7d32; } .verdict-fail { background: #c62828; }
.verdict-not-measured { background: #eceff1; color: #37474f; border: 1px dashed #78909c; }
.verdict-inconclusive { background: #fff3cd; color: #6d4700; border: 1px solid #c99400; }
ul.notes { margin: 6px 0; padding-left: 22px; } ul.notes li { margin: 3px 0; overflow-wrap: break-word; }
.route-native { background: #2e7d32; } .route-translate { background: #e6a700; color: #1d232a; }
.route-fallback { background: #e8590c; } .route-kernel { background: #1c6dd0; }
.route-unsupported { background: #8b1a1a; }
figure.chart { margin: 16px 0 24px; padding: 12px; border: 1px solid var(--line); border-radius: 6px; }
figure.chart figcaption { font-weight: 600; margin-bottom: 6px; }
.chart-svg { display: block; max-width: 100%; height: auto; font-family: inherit; }
.chart-narrow { display: none; }
@media (max-width: @NARROW_BELOW@px) { .chart-wide { display: none; } .chart-narrow { display: block; } }
.chart-svg text { font-size: 12px; fill: var(--fg); }
.chart-svg .tick { fill: var(--muted); font-size: 11px; }
.chart-svg .axis-label { font-size: 12px; font-weight: 600; }
.chart-svg .grid { stroke: #e9edf1; stroke-width: 1; }
.chart-svg .axis { stroke: #8c959f; stroke-width: 1; }
.chart-svg .zero-line { stroke: #8c959f; stroke-width: 1; }
.chart-svg rect:hover, .chart-svg circle:hover { opacity: .75; }
.note { color: var(--muted); font-style: italic; margin: 6px 0; }
footer { max-width: 1120px; margin: 24px auto; padding: 12px 20px; color: var(--muted); font-size: 12px;
  border-top: 1px solid var(--line); }
/* A phone (390 px): titles keep their size relation but fit whole words; one column for the contents
   and the summary, whose keys would otherwise squeeze the values into a sliver. */
@media (max-width: 480px) {
  main { padding: 16px 12px 8px; }
  h1 { font-size: 1.35em; } h2 { font-size: 1.15em; }
  nav.toc ol { columns: 1; }
  dl.summary { grid-template-columns: minmax(0, 1fr); gap: 0; padding: 10px 12px; }
  dl.summary dd { margin-bottom: 6px; }
  figure.chart { padding: 8px; }
}
/* A table's rows as cards of 'column: value' lines on a phone or a tablet: 390 or 640 px have no room for
   5-7 columns, whose narrowest made rows 150-250 px tall and mostly blank, with the evidence column
   off-screen. */
@media (max-width: 760px) {
  table.cards, table.cards tbody, table.cards tr, table.cards td, table.cards caption { display: block; }
  table.cards { min-width: 0; }
  table.cards thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); }
  table.cards tr { border: 1px solid var(--line); border-radius: 6px; margin: 0 0 8px; padding: 4px 8px; }
  table.cards td { border: 0; padding: 1px 0; max-width: none; text-align: left; white-space: normal; }
  table.cards td::before { content: attr(data-label) ": "; font-weight: 600; color: var(--muted); }
  table.cards td:empty { display: none; }
}
@media print { details { display: block; } }
""".replace("@NARROW_BELOW@", str(_NARROW_BELOW))

# Nothing may be fetched: styles are inline, images are data: URLs (the empty favicon stops browsers
# asking for /favicon.ico), and no script runs (the JSON island is data, not script).
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def _json_island(data: Any) -> str:
    """JSON that cannot end the <script> element: every '<', '>' and '&' (only possible inside JSON
    strings) becomes a \\u escape, which JSON parsers read back as the same character. Non-finite
    floats become null: NaN/Infinity are not JSON, and a browser's JSON.parse rejects them."""
    text = json.dumps(_finite(data), default=str, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


_VERDICT_PREFIX = re.compile(r"^\[([A-Z][A-Z ]*[A-Z])\] ")


def _note(text: str) -> str:
    """One list item; a leading '[PASS] ' (grade's evidence lines) becomes the verdict's chip."""
    m = _VERDICT_PREFIX.match(text)
    verdict = _verdict_class(m.group(1)) if m else None
    if m and verdict:
        return f'<li><span class="verdict {verdict}">{_e(m.group(1))}</span> {_breakable(text[m.end():])}</li>'
    return f"<li>{_breakable(text)}</li>"


def _text(lines: Sequence[str]) -> list[str]:
    """A section's text: runs of '- ' lines (notes, evidence) as a list, other lines as paragraphs."""
    out: list[str] = []
    items: list[str] = []
    for line in [*lines, None]:
        if line is not None and line.startswith("- "):
            items.append(_note(line[2:]))
            continue
        if items:
            out.append('<ul class="notes">' + "".join(items) + "</ul>")
            items = []
        if line is not None:
            out.append(f'<p class="text">{_breakable(line)}</p>')
    return out


def _section(index: int, section: Section) -> str:
    out = [f'<section id="section-{index}"><h2>{_breakable(section.title)}</h2>']
    out += _text(section.text)
    if section.fields:  # aligned 'key: value' rows in text (doctor's): a two-column table here
        out.append(_table(Table(["item", "value"], [list(pair) for pair in section.fields])))
    out += [_table(t) for t in section.tables]
    out += [render_chart(c) for c in section.charts]
    if not (section.text or section.fields or section.tables or section.charts):
        out.append('<p class="note">Nothing to show.</p>')
    out.append("</section>")
    return "".join(out)


def render_html(report: Report, *, generated: datetime | None = None) -> str:
    """The report as one self-contained HTML5 page (generated: the footer's time, default now)."""
    when = (generated or datetime.now(timezone.utc)).astimezone()
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f'<meta name="generator" content="torch-fl {_e(__version__)}">',
             '<link rel="icon" href="data:,">',
             f"<title>{_e(report.title)}</title><style>{_CSS}</style></head><body><main>",
             f"<h1>{_breakable(report.title)}</h1>"]
    if report.summary:
        parts.append('<dl class="summary">' + "".join(f"<dt>{_breakable(k)}</dt><dd>{_breakable(v)}</dd>"
                                                      for k, v in report.summary) + "</dl>")
    if report.warnings:
        parts.append(f'<section class="warnings" role="alert" aria-label="Warnings">'
                     f"<h2>Warnings ({len(report.warnings)})</h2><ul>"
                     + "".join(f"<li>{_breakable(w)}</li>" for w in report.warnings) + "</ul></section>")
    if len(report.sections) > 2:
        parts.append('<nav class="toc" aria-label="Sections"><ol>'
                     + "".join(f'<li><a href="#section-{i}">{_breakable(s.title)}</a></li>'
                               for i, s in enumerate(report.sections, 1)) + "</ol></nav>")
    parts += [_section(i, s) for i, s in enumerate(report.sections, 1)]
    parts.append("</main>")
    parts.append(f'<footer>Generated by torch-fl {_e(__version__)} on '
                 f'<time datetime="{when.isoformat(timespec="seconds")}">'
                 f'{when.strftime("%Y-%m-%d %H:%M:%S %Z").strip()}</time>. '
                 "The machine-readable result is embedded in this page as JSON "
                 "(element <code>#report-data</code>).</footer>")
    parts.append(f'<script type="application/json" id="report-data">{_json_island(report.data)}</script>')
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_html(report: Report, path: str | Path) -> None:
    # errors="replace": a lone surrogate in some op name must not lose the whole page.
    Path(path).write_text(render_html(report), encoding="utf-8", errors="replace")
