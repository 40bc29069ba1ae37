"""Server-rendered SVG charts: pure functions from data to `Markup`.

Every chart is a standalone `<svg role="img">` with a `<title>` (its accessible name), a
visible title, labelled axes and a legend where there is more than one series. Text from
users (pillar names...) is always escaped. No scripts and no `style` attributes (a strict
CSP blocks inline styles): only SVG presentation attributes and classes. The output is
deterministic: the same data gives the same bytes, so pages cache and tests compare.

Empty data never raises: the chart says "No data yet". Inconsistent shapes (a series whose
length does not match its bins) are programming errors and raise ValueError.

About 800 lines as one piece: every chart shares the same scale, tick and escaping helpers;
each chart itself is one function of 30-80 lines.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

# Okabe-Ito: distinguishable under the common colour-vision deficiencies. Yellow last: it
# is hard to see on white.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442")
# Diverging blue-orange scale for win rates (orange = loses, blue = wins); safe for
# red-green deficiencies, with a neutral light grey at 0.5.
DIVERGING = ("#b35806", "#f7f7f7", "#2166ac")
MISSING_FILL = "#d5d9e0"
INK = "#1d2330"
MUTED = "#667085"
GRID = "#e3e6eb"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
EMPTY_TEXT = "No data yet"
CHAR_W = 6.8  # average glyph width at 12px, for layout estimates
TITLE_H = 30
MARKERS = ("circle", "square", "triangle", "diamond")


# --- small helpers ---------------------------------------------------------------------------


def _n(x: float) -> str:
    """A coordinate with one decimal, never "-0.0"."""
    s = f"{x:.1f}"
    return "0.0" if s == "-0.0" else s


def _num(x: float) -> str:
    """A compact axis number: 1200, 0.25, 1.5e+06."""
    return f"{x:.6g}"


# Characters XML 1.0 forbids (control characters, lone surrogates): a label from user data
# must never make the SVG ill-formed when it is served or saved on its own.
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _esc(text: str) -> Markup:
    return escape(_NOT_XML.sub("\ufffd", text))


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _truncate(label: str, max_chars: int) -> tuple[str, bool]:
    if len(label) <= max_chars:
        return label, False
    return label[: max(max_chars - 1, 1)].rstrip() + "…", True


def _text(
    x: float,
    y: float,
    label: str,
    *,
    anchor: str = "start",
    size: int = 12,
    max_chars: int | None = None,
    cls: str = "",
    fill: str = INK,
    extra: str = "",
) -> str:
    """A text element; a truncated label keeps the full text in a `<title>` tooltip."""
    shown, cut = _truncate(label, max_chars) if max_chars else (label, False)
    tip = f"<title>{_esc(label)}</title>" if cut else ""
    klass = f' class="{cls}"' if cls else ""
    return (
        f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}" font-size="{size}" '
        f'fill="{fill}"{klass}{extra}>{_esc(shown)}{tip}</text>'
    )


def _fmt(value_format: str, value: float) -> str:
    return value_format.format(value)


def _nice_step(span: float, target: int) -> float:
    raw = span / max(target, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag * (1 + 1e-9))


def _ticks(lo: float, hi: float, target: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values covering [lo, hi] (the first <= lo, the last >= hi)."""
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo <= 1e-12 * max(1.0, abs(lo), abs(hi)):  # one value, or below float resolution
        lo, hi = lo - 1, hi + 1
    step = _nice_step(hi - lo, target)
    if integer:
        step = max(1.0, math.ceil(step))
    start = math.floor(lo / step + 1e-9) * step
    count = math.ceil((hi - start) / step - 1e-9)
    # round() keeps 0.1 * 3 from printing as 0.30000000000000004
    return [round(start + i * step, 10) for i in range(count + 1)]


@dataclass(frozen=True)
class _Scale:
    d0: float
    d1: float
    r0: float
    r1: float

    def __call__(self, v: float) -> float:
        if self.d1 == self.d0:
            return (self.r0 + self.r1) / 2
        return self.r0 + (v - self.d0) * (self.r1 - self.r0) / (self.d1 - self.d0)


