"""Round numbers for axis ticks (draw.py) and histogram bins.

A bin width is 1, 2, 2.5 or 5 times a power of ten, and edges are multiples of it, so
an Elo histogram reads 1400, 1425, 1450 ... instead of 1403.7, 1431.2 ...
"""

from __future__ import annotations

import math

import numpy as np

NICE_MULTIPLES = (1.0, 2.0, 2.5, 5.0, 10.0)


def nice_step(span: float, target: int) -> float:
    """The smallest round step (NICE_MULTIPLES x 10^k) that covers `span` in at most
    `target` steps."""
    if not math.isfinite(span) or span <= 0:
        return 1.0
    raw = span / max(target, 1)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in NICE_MULTIPLES if raw <= m * magnitude * (1 + 1e-9))


def _digits(step: float) -> int:
    """Decimals that keep a step's edges exact to six digits below the step (at least ten):
    rounding at a fixed ten decimals made every edge of a 1e-12-wide range 0."""
    return max(10, 6 - math.floor(math.log10(step)))


def nice_bin_edges(values: np.ndarray, target_bins: int = 10) -> np.ndarray:
    """Round bin edges covering all finite `values` with at most `target_bins` bins (two
    when one round step spans the data but they straddle an edge). One distinct value
    (to float resolution) gets one integer-aligned bin of width 1, or 2 if it straddles
    an integer; no finite values, no edges."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return np.empty(0)
    lo, hi = float(v.min()), float(v.max())
    if hi - lo <= 1e-12 * max(1.0, abs(lo), abs(hi)):
        start = math.floor(lo)
        return np.array([start, max(start + 1.0, math.ceil(hi))], dtype=np.float64)
    target = max(target_bins, 1)
    step = nice_step(hi - lo, target)
    while True:
        # the 1e-9 slack absorbs float drift (0.3 / 0.1); the checks after it keep a
        # value a hair outside a round edge inside the bins
        digits = _digits(step)
        start = math.floor(lo / step + 1e-9) * step
        if round(start, digits) > lo:
            start -= step
        # np.histogram closes the last bin on the right, so hi on an edge is counted
        count = max(1, math.ceil((hi - start) / step - 1e-9))
        if round(start + count * step, digits) < hi:
            count += 1
        # a step as wide as the data always fits it in two bins (0 may be an edge
        # inside it): stop there
        if count <= target or step >= hi - lo:
            break
        step = nice_step(step * 1.000001, 1)  # the next round step up
    # round() keeps 0.1 * 3 from printing as 0.30000000000000004
    return np.round(start + step * np.arange(count + 1), _digits(step))
