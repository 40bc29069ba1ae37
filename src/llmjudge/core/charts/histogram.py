"""Grouped histograms: one bar per series in each bin."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from markupsafe import Markup

from llmjudge.core.charts.draw import (
    CHAR_W,
    TITLE_H,
    _axis_label,
    _box_swatch,
    _color,
    _empty,
    _esc,
    _legend,
    _n,
    _num,
    _Scale,
    _svg,
    _ticks,
    _title,
    _x_axis,
    _y_axis,
)


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
    edges = [(left + e * group_w, _num(bin_edges[e])) for e in range(0, nbins + 1, stride)]
    body += _x_axis(edges, left, right, bottom)
    body.append(_axis_label(x_label, (left + right) / 2, height - 8, int((right - left) / CHAR_W)))
    body.append(
        _axis_label(y_label, 14, (top + bottom) / 2, int((bottom - top) / CHAR_W), vertical=True)
    )
    totals = "; ".join(f"{n}: {sum(series[n])}" for n in names[:20])
    desc = f"{nbins} bins from {_num(bin_edges[0])} to {_num(bin_edges[-1])}. Totals: {totals}"
    return _svg("histogram", width, height, title, desc, body)