def _svg(kind: str, width: float, height: float, title: str, desc: str, body: list[str]) -> Markup:
    content = "".join(body)
    # A content hash keeps ids deterministic and distinct between charts on one page.
    cid = "chart-" + hashlib.sha1(f"{kind}{title}{content}".encode()).hexdigest()[:10]
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart chart-{kind}" role="img" '
        f'aria-labelledby="{cid}-t" aria-describedby="{cid}-d" viewBox="0 0 {_n(width)} {_n(height)}" '
        f'width="{_n(width)}" height="{_n(height)}" font-family="{FONT}" font-size="12">'
        f'<title id="{cid}-t">{_esc(title)}</title><desc id="{cid}-d">{_esc(desc)}</desc>'
        f"{content}</svg>"
    )


def _title(title: str, width: float) -> str:
    return _text(
        12,
        20,
        title,
        size=14,
        cls="chart-title",
        max_chars=int((width - 24) / 8),
        extra=' font-weight="600"',
    )


def _empty(kind: str, title: str, width: float, height: float) -> Markup:
    body = [
        _title(title, width),
        f'<rect class="empty" x="12" y="{TITLE_H + 4}" width="{_n(width - 24)}" '
        f'height="{_n(max(height - TITLE_H - 16, 20))}" rx="6" fill="#f1f3f6" stroke="{GRID}"/>',
        _text(width / 2, (TITLE_H + height) / 2 + 4, EMPTY_TEXT, anchor="middle", fill=MUTED),
    ]
    return _svg(kind, width, height, title, EMPTY_TEXT, body)


def _marker(shape: str, x: float, y: float, color: str, r: float = 3.5) -> str:
    if shape == "square":
        return (
            f'<rect x="{_n(x - r)}" y="{_n(y - r)}" width="{_n(2 * r)}" height="{_n(2 * r)}" '
            f'fill="{color}"/>'
        )
    if shape == "triangle":
        pts = (
            f"{_n(x)},{_n(y - r * 1.2)} {_n(x + r * 1.1)},{_n(y + r)} {_n(x - r * 1.1)},{_n(y + r)}"
        )
        return f'<polygon points="{pts}" fill="{color}"/>'
    if shape == "diamond":
        pts = f"{_n(x)},{_n(y - r * 1.3)} {_n(x + r * 1.3)},{_n(y)} {_n(x)},{_n(y + r * 1.3)} {_n(x - r * 1.3)},{_n(y)}"
        return f'<polygon points="{pts}" fill="{color}"/>'
    return f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(r)}" fill="{color}"/>'


Swatch = Callable[[float, float], str]  # draws a legend key centred at (x, y)


def _legend(
    items: Sequence[tuple[str, Swatch]], x0: float, y0: float, width: float
) -> tuple[str, float]:
    """Legend entries laid out in rows that wrap at `width`; returns (svg, height used)."""
    if len(items) < 2:
        return "", 0.0
    parts, x, y = ['<g class="legend">'], x0, y0
    for label, swatch in items:
        shown, _ = _truncate(label, 22)
        w = 22 + CHAR_W * len(shown) + 16
        if x > x0 and x + w > x0 + width:
            x, y = x0, y + 18
        parts.append(swatch(x + 7, y))
        parts.append(_text(x + 18, y + 4, label, max_chars=22))
        x += w
    parts.append("</g>")
    return "".join(parts), y - y0 + 18


def _box_swatch(color: str) -> Swatch:
    return lambda x, y: (
        f'<rect x="{_n(x - 5)}" y="{_n(y - 5)}" width="10" height="10" fill="{color}"/>'
    )


def _line_swatch(color: str, shape: str) -> Swatch:
    return lambda x, y: (
        f'<line x1="{_n(x - 7)}" y1="{_n(y)}" x2="{_n(x + 7)}" y2="{_n(y)}" stroke="{color}" '
        f'stroke-width="2"/>' + _marker(shape, x, y, color, 3)
    )


def _y_axis(
    ys: _Scale, ticks: Sequence[float], left: float, right: float, fmt: Callable[[float], str]
) -> list[str]:
    out = ['<g class="axis axis-y">']
    for t in ticks:
        y = ys(t)
        out.append(
            f'<line class="grid" x1="{_n(left)}" y1="{_n(y)}" x2="{_n(right)}" y2="{_n(y)}" '
            f'stroke="{GRID}"/>'
        )
        out.append(_text(left - 6, y + 4, fmt(t), anchor="end", size=11, fill=MUTED))
    out.append("</g>")
    return out


