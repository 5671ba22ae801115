"""HTML report: escaping, self-containment, charts, and a real render in headless Chromium.

The browser tests use Debian's ``chromium`` directly (no Selenium/Playwright). Without it they are
skipped, except under CI (``CI`` set), where a missing browser fails: CI must not silently skip them.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import pytest

from torch_fl._version import __version__
from torch_fl.analysis.html import (
    MAX_VISIBLE_ROWS,
    ROUTE_COLORS,
    render_chart,
    render_html,
    series_color,
    write_html,
)
from torch_fl.cli.output import emit
from torch_fl.report import Chart, Report, Section, Table

NASTY = "</script><script>alert('x')</script> & \"quoted\" <b>bold</b> 'single' <!-- -->"
ROUTES = ["native", "translate", "fallback", "kernel", "unsupported"]
PLOTTED = 6  # charts of nasty_report() with something to draw: 3 + the last 3 awkward ones


def nasty_report(rows: int = 2500) -> Report:
    """Every chart kind (and the awkward cases), a big table, and hostile strings everywhere."""
    sizes = [1, 2, 4, 8, 16, 32, 64, 128]
    return Report(
        title=f"Coverage {NASTY}",
        data={"schema": 1, "title": NASTY, "ops": {"aten::add": {"route": "native", "n": 3}},
              "nested": [1, 2.5, None, True, "</script>", {"k</": "v&"}], "nan": math.nan},
        summary=[("device", "fl:0 <virtual>"), ("model", NASTY), ("grade", "B & better")],
        sections=[
            Section("Routes <overview>", text=[NASTY, "  indented line\n  second line"], charts=[
                Chart("bar", "Calls per route", ROUTES, [{"name": "calls", "values": [120, 30, 7, 3, 1]}],
                      x_label="route", y_label="calls"),
                Chart("stacked-bar", f"Ops per module {NASTY}", ["encoder", "decoder", "head <x>"],
                      [{"name": r, "values": [10 - i, 5, i]} for i, r in enumerate(ROUTES)],
                      x_label="module", y_label="ops"),
                Chart("line", "Latency vs size (log)", sizes,
                      [{"name": "native", "values": [0.1, 0.2, 0.0, 0.8, 1.6, 3.2, 6.4, 12.8]},
                       {"name": "fallback", "values": [1, 2, 4, -1, None, 32, 64, 128]},
                       {"name": "reference <cpu>", "values": [0.5] * 8}],
                      x_label="batch size", y_label="ms", log_y=True),
            ]),
            Section("Awkward charts", charts=[
                Chart("line", "No series at all", [1, 2, 3], []),
                Chart("bar", "No x", [], [{"name": "a", "values": []}]),
                Chart("line", "Only gaps", ["a", "b"], [{"name": "a", "values": [None, math.nan]}]),
                Chart("pie", "Unknown kind", ["a"], [{"name": "a", "values": [1]}]),
                Chart("line", "Log axis, nothing positive", ["a", "b", "c"],
                      [{"name": "x", "values": [0, -1, 0]}], log_y=True),
                Chart("bar", "Negative bars, many long labels", [f"aten::some_long_operator_{i}" for i in range(40)],
                      [{"name": "delta %", "values": [(-1) ** i * i for i in range(40)]}]),
                Chart("line", "Many points", list(range(2000)),
                      [{"name": "kernel", "values": [math.sin(i / 50) for i in range(2000)]}]),
            ]),
            Section("Ops", tables=[Table(["op", "route", "calls", "note"],
                                         [[f"aten::op_{i}", ROUTES[i % 5], i, NASTY if i % 97 == 0 else ""]
                                          for i in range(rows)], title=f"All ops {NASTY}")]),
            Section("Empty section"),
        ],
        warnings=[f"fallback used for 7 ops {NASTY}"],
    )


def _html(report: Report | None = None) -> str:
    return render_html(report or nasty_report(), generated=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))


class _Collect(HTMLParser):
    """Text of elements and every attribute, as a browser's parser would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_data: dict[str, str] = {}
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in = dict(attrs).get("id") if tag == "script" else None

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in:
            self.script_data[self._in] = self.script_data.get(self._in, "") + data


def _parse(page: str) -> _Collect:
    parser = _Collect()
    parser.feed(page)
    parser.close()
    return parser


# ------------------------------------------------------------------------------------------ unit tests

