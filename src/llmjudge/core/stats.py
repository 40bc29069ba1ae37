"""The statistics every report shares: the Wilson interval, Cohen's kappa, the bootstrap.

One definition each, one answer when a figure is undefined: **None** for a scalar and
**NaN** in an array, never 0 or a guessed interval.

- Wilson score interval of a share ``k / n``: undefined when ``n == 0`` (no evidence).
  Bounds are exact at the ends (``k == 0`` gives a lower bound of 0, ``k == n`` an upper
  bound of 1), lie in [0, 1] and always hold the share itself (float rounding must not put
  1.0 above 0.9999999999999999).
- Cohen's kappa: undefined with no data or when expected agreement is 1 (both raters
  used one and the same class). scikit-learn returns NaN there.
- Quadratic-weighted kappa of two ratings on an ordered scale (Cohen, 1968): undefined
  with no data or when the expected weighted disagreement is 0 (one rating everywhere).
- A percentile bootstrap over items whose figures are sums of per-item parts.

A caller that has always published another answer (the persona API's kappa of 0.0 and
interval (0, 1) without evidence) maps None to it at its own boundary and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import norm

__all__ = [
    "Z95",
    "bootstrap_intervals",
    "cohen_kappa",
    "kappa_from_confusion",
    "wilson_bounds",
    "weighted_kappa",
    "weighted_kappa_matrix",
    "wilson_interval",
    "z_score",
]

Z95 = 1.959963984540054  # the normal 97.5 % quantile: z_score(0.95)
_CELLS_PER_CHUNK = 4_000_000  # bootstrap weight-matrix cells held at once (memory bound)


def z_score(confidence: float) -> float:
    """The two-sided normal quantile of a confidence level in (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    return Z95 if confidence == 0.95 else float(norm.ppf(0.5 + confidence / 2.0))


# --------------------------------------------------------------------------- Wilson


def wilson_bounds(
    successes: ArrayLike, n: ArrayLike, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score intervals of ``successes / n``, elementwise; NaN where ``n == 0``.

    ``successes`` may hold halves (a tie counts half a win) and ``n`` may be an effective,
    non-integer count; the share is clipped to [0, 1].
    """
    z = z_score(confidence)
    n = np.asarray(n, np.float64)
    safe = np.maximum(n, 1.0)
    p = np.clip(np.asarray(successes, np.float64) / safe, 0.0, 1.0)
    z2 = z * z
    centre = (p + z2 / (2 * safe)) / (1 + z2 / safe)
    half = z * np.sqrt(p * (1 - p) / safe + z2 / (4 * safe * safe)) / (1 + z2 / safe)
    low = np.where(p == 0, 0.0, np.clip(np.minimum(centre - half, p), 0.0, 1.0))
    high = np.where(p == 1, 1.0, np.clip(np.maximum(centre + half, p), 0.0, 1.0))
    return np.where(n > 0, low, np.nan), np.where(n > 0, high, np.nan)


def wilson_interval(
    successes: float, n: float, confidence: float = 0.95
) -> tuple[float, float] | None:
    """Wilson score interval of one share; None when ``n == 0``.

    Unlike the normal approximation it is never zero-width: 2 of 2 gives about [0.34, 1].
    Raises ValueError unless ``0 <= successes <= n``.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    low, high = wilson_bounds(successes, n, confidence)
    return None if n == 0 else (float(low), float(high))


# --------------------------------------------------------------------------- kappa


def kappa_from_confusion(m: ArrayLike) -> np.ndarray:
    """Cohen's kappa of confusion matrices ``(..., k, k)`` (counts or shares); NaN where
    undefined.

    Written ``(n * agreements - S) / (n^2 - S)`` with ``S = n^2 * expected agreement``, so
    for counts the undefined case (``S == n^2``) is found exactly, not by a float epsilon.
    """
    m = np.asarray(m, dtype=float)
    n = m.sum(axis=(-2, -1))
    agree = np.trace(m, axis1=-2, axis2=-1)
    s = (m.sum(axis=-1) * m.sum(axis=-2)).sum(axis=-1)
    den = n * n - s
    ok = (n > 0) & (den > 0)
    return np.where(ok, (n * agree - s) / np.where(ok, den, 1.0), np.nan)


def cohen_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two raters' labels (any hashable classes); None when undefined."""
    if len(first) != len(second):
        raise ValueError(f"{len(first)} labels against {len(second)}")
    classes = {label: i for i, label in enumerate(dict.fromkeys([*first, *second]))}
    k = max(len(classes), 1)
    flat = [classes[a] * k + classes[b] for a, b in zip(first, second, strict=True)]
    m = np.bincount(np.asarray(flat, dtype=np.int64), minlength=k * k).reshape(k, k)
    value = float(kappa_from_confusion(m))
    return None if math.isnan(value) else value


def weighted_kappa_matrix(m: ArrayLike) -> np.ndarray:
    """Quadratic-weighted kappa of confusion matrices ``(..., k, k)`` over an ordered scale
    of ``k`` points, ``1 - sum(w * observed) / sum(w * expected)`` with ``w = (i - j)^2``;
    NaN where undefined."""
    m = np.asarray(m, dtype=float)
    k = m.shape[-1]
    grid = np.arange(k, dtype=float)
    w = (grid[:, None] - grid[None, :]) ** 2
    n = m.sum(axis=(-2, -1))
    expected = m.sum(axis=-1)[..., :, None] * m.sum(axis=-2)[..., None, :]
    observed = (w * m).sum(axis=(-2, -1)) * n
    chance = (w * expected).sum(axis=(-2, -1))
    ok = (n > 0) & (chance > 0)
    return np.where(ok, 1 - observed / np.where(ok, chance, 1.0), np.nan)


def weighted_kappa(
    first: Sequence[int], second: Sequence[int], labels: Sequence[int]
) -> float | None:
    """Quadratic-weighted kappa of two ratings on the ordered points ``labels``; None when
    undefined (sklearn's ``cohen_kappa_score(weights="quadratic")``)."""
    if len(first) != len(second):
        raise ValueError(f"{len(first)} ratings against {len(second)}")
    index = {label: i for i, label in enumerate(labels)}
    k = len(index)
    flat = [index[a] * k + index[b] for a, b in zip(first, second, strict=True)]
    m = np.bincount(np.asarray(flat, dtype=np.int64), minlength=k * k).reshape(k, k)
    value = float(weighted_kappa_matrix(m))
    return None if math.isnan(value) else value


# --------------------------------------------------------------------------- bootstrap


def bootstrap_intervals(
    per_item: np.ndarray,
    statistics: Sequence[Callable[[np.ndarray], np.ndarray]],
    rounds: int,
    seed: int,
) -> list[tuple[float, float] | None]:
    """Percentile 95 % intervals of ``statistics`` over items resampled with replacement.

    ``per_item`` is ``(items, ...)`` of additive per-item parts (counts); a resample is a
    weighted sum of them, so a chunk of rounds is one matrix product, and every statistic
    reads the same resamples. A statistic maps summed parts ``(rounds, ...)`` to values
    ``(rounds,)``; NaN rounds (undefined there) are dropped. None where no round is defined
    (or there are no items or rounds).
    """
    items = per_item.shape[0]
    if items == 0 or rounds <= 0:
        return [None] * len(statistics)
    rng = np.random.default_rng(seed)
    flat = per_item.reshape(items, -1).astype(float)
    chunk = max(1, _CELLS_PER_CHUNK // items)
    values: list[list[np.ndarray]] = [[] for _ in statistics]
    for done in range(0, rounds, chunk):
        size = min(chunk, rounds - done)
        # Resample counts per item (a multinomial draw, but bincount of uniform indices is
        # several times faster than Generator.multinomial over many categories).
        picks = rng.integers(0, items, size=(size, items))
        picks += np.arange(size)[:, None] * items
        weights = np.bincount(picks.ravel(), minlength=size * items).reshape(size, items)
        sums = (weights.astype(float) @ flat).reshape((size, *per_item.shape[1:]))
        for out, statistic in zip(values, statistics, strict=True):
            out.append(statistic(sums))
    intervals: list[tuple[float, float] | None] = []
    for parts in values:
        joined = np.concatenate(parts)
        joined = joined[~np.isnan(joined)]
        if joined.size == 0:
            intervals.append(None)
        else:
            low, high = np.percentile(joined, [2.5, 97.5])
            intervals.append((float(low), float(high)))
    return intervals