def _axis_label_y(label: str, x: float, y: float, max_chars: int) -> str:
    return _text(
        0,
        0,
        label,
        anchor="middle",
        size=11,
        fill=MUTED,
        cls="axis-label",
        max_chars=max_chars,
        extra=f' transform="translate({_n(x)} {_n(y)}) rotate(-90)"',
    )


# --- histogram --------------------------------------------------------------------------------


def histogram_chart(
    series: Mapping[str, Sequence[int]],
    bin_edges: Sequence[float],
    *,
    title: str,
    x_label: str,
    y_label: str = "Count",
    width: int = 640,
    height: int = 280,
) -> Markup:
    """Grouped bars: one bar per series in each bin (e.g. Elo distribution by pillar).

    `series` maps a name to its count per bin; all share `bin_edges` (len = bins + 1).
    """
    nbins = len(bin_edges) - 1
    if not series or nbins < 1:
        return _empty("histogram", title, width, height)
    if not all(math.isfinite(e) for e in bin_edges):
        raise ValueError("bin edges must be finite numbers")
    for name, counts in series.items():
        if len(counts) != nbins:
            raise ValueError(f"series {name!r} has {len(counts)} counts for {nbins} bins")
    names = list(series)
    legend, legend_h = _legend(
        [(name, _box_swatch(_color(i))) for i, name in enumerate(names)],
        12,
        TITLE_H + 6,
        width - 24,
    )
    left, right = 56.0, width - 16.0
    top, bottom = TITLE_H + 10 + legend_h, height - 44.0
    if bottom - top < 40:  # many legend rows: grow rather than squash the plot
        height += int(40 - (bottom - top))
        bottom = height - 44.0
    peak = max((max(c) for c in series.values()), default=0)
    yticks = _ticks(0, max(peak, 1), 5, integer=True)
    ys = _Scale(0, yticks[-1], bottom, top)
    group_w = (right - left) / nbins
    bar_w = group_w * (0.9 if len(names) == 1 else 0.8) / len(names)
    pad = (group_w - bar_w * len(names)) / 2

    body = [_title(title, width), legend]
    body += _y_axis(ys, yticks, left, right, lambda t: _num(t))
    body.append('<g class="bars">')
    for b in range(nbins):
        lo, hi = bin_edges[b], bin_edges[b + 1]
        for i, name in enumerate(names):
            count = series[name][b]
            x = left + b * group_w + pad + i * bar_w
            y = ys(count)
            body.append(
                f'<rect class="bar" x="{_n(x)}" y="{_n(y)}" width="{_n(max(bar_w - 0.5, 0.5))}" '
                f'height="{_n(bottom - y)}" fill="{_color(i)}"><title>{_esc(name)}: '
                f"{count} in [{_num(lo)}, {_num(hi)})</title></rect>"
            )
    body.append("</g>")
    # Edge labels: at most ~8, so they never overlap.
    stride = max(1, math.ceil((nbins + 1) / 8))
    body.append(
        f'<g class="axis axis-x"><line x1="{_n(left)}" y1="{_n(bottom)}" x2="{_n(right)}" '
        f'y2="{_n(bottom)}" stroke="{INK}"/>'
    )
    for e in range(0, nbins + 1, stride):
        x = left + e * group_w
        body.append(
            f'<line x1="{_n(x)}" y1="{_n(bottom)}" x2="{_n(x)}" y2="{_n(bottom + 4)}" stroke="{INK}"/>'
        )
        body.append(_text(x, bottom + 16, _num(bin_edges[e]), anchor="middle", size=11, fill=MUTED))
    body.append("</g>")
    body.append(
        _text(
            (left + right) / 2,
            height - 8,
            x_label,
            anchor="middle",
            size=11,
            fill=MUTED,
            cls="axis-label",
            max_chars=int((right - left) / CHAR_W),
        )
    )
    body.append(_axis_label_y(y_label, 14, (top + bottom) / 2, int((bottom - top) / CHAR_W)))
    totals = "; ".join(f"{n}: {sum(series[n])}" for n in names[:20])
    desc = f"{nbins} bins from {_num(bin_edges[0])} to {_num(bin_edges[-1])}. Totals: {totals}"
    return _svg("histogram", width, height, title, desc, body)


# --- heatmap ----------------------------------------------------------------------------------


