"""Single-answer grading results: grades per thread and per pillar with intervals, their
distribution, agreement with reference grades, and the pairwise preferences they imply.

Pure numpy/scipy over parallel columns, one grade per row (a thread graded ``r`` times
has ``r`` rows). Units: a thread's grade is the mean of its repetitions; a pillar's is the
mean of its threads' grades, with a Student-t interval over those threads (the threads are
the sample; repetitions of one thread are not independent evidence about the pillar). An
interval needs two units; with fewer it is None (undefined, never a guess).

Agreement with reference grades (one per thread, e.g. a human's): Spearman and Pearson
correlations, mean absolute error, and quadratic-weighted kappa on the grades rounded to
the scale's whole points (``core.stats.weighted_kappa``), each with a percentile
bootstrap interval over threads.

Derived preferences: two threads of different pillars answering the same prompt key meet
once; the one with the higher grade wins, equal grades tie. They feed the usual pairwise
leaderboard (``OutcomeTable``), so a grading session ranks its pillars as a tournament
does; threads without a prompt key take part in no pair.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from llmjudge.core.stats import weighted_kappa_matrix

__all__ = [
    "AGREEMENT_ROUNDS",
    "Agreement",
    "DerivedPairs",
    "MeanScore",
    "ScoreBin",
    "derived_pairs",
    "distribution",
    "mean_scores",
    "score_agreement",
    "thread_means",
]

AGREEMENT_ROUNDS = 500
_FIGURES = ("spearman", "pearson", "mae", "qwk")


@dataclass(frozen=True)
class MeanScore:
    """A mean grade over ``n`` units with its 95 % t interval (None below two units)."""

    key: int
    n: int
    mean: float
    sd: float | None
    low: float | None
    high: float | None


def _t_interval(values: np.ndarray) -> tuple[float | None, float | None, float | None]:
    n = values.size
    if n < 2:
        return None, None, None
    sd = float(np.std(values, ddof=1))
    half = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    mean = float(values.mean())
    return sd, mean - half, mean + half


def _group_means(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    unique, inverse = np.unique(keys, return_inverse=True)
    sums = np.bincount(inverse, weights=values, minlength=unique.size)
    counts = np.bincount(inverse, minlength=unique.size)
    return unique, sums / counts


def mean_scores(
    keys: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray
) -> list[MeanScore]:
    """Mean of ``values`` per key with a t interval over that key's values, by key."""
    keys = np.asarray(keys, dtype=np.int64)
    values = np.asarray(values, dtype=float)
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    unique, starts = np.unique(keys, return_index=True)
    out = []
    for key, part in zip(unique.tolist(), np.split(values, starts[1:]), strict=True):
        sd, low, high = _t_interval(part)
        out.append(MeanScore(key, int(part.size), float(part.mean()), sd, low, high))
    return out


