"""Agreement of a judge with reference labels, and of people with each other (pure, numpy).

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
people's agreement with each other from :func:`human_agreement`.

One module (over 500 lines) on purpose: judge-vs-reference and human-human figures share
the label coding, the Estimate type and the vectorised bootstrap, and the service that
builds the agreement report reads them together.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = [
    "CLASSES",
    "AgreementReport",
    "AnnotatorPair",
    "Disagreement",
    "Estimate",
    "HumanAgreement",
    "Judgment",
    "ReferenceLabel",
    "agreement_by_group",
    "agreement_report",
    "cohen_kappa",
    "confusion_matrix",
    "fleiss_kappa",
    "flip",
    "human_agreement",
    "krippendorff_alpha_nominal",
    "macro_prf",
    "pair_group",
    "select_references",
    "to_pair_order",
    "wilson",
]

Label = Literal["A", "B", "TIE"]
Source = Literal["human", "gold"]
CLASSES: tuple[Label, ...] = ("A", "B", "TIE")
_INDEX = {label: i for i, label in enumerate(CLASSES)}
_FLIP: dict[str, Label] = {"A": "B", "B": "A", "TIE": "TIE"}
Z95 = 1.959963984540054  # the normal 97.5 % quantile
DEFAULT_ROUNDS = 1000
_CELLS_PER_CHUNK = 4_000_000  # bootstrap weight-matrix cells held at once (memory bound)


# --------------------------------------------------------------------------- basics


@dataclass(frozen=True)
class Estimate:
    """A figure with the count it rests on and its 95 % interval (None when undefined)."""

    value: float | None
    n: int
    low: float | None = None
    high: float | None = None


def wilson(successes: int, n: int, z: float = Z95) -> Estimate:
    """Share ``successes / n`` with its Wilson score interval."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in 0..n, got {successes} of {n}")
    if n == 0:
        return Estimate(None, 0)
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # Rounding must not put the share outside its own interval (1.0 > 0.9999999999999999).
    low = 0.0 if successes == 0 else min(p, centre - half)
    high = 1.0 if successes == n else max(p, centre + half)
    return Estimate(p, n, low, high)


def flip(label: Label) -> Label:
    """The same verdict seen from the other side: A <-> B, TIE stays."""
    return _FLIP[label]


def to_pair_order(winner: Label, swapped: bool) -> Label:
    """A verdict given on the pair shown swapped, in the pair's own order."""
    return _FLIP[winner] if swapped else winner


def _check(label: str) -> Label:
    if label not in _INDEX:
        raise ValueError(f"label must be one of A, B, TIE, got {label!r}")
    return label  # type: ignore[return-value]


def _codes(labels: Iterable[str]) -> np.ndarray:
    return np.fromiter((_INDEX[_check(x)] for x in labels), dtype=np.int64)


def confusion_matrix(reference: Sequence[str], judge: Sequence[str]) -> np.ndarray:
    """3x3 counts, rows the reference and columns the judge, both in A, B, TIE order."""
    if len(reference) != len(judge):
        raise ValueError(f"{len(reference)} reference labels but {len(judge)} verdicts")
    flat = _codes(reference) * 3 + _codes(judge)
    return np.bincount(flat, minlength=9).reshape(3, 3)


def _kappa(m: np.ndarray) -> np.ndarray:
    """Cohen's kappa of confusion matrices ``(..., k, k)``; NaN where undefined."""
    m = np.asarray(m, dtype=float)
    n = m.sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        po = np.trace(m, axis1=-2, axis2=-1) / n
        pe = (m.sum(axis=-1) * m.sum(axis=-2)).sum(axis=-1) / (n * n)
        kappa = (po - pe) / (1 - pe)
    return np.where((n > 0) & (pe < 1 - 1e-12), kappa, np.nan)


def cohen_kappa(reference: Sequence[str], judge: Sequence[str]) -> float | None:
    """Cohen's kappa; None when undefined (no data, or both raters used one same class)."""
    value = float(_kappa(confusion_matrix(reference, judge)))
    return None if math.isnan(value) else value


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


# --------------------------------------------------------------------------- bootstrap


