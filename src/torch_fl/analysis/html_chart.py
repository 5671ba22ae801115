"""The SVG charts of a report's HTML page (torch_fl.analysis.html): bar, stacked bar and line charts drawn as
inline SVG, each laid out for a laptop and for a phone, with its data as a table beside it; one colour per route
in every chart of every report."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._names import ROUTES
from ..report import Chart, format_cell

# The same route always has the same colour in every chart of every report, so a reader learns it once.
ROUTE_COLORS: dict[str, str] = {
    "native": "#2e7d32",
    "translate": "#e6a700",
    "fallback": "#e8590c",
    "kernel": "#1c6dd0",
    "unsupported": "#8b1a1a",
}
# Hues kept away from the route colours, so a non-route series is never mistaken for a route.
DEFAULT_PALETTE: tuple[str, ...] = ("#6a3d9a", "#0c8599", "#d6336c", "#5f6b7a", "#a6761d", "#3b5bdb",
                                    "#7d8a2e", "#c2255c")

# The other spellings of a route in series and column names; the pattern is the route words of _names.
_ROUTE_CANON = {"translated": "translate", "translation": "translate", "translations": "translate",
                "fallbacks": "fallback", "kernels": "kernel"}
_ROUTE_RE = re.compile(r"^\W*(" + "|".join(sorted((*ROUTES, *_ROUTE_CANON), key=len, reverse=True)) + r")\b",
                       re.IGNORECASE)


def route_of(name: Any) -> str | None:
    """The route a series or category is named after ('native', 'Fallback ops', ...), else None."""
    m = _ROUTE_RE.match(str(name))
    if not m:
        return None
    word = m.group(1).lower()
    return _ROUTE_CANON.get(word, word)


def series_color(name: Any, index: int) -> str:
    """Colour of the index-th series: its route's colour when named like a route, else the palette's."""
    route = route_of(name)
    return ROUTE_COLORS[route] if route else DEFAULT_PALETTE[index % len(DEFAULT_PALETTE)]


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


# Where a long token may wrap: after '::' and '/', and after a '.' not followed by a digit (op names,
# dtype lists, paths; never inside 2.41503) nor by a file name's extension (never 'gpt.|py': up to 5
# letters or digits, then the token's end or a ':' / ')' / ',', issue 42). Table cells wrap only at spaces
# and these points, never mid-word: a table too wide for the page scrolls in its own box instead.
_BREAK_AFTER = re.compile(r"(::|/|,|\.(?![\d\s])(?![A-Za-z0-9]{1,5}(?:$|[:),])))(?=\S)")


def _breakable(value: Any) -> str:
    """Escaped text with <wbr> at the break points above. A piece with a hyphen is kept on one line
    (browsers break after any '-': '--compile' and 'translate-or-error' are names, not prose)."""
    out = []
    for part in re.split(r"(\s+)", str(value)):
        if not part or part.isspace():
            out.append(_e(part))
            continue
        pieces = _BREAK_AFTER.sub("\\1\0", part).split("\0")
        out.append("<wbr>".join(f'<span class="nw">{_e(p)}</span>' if "-" in p else _e(p) for p in pieces))
    return "".join(out)


# --------------------------------------------------------------------------------------------- numbers

def _num(value: Any) -> float | None:
    """A plottable number, or None for a gap (None, NaN, inf, text that is not a number)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _fmt(value: float) -> str:
    """Short tick/tooltip number: 0.25, 1500, 2.5e6, 1e-5."""
    if value == 0:
        return "0"
    a = abs(value)
    if a >= 1e5 or a < 1e-3:
        mant, _, exp = f"{value:.3g}".partition("e")
        return f"{mant}e{int(exp)}" if exp else mant
    return f"{value:.6g}"


def _nice_step(raw: float) -> float:
    exp = math.floor(math.log10(raw))
    frac = raw / 10**exp
    nice = 1 if frac <= 1 else 2 if frac <= 2 else 2.5 if frac <= 2.5 else 5 if frac <= 5 else 10
    return nice * 10**exp