def thread_means(
    thread: Sequence[int] | np.ndarray, score: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(thread ids, mean grade over each thread's repetitions), ids sorted."""
    return _group_means(np.asarray(thread, dtype=np.int64), np.asarray(score, dtype=float))


@dataclass(frozen=True)
class ScoreBin:
    low: float
    high: float
    counts: dict[int, int]  # pillar -> grades in [low, high) ([low, high] for the last)


def distribution(
    pillar: Sequence[int] | np.ndarray,
    score: Sequence[float] | np.ndarray,
    scale: tuple[float, float],
) -> list[ScoreBin]:
    """Grades per pillar in bins over the scale: one per whole point on a whole-number
    scale of at most 20 points, else ten equal bins."""
    lo, hi = scale
    whole = float(lo).is_integer() and float(hi).is_integer() and hi - lo <= 20
    edges = np.arange(lo, hi + 2) - 0.5 if whole else np.linspace(lo, hi, 11)
    pillar = np.asarray(pillar, dtype=np.int64)
    score = np.asarray(score, dtype=float)
    index = np.clip(np.searchsorted(edges, score, side="right") - 1, 0, len(edges) - 2)
    bins = []
    for k in range(len(edges) - 1):
        inside = index == k
        low, high = (
            (float(edges[k] + 0.5), float(edges[k] + 0.5))
            if whole
            else (
                float(edges[k]),
                float(edges[k + 1]),
            )
        )
        counts = np.unique(pillar[inside], return_counts=True)
        bins.append(ScoreBin(low, high, dict(zip(*(c.tolist() for c in counts), strict=True))))
    return bins


@dataclass(frozen=True)
class Agreement:
    """Judge grades against reference grades over ``n`` threads; each figure with its 95 %
    bootstrap interval (None where undefined, e.g. a constant column)."""

    n: int
    spearman: float | None
    pearson: float | None
    mae: float | None
    qwk: float | None
    intervals: dict[str, tuple[float, float] | None]


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of each row pair of ``x`` and ``y`` (rounds, n); NaN where undefined."""
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt((x * x).sum(axis=-1) * (y * y).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (x * y).sum(axis=-1) / np.where(den > 0, den, 1), np.nan)


def _resampled_ranks(values: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """``scipy.stats.rankdata(values[picks], axis=-1)`` (average ranks, ties sharing theirs)
    from the counts of each distinct value in each resample: no sort per round, which was
    most of a bootstrap's time."""
    unique, inverse = np.unique(values, return_inverse=True)
    u, rounds = unique.size, picks.shape[0]
    codes = inverse.reshape(-1)[picks]
    flat = (codes + np.arange(rounds)[:, None] * u).ravel()
    counts = np.bincount(flat, minlength=rounds * u).reshape(rounds, u)
    average = np.cumsum(counts, axis=1) - (counts - 1) / 2.0  # below + (ties + 1) / 2
    return np.take_along_axis(average, codes, axis=1)


def _figures(
    judge: np.ndarray,
    ref: np.ndarray,
    scale: tuple[float, float],
    ranks: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """(rounds, 4): Spearman, Pearson, MAE and QWK of each row (``ranks``: the rows'
    average ranks where known)."""
    if ranks is None:
        ranks = (sps.rankdata(judge, axis=-1), sps.rankdata(ref, axis=-1))
    spearman = _pearson_rows(*ranks)
    pearson = _pearson_rows(judge, ref)
    mae = np.abs(judge - ref).mean(axis=-1)
    lo, hi = int(math.floor(scale[0])), int(math.ceil(scale[1]))
    k = hi - lo + 1
    a = np.clip(np.rint(judge), lo, hi).astype(np.int64) - lo
    b = np.clip(np.rint(ref), lo, hi).astype(np.int64) - lo
    rows = np.arange(judge.shape[0])[:, None] * k * k
    cells = np.bincount((rows + a * k + b).ravel(), minlength=judge.shape[0] * k * k)
    qwk = weighted_kappa_matrix(cells.reshape(judge.shape[0], k, k))
    return np.stack([spearman, pearson, mae, qwk], axis=-1)


def _scalar(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def score_agreement(
    judge: Sequence[float] | np.ndarray,
    reference: Sequence[float] | np.ndarray,
    scale: tuple[float, float],
    *,
    rounds: int = AGREEMENT_ROUNDS,
    seed: int = 0,
) -> Agreement:
    """Agreement of the judge's grades with reference grades, paired by position."""
    judge = np.asarray(judge, dtype=float)
    ref = np.asarray(reference, dtype=float)
    if judge.shape != ref.shape:
        raise ValueError(f"{judge.size} grades against {ref.size} reference grades")
    n = judge.size
    if n == 0:
        return Agreement(0, None, None, None, None, dict.fromkeys(_FIGURES))
    point = _figures(judge[None, :], ref[None, :], scale)[0]
    intervals: dict[str, tuple[float, float] | None] = dict.fromkeys(_FIGURES)
    if n >= 2 and rounds > 0:
        picks = np.random.default_rng(seed).integers(0, n, size=(rounds, n))
        ranks = (_resampled_ranks(judge, picks), _resampled_ranks(ref, picks))
        boot = _figures(judge[picks], ref[picks], scale, ranks)
        for k, name in enumerate(_FIGURES):
            column = boot[:, k][~np.isnan(boot[:, k])]
            if column.size:
                low, high = np.percentile(column, [2.5, 97.5])
                intervals[name] = (float(low), float(high))
    return Agreement(n, *(_scalar(v) for v in point), intervals)


@dataclass(frozen=True)
class DerivedPairs:
    """Preferences derived from grades: ``score_a`` 1 (A graded higher), 0, or 0.5."""

    thread_a: np.ndarray
    thread_b: np.ndarray
    score_a: np.ndarray
    unkeyed: int  # graded threads without a prompt key (in no pair)

    def __len__(self) -> int:
        return len(self.thread_a)


def derived_pairs(
    thread: Sequence[int] | np.ndarray,
    pillar: Sequence[int] | np.ndarray,
    prompt_key: Sequence[str | None],
    score: Sequence[float] | np.ndarray,
) -> DerivedPairs:
    """Every pair of threads of different pillars that answer the same prompt key, from
    their mean grades (one row per thread and grade; repetitions are averaged first)."""
    ids, means = thread_means(thread, score)
    mean_of = dict(zip(ids.tolist(), means.tolist(), strict=True))
    facts: dict[int, tuple[int, str | None]] = {}
    threads, pillars = np.asarray(thread).tolist(), np.asarray(pillar).tolist()
    for t, p, key in zip(threads, pillars, prompt_key, strict=True):
        facts[t] = (p, key)
    by_key: dict[str, list[int]] = defaultdict(list)
    unkeyed = 0
    for t in ids.tolist():
        key = facts[t][1]
        if key is None:
            unkeyed += 1
        else:
            by_key[key].append(t)
    a_parts, b_parts = [], []
    for key in sorted(by_key):
        group = np.array(by_key[key], dtype=np.int64)
        i, j = np.triu_indices(len(group), 1)
        pillars = np.array([facts[t][0] for t in group.tolist()], dtype=np.int64)
        keep = pillars[i] != pillars[j]
        a_parts.append(group[i][keep])
        b_parts.append(group[j][keep])
    a = np.concatenate(a_parts) if a_parts else np.empty(0, dtype=np.int64)
    b = np.concatenate(b_parts) if b_parts else np.empty(0, dtype=np.int64)
    grade_a = np.array([mean_of[t] for t in a.tolist()], dtype=float)
    grade_b = np.array([mean_of[t] for t in b.tolist()], dtype=float)
    score_a = np.where(grade_a > grade_b, 1.0, np.where(grade_a < grade_b, 0.0, 0.5))
    return DerivedPairs(a, b, score_a, unkeyed)
