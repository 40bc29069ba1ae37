"""Line charts over x and sparklines for tables."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from markupsafe import Markup

from llmjudge.core.charts.draw import (
    CHAR_W,
    EMPTY_TEXT,
    INK,
    MARKERS,
    MUTED,
    PALETTE,
    TITLE_H,
    _axis_label,
    _color,
    _empty,
    _esc,
    _fmt,
    _legend,
    _line_swatch,
    _marker,
    _n,
    _num,
    _Scale,
    _svg,
    _text,
    _ticks,
    _title,
    _x_axis,
    _y_axis,
)


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
    body += _x_axis([(xs(t), _num(t)) for t in xticks], left, right, bottom)
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
    body.append(_axis_label(x_label, (left + right) / 2, height - 8))
    body.append(
        _axis_label(y_label, 14, (top + bottom) / 2, int((bottom - top) / CHAR_W), vertical=True)
    )
    last = "; ".join(
        f"{n}: {next((_fmt(y_format, v) for v in reversed(series[n]) if v is not None), '–')}"
        for n in names[:20]
    )
    desc = f"{len(x)} points from {_num(xmin)} to {_num(xmax)}. Latest: {last}"
    return _svg("line", width, height, title, desc, body)


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