@dataclass
class _Scale:
    """Maps data values to pixels (y grows downwards in SVG, hence pixel_lo > pixel_hi for y)."""

    lo: float
    hi: float
    pixel_lo: float
    pixel_hi: float
    log: bool
    ticks: list[float]

    def __call__(self, value: float) -> float:
        if self.log:
            value, lo, hi = math.log10(value), math.log10(self.lo), math.log10(self.hi)
        else:
            lo, hi = self.lo, self.hi
        t = (value - lo) / (hi - lo) if hi != lo else 0.5
        return self.pixel_lo + t * (self.pixel_hi - self.pixel_lo)


def _linear_scale(lo: float, hi: float, pixel_lo: float, pixel_hi: float, target: int = 6) -> _Scale:
    if lo == hi:
        lo, hi = (lo - 1, hi + 1) if lo != 0 else (0.0, 1.0)
    step = _nice_step((hi - lo) / target)
    lo, hi = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    n = round((hi - lo) / step)
    # Rounded so that 0.1 * 3 shows as 0.3, not 0.30000000000000004.
    ticks = [round(lo + i * step, 12) for i in range(n + 1)]
    return _Scale(lo, hi, pixel_lo, pixel_hi, False, ticks)


def _log_scale(lo: float, hi: float, pixel_lo: float, pixel_hi: float) -> _Scale:
    lo_e, hi_e = math.floor(math.log10(lo) + 1e-9), math.ceil(math.log10(hi) - 1e-9)
    if hi_e <= lo_e:
        hi_e = lo_e + 1
    stride = max(1, math.ceil((hi_e - lo_e) / 8))
    ticks = [10.0**e for e in range(lo_e, hi_e + 1, stride)]
    return _Scale(10.0**lo_e, 10.0**hi_e, pixel_lo, pixel_hi, True, ticks)


# ---------------------------------------------------------------------------------------------- charts

# Geometry in SVG user units; the SVG scales down with the page (viewBox) but never up. Each chart is
# laid out twice: _WIDTH wide for a laptop, _NARROW_WIDTH for a phone or a narrow window (the CSS shows
# one): scaled down from 920 to a phone's ~350 px its 11-12 px labels shrank to ~4 px (issue 42), and at
# 360 they stay >= 10 px down to a 370 px wide screen.
_WIDTH = 920
_NARROW_WIDTH = 360
_NARROW_BELOW = 900  # window width (CSS px) under which the narrow layout is shown: the wide one would
#                      scale below 0.91 there, its 11 px ticks below 10 px
_PLOT_HEIGHT = 260
_CHAR_W = 6.6  # average glyph width of the 12px sans-serif used for labels: for layout estimates only
_LABEL_MAX = 24


_ROTATE = 60  # degrees: steep enough that labels 16px apart do not overlap (16 * sin 60° > 12px font)
_ROTATED_PITCH = 16


def _short(label: str, limit: int = _LABEL_MAX) -> str:
    """Shortened in the middle: op names share prefixes (aten::...) and differ at the end."""
    if len(label) <= limit:
        return label
    head = (limit - 1) * 2 // 5
    return label[:head] + "…" + label[len(label) - (limit - 1 - head):]


def _series(chart: Chart) -> list[tuple[str, list[float | None]]]:
    """(name, values) per series, values aligned to chart.x (padded with gaps, extra values dropped)."""
    n = len(chart.x)
    out = []
    for i, s in enumerate(chart.series):
        if not isinstance(s, dict):
            continue
        values = [_num(v) for v in list(s.get("values") or [])[:n]]
        out.append((str(s.get("name", f"series {i + 1}")), values + [None] * (n - len(values))))
    return out


