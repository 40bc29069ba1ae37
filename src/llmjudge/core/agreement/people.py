"""People's agreement with each other: Fleiss' kappa, Krippendorff's alpha, Cohen's kappa
per pair of annotators (pure, numpy).

Labels are coded as in :mod:`llmjudge.core.agreement.labels`; every figure is an
:class:`~llmjudge.core.agreement.labels.Estimate` whose interval is a bootstrap over items
(annotator pairs within one item are not independent, so no Wilson for pooled shares).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from llmjudge.core.agreement.labels import (
    DEFAULT_ROUNDS,
    Estimate,
    boot_estimate,
    codes,
    wilson,
)
from llmjudge.core.stats import kappa_from_confusion

__all__ = [
    "AnnotatorPair",
    "HumanAgreement",
    "fleiss_kappa",
    "human_agreement",
    "krippendorff_alpha_nominal",
]


def _item_counts(annotations: Mapping[Hashable, Mapping[str, str]]) -> np.ndarray:
    """Items x classes counts of the items at least two annotators labelled."""
    rows = [
        np.bincount(codes(by_person.values()), minlength=3)
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

    percent = boot_estimate(percent_value, items, percent_parts, share, rounds, seed)

    with np.errstate(divide="ignore", invalid="ignore"):
        agree = np.where(m >= 2, ((counts * counts).sum(axis=1) - m) / (m * (m - 1)), 0.0)
    fleiss_parts = np.concatenate([counts.astype(float), agree[:, None], np.ones((items, 1))], 1)

    def fleiss(sums: np.ndarray) -> np.ndarray:
        return _fleiss_from(sums[..., :3], sums[..., 3], sums[..., 4])

    fleiss_value = fleiss_kappa(counts)
    fleiss_est = boot_estimate(
        math.nan if fleiss_value is None else fleiss_value,
        items,
        fleiss_parts,
        fleiss,
        rounds,
        seed,
    )
    alpha_value = krippendorff_alpha_nominal(counts)
    alpha_est = boot_estimate(
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
        rows, cols = codes(a for a, _ in common), codes(b for _, b in common)
        per_item[np.arange(len(common)), rows, cols] = 1
        value = float(kappa_from_confusion(per_item.sum(axis=0)))
        pairwise.append(
            AnnotatorPair(
                first,
                second,
                boot_estimate(value, len(common), per_item, kappa_from_confusion, rounds, seed),
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