def _bootstrap(
    per_item: np.ndarray,
    statistics: Sequence[Callable[[np.ndarray], np.ndarray]],
    rounds: int,
    seed: int,
) -> list[tuple[float | None, float | None]]:
    """Percentile 95 % intervals of ``statistics`` over items resampled with replacement.

    ``per_item`` is ``(items, ...)`` of additive per-item parts (counts); a resample is a
    weighted sum of them, so a chunk of rounds is one matrix product, and every statistic
    reads the same resamples. A statistic maps summed parts ``(rounds, ...)`` to values
    ``(rounds,)``; NaN rounds (undefined there) are dropped.
    """
    items = per_item.shape[0]
    if items == 0 or rounds <= 0:
        return [(None, None)] * len(statistics)
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
    intervals: list[tuple[float | None, float | None]] = []
    for parts in values:
        joined = np.concatenate(parts)
        joined = joined[~np.isnan(joined)]
        if joined.size == 0:
            intervals.append((None, None))
        else:
            low, high = np.percentile(joined, [2.5, 97.5])
            intervals.append((float(low), float(high)))
    return intervals


def _boot_estimates(
    values: Sequence[float],
    n: int,
    per_item: np.ndarray,
    statistics: Sequence[Callable[[np.ndarray], np.ndarray]],
    rounds: int,
    seed: int,
) -> list[Estimate]:
    intervals = _bootstrap(per_item, statistics, rounds, seed)
    return [
        Estimate(None, n) if math.isnan(v) else Estimate(v, n, low, high)
        for v, (low, high) in zip(values, intervals, strict=True)
    ]


def _boot_estimate(
    value: float,
    n: int,
    per_item: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    rounds: int,
    seed: int,
) -> Estimate:
    return _boot_estimates([value], n, per_item, [statistic], rounds, seed)[0]


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
        latest[item.pair][(item.source, item.annotator)] = _check(item.label)
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
        _check(j.winner)
        if j.pair in references:
            scored.append(j)
        else:
            unlabelled += 1
    pair_ids = list(dict.fromkeys(j.pair for j in scored))
    pair_index = {p: i for i, p in enumerate(pair_ids)}
    n_pairs = len(pair_ids)
    ref = _codes(_check(references[j.pair]) for j in scored)
    judge = _codes(j.in_pair_order for j in scored)
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
    kappa, precision, recall, f1 = _boot_estimates(
        [float(_kappa(total)), float(prf[0]), float(prf[1]), float(prf[2])],
        len(scored),
        per_pair,
        [_kappa] + [lambda m, i=i: _prf(m)[..., i] for i in range(3)],
        rounds,
        seed,
    )

    # Swap-aware pair scores over pairs with verdicts in both orders.
    tie = _INDEX["TIE"]
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


# --------------------------------------------------------------------------- people with people


def _item_counts(annotations: Mapping[Hashable, Mapping[str, str]]) -> np.ndarray:
    """Items x classes counts of the items at least two annotators labelled."""
    rows = [
        np.bincount(_codes(by_person.values()), minlength=3)
        for by_person in annotations.values()
        if len(by_person) >= 2
    ]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def _fleiss_from(
    counts_sum: np.ndarray, agree_sum: np.ndarray, raters_sum: np.ndarray
) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        p = counts_sum / counts_sum.sum(axis=-1, keepdims=True)
        pe = (p * p).sum(axis=-1)
        po = agree_sum / raters_sum
        return np.where(pe < 1 - 1e-12, (po - pe) / (1 - pe), np.nan)


def fleiss_kappa(counts: np.ndarray) -> float | None:
    """Fleiss' kappa of an items x categories count matrix.

    Items may have different numbers of raters (at least two): each item's observed
    agreement is the share of its rater pairs that agree, averaged over items, and chance
    agreement comes from the pooled category shares; with a constant number of raters this
    is Fleiss' original statistic. None when undefined (one category only, or no item).
    """
    counts = np.asarray(counts, dtype=float)
    counts = counts[counts.sum(axis=1) >= 2]
    if counts.shape[0] == 0:
        return None
    m = counts.sum(axis=1)
    agree = ((counts * counts).sum(axis=1) - m) / (m * (m - 1))
    value = float(_fleiss_from(counts.sum(axis=0), agree.sum(), np.float64(counts.shape[0])))
    return None if math.isnan(value) else value