def _legend(items: Sequence[tuple[str, str]], top: float, left: float, width: float,
            lines: bool = False) -> tuple[str, float]:
    """Legend rows wrapped to width; returns (svg, height). With `lines`, each swatch is the series' line
    (its width and dashes, _line_style) instead of a square."""
    parts, x, y = [], left, top
    swatch = 22 if lines else 12
    for i, (name, color) in enumerate(items):
        label = _short(name, 40)
        w = swatch + 6 + len(label) * _CHAR_W + 16
        if x > left and x + w > left + width:
            x, y = left, y + 18
        if lines:
            stroke, dash = _line_style(i, len(items))
            mark = (f'<line x1="{x:.1f}" x2="{x + swatch:.1f}" y1="{y + 6:.1f}" y2="{y + 6:.1f}" stroke="{color}" '
                    f'stroke-width="{stroke:g}"{dash}/>')
        else:
            mark = f'<rect x="{x:.1f}" y="{y:.1f}" width="12" height="12" rx="2" fill="{color}"/>'
        parts.append(f'<g class="legend-item"><title>{_e(name)}</title>{mark}'
                     f'<text x="{x + swatch + 5:.1f}" y="{y + 10:.1f}">{_e(label)}</text></g>')
        x += w
    return '<g class="legend">' + "".join(parts) + "</g>", (y - top + 18) if items else 0.0


def _empty_figure(chart: Chart, reason: str) -> str:
    return (f'<figure class="chart chart-empty"><figcaption>{_breakable(chart.title)}</figcaption>'
            f'<p class="note">{_e(reason)}</p></figure>')


def _data_table(chart: Chart, series: list[tuple[str, list[float | None]]]) -> str:
    """The plotted numbers as a collapsed table: exact values, and what screen readers can navigate."""
    head = "".join(f"<th scope=\"col\">{_e(name)}</th>" for name, _ in series)
    rows = []
    for i, x in enumerate(chart.x):
        cells = "".join(f'<td class="num">{"" if vals[i] is None else _e(format_cell(vals[i]))}</td>'
                        for _, vals in series)
        rows.append(f'<tr><th scope="row">{_e(format_cell(x))}</th>{cells}</tr>')
    return (f'<details class="chart-data"><summary>Data ({len(chart.x)} points)</summary>'
            f'<div class="table-wrap"><table><thead><tr><th scope="col">{_e(chart.x_label or "x")}</th>'
            f'{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div></details>')


def render_chart(chart: Chart) -> str:
    """A <figure> with the chart as inline SVG, or with a short note when there is nothing to draw."""
    kind = (chart.kind or "").lower()
    if kind not in ("bar", "stacked-bar", "line"):
        return _empty_figure(chart, f"Chart kind {chart.kind!r} is not supported (bar, stacked-bar, line).")
    series = _series(chart)
    if not chart.x or not series:
        return _empty_figure(chart, "No data to plot.")
    if all(v is None for _, vals in series for v in vals):
        return _empty_figure(chart, "No numeric values to plot.")
    svg, notes = _svg(chart, kind, series, _WIDTH)
    narrow, _ = _svg(chart, kind, series, _NARROW_WIDTH)  # the same notes: the same data
    note_html = "".join(f'<p class="note">{_e(n)}</p>' for n in notes)
    return (f'<figure class="chart chart-{kind}"><figcaption>{_breakable(chart.title)}</figcaption>{svg}{narrow}'
            f"{note_html}{_data_table(chart, series)}</figure>")


_Series = list[tuple[str, list[float | None]]]


def _svg(chart: Chart, kind: str, series: _Series, width: int) -> tuple[str, list[str]]:
    """The chart as an <svg> element `width` units wide, and notes on what it could not draw faithfully.
    The narrow one is hidden from screen readers: it repeats the wide one."""
    use_log, floor, notes = _log_axis(chart, kind, series)
    plot = _layout(chart, kind, series, use_log, floor, width)
    if kind == "line":
        notes += _overlaps(plot)
    marks = _lines(plot) if kind == "line" else _stacked_bars(plot) if kind == "stacked-bar" else _bars(plot)
    kind_word = {"bar": "Bar chart", "stacked-bar": "Stacked bar chart", "line": "Line chart"}[kind]
    aria = f"{kind_word}: {chart.title}" + (f" ({', '.join(s[0] for s in series)})" if len(series) > 1 else "")
    variant = ('class="chart-svg chart-wide" role="img"' if width == _WIDTH else
               'class="chart-svg chart-narrow" aria-hidden="true"')
    svg = (f'<svg {variant} aria-label="{_e(aria)}" '
           f'viewBox="0 0 {width} {plot.height:.0f}" width="{width}" height="{plot.height:.0f}">'
           f"<title>{_e(aria)}</title>{plot.legend}{''.join(_axes(chart, plot) + marks)}</svg>")
    return svg, notes


