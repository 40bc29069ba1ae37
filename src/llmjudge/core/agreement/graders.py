"""Agreement between graders on a numeric scale: a panel of graders (pure, numpy).

Grades come as an items x graders matrix, NaN where a grader gave no grade (an item is a
graded thread; its grade from one grader is the mean of that grader's repetitions).

- **Krippendorff's alpha, interval metric** (Krippendorff 2011, "Computing Krippendorff's
  Alpha-Reliability"): ``1 - D_o / D_e`` with squared differences, over the items that at
  least two graders graded (the others are not pairable and are left out). ``D_o``: the
  mean squared difference between two grades of the same item (each item's pairs weighted
  ``1 / (m_u - 1)``); ``D_e``: the same between any two of all pairable grades. 1 is perfect
  agreement, 0 agreement at chance; undefined (None) when every pairable grade is equal.
  Written from per-item sums (count, sum, sum of squares, within-item disagreement), so the
  bootstrap over items is a matrix product (``core.stats.bootstrap_intervals``).
- **Two graders' agreement** over the items both graded: Spearman, Pearson, mean absolute
  difference and quadratic-weighted kappa, with bootstrap intervals over items, as
  ``core.analysis.scores.score_agreement`` defines them; the kappa only where every grade
  on both sides is a whole point (a mean of repetitions or of a panel, or a probability-
  weighted grade, is not), since kappa counts agreement on whole points.
- **A grader's offset** from the panel: the mean of (grader's grade - panel's grade) over
  the items both graded, with a Student-t interval over those items; a lenient grader has a
  positive offset, a severe one a negative. The grader that deviates most is named only when
  it rests on ``MIN_OFFSET_ITEMS`` items and its interval excludes 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmjudge.core.agreement.labels import DEFAULT_ROUNDS, Estimate, boot_estimate
from llmjudge.core.analysis.scores import AGREEMENT_ROUNDS, MeanScore, mean_scores, score_agreement

__all__ = [
    "MIN_OFFSET_ITEMS",
    "Deviation",
    "PairAgreement",
    "alpha_interval_estimate",
    "deviating_member",
    "grade_offset",
    "krippendorff_alpha_interval",
    "pair_agreement",
]

MIN_OFFSET_ITEMS = 20  # items a grader and the panel both graded, to call it lenient/severe
# Two grades closer than this (relative to the scale's magnitude) count as equal: below it
# D_e is float noise and alpha is undefined rather than a ratio of rounding errors.
_EQUAL = 1e-12


def _alpha_parts(grades: np.ndarray) -> tuple[np.ndarray, float]:
    """Per pairable item (``m_u >= 2``): count, sum, sum of squares and within-item
    disagreement ``sum_{i != j} (x_i - x_j)^2 / (m_u - 1)``, of the grades centred on their
    overall mean (alpha is shift-invariant; centring keeps the sums from cancelling); and
    the squared magnitude the equality tolerance is relative to."""
    x = np.asarray(grades, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"grades must be items x graders, got shape {x.shape}")
    present = ~np.isnan(x)
    m = present.sum(axis=1)
    keep = m >= 2
    x, present, m = x[keep], present[keep], m[keep].astype(float)
    if not m.size:
        return np.zeros((0, 4)), 1.0
    centre = float(x[present].mean())
    y = np.where(present, x - centre, 0.0)
    s1 = y.sum(axis=1)
    s2 = (y * y).sum(axis=1)
    within = np.where(present, y - (s1 / m)[:, None], 0.0)
    # sum over ordered pairs i != j of (y_i - y_j)^2 = 2 m sum (y_i - mean_u)^2
    d = 2.0 * m * (within * within).sum(axis=1) / (m - 1.0)
    return np.stack([m, s1, s2, d], axis=1), 1.0 + centre * centre


def _alpha_from(sums: np.ndarray, magnitude: float = 1.0) -> np.ndarray:
    """Alpha of summed parts ``(..., 4)``; NaN where undefined."""
    n, s1, s2, d = (sums[..., k] for k in range(4))
    expected = 2.0 * (n * s2 - s1 * s1)  # sum over ordered pairs of all values, i != j
    ok = (n > 1) & (expected > _EQUAL * n * n * magnitude)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, 1.0 - (n - 1.0) * d / np.where(ok, expected, 1.0), np.nan)


def krippendorff_alpha_interval(grades: np.ndarray) -> float | None:
    """Krippendorff's alpha (interval metric) of an items x graders matrix (NaN: missing);
    None when undefined (no pairable item, or all pairable grades equal)."""
    parts, magnitude = _alpha_parts(grades)
    if not parts.shape[0]:
        return None
    value = float(_alpha_from(parts.sum(axis=0), magnitude))
    return None if math.isnan(value) else value


def alpha_interval_estimate(
    grades: np.ndarray, *, rounds: int = DEFAULT_ROUNDS, seed: int = 0
) -> Estimate:
    """Interval alpha with its 95 % percentile bootstrap over the pairable items (``n``)."""
    parts, magnitude = _alpha_parts(grades)
    value = krippendorff_alpha_interval(grades)
    return boot_estimate(
        math.nan if value is None else value,
        int(parts.shape[0]),
        parts,
        lambda sums: _alpha_from(sums, magnitude),
        rounds,
        seed,
    )


@dataclass(frozen=True)
class PairAgreement:
    """Two graders' agreement over the ``n`` items both graded; each figure an Estimate."""

    n: int
    spearman: Estimate
    pearson: Estimate
    mean_abs_difference: Estimate
    qwk: Estimate  # value None unless every grade on both sides is a whole point