def _wide_chart(chart: Chart) -> str:
    """The chart's figure with its wide layout only (the narrow one repeats every mark at another size)."""
    figure = render_chart(chart)
    start = figure.find('<svg class="chart-svg chart-narrow"')
    return figure if start < 0 else figure[:start] + figure[figure.index("</svg>", start) + 6:]


def test_nasty_strings_are_escaped():
    page = _html()
    parsed = _parse(page)
    # Exactly one script element, the JSON island: no report text managed to open another one.
    assert [t for t, _ in parsed.tags if t == "script"] == ["script"]
    assert "<b>bold</b>" not in page
    assert "alert('x')</script>" not in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page
    assert "&amp; &quot;quoted&quot;" in page
    assert "&#x27;single&#x27;" in page
    assert "<!-- -->" not in page


def test_key_value_fields_of_a_section_are_shown():
    # doctor's sections are 'key: value' fields (report.Section.fields): a page without them lost them
    page = render_html(Report("r", {}, sections=[Section("Device", fields=[("device", "npu0"), (NASTY, "v")])]))
    assert ">npu0<" in page and "<b>bold</b>" not in page and "Nothing to show" not in page


def test_no_network_urls():
    page = _html()
    for _, attrs in _parse(page).tags:
        for name in ("src", "href", "xlink:href", "action", "data", "poster"):
            value = (attrs.get(name) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//", "ftp:")), (name, value)
    # Stricter than needed: no URL scheme or @import anywhere in the page at all.
    assert not re.search(r"https?://|@import|url\(", page)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_json_island_round_trips():
    report = nasty_report(rows=3)
    parsed = _parse(_html(report))
    island = parsed.script_data["report-data"]
    assert "</" not in island
    expected = json.loads(json.dumps(report.data, default=str))
    expected["nan"] = None  # NaN is not JSON: the island carries null so a browser can parse it
    assert json.loads(island) == expected
    assert json.loads(island)["nested"][4] == "</script>"
    assert ("script", {"type": "application/json", "id": "report-data"}) in parsed.tags


def test_every_chart_kind_renders_svg():
    for kind in ("bar", "stacked-bar", "line"):
        figure = render_chart(Chart(kind, f"{kind} chart", ["a", "b", "c"],
                                    [{"name": "native", "values": [1, 2, 3]},
                                     {"name": "other", "values": [3, 2, 1]}], x_label="x", y_label="y"))
        assert figure.count("<svg") == 2, kind  # a wide and a narrow layout (the CSS shows one)
        assert 'role="img"' in figure and 'aria-label="' in figure
        assert "<title>" in figure  # tooltips
        assert ROUTE_COLORS["native"] in figure
        assert ">x</text>" in figure and ">y</text>" in figure  # axis labels
        if kind != "bar":
            assert 'class="legend"' in figure


def test_route_colours():
    from torch_fl._names import ROUTES

    assert list(ROUTE_COLORS) == list(ROUTES)  # every route word has its colour, and only those
    assert len(set(ROUTE_COLORS.values())) == len(ROUTES)
    assert series_color("native", 3) == ROUTE_COLORS["native"]
    assert series_color("Fallback ops", 0) == ROUTE_COLORS["fallback"]
    assert series_color("translated", 0) == ROUTE_COLORS["translate"]
    assert series_color("kernels", 0) == ROUTE_COLORS["kernel"]
    assert series_color("unsupported", 0) == ROUTE_COLORS["unsupported"]
    others = {series_color(f"device {i}", i) for i in range(4)}
    assert len(others) == 4 and not others & set(ROUTE_COLORS.values())
    # A single bar series over route names: each bar in its route's colour.
    figure = _wide_chart(Chart("bar", "per route", ROUTES, [{"name": "calls", "values": [1, 2, 3, 4, 5]}]))
    for route in ROUTES:
        assert f'fill="{ROUTE_COLORS[route]}"' in figure


def test_log_axis_with_zeros_and_negatives():
    figure = _wide_chart(Chart("line", "log", [1, 2, 3, 4], [{"name": "a", "values": [0, 1e-3, -5, 1e4]}],
                                log_y=True))
    assert "<svg" in figure and "nan" not in figure.lower() and "inf" not in figure.lower()
    assert "band marked 0" in figure
    # Decade ticks from 1e-3 to 1e4.
    assert ">0.001</text>" in figure and ">10000</text>" in figure
    all_bad = _wide_chart(Chart("bar", "log", ["a", "b"], [{"name": "a", "values": [0, -1]}], log_y=True))
    assert "<svg" in all_bad and "linear axis" in all_bad


def _axis_bottom(figure: str) -> float:
    """y of the horizontal axis line (the plot's bottom on a log axis)."""
    ys = [float(a) for a, b in re.findall(r'<line class="axis" x1="[\d.]+" x2="[\d.]+" y1="([\d.]+)" '
                                          r'y2="([\d.]+)"', figure) if a == b]
    return max(ys)


def test_zero_error_is_drawn_below_a_log_axis_not_at_the_threshold():
    """compare's chart: errors of 0 next to an rtol line at the smallest positive value. A zero drawn at
    the floor would sit exactly on the rtol line, as if every module were at the threshold."""
    figure = _wide_chart(Chart("line", "Max relative error per module", ["a", "b", "c"],
                                [{"name": "max relative error", "values": [0, 3e-6, 0]},
                                 {"name": "rtol", "values": [1e-4, 1e-4, 1e-4]}], log_y=True))
    circles = [(float(cy), 'fill="#fff"' in paint) for cy, paint in
               re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)" r="[\d.]+" ([^>]*)>', figure)]
    bottom = _axis_bottom(figure)
    zeros = [cy for cy, hollow in circles if hollow]
    filled = [cy for cy, hollow in circles if not hollow]
    assert len(zeros) == 2 and all(cy > bottom for cy in zeros)  # under the axis
    assert all(cy <= bottom for cy in filled) and len(filled) == 4  # 3e-6 and the rtol line, on the axis
    assert re.search(r'<g class="zero-band">.*?>0</text></g>', figure)  # the band is labelled 0
    assert "values of 0 or below are drawn under it" in figure
    # A bar of 0 on a log axis is a mark on the band too, and the smallest positive bar has a height.
    bars = _wide_chart(Chart("bar", "b", ["a", "b"], [{"name": "err", "values": [0, 1e-3]}], log_y=True))
    heights = [float(h) for h in re.findall(r'<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)"',
                                            bars)]
    assert len(heights) == 2 and min(heights) == 3.0 and max(heights) > 50


def test_a_line_of_non_negative_values_starts_at_zero():
    """bench's memory chart: 0.17 MiB after every step must not fill the chart, nor the axis go below 0."""
    figure = _wide_chart(Chart("line", "Memory after each step", list(range(1, 11)),
                                [{"name": "native", "values": [0.17] * 10}], y_label="MiB"))
    ticks = [float(t) for t in re.findall(r'text-anchor="end">(-?[\d.e+-]+)</text>', figure)]
    assert min(ticks) == 0 and max(ticks) <= 0.5
    # Data that does go negative keeps its negative part.
    signed = _wide_chart(Chart("line", "delta", [1, 2, 3], [{"name": "d", "values": [-2, 1, 3]}]))
    assert min(float(t) for t in re.findall(r'text-anchor="end">(-?[\d.e+-]+)</text>', signed)) < 0


def _memory_chart(routed: list[float], native: list[float]) -> Chart:
    """bench's memory chart (analysis/bench.py): one line per mode over the steps."""
    return Chart("line", "Memory after each step", list(range(1, len(routed) + 1)),
                 [{"name": "routed", "values": routed}, {"name": "native", "values": native}],
                 x_label="step (per mode)", y_label="MiB")


def test_equal_lines_do_not_hide_each_other():
    """bench's routed and native memory are often equal: the later line is narrower and dashed, its
    markers smaller, and a note says that the lines coincide."""
    figure = _wide_chart(_memory_chart([3.0, 3.5, 3.5, 3.5], [3.0, 3.5, 3.5, 3.5]))
    widths = [float(w) for w in re.findall(r'<polyline [^>]*stroke-width="([\d.]+)"', figure)]
    assert len(widths) == 2 and widths[0] > widths[1]
    assert re.search(r'<polyline [^>]*stroke="#2e7d32" stroke-width="2" stroke-dasharray=', figure)  # native
    radii = {float(r) for r in re.findall(r'<circle [^>]*r="([\d.]+)"', figure)}
    assert len(radii) == 2
    assert "routed and native have the same values (within 0.5% of the axis) at all 4 points" in figure
    assert figure.count("<line x1=") >= 2  # the legend shows each line's own stroke
    apart = _wide_chart(_memory_chart([3.0, 3.5, 3.5, 3.5], [1.0, 1.2, 1.2, 1.2]))
    assert "have the same values" not in apart
    alone = _wide_chart(Chart("line", "one", [1, 2], [{"name": "native", "values": [1, 2]}]))
    assert 'stroke-width="2" stroke-linejoin' in alone and "stroke-dasharray" not in alone


def test_inconclusive_has_its_own_chip():
    page = _html(Report("t", {}, sections=[Section("s", text=["- [INCONCLUSIVE] alignment 0.9 [0.85, 0.95]"],
                                                   tables=[Table(["criterion", "status"],
                                                                 [["alignment", "INCONCLUSIVE"]])])]))
    assert page.count('<span class="verdict verdict-inconclusive">INCONCLUSIVE</span>') == 2
    assert ".verdict-inconclusive {" in page


def test_empty_charts_give_a_note():
    for chart in (Chart("line", "none", [1, 2], []), Chart("bar", "no x", [], [{"name": "a", "values": []}]),
                  Chart("stacked-bar", "gaps", ["a"], [{"name": "a", "values": [None]}]),
                  Chart("donut", "unknown", ["a"], [{"name": "a", "values": [1]}])):
        figure = render_chart(chart)
        assert "<svg" not in figure and 'class="note"' in figure, chart.title


def test_page_structure():
    page = _html()
    report = nasty_report()
    assert page.startswith("<!DOCTYPE html>")
    assert f"<title>{'Coverage &lt;/script&gt;'}" in page
    assert '<dl class="summary">' in page and "<dt>device</dt><dd>fl:0 &lt;virtual&gt;</dd>" in page
    assert 'class="warnings" role="alert"' in page
    assert f"torch-fl {__version__}" in page and 'datetime="' in page and "2026-01-0" in page
    assert page.count("<svg") == 2 * PLOTTED
    n_charts = sum(len(s.charts) for s in report.sections)
    assert page.count("<figure") == n_charts


def test_large_table_collapses():
    page = _html(nasty_report(rows=2500))
    visible, _, hidden = page.partition('<details class="more-rows">')
    assert hidden, "rows beyond the limit must be in a <details>"
    assert f"Show {2500 - MAX_VISIBLE_ROWS} more rows" in hidden
    assert "aten::<wbr>op_199<" in visible and "aten::<wbr>op_200<" not in visible
    assert "aten::<wbr>op_2499<" in hidden
    small = _html(nasty_report(rows=10))
    assert '<details class="more-rows">' not in small


def test_write_html_and_emit(tmp_path, capsys):
    report = nasty_report(rows=5)
    path = tmp_path / "r.html"
    write_html(report, path)
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    emit(report, html_path=str(tmp_path / "e.html"), json_path=str(tmp_path / "e.json"))
    assert (tmp_path / "e.html").exists()
    assert "Coverage" in capsys.readouterr().out


# ---------------------------------------------------------------------------------- headless Chromium

CHROMIUM = Path("/usr/bin/chromium")
# Console messages reach stderr as ':INFO:CONSOLE:<line>] "<message>", source: <url> (<line>)' with no
# level in them (console.log and console.error look alike), and an uncaught exception as a console
# message starting 'Uncaught'. The page has no script, so any console message at all is a failure.
CONSOLE_RE = re.compile(r":CONSOLE[:(]|Uncaught ")


def _chromium() -> Path:
    if not CHROMIUM.exists():
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"{CHROMIUM} is missing, and under CI the browser test must run: "
                        "apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} not installed (Debian: apt-get install -y chromium); "
                    "set CI=true to make this a failure")
    return CHROMIUM


