"""Calibration of a judge's probabilities against reference labels (pure, numpy).

A judgment's probability is P(A is better) for the pair as written: a stated confidence
``c`` in a verdict A is ``c``, in B ``1 - c``, in a tie 0.5; a judge's own probability
(``prob_a``: from its token log probabilities, or an imported preference) is taken as
it is, turned to the pair's order when the pair was shown swapped. The outcome is whether the
reference says A; pairs whose reference is a tie are left out (the outcome is binary), as
are judgments without a probability.

- Brier score: the mean of ``(p - y)^2``; log loss: the mean of ``-log`` of the
  probability given to what happened, with ``p`` clipped to ``[eps, 1 - eps]`` (eps of
  float64, as scikit-learn clips it); both with a percentile bootstrap interval over pairs
  (a pair's repeated judgments move together).
- Reliability: ten equal-width bins of ``p`` (scikit-learn's ``calibration_curve``
  bins: a value on an edge belongs to the lower bin), each with its count, mean
  probability and the observed share of A with a Wilson interval. A calibrated judge's
  observed share equals its mean probability in every bin.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from llmjudge.core.agreement.labels import (
    DEFAULT_ROUNDS,
    Estimate,
    Label,
    boot_estimates,
    check_label,
    to_pair_order,
    wilson,
)

__all__ = [
    "BINS",
    "ConfidenceReport",
    "ConfidenceBin",
    "ProbabilityJudgment",
    "confidence_report",
    "probability_of_a",
]

BINS = 10
_EPS = float(np.finfo(np.float64).eps)


def probability_of_a(winner: Label, confidence: float) -> float:
    """P(A is better) from a verdict and the judge's confidence in it."""
    c = min(1.0, max(0.0, float(confidence)))
    return {"A": c, "B": 1.0 - c}.get(winner, 0.5)


@dataclass(frozen=True)
class ProbabilityJudgment:
    """One judgment's verdict as shown, the judge's confidence in it, and whether the pair
    was shown swapped (the probability is turned to the pair's order). ``prob_a``, the
    judge's own P(shown A is better), is used instead of the confidence when given."""

    pair: Hashable
    winner: Label
    confidence: float | None
    swapped: bool = False
    prob_a: float | None = None

    @property
    def probability_of_a(self) -> float | None:
        if self.prob_a is not None:
            p = min(1.0, max(0.0, float(self.prob_a)))
            return 1.0 - p if self.swapped else p
        if self.confidence is None:
            return None
        return probability_of_a(to_pair_order(self.winner, self.swapped), self.confidence)


@dataclass(frozen=True)
class ConfidenceBin:
    low: float
    high: float
    n: int
    mean_probability: float | None
    observed: Estimate  # share of the bin's judgments whose reference is A


@dataclass(frozen=True)
class ConfidenceReport:
    brier: Estimate
    log_loss: Estimate
    bins: tuple[ConfidenceBin, ...]
    judgments: int  # scored: a probability, and a reference A or B
    pairs: int
    left_out: int  # judgments of labelled pairs without a probability or with a tie label


def _losses(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    brier = (p - y) ** 2
    clipped = np.clip(p, _EPS, 1.0 - _EPS)
    log = -(y * np.log(clipped) + (1.0 - y) * np.log1p(-clipped))
    return brier, log


def confidence_report(
    judgments: Iterable[ProbabilityJudgment],
    references: Mapping[Hashable, Label],
    *,
    bins: int = BINS,
    rounds: int = DEFAULT_ROUNDS,
    seed: int = 0,
) -> ConfidenceReport:
    """The judge's probabilities against the labels; see the module docstring."""
    probs: list[float] = []
    outcomes: list[float] = []
    pair_index: dict[Hashable, int] = {}
    where: list[int] = []
    left_out = 0
    for j in judgments:
        if j.pair not in references:
            continue
        label = check_label(references[j.pair])
        p = j.probability_of_a
        if p is None or label == "TIE":
            left_out += 1
            continue
        probs.append(p)
        outcomes.append(1.0 if label == "A" else 0.0)
        where.append(pair_index.setdefault(j.pair, len(pair_index)))
    p, y = np.asarray(probs, dtype=float), np.asarray(outcomes, dtype=float)
    n = p.size
    brier, log = _losses(p, y)
    # Per-pair additive parts (count, squared errors, log losses): a bootstrap over pairs
    # is a reweighting of these rows.
    per_pair = np.zeros((len(pair_index), 3))
    idx = np.asarray(where, dtype=np.int64)
    np.add.at(per_pair, idx, np.column_stack([np.ones(n), brier, log]))

    def mean_of(column: int):  # noqa: ANN202 - a statistic over resampled sums
        return lambda sums: np.divide(
            sums[:, column], sums[:, 0], out=np.full(sums.shape[0], np.nan), where=sums[:, 0] > 0
        )

    values = [float(brier.mean()), float(log.mean())] if n else [float("nan")] * 2
    brier_est, log_est = boot_estimates(
        values, n, per_pair, [mean_of(1), mean_of(2)], rounds if n else 0, seed
    )
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.searchsorted(edges[1:-1], p)
    counts = np.bincount(which, minlength=bins)
    sums = np.bincount(which, weights=p, minlength=bins)
    hits = np.bincount(which, weights=y, minlength=bins)
    table = tuple(
        ConfidenceBin(
            low=float(edges[k]),
            high=float(edges[k + 1]),
            n=int(counts[k]),
            mean_probability=float(sums[k] / counts[k]) if counts[k] else None,
            observed=wilson(int(hits[k]), int(counts[k])),
        )
        for k in range(bins)
    )
    return ConfidenceReport(
        brier=brier_est,
        log_loss=log_est,
        bins=table,
        judgments=n,
        pairs=len(pair_index),
        left_out=left_out,
    )