def _whole(values: np.ndarray) -> bool:
    return bool(np.all(np.isclose(values, np.rint(values), rtol=0.0, atol=1e-9)))


def pair_agreement(
    first: np.ndarray,
    second: np.ndarray,
    scale: tuple[float, float],
    *,
    rounds: int = AGREEMENT_ROUNDS,
    seed: int = 0,
) -> PairAgreement:
    """Agreement of two columns of grades (NaN: not graded) over the items both graded."""
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    both = ~np.isnan(a) & ~np.isnan(b)
    a, b = a[both], b[both]
    found = score_agreement(a, b, scale, rounds=rounds, seed=seed)
    n = found.n

    def est(name: str, value: float | None) -> Estimate:
        interval = found.intervals[name]
        if value is None:
            return Estimate(None, n)
        return Estimate(value, n, *(interval or (None, None)))

    whole = n > 0 and _whole(a) and _whole(b)
    return PairAgreement(
        n=n,
        spearman=est("spearman", found.spearman),
        pearson=est("pearson", found.pearson),
        mean_abs_difference=est("mae", found.mae),
        qwk=est("qwk", found.qwk) if whole else Estimate(None, n),
    )


def grade_offset(member: np.ndarray, panel: np.ndarray) -> MeanScore | None:
    """Mean of (member - panel) over the items both graded, with its t interval (None
    below two items); None when no item was graded by both."""
    a, b = np.asarray(member, dtype=float), np.asarray(panel, dtype=float)
    both = ~np.isnan(a) & ~np.isnan(b)
    if not both.any():
        return None
    diff = a[both] - b[both]
    return mean_scores(np.zeros(diff.size, dtype=np.int64), diff)[0]


@dataclass(frozen=True)
class Deviation:
    """The grader whose grades stand furthest from the panel's, or why none is named."""

    member: int | None  # index of the grader named; None when none is
    offset: MeanScore | None
    statement: str


def deviating_member(
    offsets: list[MeanScore | None],
    labels: list[str],
    *,
    min_items: int = MIN_OFFSET_ITEMS,
) -> Deviation:
    """The grader with the largest absolute offset among those with at least
    ``min_items`` items and an interval that excludes 0; fails closed otherwise, saying
    what is missing."""
    if len(offsets) != len(labels):
        raise ValueError(f"{len(offsets)} offsets for {len(labels)} graders")
    enough = [
        k for k, o in enumerate(offsets) if o is not None and o.n >= min_items and o.low is not None
    ]
    most = max((o.n for o in offsets if o is not None), default=0)
    if not enough:
        return Deviation(
            None,
            None,
            f"Not enough evidence to name a lenient or severe grader: it needs {min_items} "
            f"items graded by a member and by the panel (at most {most} here).",
        )
    clear = [
        k
        for k in enough
        if offsets[k].low > 0 or offsets[k].high < 0  # type: ignore[operator,union-attr]
    ]
    short = len(offsets) - len(enough)
    unjudged = f" ({short} member(s) with fewer than {min_items} items not judged)" if short else ""
    if not clear:
        return Deviation(
            None,
            None,
            f"No member's mean grade differs from the panel's beyond its 95 % interval{unjudged}.",
        )
    k = max(clear, key=lambda i: (abs(offsets[i].mean), -i))  # type: ignore[union-attr]
    o = offsets[k]
    assert o is not None and o.low is not None and o.high is not None
    word = "lenient" if o.mean > 0 else "severe"
    return Deviation(
        k,
        o,
        f"{labels[k]} deviates most: {word}, grading {abs(o.mean):.2f} points "
        f"{'above' if o.mean > 0 else 'below'} the panel on average "
        f"(95 % interval {o.low:+.2f} to {o.high:+.2f}, {o.n} items){unjudged}.",
    )
