"""Horizontal bar charts and small multiples of dot-and-whisker panels."""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup

from llmjudge.core.charts.draw import (
    CHAR_W,
    GRID,
    INK,
    MUTED,
    PALETTE,
    TITLE_H,
    _empty,
    _esc,
    _fmt,
    _n,
    _Scale,
    _svg,
    _text,
    _ticks,
    _title,
)


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