def _hex(c: str) -> tuple[int, int, int]:
    return int(c[1:3], 16), int(c[3:5], 16), int(c[5:7], 16)


def diverging_color(value: float) -> str:
    """Colour of a win rate in [0, 1] (clamped) on the blue-orange scale centred at 0.5."""
    t = min(max(value, 0.0), 1.0)
    a, b, s = (
        (DIVERGING[0], DIVERGING[1], t / 0.5)
        if t < 0.5
        else (DIVERGING[1], DIVERGING[2], (t - 0.5) / 0.5)
    )
    ca, cb = _hex(a), _hex(b)
    return "#" + "".join(f"{round(x + (y - x) * s):02x}" for x, y in zip(ca, cb, strict=True))


def _ink_on(fill: str) -> str:
    """Dark text on light cells, white on dark ones (relative luminance)."""
    r, g, b = (v / 255 for v in _hex(fill))
    return INK if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "#ffffff"


def heatmap_chart(
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    values: Sequence[Sequence[float | None]],
    counts: Sequence[Sequence[int]] | None = None,
    *,
    title: str,
    legend_label: str = "Win rate of row vs column",
    value_range: tuple[float, float] = (0.0, 1.0),
    value_format: str | None = None,
    missing_label: str = "no games",
) -> Markup:
    """Pillar matrix: cell (r, c) is row r's win rate against column c, with "62%" and "n=13".

    None (no games, or the diagonal) is drawn grey. Other matrices (Cohen's kappa between
    judges, -1..1) give their ``value_range`` (the colour scale's ends, its middle the
    neutral colour) and ``value_format`` (e.g. "{:.2f}"; unset: a percentage).
    """
    lo_v, hi_v = value_range

    def shown(v: float) -> str:
        return f"{round(v * 100)}%" if value_format is None else value_format.format(v)

    def scaled(v: float) -> float:
        return (v - lo_v) / (hi_v - lo_v) if hi_v > lo_v else 0.5

    nr, nc = len(row_labels), len(col_labels)
    if nr == 0 or nc == 0:
        return _empty("heatmap", title, 640, 200)
    if len(values) != nr or any(len(row) != nc for row in values):
        raise ValueError(f"values must be {nr} rows of {nc} columns")
    if counts is not None and (len(counts) != nr or any(len(row) != nc for row in counts)):
        raise ValueError(f"counts must be {nr} rows of {nc} columns")
    cell_w, cell_h = 68.0, 44.0 if counts is not None else 32.0
    label_chars = 18
    row_w = min(max(len(r) for r in row_labels), label_chars) * CHAR_W + 16
    col_h = min(max(len(c) for c in col_labels), label_chars) * CHAR_W * 0.64 + 18  # sin 40°
    left, top = 12 + row_w, TITLE_H + 8 + col_h
    grid_w, grid_h = nc * cell_w, nr * cell_h
    width = max(left + grid_w + 16, 360.0)
    height = top + grid_h + 76

    body = [_title(title, width), '<g class="col-labels">']
    for c, label in enumerate(col_labels):
        x = left + (c + 0.5) * cell_w
        body.append(
            _text(
                0,
                0,
                label,
                max_chars=label_chars,
                extra=f' transform="translate({_n(x - 4)} {_n(top - 8)}) rotate(-40)"',
            )
        )
    body.append('</g><g class="row-labels">')
    for r, label in enumerate(row_labels):
        body.append(
            _text(
                left - 8, top + (r + 0.5) * cell_h + 4, label, anchor="end", max_chars=label_chars
            )
        )
    body.append('</g><g class="cells">')
    for r, row in enumerate(values):
        for c, v in enumerate(row):
            x, y = left + c * cell_w, top + r * cell_h
            n = counts[r][c] if counts is not None else None
            missing = v is None or math.isnan(v)
            fill = MISSING_FILL if missing else diverging_color(scaled(v))  # type: ignore[arg-type]
            pct = "–" if missing else shown(v)  # type: ignore[arg-type]
            tip = f"{row_labels[r]} vs {col_labels[c]}: {missing_label if missing else pct}"
            tip += f" (n={n})" if n is not None else ""
            body.append(
                f'<rect class="cell{" missing" if missing else ""}" x="{_n(x)}" y="{_n(y)}" '
                f'width="{_n(cell_w)}" height="{_n(cell_h)}" fill="{fill}" stroke="#ffffff" '
                f'stroke-width="2"><title>{_esc(tip)}</title></rect>'
            )
            ink = MUTED if missing else _ink_on(fill)
            cy = y + cell_h / 2 + (0 if n is not None else 4)
            body.append(
                _text(
                    x + cell_w / 2,
                    cy,
                    pct,
                    anchor="middle",
                    size=13,
                    fill=ink,
                    extra=' font-weight="600"',
                )
            )
            if n is not None:
                body.append(
                    _text(x + cell_w / 2, cy + 14, f"n={n}", anchor="middle", size=10, fill=ink)
                )
    body.append("</g>")
    # Colour key: what the colour means, a 0%..100% gradient and the grey "no games" swatch.
    ky = top + grid_h + 20
    gid = "grad-" + hashlib.sha1("".join(body).encode()).hexdigest()[:10]
    body.append(
        '<g class="color-key">'
        + _text(12, ky, legend_label, size=11, fill=MUTED, max_chars=int((width - 24) / CHAR_W))
        + f'<defs><linearGradient id="{gid}" x1="0" x2="1" y1="0" y2="0">'
        f'<stop offset="0" stop-color="{DIVERGING[0]}"/>'
        f'<stop offset="0.5" stop-color="{DIVERGING[1]}"/>'
        f'<stop offset="1" stop-color="{DIVERGING[2]}"/></linearGradient></defs>'
        f'<rect x="12" y="{_n(ky + 8)}" width="150" height="10" fill="url(#{gid})" '
        f'stroke="{GRID}"/>'
    )
    for frac in (0, 0.5, 1):
        lab = shown(lo_v + frac * (hi_v - lo_v))
        body.append(_text(12 + 150 * frac, ky + 32, lab, anchor="middle", size=10, fill=MUTED))
    body.append(
        f'<rect x="180" y="{_n(ky + 8)}" width="10" height="10" fill="{MISSING_FILL}"/>'
        + _text(196, ky + 17, missing_label, size=11, fill=MUTED)
        + "</g>"
    )
    desc = f"{legend_label}: {nr} rows by {nc} columns."
    return _svg("heatmap", width, height, title, desc, body)