def _alpha_from(coincidence: np.ndarray) -> np.ndarray:
    """Nominal alpha of coincidence matrices ``(..., k, k)``; NaN where undefined."""
    o = np.asarray(coincidence, dtype=float)
    n_c = o.sum(axis=-1)
    n = n_c.sum(axis=-1)
    observed = n - np.trace(o, axis1=-2, axis2=-1)
    expected = (n * n - (n_c * n_c).sum(axis=-1)) / (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((n > 1) & (expected > 0), 1 - observed / expected, np.nan)


def _coincidences(counts: np.ndarray) -> np.ndarray:
    """Per-item coincidence matrices ``(items, k, k)`` of items x categories counts."""
    counts = np.asarray(counts, dtype=float)
    m = counts.sum(axis=1)
    pairs = counts[:, :, None] * counts[:, None, :]
    k = counts.shape[1]
    pairs -= counts[:, :, None] * np.eye(k)[None]
    return pairs / (m - 1)[:, None, None]


def krippendorff_alpha_nominal(counts: np.ndarray) -> float | None:
    """Krippendorff's alpha (nominal) of an items x categories count matrix.

    Items with fewer than two values are not pairable and are left out. None when
    undefined (a single category in all pairable values).
    """
    counts = np.asarray(counts, dtype=float)
    counts = counts[counts.sum(axis=1) >= 2]
    if counts.shape[0] == 0:
        return None
    value = float(_alpha_from(_coincidences(counts).sum(axis=0)))
    return None if math.isnan(value) else value


@dataclass(frozen=True)
class AnnotatorPair:
    first: str
    second: str
    kappa: Estimate  # over the pairs both labelled
    agreement: Estimate  # share of those pairs they labelled alike


@dataclass(frozen=True)
class HumanAgreement:
    items: int  # pairs labelled by at least two annotators
    annotators: tuple[str, ...]
    percent_agreement: Estimate  # share of agreeing annotator pairs, pooled over items
    fleiss_kappa: Estimate
    krippendorff_alpha: Estimate
    pairwise: tuple[AnnotatorPair, ...]


def human_agreement(
    annotations: Mapping[Hashable, Mapping[str, str]],
    *,
    rounds: int = DEFAULT_ROUNDS,
    seed: int = 0,
) -> HumanAgreement:
    """Agreement between annotators: ``annotations[pair][annotator] = label``.

    Only pairs labelled by at least two annotators count. Intervals are bootstraps over
    those pairs (annotator pairs within one item are not independent, so no Wilson).
    """
    counts = _item_counts(annotations)
    items = counts.shape[0]
    m = counts.sum(axis=1).astype(float)
    agreeing = ((counts * (counts - 1)) // 2).sum(axis=1).astype(float)
    rater_pairs = m * (m - 1) / 2
    percent_parts = np.stack([agreeing, rater_pairs], axis=1)
    percent_value = float(agreeing.sum() / rater_pairs.sum()) if items else math.nan

    def share(sums: np.ndarray) -> np.ndarray:
        return sums[..., 0] / sums[..., 1]

    percent = _boot_estimate(percent_value, items, percent_parts, share, rounds, seed)

    with np.errstate(divide="ignore", invalid="ignore"):
        agree = np.where(m >= 2, ((counts * counts).sum(axis=1) - m) / (m * (m - 1)), 0.0)
    fleiss_parts = np.concatenate([counts.astype(float), agree[:, None], np.ones((items, 1))], 1)

    def fleiss(sums: np.ndarray) -> np.ndarray:
        return _fleiss_from(sums[..., :3], sums[..., 3], sums[..., 4])

    fleiss_value = fleiss_kappa(counts)
    fleiss_est = _boot_estimate(
        math.nan if fleiss_value is None else fleiss_value,
        items,
        fleiss_parts,
        fleiss,
        rounds,
        seed,
    )
    alpha_value = krippendorff_alpha_nominal(counts)
    alpha_est = _boot_estimate(
        math.nan if alpha_value is None else alpha_value,
        items,
        _coincidences(counts) if items else np.zeros((0, 3, 3)),
        _alpha_from,
        rounds,
        seed,
    )

    people = sorted({who for by_person in annotations.values() for who in by_person})
    pairwise = []
    for first, second in itertools.combinations(people, 2):
        common = [
            (by_person[first], by_person[second])
            for by_person in annotations.values()
            if first in by_person and second in by_person
        ]
        if not common:
            continue
        per_item = np.zeros((len(common), 3, 3), dtype=np.int64)
        rows, cols = _codes(a for a, _ in common), _codes(b for _, b in common)
        per_item[np.arange(len(common)), rows, cols] = 1
        value = float(_kappa(per_item.sum(axis=0)))
        pairwise.append(
            AnnotatorPair(
                first,
                second,
                _boot_estimate(value, len(common), per_item, _kappa, rounds, seed),
                wilson(int((rows == cols).sum()), len(common)),
            )
        )
    return HumanAgreement(
        items=items,
        annotators=tuple(people),
        percent_agreement=percent,
        fleiss_kappa=fleiss_est,
        krippendorff_alpha=alpha_est,
        pairwise=tuple(pairwise),
    )
