"""Agreement metrics of a persona's judge against the human.

The human's label is the truth and the judge's label the prediction; the positive class
is "the answer is correct". Values equal scikit-learn's with ``zero_division=0``:
precision, recall and F1 are 0.0 when their denominator is zero. Cohen's kappa is 0.0
when it is undefined (both raters used one and the same class, so expected agreement
is 1): scikit-learn returns NaN there by default and 0.0 with
``replace_undefined_by=0.0``. 0.0 is the conservative choice: a judge seen on one class
only has shown no agreement beyond chance. Nothing here raises on degenerate input or
returns NaN. Kappa and the Wilson interval are :mod:`llmjudge.core.stats`'s, whose answer
when undefined is None; this module maps it to the persona API's published answers (kappa
0.0, interval (0, 1) without evidence) and nowhere else.

Every figure shown also carries its count and a 95% interval (``metrics_with_intervals``):
Wilson score intervals for the proportions (precision over the judge's "correct" calls,
recall over the human's correct answers, accuracy over all pairs) and a seeded
Bayesian bootstrap over pairs for F1 and kappa, which are not proportions. Reweighting
the pairs with Dirichlet weights only moves mass between the four confusion cells, so
each round draws the cells' shares from Dirichlet(counts + 1/2) (the Jeffreys prior,
as in the gate) and computes F1 and kappa from them: O(rounds) whatever the number of
pairs. The half pair of prior per cell is why 7 of 7 right gives F1 in about [0.7, 1]
rather than the plain bootstrap's [1, 1]: a resample of a perfect record is perfect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Generic, TypeVar

import numpy as np

from llmjudge.core import stats


@dataclass(frozen=True)
class Confusion:
    tp: int
    tn: int
    fp: int
    fn: int

    @property
    def n(self) -> int:
        return self.tp + self.tn + self.fp + self.fn


# A figure: a plain float (``Metrics``) or a float with its interval (``MetricsReport``).
_Figure = TypeVar("_Figure")


@dataclass(frozen=True)
class _Figures(Generic[_Figure]):
    """The five agreement figures of one confusion matrix over ``n`` pairs."""

    precision: _Figure
    recall: _Figure
    f1: _Figure
    kappa: _Figure
    accuracy: _Figure
    n: int
    confusion: Confusion

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Metrics(_Figures[float]):
    """The figures as values."""


def confusion_from_labels(y_true: Sequence[bool], y_pred: Sequence[bool]) -> Confusion:
    """Confusion matrix of predictions against truth, positive class True."""
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true has {len(y_true)} labels but y_pred has {len(y_pred)}")
    tp = tn = fp = fn = 0
    for truth, pred in zip(y_true, y_pred, strict=True):
        if pred:
            if truth:
                tp += 1
            else:
                fp += 1
        elif truth:
            fn += 1
        else:
            tn += 1
    return Confusion(tp=tp, tn=tn, fp=fp, fn=fn)


def confusion_from_decisions(
    judge_correct: Sequence[bool], human_agrees: Sequence[bool]
) -> Confusion:
    """Confusion matrix from review decisions.

    The human's label is "correct" when they agree with a judge that said correct or
    disagree with one that said incorrect, so TP = judge correct & agree, FP = judge
    correct & disagree, TN = judge incorrect & agree, FN = judge incorrect & disagree.
    """
    if len(judge_correct) != len(human_agrees):
        raise ValueError(
            f"{len(judge_correct)} judge labels but {len(human_agrees)} human decisions"
        )
    human_correct = [bool(j) == bool(a) for j, a in zip(judge_correct, human_agrees, strict=True)]
    return confusion_from_labels(human_correct, judge_correct)


def _ratio(num: int, den: int) -> float:
    return num / den if den else 0.0


def _matrix(
    tp: np.ndarray | int, tn: np.ndarray | int, fp: np.ndarray | int, fn: np.ndarray | int
) -> np.ndarray:
    """Confusion matrices ``(..., 2, 2)``: rows the human (correct, incorrect), columns the
    judge."""
    return np.stack([np.stack([tp, fn], -1), np.stack([fp, tn], -1)], -2)


def compute_metrics(c: Confusion) -> Metrics:
    """Precision, recall, F1, Cohen's kappa and accuracy of a confusion matrix."""
    n = c.n
    kappa = float(stats.kappa_from_confusion(_matrix(c.tp, c.tn, c.fp, c.fn)))
    return Metrics(
        precision=_ratio(c.tp, c.tp + c.fp),
        recall=_ratio(c.tp, c.tp + c.fn),
        f1=_ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn),
        kappa=0.0 if math.isnan(kappa) else kappa,
        accuracy=_ratio(c.tp + c.tn, n),
        n=n,
        confusion=c,
    )