# --- line chart -------------------------------------------------------------------------------


def line_chart(
    x: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_min: float = 0.0,
    y_max: float = 1.0,
    target: float | None = None,
    y_format: str = "{:.0%}",
    width: int = 640,
    height: int = 280,
) -> Markup:
    """Lines over x (e.g. F1, precision, recall per iteration); None leaves a gap.

    The y range is [y_min, y_max], widened to fit the data and the dashed `target` line.
    Each series has its own colour and marker shape.
    """
    if not x or not series:
        return _empty("line", title, width, height)
    for name, ys_ in series.items():
        if len(ys_) != len(x):
            raise ValueError(f"series {name!r} has {len(ys_)} values for {len(x)} x positions")
    names = list(series)
    present = [v for vals in series.values() for v in vals if v is not None and not math.isnan(v)]
    if not present:
        return _empty("line", title, width, height)
    lo = min([y_min, *present] + ([target] if target is not None else []))
    hi = max([y_max, *present] + ([target] if target is not None else []))
    if hi == lo:
        lo, hi = lo - 1, hi + 1
    legend, legend_h = _legend(
        [(n, _line_swatch(_color(i), MARKERS[i % len(MARKERS)])) for i, n in enumerate(names)],
        12,
        TITLE_H + 6,
        width - 24,
    )
    left, right = 60.0, width - 20.0
    top, bottom = TITLE_H + 14 + legend_h, height - 44.0
    if bottom - top < 40:
        height += int(40 - (bottom - top))
        bottom = height - 44.0
    ys = _Scale(lo, hi, bottom, top)
    xmin, xmax = min(x), max(x)
    xs = (
        _Scale(xmin - 0.5, xmax + 0.5, left, right)
        if xmin == xmax
        else _Scale(xmin, xmax, left + 8, right - 8)
    )
    yticks = [t for t in _ticks(lo, hi, 5) if lo - 1e-9 <= t <= hi + 1e-9]
    integer_x = all(float(v).is_integer() for v in x)
    if integer_x and len(set(x)) <= 12:
        xticks = sorted(set(x))
    else:
        xticks = [t for t in _ticks(xmin, xmax, 6, integer=integer_x) if xmin <= t <= xmax] or [
            xmin
        ]

    body = [_title(title, width), legend]
    body += _y_axis(ys, yticks, left, right, lambda t: _fmt(y_format, t))
    body.append(
        f'<g class="axis axis-x"><line x1="{_n(left)}" y1="{_n(bottom)}" x2="{_n(right)}" '
        f'y2="{_n(bottom)}" stroke="{INK}"/>'
    )
    for t in xticks:
        px = xs(t)
        body.append(
            f'<line x1="{_n(px)}" y1="{_n(bottom)}" x2="{_n(px)}" y2="{_n(bottom + 4)}" stroke="{INK}"/>'
        )
        body.append(_text(px, bottom + 16, _num(t), anchor="middle", size=11, fill=MUTED))
    body.append("</g>")
    if target is not None:
        ty = ys(target)
        label = f"target {_fmt(y_format, target)}"
        body.append(
            f'<g class="target"><line x1="{_n(left)}" y1="{_n(ty)}" x2="{_n(right)}" y2="{_n(ty)}" '
            f'stroke="{INK}" stroke-width="1.5" stroke-dasharray="6 4"/>'
            # Left end: early iterations usually sit below the target, so the label is clear.
            + _text(left + 6, ty - 5 if ty - 16 > top else ty + 14, label, size=11)
            + "</g>"
        )
    order = sorted(range(len(x)), key=lambda k: x[k])
    for i, name in enumerate(names):
        color, shape = _color(i), MARKERS[i % len(MARKERS)]
        body.append('<g class="series">')
        # Consecutive present points form one polyline; a None breaks the line.
        segments: list[list[tuple[float, float]]] = [[]]
        for k in order:
            v = series[name][k]
            if v is None or math.isnan(v):
                segments.append([])
            else:
                segments[-1].append((xs(x[k]), ys(v)))
        for seg in segments:
            if len(seg) > 1:
                pts = " ".join(f"{_n(a)},{_n(b)}" for a, b in seg)
                body.append(
                    f'<polyline class="series-line" points="{pts}" fill="none" stroke="{color}" '
                    f'stroke-width="2" stroke-linejoin="round"/>'
                )
        for k in order:
            v = series[name][k]
            if v is not None and not math.isnan(v):
                body.append(
                    f'<g class="point">{_marker(shape, xs(x[k]), ys(v), color)}'
                    f"<title>{_esc(name)} at {_num(x[k])}: {_esc(_fmt(y_format, v))}</title></g>"
                )
        body.append("</g>")
    body.append(
        _text(
            (left + right) / 2,
            height - 8,
            x_label,
            anchor="middle",
            size=11,
            fill=MUTED,
            cls="axis-label",
        )
    )
    body.append(_axis_label_y(y_label, 14, (top + bottom) / 2, int((bottom - top) / CHAR_W)))
    last = "; ".join(
        f"{n}: {next((_fmt(y_format, v) for v in reversed(series[n]) if v is not None), '–')}"
        for n in names[:20]
    )
    desc = f"{len(x)} points from {_num(xmin)} to {_num(xmax)}. Latest: {last}"
    return _svg("line", width, height, title, desc, body)