def _log_axis(chart: Chart, kind: str, series: _Series) -> tuple[bool, float | None, list[str]]:
    """(log axis?, its floor: the smallest positive value, notes on values a log axis cannot show)."""
    if not chart.log_y:
        return False, None, []
    # Individual values, not stack totals: the lowest segment of a stack starts at its own value.
    values = [v for _, vals in series for v in vals if v is not None]
    positive = [v for v in values if v > 0]
    if not positive:
        return False, None, ["No positive values: drawn on a linear axis instead of a log axis."]
    floor = min(positive)
    if kind == "stacked-bar":
        notes = ["Log axis: negative values are left out of the stacks."] if any(v < 0 for v in values) else []
    elif any(v <= 0 for v in values):
        # Not at the floor: a zero drawn at the smallest positive value (often a threshold line) would
        # look like a value sitting on that threshold.
        notes = ["Log axis: it has no 0, so values of 0 or below are drawn under it, on the band marked 0"
                 + (", as hollow markers." if kind == "line" else ".")]
    else:
        notes = []
    return True, floor, notes


def _extent(kind: str, series: _Series) -> list[float]:
    """The values the y axis must reach: stacks for stacked bars (positives up, negatives down)."""
    if kind != "stacked-bar":
        return [v for _, vals in series for v in vals if v is not None]
    n = len(series[0][1])
    tops = [sum(v for _, vals in series if (v := vals[i]) is not None and v > 0) for i in range(n)]
    bottoms = [sum(v for _, vals in series if (v := vals[i]) is not None and v < 0) for i in range(n)]
    return [*tops, *bottoms]


def _y_scale(kind: str, series: _Series, floor: float | None, top: float, bottom: float) -> _Scale:
    extent = _extent(kind, series)
    if floor is not None:
        # Bars start a decade under the smallest one, or that bar would have no height at all.
        return _log_scale(floor / 10 if kind == "bar" else floor, max(max(extent), floor), bottom, top)
    lo, hi = min(extent), max(extent)
    # Bars grow from zero, so zero must be on the axis; a line of values that cannot be negative
    # (memory, time, counts) starts at zero too, so that 0.2 MiB does not fill the chart (nor an axis
    # reach below zero).
    if kind != "line" or lo >= 0:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    return _linear_scale(lo, hi, bottom, top)


@dataclass
class _Plot:
    """Where one chart's parts go: the plot box, both axes and the series' colours."""

    kind: str
    series: _Series
    colors: list[str]
    labels: list[str]  # x values as text
    floor: float | None  # smallest positive value on a log axis; None on a linear one
    legend: str
    top: float
    bottom: float
    left: float
    right: float
    y: _Scale
    x_ticks: list[tuple[float, str]]  # (position, label) of the labels shown
    x_pos: Callable[[int], float]
    band: float  # width of one x slot (categorical axes)
    rotate: bool  # x labels rotated
    height: float
    zero_band: float = 0.0  # height of the band under a log axis where values <= 0 are drawn (0: none)

    @property
    def base_y(self) -> float:
        """Where bars start: zero when the axis shows it, else the bottom (always on a log axis)."""
        return self.bottom if self.floor is not None or not self.y.lo <= 0 <= self.y.hi else self.y(0.0)

    def clamp(self, v: float) -> float:
        return max(v, self.floor) if self.floor is not None else v

    @property
    def zero_y(self) -> float:
        """Where a value <= 0 is drawn on a log axis: the middle of the band under the axis."""
        return self.bottom + self.zero_band / 2 + 2

    def value_y(self, v: float) -> float:
        return self.zero_y if self.zero_band and v <= 0 else self.y(self.clamp(v))

    @property
    def labels_top(self) -> float:
        """Top of the x tick labels: under the zero band when there is one."""
        return self.bottom + self.zero_band

    def tip(self, i: int, name: str, v: float | None) -> str:
        return f"<title>{_e(self.labels[i])} · {_e(name)}: {'no value' if v is None else _e(format_cell(v))}</title>"


