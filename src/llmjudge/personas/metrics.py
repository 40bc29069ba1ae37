"""Agreement metrics of a persona's judge against the human, and the held-out split.

The human's label is the truth and the judge's label the prediction; the positive class
is "the answer is correct". Values equal scikit-learn's with ``zero_division=0``:
precision, recall and F1 are 0.0 when their denominator is zero. Cohen's kappa is 0.0
when it is undefined (both raters used one and the same class, so expected agreement
is 1): scikit-learn returns NaN there by default and 0.0 with
``replace_undefined_by=0.0``. 0.0 is the conservative choice: a judge seen on one class
only has shown no agreement beyond chance. Nothing here raises on degenerate input or
returns NaN.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Confusion:
    tp: int
    tn: int
    fp: int
    fn: int

    @property
    def n(self) -> int:
        return self.tp + self.tn + self.fp + self.fn


@dataclass(frozen=True)
class Metrics:
    precision: float
    recall: float
    f1: float
    kappa: float
    accuracy: float
    n: int
    confusion: Confusion

    def to_dict(self) -> dict:
        return asdict(self)


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


def compute_metrics(c: Confusion) -> Metrics:
    """Precision, recall, F1, Cohen's kappa and accuracy of a confusion matrix."""
    n = c.n
    # Kappa in integers, (n*agreements - S) / (n^2 - S) with S = n^2 * expected agreement,
    # so the undefined case (S == n^2) is detected exactly rather than by a float epsilon.
    s = (c.tp + c.fp) * (c.tp + c.fn) + (c.tn + c.fn) * (c.tn + c.fp)
    return Metrics(
        precision=_ratio(c.tp, c.tp + c.fp),
        recall=_ratio(c.tp, c.tp + c.fn),
        f1=_ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn),
        kappa=_ratio(n * (c.tp + c.tn) - s, n * n - s),
        accuracy=_ratio(c.tp + c.tn, n),
        n=n,
        confusion=c,
    )


def split_holdout(
    pair_ids: Sequence[int], fraction: float = 0.25, seed: int = 0
) -> tuple[list[int], list[int]]:
    """Split pair ids into (optimisation, holdout), each in input order.

    The holdout is the ``round(fraction * n)`` ids with the smallest seeded hash, at least
    one when ``fraction > 0`` and ``n >= 2``, and never all of them. Hashing each id on its
    own (instead of shuffling the list) keeps the split stable as pairs are added: sides
    are prefixes of one fixed hash order, so a new pair only moves the boundary, and old
    pairs change side only where the boundary crosses them.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within [0, 1], got {fraction}")
    if len(set(pair_ids)) != len(pair_ids):
        raise ValueError("pair_ids contains duplicates")
    n = len(pair_ids)
    k = round(fraction * n)
    if fraction > 0 and n >= 2:
        k = max(k, 1)
    k = min(k, max(n - 1, 0))
    ranked = sorted(pair_ids, key=lambda pid: (_split_hash(pid, seed), pid))
    holdout_set = set(ranked[:k])
    optimisation = [pid for pid in pair_ids if pid not in holdout_set]
    holdout = [pid for pid in pair_ids if pid in holdout_set]
    return optimisation, holdout


def _split_hash(pair_id: int, seed: int) -> bytes:
    return hashlib.sha256(f"{seed}:{pair_id}".encode()).digest()