# --- horizontal bar chart ---------------------------------------------------------------------


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    value_format: str = "{:.0%}",
    errors: Sequence[tuple[float, float]] | None = None,
    width: int = 640,
) -> Markup:
    """Horizontal bars from 0 to each value (negative values go left), in the given order.

    `errors` are (low, high) interval bounds per bar, drawn as whiskers (e.g. Bradley-Terry
    confidence intervals). The height grows with the number of bars.
    """
    if len(labels) != len(values):
        raise ValueError(f"{len(labels)} labels for {len(values)} values")
    if errors is not None and len(errors) != len(values):
        raise ValueError(f"{len(errors)} error intervals for {len(values)} values")
    if not all(math.isfinite(v) for v in [*values, *(b for e in errors or () for b in e)]):
        raise ValueError("bar values and intervals must be finite numbers")
    if not labels:
        return _empty("bar", title, width, 140)
    row_h, bar_h = 26.0, 16.0
    label_chars = 24
    left = 12 + min(max(len(lab) for lab in labels), label_chars) * CHAR_W + 10
    value_w = max(len(_fmt(value_format, v)) for v in values) * CHAR_W + 16
    right = width - value_w
    top = TITLE_H + 10.0
    bottom = top + row_h * len(labels)
    height = bottom + 36
    points = [*values, 0.0] + ([b for e in errors for b in e] if errors else [])
    lo, hi = min(points), max(points)
    xticks = _ticks(lo, hi, 5)
    xs = _Scale(xticks[0], xticks[-1], left, right)

    body = [_title(title, width), '<g class="axis axis-x">']
    for t in xticks:
        px = xs(t)
        body.append(
            f'<line class="grid" x1="{_n(px)}" y1="{_n(top)}" x2="{_n(px)}" y2="{_n(bottom)}" stroke="{GRID}"/>'
        )
        body.append(
            _text(px, bottom + 16, _fmt(value_format, t), anchor="middle", size=11, fill=MUTED)
        )
    body.append("</g>")
    zero = xs(0.0)
    body.append('<g class="bars">')
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        cy = top + (i + 0.5) * row_h
        x0, x1 = sorted((zero, xs(v)))
        tip = f"{label}: {_fmt(value_format, v)}"
        if errors is not None:
            tip += f" [{_fmt(value_format, errors[i][0])}, {_fmt(value_format, errors[i][1])}]"
        body.append(_text(left - 8, cy + 4, label, anchor="end", max_chars=label_chars))
        body.append(
            f'<rect class="bar" x="{_n(x0)}" y="{_n(cy - bar_h / 2)}" width="{_n(max(x1 - x0, 0.5))}" '
            f'height="{_n(bar_h)}" fill="{PALETTE[0]}"><title>{_esc(tip)}</title></rect>'
        )
        if errors is not None:
            e0, e1 = xs(min(errors[i])), xs(max(errors[i]))
            body.append(
                f'<g class="error-bar" stroke="{INK}" stroke-width="1.5">'
                f'<line x1="{_n(e0)}" y1="{_n(cy)}" x2="{_n(e1)}" y2="{_n(cy)}"/>'
                f'<line x1="{_n(e0)}" y1="{_n(cy - 5)}" x2="{_n(e0)}" y2="{_n(cy + 5)}"/>'
                f'<line x1="{_n(e1)}" y1="{_n(cy - 5)}" x2="{_n(e1)}" y2="{_n(cy + 5)}"/></g>'
            )
        body.append(_text(width - 8, cy + 4, _fmt(value_format, v), anchor="end", cls="value"))
    body.append(
        f'</g><line class="zero" x1="{_n(zero)}" y1="{_n(top)}" x2="{_n(zero)}" y2="{_n(bottom)}" '
        f'stroke="{INK}"/>'
    )
    desc = "; ".join(
        f"{lab}: {_fmt(value_format, v)}" for lab, v in list(zip(labels, values, strict=True))[:30]
    )
    return _svg("bar", width, height, title, desc, body)


