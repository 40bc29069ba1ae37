"""The embedding-similarity judge's core: thresholds on cosine similarities.

The judge says an answer is correct when the cosine similarity of its embedding to the
correct output's clears a threshold. ``fit_threshold`` picks the threshold that
maximises F1 against the human labels of the optimisation split: sort once, then every
cut's confusion matrix is a cumulative sum, O(n log n) in all. Only cuts between two
distinct similarities are candidates (equal similarities must get the same label), the
threshold is the midpoint of the gap, and among equally good cuts the highest threshold
wins (the fewest answers accepted). Its held-out metrics come from ``evaluate_threshold``
on the selection split, like any persona's.

As the first step of an escalation, two thresholds split the similarities in three:
at or above ``accept_at`` the answer is correct, below ``reject_below`` it is incorrect,
and the middle goes to the LLM judge (``escalate``). ``fit_escalation`` chooses the widest
bands whose decisions are right often enough: the Wilson lower bound of the precision
above ``accept_at`` (and of the negative predictive value below ``reject_below``) must
reach ``min_precision``, so a band is never drawn on a handful of pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmjudge.core.personas.metrics import (
    Metrics,
    MetricsReport,
    compute_metrics,
    confusion_from_labels,
    metrics_with_intervals,
)
from llmjudge.core.stats import wilson_bounds

CORRECT = 1
INCORRECT = 0
ESCALATE = -1


@dataclass(frozen=True)
class ThresholdFit:
    threshold: float  # correct when similarity >= threshold
    metrics: Metrics  # on the pairs it was fitted on
    n: int


@dataclass(frozen=True)
class EscalationFit:
    accept_at: float  # correct when similarity >= accept_at
    reject_below: float  # incorrect when similarity < reject_below
    accepted: int
    rejected: int
    escalated: int
    n: int


def _arrays(similarities: Sequence[float], labels: Sequence[bool]) -> tuple:
    s = np.asarray(similarities, dtype=float)
    y = np.asarray(labels, dtype=bool)
    if s.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"{s.size} similarities but {y.size} labels")
    if not np.all(np.isfinite(s)):
        raise ValueError("similarities must be finite")
    return s, y


def _gap_threshold(high: float, low: float) -> float:
    """A threshold t with high >= t > low (the midpoint unless floats are adjacent)."""
    mid = low + (high - low) / 2.0
    return mid if mid > low else high


def fit_threshold(similarities: Sequence[float], human_correct: Sequence[bool]) -> ThresholdFit:
    """The F1-maximising threshold on these pairs, and the metrics it reaches on them."""
    s, y = _arrays(similarities, human_correct)
    n = s.size
    if n == 0:
        return ThresholdFit(float("inf"), compute_metrics(confusion_from_labels([], [])), 0)
    order = np.argsort(-s, kind="stable")
    s_desc, y_desc = s[order], y[order]
    positives = int(y.sum())
    k = np.arange(n + 1)  # the top k answers are called correct
    tp = np.concatenate(([0], np.cumsum(y_desc)))
    # a cut after position k-1 is valid only where the similarity strictly drops
    valid = np.ones(n + 1, dtype=bool)
    valid[1:n] = s_desc[:-1] > s_desc[1:]
    den = k + positives  # 2tp + fp + fn = k + P
    f1 = np.where(den > 0, 2 * tp / np.maximum(den, 1), 0.0)
    f1 = np.where(valid, f1, -1.0)
    best = int(np.argmax(f1))  # first maximum: the fewest answers accepted
    if best == 0:
        threshold = float(np.nextafter(s_desc[0], np.inf))
    elif best == n:
        threshold = float(s_desc[-1])
    else:
        threshold = _gap_threshold(float(s_desc[best - 1]), float(s_desc[best]))
    predicted = s >= threshold
    metrics = compute_metrics(confusion_from_labels(y.tolist(), predicted.tolist()))
    return ThresholdFit(threshold=threshold, metrics=metrics, n=n)


def evaluate_threshold(
    similarities: Sequence[float],
    human_correct: Sequence[bool],
    threshold: float,
    *,
    seed: int = 0,
) -> MetricsReport:
    """Metrics with counts and intervals of a fitted threshold on other pairs."""
    s, y = _arrays(similarities, human_correct)
    c = confusion_from_labels(y.tolist(), (s >= threshold).tolist())
    return metrics_with_intervals(c, seed=seed)


def escalate(similarities: Sequence[float], *, accept_at: float, reject_below: float) -> np.ndarray:
    """CORRECT (1), INCORRECT (0) or ESCALATE (-1) per similarity."""
    if reject_below > accept_at:
        raise ValueError(f"reject_below {reject_below} is above accept_at {accept_at}")
    s = np.asarray(similarities, dtype=float)
    return np.where(s >= accept_at, CORRECT, np.where(s < reject_below, INCORRECT, ESCALATE))


def fit_escalation(
    similarities: Sequence[float],
    human_correct: Sequence[bool],
    *,
    min_precision: float = 0.95,
    confidence: float = 0.95,
) -> EscalationFit:
    """The widest accept and reject bands whose decisions are right often enough.

    A band that no cut makes trustworthy is empty: ``accept_at`` above every similarity,
    or ``reject_below`` below every one, so those answers all go to the LLM judge.
    """
    if not 0.0 < min_precision <= 1.0:
        raise ValueError(f"min_precision must be within (0, 1], got {min_precision}")
    s, y = _arrays(similarities, human_correct)
    n = s.size
    if n == 0:
        return EscalationFit(float("inf"), float("-inf"), 0, 0, 0, 0)
    s_desc = np.sort(s)[::-1]
    y_desc = y[np.argsort(-s, kind="stable")]
    k = np.arange(1, n + 1)
    # accept the top k: valid where the next similarity is strictly lower
    ok_top = np.ones(n, dtype=bool)
    ok_top[:-1] = s_desc[:-1] > s_desc[1:]
    precise = wilson_bounds(np.cumsum(y_desc), k, confidence)[0] >= min_precision
    top = np.flatnonzero(ok_top & precise)
    accepted = int(top[-1] + 1) if top.size else 0
    accept_at = float(s_desc[accepted - 1]) if accepted else float(np.nextafter(s_desc[0], np.inf))
    # reject the bottom k: the same from the other end, on the human's "incorrect"
    s_asc, y_asc = s_desc[::-1], y_desc[::-1]
    ok_bottom = np.ones(n, dtype=bool)
    ok_bottom[:-1] = s_asc[:-1] < s_asc[1:]
    npv = wilson_bounds(np.cumsum(~y_asc), k, confidence)[0] >= min_precision
    bottom = np.flatnonzero(ok_bottom & npv)
    rejected = int(bottom[-1] + 1) if bottom.size else 0
    if rejected:
        above = s_asc[rejected] if rejected < n else np.nextafter(s_asc[-1], np.inf)
        reject_below = _gap_threshold(float(above), float(s_asc[rejected - 1]))
    else:
        reject_below = float(s_asc[0])
    if reject_below > accept_at:  # both bands claim the same pairs: keep neither's overlap
        reject_below = accept_at
    decisions = escalate(s, accept_at=accept_at, reject_below=reject_below)
    return EscalationFit(
        accept_at=accept_at,
        reject_below=reject_below,
        accepted=int((decisions == CORRECT).sum()),
        rejected=int((decisions == INCORRECT).sum()),
        escalated=int((decisions == ESCALATE).sum()),
        n=n,
    )
