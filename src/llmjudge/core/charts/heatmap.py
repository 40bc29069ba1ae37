"""Heatmaps: a matrix of values (win rates, kappas) on a diverging colour scale."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from markupsafe import Markup

from llmjudge.core.charts.draw import (
    CHAR_W,
    DIVERGING,
    GRID,
    INK,
    MISSING_FILL,
    MUTED,
    TITLE_H,
    _empty,
    _esc,
    _n,
    _svg,
    _text,
    _title,
)


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