# --- sparkline --------------------------------------------------------------------------------


def sparkline(
    values: Sequence[float | None], *, width: int = 120, height: int = 28, title: str = "Trend"
) -> Markup:
    """A tiny trend line for tables; the last value is marked. None leaves a gap."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    if not present:
        body = [_text(width / 2, height / 2 + 3, EMPTY_TEXT, anchor="middle", size=9, fill=MUTED)]
        return _svg("sparkline", width, height, title, EMPTY_TEXT, body)
    lo, hi = min(present), max(present)
    ys = _Scale(lo, hi, height - 4, 4)  # all equal: a flat line in the middle
    xs = (
        _Scale(0, max(len(values) - 1, 1), 3, width - 3)
        if len(values) > 1
        else _Scale(0, 0, 3, width - 3)
    )
    body: list[str] = []
    seg: list[str] = []
    for k, v in [*enumerate(values), (len(values), None)]:
        if v is None or math.isnan(v):
            if len(seg) > 1:
                body.append(
                    f'<polyline class="series-line" points="{" ".join(seg)}" fill="none" '
                    f'stroke="{PALETTE[0]}" stroke-width="1.5" stroke-linejoin="round"/>'
                )
            seg = []
        else:
            seg.append(f"{_n(xs(k))},{_n(ys(v))}")
    last_k = max(k for k, v in enumerate(values) if v is not None and not math.isnan(v))
    body.append(
        f'<circle class="point" cx="{_n(xs(last_k))}" cy="{_n(ys(values[last_k]))}" r="2.5" '
        f'fill="{PALETTE[5]}"/>'
    )
    desc = f"{len(present)} values from {_num(lo)} to {_num(hi)}; last {_num(values[last_k])}"
    return _svg("sparkline", width, height, title, desc, body)


# --- small multiples ---------------------------------------------------------------------------

Panel = tuple[str, Sequence[str], Sequence[float], Sequence[tuple[float | None, float | None]]]


def small_multiples_chart(
    panels: Sequence[Panel],
    *,
    title: str,
    columns: int = 3,
    panel_width: int = 300,
    value_format: str = "{:.0f}",
) -> Markup:
    """A grid of dot-and-whisker panels sharing one x scale (e.g. the pillar ranking per
    category): each panel is (heading, labels, values, (low, high) intervals), rows in the
    given order. A missing interval bound draws the dot alone."""
    for heading, labels, values, intervals in panels:
        if not (len(labels) == len(values) == len(intervals)):
            raise ValueError(f"panel {heading!r}: labels, values and intervals differ in length")
    points = [
        v
        for _, _, values, intervals in panels
        for v in [*values, *(b for e in intervals for b in e if b is not None)]
    ]
    if not all(math.isfinite(v) for v in points):
        raise ValueError("values and intervals must be finite numbers")
    cols = max(1, min(columns, len(panels)))
    width = cols * panel_width + 24
    if not panels or not points:
        return _empty("multiples", title, max(width, 320), 140)
    row_h, head_h, axis_h = 18.0, 22.0, 26.0
    label_chars = 16
    rows_per = max(len(p[1]) for p in panels)
    panel_h = head_h + rows_per * row_h + axis_h
    grid_rows = math.ceil(len(panels) / cols)
    height = TITLE_H + 8 + grid_rows * (panel_h + 10)
    xticks = _ticks(min(points), max(points), 4)
    body = [_title(title, width)]
    for k, (heading, labels, values, intervals) in enumerate(panels):
        x0 = 12 + (k % cols) * panel_width
        y0 = TITLE_H + 8 + (k // cols) * (panel_h + 10)
        left = x0 + label_chars * CHAR_W * 0.8 + 8
        right = x0 + panel_width - 14
        xs = _Scale(xticks[0], xticks[-1], left, right)
        top, bottom = y0 + head_h, y0 + head_h + rows_per * row_h
        body.append('<g class="panel">')
        body.append(
            _text(x0, y0 + 14, heading, size=12, cls="panel-title", max_chars=int(panel_width / 7))
        )
        for t in xticks:
            px = xs(t)
            body.append(
                f'<line class="grid" x1="{_n(px)}" y1="{_n(top)}" x2="{_n(px)}" '
                f'y2="{_n(bottom)}" stroke="{GRID}"/>'
            )
            body.append(
                _text(px, bottom + 14, _fmt(value_format, t), anchor="middle", size=10, fill=MUTED)
            )
        for i, (label, v, (lo, hi)) in enumerate(zip(labels, values, intervals, strict=True)):
            cy = top + (i + 0.5) * row_h
            tip = f"{label}: {_fmt(value_format, v)}"
            if lo is not None and hi is not None:
                tip += f" [{_fmt(value_format, lo)}, {_fmt(value_format, hi)}]"
                body.append(
                    f'<line class="error-bar" x1="{_n(xs(lo))}" y1="{_n(cy)}" x2="{_n(xs(hi))}" '
                    f'y2="{_n(cy)}" stroke="{INK}" stroke-width="1.5"/>'
                )
            body.append(
                _text(left - 6, cy + 4, label, anchor="end", size=11, max_chars=label_chars)
            )
            body.append(
                f'<circle class="point" cx="{_n(xs(v))}" cy="{_n(cy)}" r="4" fill="{PALETTE[0]}">'
                f"<title>{_esc(tip)}</title></circle>"
            )
        body.append("</g>")
    desc = "; ".join(
        f"{heading}: "
        + ", ".join(
            f"{lab} {_fmt(value_format, v)}"
            for lab, v in list(zip(labels, values, strict=True))[:5]
        )
        for heading, labels, values, _ in panels[:12]
    )
    return _svg("multiples", width, height, title, desc, body)