def _layout(chart: Chart, kind: str, series: _Series, use_log: bool, floor: float | None,
            width: int = _WIDTH) -> _Plot:
    """Legend on top, y tick labels set the left margin, x labels (maybe rotated) the bottom one."""
    colors = [series_color(name, i) for i, (name, _) in enumerate(series)]
    top = 14.0
    legend, legend_h = ("", 0.0)
    if kind in ("stacked-bar", "line") or len(series) > 1:
        legend, legend_h = _legend(list(zip([s[0] for s in series], colors, strict=True)), top, 12, width - 24,
                                   lines=kind == "line")
    top += legend_h + (10 if legend_h else 0)
    bottom = top + _PLOT_HEIGHT
    yscale = _y_scale(kind, series, floor if use_log else None, top, bottom)
    left = 14 + max(len(_fmt(t)) for t in yscale.ticks) * _CHAR_W + 8 + (18 if chart.y_label else 0)
    labels = [format_cell(x) for x in chart.x]
    right = width - 18.0
    left, x_pos, x_ticks, rotate, label_h = _x_axis(chart, kind, labels, left, right)
    nonpositive = any(v is not None and v <= 0 for _, vals in series for v in vals)
    zero_band = 30.0 if use_log and kind != "stacked-bar" and nonpositive else 0.0
    height = bottom + zero_band + 8 + label_h + (22 if chart.x_label else 0) + 8
    return _Plot(kind, series, colors, labels, floor if use_log else None, legend, top, bottom, left, right,
                 yscale, x_ticks, x_pos, (right - left) / len(chart.x), rotate, height, zero_band)


def _x_axis(chart: Chart, kind: str, labels: list[str], left: float,
            right: float) -> tuple[float, Callable[[int], float], list[tuple[float, str]], bool, float]:
    """(left margin, x position of value i, ticks shown, rotated?, label height).

    Labels are horizontal when they fit their slot, else rotated (then the first one must not run off
    the left edge), and thinned out when even rotated ones would overlap. A line chart over numbers gets
    a numeric axis.
    """
    n = len(chart.x)
    numeric_x = kind == "line" and all(
        not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) for x in chart.x
    ) and len(set(chart.x)) > 1
    longest = max(len(_short(t)) for t in labels) if not numeric_x else 8
    rotate = not numeric_x and longest * _CHAR_W > (right - left) / n - 4
    if rotate:
        reach = longest * _CHAR_W * math.cos(math.radians(_ROTATE))
        left = max(left, reach - (right - left) / n / 2 + 4)
    plot_w = right - left
    band = plot_w / n
    if numeric_x:
        xscale = _linear_scale(min(chart.x), max(chart.x), left, right, target=8)
        xticks = [(xscale(t), _fmt(t)) for t in xscale.ticks if xscale.lo <= t <= xscale.hi]

        def x_pos(i: int) -> float:
            return xscale(float(chart.x[i]))
    else:
        def x_pos(i: int) -> float:
            return left + band * (i + 0.5)
        xticks = [(x_pos(i), labels[i]) for i in range(n)]
    capacity = int(plot_w / (_ROTATED_PITCH if rotate else longest * _CHAR_W + 8))
    stride = max(1, math.ceil(len(xticks) / max(capacity, 1)))
    label_h = (longest * _CHAR_W * math.sin(math.radians(_ROTATE)) + 14) if rotate else 16
    return left, x_pos, xticks[::stride], rotate, label_h