# -- intervals -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A figure with its count and interval: ``n`` is what the figure is a share of."""

    value: float
    low: float
    high: float
    n: int
    method: str  # "wilson" or "bayesian-bootstrap"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MetricsReport(_Figures[Estimate]):
    """The figures with their counts and intervals at ``confidence``."""

    confidence: float


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """:func:`llmjudge.core.stats.wilson_interval` in the persona API's form: (0, 1) when
    there is no evidence (n == 0), as stored iterations and calibration replies say."""
    return stats.wilson_interval(successes, n, confidence) or (0.0, 1.0)


def _f1_kappa(tp: np.ndarray, tn: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> tuple:
    """F1 and kappa of arrays of confusion cells (counts or shares), zero where undefined."""
    f1_den = 2 * tp + fp + fn
    f1 = np.where(f1_den > 0, 2 * tp / np.where(f1_den > 0, f1_den, 1), 0.0)
    kappa = np.nan_to_num(stats.kappa_from_confusion(_matrix(tp, tn, fp, fn)), nan=0.0)
    return f1, kappa


def _holding(bounds: np.ndarray, value: float) -> tuple[float, float]:
    return min(float(bounds[0]), value), max(float(bounds[1]), value)


def metrics_with_intervals(
    c: Confusion, *, confidence: float = 0.95, rounds: int = 2000, seed: int = 0
) -> MetricsReport:
    """``compute_metrics`` with each figure's count and interval (see the module docstring).

    With no pairs every interval is [0, 1]: nothing is known.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    m = compute_metrics(c)
    n = c.n

    def wilson(value: float, k: int, total: int) -> Estimate:
        low, high = wilson_interval(k, total, confidence)
        return Estimate(value=value, low=low, high=high, n=total, method="wilson")

    if n == 0:
        f1_ci = kappa_ci = (0.0, 1.0)
    else:
        rng = np.random.default_rng(seed)
        shares = rng.dirichlet(np.array([c.tp, c.tn, c.fp, c.fn], dtype=float) + 0.5, rounds)
        f1_b, kappa_b = _f1_kappa(*shares.T)
        alpha = (1.0 - confidence) / 2.0
        # Widened to hold the measured value: the posterior of a perfect record never
        # reaches exactly 1, but 1 is what was seen and must stay inside the interval.
        f1_ci = _holding(np.quantile(f1_b, [alpha, 1 - alpha]), m.f1)
        kappa_ci = _holding(np.quantile(kappa_b, [alpha, 1 - alpha]), m.kappa)
    return MetricsReport(
        precision=wilson(m.precision, c.tp, c.tp + c.fp),
        recall=wilson(m.recall, c.tp, c.tp + c.fn),
        f1=Estimate(m.f1, f1_ci[0], f1_ci[1], n, "bayesian-bootstrap"),
        kappa=Estimate(m.kappa, kappa_ci[0], kappa_ci[1], n, "bayesian-bootstrap"),
        accuracy=wilson(m.accuracy, c.tp + c.tn, n),
        n=n,
        confusion=c,
        confidence=confidence,
    )


def report_dict(c: Confusion, *, rounds: int = 2000, seed: int = 0) -> dict:
    """``compute_metrics(c).to_dict()`` plus ``intervals``: each figure's Estimate as a dict
    (what an iteration stores, so every card can show its count and interval)."""
    out = compute_metrics(c).to_dict()
    report = metrics_with_intervals(c, rounds=rounds, seed=seed)
    out["intervals"] = {
        key: getattr(report, key).to_dict()
        for key in ("precision", "recall", "f1", "kappa", "accuracy")
    }
    out["confidence"] = report.confidence
    return out


# -- several annotators ----------------------------------------------------------------------


def majority_label(labels: Sequence[bool]) -> bool | None:
    """The majority of several annotators' labels (True = correct); None on a tie or none."""
    yes = sum(bool(v) for v in labels)
    no = len(labels) - yes
    if yes == no:
        return None
    return yes > no
