"""Agreement of a judge with reference labels (pure, numpy).

Labels and verdicts are ``"A"``, ``"B"`` or ``"TIE"`` relative to the pair *as written*
(its thread_a, thread_b). A comparison that showed the pair swapped is mapped back first
(:func:`to_pair_order`). Every figure is an :class:`Estimate`: a value, the count it rests
on and a 95 % interval: Wilson for proportions, a percentile bootstrap over pairs (items)
for kappa, alpha, F1 and the pooled human agreement. An undefined figure (no data, or a
kappa whose expected agreement is 1) has value ``None``: shown as missing, never as 0.

The report (:func:`agreement_report`):

- per-judgment accuracy: each comparison on its own, with TIE as a class, and without
  ties (judgments where the reference or the judge said TIE are left out);
- swap-aware pair scores over pairs judged in both orders (at least one comparison each
  way): ``both_orders_correct`` (every verdict equals the label), ``net_vote`` (+1 per
  verdict equal to the label, -1 per verdict equal to the opposite side, 0 for a tie;
  correct when the sum is > 0; for a TIE label either side is the opposite) and
  ``consistency`` (all verdicts of the pair agree). With
  one comparison per order these are exactly the definitions; repetitions just add votes;
- Cohen's kappa, the 3x3 confusion matrix (rows reference, columns judge, order A/B/TIE)
  and macro precision/recall/F1 over the classes that occur in the reference or the
  verdicts (scikit-learn's default, ``zero_division=0``);
- the disagreements (each comparison whose mapped verdict differs from the label).

References come from :func:`select_references` (gold, human, one annotator, majority);
people's agreement with each other is :mod:`llmjudge.core.agreement.people`. The label
coding and the Estimate type are :mod:`llmjudge.core.agreement.labels` (re-exported here for
the callers that read both).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from llmjudge.core.agreement.labels import (
    CLASSES,
    DEFAULT_ROUNDS,
    INDEX,
    Estimate,
    Label,
    Source,
    boot_estimates,
    check_label,
    codes,
    confusion_matrix,
    flip,
    to_pair_order,
    wilson,
)
from llmjudge.core.stats import kappa_from_confusion

__all__ = [
    "CLASSES",
    "DEFAULT_ROUNDS",
    "AgreementReport",
    "Disagreement",
    "Estimate",
    "Judgment",
    "Label",
    "ReferenceLabel",
    "agreement_by_group",
    "agreement_report",
    "confusion_matrix",
    "flip",
    "macro_prf",
    "pair_group",
    "select_references",
    "to_pair_order",
    "wilson",
]


def _prf(m: np.ndarray) -> np.ndarray:
    """Macro precision, recall, F1 of confusion matrices ``(..., 3, 3)`` -> ``(..., 3)``.

    Averaged over classes that occur in the reference or the verdicts; a class with a zero
    denominator scores 0 (scikit-learn's ``zero_division=0``).
    """
    m = np.asarray(m, dtype=float)
    tp = np.diagonal(m, axis1=-2, axis2=-1)
    predicted = m.sum(axis=-2)
    actual = m.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(actual > 0, tp / actual, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
        present = (predicted + actual) > 0
        count = present.sum(axis=-1)
        out = np.stack(
            [np.where(present, x, 0.0).sum(axis=-1) / count for x in (precision, recall, f1)],
            axis=-1,
        )
    return np.where((count > 0)[..., None], out, np.nan)


def macro_prf(reference: Sequence[str], judge: Sequence[str]) -> tuple[float, float, float] | None:
    """Macro (precision, recall, F1) as scikit-learn computes them; None without data."""
    values = _prf(confusion_matrix(reference, judge))
    if np.isnan(values).any():
        return None
    return float(values[0]), float(values[1]), float(values[2])


# --------------------------------------------------------------------------- references


@dataclass(frozen=True)
class ReferenceLabel:
    """A person's (or a gold set's) label for a pair, relative to the pair as written."""

    pair: Hashable
    label: Label
    source: Source = "human"
    annotator: str = ""


Reference = Literal["gold", "human", "majority"] | str  # or "annotator:<name>"


def select_references(
    labels: Iterable[ReferenceLabel], reference: Reference = "gold"
) -> dict[Hashable, Label]:
    """One reference label per pair, or none for the pair.

    - ``gold``: gold labels; gold labels of one pair that disagree give no reference;
    - ``human``: human labels when all of the pair's annotators agree;
    - ``majority``: the label most human annotators gave; a tie between labels (1 A,
      1 B) gives no reference;
    - ``annotator:<name>``: that annotator's label.

    An annotator's later label for a pair replaces their earlier one (pass labels in time
    order).
    """
    latest: dict[Hashable, dict[tuple[str, str], Label]] = defaultdict(dict)
    for item in labels:
        if item.source not in ("human", "gold"):
            raise ValueError(f"label source must be human or gold, got {item.source!r}")
        latest[item.pair][(item.source, item.annotator)] = check_label(item.label)
    name: str | None = None
    if reference.startswith("annotator:"):
        name = reference.removeprefix("annotator:")
    elif reference not in ("gold", "human", "majority"):
        raise ValueError(
            f"reference must be gold, human, majority or annotator:<name>, got {reference!r}"
        )
    out: dict[Hashable, Label] = {}
    for pair, by_rater in latest.items():
        if name is not None:
            chosen = [
                v for (source, who), v in by_rater.items() if source == "human" and who == name
            ]
        else:
            wanted = "gold" if reference == "gold" else "human"
            chosen = [v for (source, _), v in by_rater.items() if source == wanted]
        if not chosen:
            continue
        counts = {label: chosen.count(label) for label in set(chosen)}
        top = max(counts.values())
        winners = [label for label, c in counts.items() if c == top]
        if reference == "majority":
            if len(winners) == 1:
                out[pair] = winners[0]
        elif len(counts) == 1:
            out[pair] = winners[0]
    return out


# --------------------------------------------------------------------------- judge vs reference


@dataclass(frozen=True)
class Judgment:
    """One completed comparison: its verdict as shown, and whether the pair was swapped."""

    pair: Hashable
    comparison: Hashable
    winner: Label
    swapped: bool = False

    @property
    def in_pair_order(self) -> Label:
        return to_pair_order(self.winner, self.swapped)


@dataclass(frozen=True)
class Disagreement:
    pair: Hashable
    comparison: Hashable
    reference: Label
    judge: Label  # in the pair's order
    swapped: bool


@dataclass(frozen=True)
class AgreementReport:
    accuracy: Estimate  # per judgment, TIE a class
    accuracy_without_ties: Estimate  # per judgment, reference or judge TIE left out
    both_orders_correct: Estimate  # per pair judged in both orders
    net_vote: Estimate
    consistency: Estimate
    kappa: Estimate  # per judgment, interval by bootstrap over pairs
    precision: Estimate  # macro
    recall: Estimate
    f1: Estimate
    confusion: tuple[tuple[int, int, int], ...]  # rows reference, columns judge: A, B, TIE
    judgments: int  # judgments scored (their pair has a reference)
    pairs: int  # pairs with a reference and at least one judgment
    unlabelled: int  # judgments left out: no reference for their pair
    disagreements: tuple[Disagreement, ...] = field(default=())
    labels: tuple[Label, ...] = CLASSES


def agreement_report(
    judgments: Iterable[Judgment],
    references: Mapping[Hashable, Label],
    *,
    rounds: int = DEFAULT_ROUNDS,
    seed: int = 0,
) -> AgreementReport:
    """The judge against reference labels; see the module docstring for each figure."""
    scored = []
    unlabelled = 0
    for j in judgments:
        check_label(j.winner)
        if j.pair in references:
            scored.append(j)
        else:
            unlabelled += 1
    pair_ids = list(dict.fromkeys(j.pair for j in scored))
    pair_index = {p: i for i, p in enumerate(pair_ids)}
    n_pairs = len(pair_ids)
    ref = codes(check_label(references[j.pair]) for j in scored)
    judge = codes(j.in_pair_order for j in scored)
    where = np.fromiter((pair_index[j.pair] for j in scored), dtype=np.int64, count=len(scored))
    swapped = np.fromiter((j.swapped for j in scored), dtype=bool, count=len(scored))

    # Per-pair confusion counts: the additive parts every per-judgment figure is built of.
    per_pair = np.zeros((n_pairs, 9), dtype=np.int64)
    np.add.at(per_pair, (where, ref * 3 + judge), 1)
    per_pair = per_pair.reshape(n_pairs, 3, 3)
    total = per_pair.sum(axis=0)

    correct = int(np.trace(total))
    accuracy = wilson(correct, len(scored))
    decisive = total[:2, :2]
    accuracy_without_ties = wilson(int(np.trace(decisive)), int(decisive.sum()))

    prf = _prf(total)
    kappa, precision, recall, f1 = boot_estimates(
        [float(kappa_from_confusion(total)), float(prf[0]), float(prf[1]), float(prf[2])],
        len(scored),
        per_pair,
        [kappa_from_confusion] + [lambda m, i=i: _prf(m)[..., i] for i in range(3)],
        rounds,
        seed,
    )

    # Swap-aware pair scores over pairs with verdicts in both orders.
    tie = INDEX["TIE"]
    # +1 equal to the label; for a decisive label -1 for the other side and 0 for a tie;
    # for a TIE label, either side is the opposite (-1).
    vote = np.where(judge == ref, 1, np.where((judge == tie) & (ref != tie), 0, -1))
    net = np.bincount(where, weights=vote, minlength=n_pairs)
    wrong = np.bincount(where, weights=(judge != ref), minlength=n_pairs)
    shown_first = np.bincount(where, weights=~swapped, minlength=n_pairs)
    shown_swapped = np.bincount(where, weights=swapped, minlength=n_pairs)
    distinct = np.zeros((n_pairs, 3), dtype=bool)
    distinct[where, judge] = True
    both = (shown_first > 0) & (shown_swapped > 0)
    n_both = int(both.sum())
    both_orders_correct = wilson(int((both & (wrong == 0)).sum()), n_both)
    net_vote = wilson(int((both & (net > 0)).sum()), n_both)
    consistency = wilson(int((both & (distinct.sum(axis=1) == 1)).sum()), n_both)

    disagreements = tuple(
        Disagreement(j.pair, j.comparison, references[j.pair], j.in_pair_order, j.swapped)
        for j in scored
        if j.in_pair_order != references[j.pair]
    )
    return AgreementReport(
        accuracy=accuracy,
        accuracy_without_ties=accuracy_without_ties,
        both_orders_correct=both_orders_correct,
        net_vote=net_vote,
        consistency=consistency,
        kappa=kappa,
        precision=precision,
        recall=recall,
        f1=f1,
        confusion=tuple(tuple(int(x) for x in row) for row in total),  # type: ignore[misc]
        judgments=len(scored),
        pairs=n_pairs,
        unlabelled=unlabelled,
        disagreements=disagreements,
    )


def pair_group(value_a: object, value_b: object) -> str:
    """Group key of a pair from a per-thread value (pillar, metadata): one value when the
    threads share it, else both in the pair's order ("formal vs casual")."""
    a, b = str(value_a), str(value_b)
    return a if a == b else f"{a} vs {b}"


def agreement_by_group(
    judgments: Iterable[Judgment],
    references: Mapping[Hashable, Label],
    group_of: Mapping[Hashable, Hashable],
    *,
    rounds: int = DEFAULT_ROUNDS,
    seed: int = 0,
) -> dict[Hashable, AgreementReport]:
    """:func:`agreement_report` per group of pairs (pairs without a group are left out)."""
    grouped: dict[Hashable, list[Judgment]] = defaultdict(list)
    for j in judgments:
        if j.pair in group_of:
            grouped[group_of[j.pair]].append(j)
    return {
        key: agreement_report(items, references, rounds=rounds, seed=seed)
        for key, items in grouped.items()
    }