def _axes(chart: Chart, plot: _Plot) -> list[str]:
    """Grid, both axes, tick labels and axis titles."""
    left, right, bottom = plot.left, plot.right, plot.bottom
    p: list[str] = []
    for t in plot.y.ticks:
        y = plot.y(t)
        p.append(f'<line class="grid" x1="{left:.1f}" x2="{right:.1f}" y1="{y:.1f}" y2="{y:.1f}"/>'
                 f'<text class="tick" x="{left - 6:.1f}" y="{y + 4:.1f}" text-anchor="end">{_e(_fmt(t))}</text>')
    p.append(f'<line class="axis" x1="{left:.1f}" x2="{left:.1f}" y1="{plot.top:.1f}" y2="{bottom:.1f}"/>')
    base_y = plot.base_y
    p.append(f'<line class="axis" x1="{left:.1f}" x2="{right:.1f}" y1="{base_y:.1f}" y2="{base_y:.1f}"/>')
    if plot.zero_band:
        zy = plot.zero_y
        p.append(f'<g class="zero-band"><line class="zero-line" x1="{left:.1f}" x2="{right:.1f}" y1="{zy:.1f}" '
                 f'y2="{zy:.1f}" stroke-dasharray="4 3"/><text class="tick" x="{left - 6:.1f}" y="{zy + 4:.1f}" '
                 f'text-anchor="end">0</text></g>')
    label_y = plot.labels_top
    for x, text in plot.x_ticks:
        title = f"<title>{_e(text)}</title>" if len(text) > _LABEL_MAX else ""
        if plot.rotate:
            p.append(f'<text class="tick" x="{x:.1f}" y="{label_y + 10:.1f}" text-anchor="end" '
                     f'transform="rotate(-{_ROTATE} {x:.1f} {label_y + 10:.1f})">{title}{_e(_short(text))}</text>')
        else:
            p.append(f'<text class="tick" x="{x:.1f}" y="{label_y + 16:.1f}" text-anchor="middle">{title}'
                     f"{_e(_short(text))}</text>")
    if chart.x_label:
        p.append(f'<text class="axis-label" x="{(left + right) / 2:.1f}" y="{plot.height - 10:.1f}" '
                 f'text-anchor="middle">{_e(chart.x_label)}</text>')
    if chart.y_label:
        cy = (plot.top + bottom) / 2
        p.append(f'<text class="axis-label" x="16" y="{cy:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 16 {cy:.1f})">{_e(chart.y_label)}'
                 f'{" (log scale)" if plot.floor is not None else ""}</text>')
    return p


def _rect(x: float, y0: float, y1: float, width: float, fill: str, tip: str) -> str:
    y, h = min(y0, y1), abs(y1 - y0)
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{max(h, 0.5):.1f}" '
            f'fill="{fill}">{tip}</rect>')


def _bars(plot: _Plot) -> list[str]:
    """Side-by-side bars per x; one series over route names is coloured by route (calls per route)."""
    by_route = len(plot.series) == 1 and any(route_of(x) for x in plot.labels)
    group_w = plot.band * 0.8
    w = group_w / len(plot.series)
    p: list[str] = []
    for i, label in enumerate(plot.labels):
        x0 = plot.left + plot.band * i + (plot.band - group_w) / 2
        for j, ((name, vals), color) in enumerate(zip(plot.series, plot.colors, strict=True)):
            v = vals[i]
            if v is None:
                continue
            fill = ROUTE_COLORS.get(route_of(label) or "", plot.colors[0]) if by_route else color
            if plot.zero_band and v <= 0:  # a log axis has no 0: a short mark on the zero band
                p.append(_rect(x0 + j * w, plot.zero_y - 1.5, plot.zero_y + 1.5, max(w - 1, 0.5), fill,
                               plot.tip(i, name, v)))
                continue
            p.append(_rect(x0 + j * w, plot.y(plot.clamp(v)), plot.base_y, max(w - 1, 0.5), fill,
                           plot.tip(i, name, v)))
    return p


def _stacked_bars(plot: _Plot) -> list[str]:
    """One stack per x: positives up from zero, negatives down (left out on a log axis)."""
    group_w = plot.band * 0.8
    p: list[str] = []
    for i in range(len(plot.labels)):
        x0 = plot.left + plot.band * i + (plot.band - group_w) / 2
        pos = neg = 0.0
        for (name, vals), color in zip(plot.series, plot.colors, strict=True):
            v = vals[i]
            if v is None or v == 0 or (v < 0 and plot.floor is not None):
                continue
            if v > 0:
                start, pos = pos, pos + v
                end = pos
            else:
                start, neg = neg, neg + v
                end = neg
            log_zero = plot.floor is not None and start == 0
            y_start = plot.y(plot.y.lo) if log_zero else plot.y(plot.clamp(start))
            p.append(_rect(x0, y_start, plot.y(plot.clamp(end)), group_w, color, plot.tip(i, name, v)))
    return p


