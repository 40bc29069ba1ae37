"""What every SVG chart shares: palette, escaping, ticks, scales, frame, legends, axes.

Coordinates and escaping, round ticks and linear scales, the frame (title, empty state),
markers, legends and axes.

The helpers keep their leading underscore: they are the charts package's internals, for
the chart modules beside this one, not for callers (who use the charts package).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from llmjudge.core.charts.scales import nice_step

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


def _ticks(lo: float, hi: float, target: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values covering [lo, hi] (the first <= lo, the last >= hi)."""
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo <= 1e-12 * max(1.0, abs(lo), abs(hi)):  # one value, or below float resolution
        lo, hi = lo - 1, hi + 1
    step = nice_step(hi - lo, target)
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


def _axis_label(
    label: str, x: float, y: float, max_chars: int | None = None, *, vertical: bool = False
) -> str:
    """An axis title centred at (x, y); ``vertical`` turns it to read upwards (y axes)."""
    turn = f' transform="translate({_n(x)} {_n(y)}) rotate(-90)"' if vertical else ""
    return _text(
        0 if vertical else x,
        0 if vertical else y,
        label,
        anchor="middle",
        size=11,
        fill=MUTED,
        cls="axis-label",
        max_chars=max_chars,
        extra=turn,
    )


def _x_axis(
    ticks: Sequence[tuple[float, str]], left: float, right: float, bottom: float
) -> list[str]:
    """The x axis line with a tick mark and a label at each (x, label)."""
    out = [
        f'<g class="axis axis-x"><line x1="{_n(left)}" y1="{_n(bottom)}" x2="{_n(right)}" '
        f'y2="{_n(bottom)}" stroke="{INK}"/>'
    ]
    for x, label in ticks:
        out.append(
            f'<line x1="{_n(x)}" y1="{_n(bottom)}" x2="{_n(x)}" y2="{_n(bottom + 4)}" stroke="{INK}"/>'
        )
        out.append(_text(x, bottom + 16, label, anchor="middle", size=11, fill=MUTED))
    out.append("</g>")
    return out