def _run_chromium(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    cmd = [str(_chromium()), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage",
           # Any name lookup fails: even a page that tried to reach the network could not.
           "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}",
           "--enable-logging=stderr", "--v=0", *extra, page.as_uri()]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if CONSOLE_RE.search(line)]


def test_console_error_detector_catches_broken_page(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><head><title>broken</title></head><body><p>x</p>'
                      '<script>console.error("deliberate-error"); notDefinedAnywhere();</script>'
                      "</body></html>", encoding="utf-8")
    result = _run_chromium(broken, tmp_path, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    errors = console_errors(result.stderr)
    assert any("deliberate-error" in e for e in errors), result.stderr[-2000:]
    assert any("Uncaught ReferenceError" in e and "notDefinedAnywhere" in e for e in errors), errors
    clean = tmp_path / "clean.html"
    clean.write_text("<!DOCTYPE html><html><head><title>ok</title></head><body><p>x</p></body></html>",
                     encoding="utf-8")
    result = _run_chromium(clean, tmp_path, "--dump-dom")
    assert result.returncode == 0 and console_errors(result.stderr) == [], result.stderr[-2000:]


def test_csp_violations_are_console_errors(tmp_path):
    """The page's Content-Security-Policy blocks any external resource and the browser reports it on
    the console, so the console check also catches a report that tried to reach the network."""
    page = tmp_path / "leaky.html"
    leak = '<img src="https://example.com/x.png" alt=""><style>@import url(https://example.com/a.css);</style>'
    page.write_text(_html(nasty_report(rows=3)).replace("<main>", "<main>" + leak, 1), encoding="utf-8")
    result = _run_chromium(page, tmp_path, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    errors = console_errors(result.stderr)
    assert any("example.com/x.png" in e and "Content Security Policy" in e for e in errors), errors
    assert any("example.com/a.css" in e for e in errors), errors


def test_missing_browser_skips_locally_but_fails_under_ci(monkeypatch, tmp_path):
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        _chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="must run"):
        _chromium()


def test_report_renders_in_chromium(tmp_path):
    report = nasty_report()
    page = tmp_path / "report.html"
    write_html(report, page)
    result = _run_chromium(page, tmp_path, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_errors(result.stderr) == [], result.stderr[-4000:]
    dom = result.stdout
    assert "<title>Coverage &lt;/script&gt;&lt;script&gt;alert('x')&lt;/script&gt;" in dom
    assert dom.count("<svg") == 2 * PLOTTED
    assert dom.count('role="img"') == PLOTTED
    assert '<script type="application/json" id="report-data">' in dom
    assert "<b>bold</b>" not in dom  # the browser saw text, not markup
    assert "aten::<wbr>op_2499" in dom


def test_report_screenshot(tmp_path):
    page = tmp_path / "report.html"
    write_html(nasty_report(rows=300), page)
    png = tmp_path / "report.png"
    result = _run_chromium(page, tmp_path, f"--screenshot={png}", "--window-size=1200,3000",
                           "--hide-scrollbars")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_errors(result.stderr) == [], result.stderr[-4000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 3000)
    assert len(data) > 20_000  # a blank page compresses to a few KB; charts and tables do not


# ------------------------------------------------------------------- layout of real reports, two widths

# Written into a copy of the page (the report itself runs no script): what the browser laid out.
# A word (a run of non-spaces inside one text node; <wbr> ends a text node) whose pieces sit on two
# lines was broken mid-word: in every text of the page (titles, captions, cells, notes, the summary), not
# in the charts' SVG (whose labels never wrap). Closed <details> are not laid out and have no rects.
LAYOUT_JS = """
(function () {
  const root = document.documentElement;
  const out = {clientWidth: root.clientWidth, scrollWidth: root.scrollWidth, midword: [], overflow: [],
               verdicts: [], scrolled_tables: 0, notes: document.querySelectorAll('ul.notes li').length};
  const walker = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
  let node;
  while ((node = walker.nextNode())) {
    const el = node.parentElement;
    if (el.closest('svg')) continue;
    const words = /\\S+/g;
    let m;
    while ((m = words.exec(node.data))) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
      if (lines.size > 1) out.midword.push(m[0]);
    }
  }
  for (const el of document.querySelectorAll('main *')) {
    if (el.closest('.table-wrap') || el.closest('details:not([open])')) continue;
    const box = el.getBoundingClientRect();
    if (box.width && box.right > root.clientWidth + 1) out.overflow.push(el.tagName + '.' + el.className);
  }
  // A table that scrolls in its box must say so: the wrap paints scroll shadows (radial gradients).
  out.uncued_tables = 0;
  for (const wrap of document.querySelectorAll('.table-wrap')) {
    if (wrap.closest('details:not([open])') || !wrap.getClientRects().length) continue;
    if (wrap.scrollWidth > wrap.clientWidth + 1) {
      out.scrolled_tables += 1;
      if (!getComputedStyle(wrap).backgroundImage.includes('radial-gradient')) out.uncued_tables += 1;
    }
  }
  // Rendered size of every label and legend of the charts shown (the SVG scales with its box).
  out.chart_font_px = [];
  for (const svg of document.querySelectorAll('svg.chart-svg')) {
    if (!svg.getClientRects().length) continue;
    const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    let least = Infinity;
    for (const t of svg.querySelectorAll('text')) least = Math.min(least, parseFloat(getComputedStyle(t).fontSize) * scale);
    out.chart_font_px.push(least);
  }
  // Blank space in a table cell: its box's height less its content's (a narrow column made rows of
  // 150-250 px whose other cells were mostly empty).
  out.blank_px = 0;
  for (const cell of document.querySelectorAll('main td, main th')) {
    if (cell.closest('details:not([open])') || !cell.getClientRects().length || !cell.textContent.trim()) continue;
    const head = cell.closest('thead');  // a phone's card tables keep their header for screen readers only
    if (head && head.getBoundingClientRect().height <= 2) continue;
    const range = document.createRange();
    range.selectNodeContents(cell);
    const style = getComputedStyle(cell);
    const blank = cell.getBoundingClientRect().height - range.getBoundingClientRect().height
      - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
    if (blank > out.blank_px) { out.blank_px = Math.round(blank); out.blank_at = cell.textContent.slice(0, 80); }
  }
  // A file name in a title, caption or contents entry on two lines ('gpt.|py').
  out.split_files = [];
  for (const el of document.querySelectorAll('main h1, main h2, main figcaption, main caption, nav.toc a')) {
    const nodes = [], starts = [];
    let text = '';
    const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let n;
    while ((n = w.nextNode())) { nodes.push(n); starts.push(text.length); text += n.data; }
    const at = (i) => { let k = nodes.length - 1; while (k > 0 && starts[k] > i) k--; return [nodes[k], i - starts[k]]; };
    for (const m of text.matchAll(/[\\w-]+\\.(py|toml|json|txt|html)\\b/g)) {
      const range = document.createRange();
      range.setStart(...at(m.index));
      range.setEnd(...at(m.index + m[0].length - 1));
      range.setEnd(range.endContainer, range.endOffset + 1);
      const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
      if (lines.size > 1) out.split_files.push(m[0]);
    }
  }
  for (const v of document.querySelectorAll('.verdict'))
    out.verdicts.push([v.textContent, getComputedStyle(v).backgroundColor]);
  // In a frame (a phone's width, below the window's minimum): the result goes to the page Chromium dumps.
  const target = window.parent === window ? document : window.parent.document;
  const pre = target.createElement('pre');
  pre.id = 'layout';
  pre.textContent = JSON.stringify(out);
  target.body.appendChild(pre);
})();
"""
# Headless Chromium's window is at least 500 px wide: a narrower viewport (a phone's 390 px) is a frame of
# that width in a wider page. A srcdoc frame shares the page's origin, so its script can report out.
MIN_WINDOW = 500


def measure_layout(page_html: str, width: int, tmp_path: Path) -> dict:
    """Lay the page out in Chromium at `width` CSS pixels and return LAYOUT_JS's measurements."""
    import html as html_lib

    measured = page_html.replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';", 1)
    measured = measured.replace("</body>", f"<script>{LAYOUT_JS}</script></body>", 1)
    if width < MIN_WINDOW:
        measured = (f'<!DOCTYPE html><html><body style="margin:0"><iframe style="border:0;width:{width}px;'
                    f'height:900px" srcdoc="{html_lib.escape(measured, quote=True)}"></iframe></body></html>')
    page = tmp_path / f"layout-{width}.html"
    page.write_text(measured, encoding="utf-8")
    result = _run_chromium(page, tmp_path, "--dump-dom", "--hide-scrollbars",
                           f"--window-size={max(width, MIN_WINDOW)},900")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_errors(result.stderr) == [], result.stderr[-4000:]
    found = re.search(r'<pre id="layout">(.*?)</pre>', result.stdout, re.S)
    assert found, result.stdout[-2000:]
    return json.loads(html_lib.unescape(found.group(1)))


def _rgb(css: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", css)[:3])


@pytest.fixture(scope="module")
def real_pages():
    """HTML of a real coverage report (unusual.py on the minimal chip: unsupported, translated and
    complex64 rows), of a real grade report (cnn.py on emu:cuda), plus every verdict, and of a real bench
    report (cnn.py on the CPU: the memory chart's two lines). Their titles hold the model's whole path."""
    from torch_fl.analysis.bench import bench
    from torch_fl.analysis.coverage import coverage
    from torch_fl.analysis.grade import grade
    from torch_fl.analysis.model import load_model

    examples = Path(__file__).parents[2] / "examples"
    cov = coverage(load_model(f"{examples}/unusual.py:factory"), "minimal", train=True)
    graded = grade(load_model(f"{examples}/cnn.py:factory"), "emu:cuda", steps=6, warmup=1, preflight=False)
    graded.sections.append(Section("Every verdict", text=["- [FAIL] made up: a failing row",
                                                          "- [INCONCLUSIVE] made up: a noisy row"], tables=[
        Table(["criterion", "status"], [["a", "PASS"], ["b", "FAIL"], ["c", "NOT MEASURED"],
                                        ["d", "INCONCLUSIVE"]])]))
    benched = bench(load_model(f"{examples}/cnn.py:factory"), "cpu", steps=4, warmup=1)
    return {"coverage": (cov, _html(cov)), "grade": (graded, _html(graded)), "bench": (benched, _html(benched))}


@pytest.mark.slow  # a real coverage trace, a real grade and bench run, then 9 browser layouts
@pytest.mark.parametrize("width", [1280, 640, 390])  # a laptop, a tablet, a phone
@pytest.mark.parametrize("name", ["coverage", "grade", "bench"])
def test_real_reports_lay_out_without_overflow_or_mid_word_breaks(real_pages, name, width, tmp_path):
    report, page = real_pages[name]
    layout = measure_layout(page, width, tmp_path)
    assert layout["clientWidth"] == width
    # Nothing runs off the page: a table too wide for it scrolls inside its own box.
    assert layout["scrollWidth"] <= layout["clientWidth"], layout["overflow"]
    assert layout["overflow"] == []
    # Titles, captions, table cells, notes and summary values wrap at spaces, '::', '.' and '/' only.
    assert layout["midword"] == [], layout["midword"][:20]
    assert layout["split_files"] == [], layout["split_files"]  # never 'gpt.|py' (issue 42)
    # Charts: every label and legend >= 10 px as rendered (a 920-unit chart shrunk to 350 px drew ~4 px)
    assert layout["chart_font_px"] and min(layout["chart_font_px"]) >= 10, layout["chart_font_px"]
    # A table that scrolls in its box shows that it does; on a phone or a tablet none needs to (rows are
    # cards) and no cell is a tall blank box beside a narrow column's wrapped text.
    assert layout["uncued_tables"] == 0, layout
    if width <= 760:
        assert layout["scrolled_tables"] == 0 and layout["blank_px"] < 40, layout
    assert str(Path(__file__).parents[2] / "examples") in report.title  # a long path, in the title too
    notes = sum(line.startswith("- ") for s in report.sections for line in s.text)
    assert layout["notes"] == notes  # every "- " line is a list item, none a literal "- "
    assert notes > 0 or name == "bench"
    assert "<p class=\"text\">- " not in page
    if name == "grade":
        colours = {text: _rgb(bg) for text, bg in layout["verdicts"]}
        (pr, pg, _), (fr, fg, _) = colours["PASS"], colours["FAIL"]
        assert pg > pr + 40 and fr > fg + 40  # green and red
        assert len({colours[v] for v in ("PASS", "FAIL", "NOT MEASURED", "INCONCLUSIVE")}) == 4
        ir, ig, _ = colours["INCONCLUSIVE"]  # its own colour: neither PASS's green nor FAIL's red
        assert not ig > ir + 40 and not ir > ig + 40
    elif name == "bench":
        assert "Memory after each step" in page and page.count("<polyline") >= 2
    else:
        # The warning names the table instead of saying where it is (the page puts warnings first).
        assert "table above" not in page and "table below" not in page
        assert "the table &#x27;Ops that are not native on minimal&#x27; lists" in page
        assert "<h2>Ops that are not native on minimal</h2>" in page
        assert "complex64" in page and "compl" not in page.replace("complex", "")


@pytest.mark.slow
def test_the_layout_check_catches_a_mid_word_break_and_an_overflow(tmp_path):
    """The measurement is not vacuous: the old CSS (overflow-wrap: anywhere) breaks PASS in a narrow
    column, and a fixed-width block runs off a narrow page."""
    rows = [["aten::_scaled_dot_product_efficient_attention.default", "NOT MEASURED", "complex64 " * 8, "x" * 3]]
    report = Report("t", {}, sections=[Section("s", tables=[Table(["op", "status", "dtypes", "n"], rows)])])
    page = _html(report).replace("max-width: 48em; overflow-wrap: normal;", "max-width: 3em; overflow-wrap: anywhere;")
    page = page.replace('<span class="verdict verdict-not-measured">', "<span>")
    assert measure_layout(page, 640, tmp_path)["midword"]
    wide = _html(report).replace("<main>", '<main><div style="width: 2000px">wide</div>', 1)
    layout = measure_layout(wide, 640, tmp_path)
    assert layout["scrollWidth"] > layout["clientWidth"] and layout["overflow"]
    # Titles are measured too, and at a phone's width (a frame: the window is at least 500 px wide).
    title = "torchfl coverage: examples_with_a_very_long_module_name_and_no_break:factory"
    layout = measure_layout(_html(Report(title, {}, sections=report.sections)), 390, tmp_path)
    assert layout["clientWidth"] == 390
    assert "examples_with_a_very_long_module_name_and_no_break:factory" in layout["midword"]
    # Issue 42's phone checks are not vacuous either: without the narrow chart and the card rows, a chart's
    # labels render under 10 px, a wide table scrolls, and its short cells stand in tall blank boxes; without
    # the shadows a scrolling table gives no cue; a file name in a title may break after its dot.
    evidence = "forward, loss, backward and AdamW step on emu:cuda with routing active in 0.58 s; " * 4
    rows = [["training step runs", "forward, loss, backward", "ran", "PASS", evidence]] * 3
    phone = Report("torchfl grade: examples/gpt.py:factory", {}, sections=[Section("L0", tables=[
        Table(["criterion", "threshold", "measured", "status", "evidence"], rows)], charts=[
        Chart("bar", "Calls per route", ROUTES, [{"name": "calls", "values": [120, 30, 7, 3, 1]}])])])
    good = measure_layout(_html(phone), 390, tmp_path)
    assert min(good["chart_font_px"]) >= 10 and good["blank_px"] < 40 and good["scrolled_tables"] == 0, good
    old = (_html(phone).replace(' class="cards"', "").replace(".chart-narrow { display: block; }", "")
           .replace(".chart-wide { display: none; }", "").replace("radial-gradient", "no-gradient")
           .replace("gpt.py:factory", "gpt.<wbr>py:factory"))
    bad = measure_layout(old, 390, tmp_path)
    assert min(bad["chart_font_px"]) < 10 and bad["blank_px"] > 100, bad
    assert bad["scrolled_tables"] and bad["uncued_tables"] == bad["scrolled_tables"], bad
    assert bad["split_files"] == ["gpt.py"], bad


@pytest.mark.slow
def test_equal_memory_lines_both_show_in_chromium(tmp_path):
    """Drawn, not just written: with the same values, both lines' colours cover the plot in a screenshot
    (the later line used to cover the earlier one completely)."""
    image = pytest.importorskip("PIL.Image")
    report = Report("bench", {}, sections=[Section("Memory", charts=[
        _memory_chart([2.0, 3.5, 3.5, 3.5, 3.5, 3.5], [2.0, 3.5, 3.5, 3.5, 3.5, 3.5])])])
    page = tmp_path / "lines.html"
    write_html(report, page)
    png = tmp_path / "lines.png"
    result = _run_chromium(page, tmp_path, f"--screenshot={png}", "--window-size=1280,900", "--hide-scrollbars")
    assert result.returncode == 0, result.stderr[-2000:]
    data = image.open(png).convert("RGB").tobytes()
    pixels = [data[i:i + 3] for i in range(0, len(data), 3)]

    def near(colour: str) -> int:
        want = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        return sum(all(abs(p - w) <= 24 for p, w in zip(px, want, strict=True)) for px in pixels)

    routed, native = near(series_color("routed", 0)), near(series_color("native", 1))
    assert native > 500 and routed > 500, (routed, native)