# Lines are drawn in series order, each later one on top: when two series have the same values (bench's
# routed and native memory often do), the later one would hide the earlier completely. So each later line
# is narrower and dashed differently, and its markers smaller: equal lines show as a stripe inside a stripe.
_DASHES = ("", "8 4", "3 3", "10 3 2 3")
_NESTED_MAX = 4  # more series than this: all drawn alike (too many widths to tell apart)


def _line_style(index: int, count: int) -> tuple[float, str]:
    """(stroke width, dash attribute) of the index-th of `count` line series."""
    if count == 1 or count > _NESTED_MAX:
        return 2.0, ""
    dash = _DASHES[index]
    return 2.0 + 2.0 * (count - 1 - index), f' stroke-dasharray="{dash}"' if dash else ""


def _overlaps(plot: _Plot) -> list[str]:
    """A note for each pair of line series that lie on each other at every point both have (within 0.5%
    of the axis): the drawing keeps both visible, and the note says why one sits inside the other."""
    # In pixels, so that a log axis is judged as drawn.
    span = abs(plot.y.pixel_lo - plot.y.pixel_hi) or 1.0
    notes = []
    for i, (first, a) in enumerate(plot.series):
        for second, b in plot.series[i + 1:]:
            both = [(plot.value_y(x), plot.value_y(y)) for x, y in zip(a, b, strict=True)
                    if x is not None and y is not None]
            if both and all(abs(x - y) <= 0.005 * span for x, y in both):
                notes.append(f"{first} and {second} have the same values (within 0.5% of the axis) at all "
                             f"{len(both)} points: the narrower line runs inside the wider one.")
    return notes


def _lines(plot: _Plot) -> list[str]:
    """One polyline per series, broken at gaps; markers when there are at most 60 points."""
    markers = len(plot.labels) <= 60
    p: list[str] = []
    count = len(plot.series)
    for index, ((name, vals), color) in enumerate(zip(plot.series, plot.colors, strict=True)):
        stroke, dash = _line_style(index, count)
        radius = 3.2 + (stroke - 2.0) * 0.75
        runs: list[list[tuple[float, float, int]]] = [[]]
        zeros: list[tuple[float, float, int]] = []
        for i, v in enumerate(vals):
            if v is None:
                runs.append([])  # a missing value breaks the line rather than drawing through it
            elif plot.zero_band and v <= 0:
                runs.append([])  # under the axis: a point on the zero band, not joined to the line
                zeros.append((plot.x_pos(i), plot.zero_y, i))
            else:
                runs[-1].append((plot.x_pos(i), plot.value_y(v), i))
        g = [f'<g class="series"><title>{_e(name)}</title>']
        for run in runs:
            if len(run) > 1:
                pts = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in run)
                g.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{stroke:g}"{dash} '
                         f'stroke-linejoin="round"/>')
            if markers or len(run) == 1:
                g += [_marker(plot, x, y, color, vals[i], plot.tip(i, name, vals[i]), radius) for x, y, i in run]
        g += [_marker(plot, x, y, color, vals[i], plot.tip(i, name, vals[i]), radius) for x, y, i in zeros]
        g.append("</g>")
        p.append("".join(g))
    return p


def _marker(plot: _Plot, x: float, y: float, color: str, value: float | None, tip: str,
            radius: float = 3.2) -> str:
    # Hollow: a value ≤ 0 that a log axis can only show on the zero band under it.
    hollow = plot.floor is not None and (value or 0) <= 0
    paint = f'fill="#fff" stroke="{color}" stroke-width="1.5"' if hollow else f'fill="{color}"'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:g}" {paint}>{tip}</circle>'
