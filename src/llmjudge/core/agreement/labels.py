"""The label coding and the Estimate every agreement figure shares (pure, numpy).

Labels and verdicts are ``"A"``, ``"B"`` or ``"TIE"`` relative to the pair *as written*
(its thread_a, thread_b). A comparison that showed the pair swapped is mapped back first
(:func:`to_pair_order`). Every figure is an :class:`Estimate`: a value, the count it rests
on and a 95 % interval (Wilson for proportions, a percentile bootstrap over items for the
rest, both from :mod:`llmjudge.core.stats`). An undefined figure (no data, or a kappa whose
expected agreement is 1) has value ``None``: shown as missing, never as 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from llmjudge.core.stats import bootstrap_intervals, wilson_interval

__all__ = [
    "CLASSES",
    "DEFAULT_ROUNDS",
    "Estimate",
    "Label",
    "Source",
    "boot_estimate",
    "boot_estimates",
    "check_label",
    "codes",
    "confusion_matrix",
    "flip",
    "to_pair_order",
    "wilson",
]

Label = Literal["A", "B", "TIE"]
Source = Literal["human", "gold"]
CLASSES: tuple[Label, ...] = ("A", "B", "TIE")
INDEX = {label: i for i, label in enumerate(CLASSES)}
_FLIP: dict[str, Label] = {"A": "B", "B": "A", "TIE": "TIE"}
DEFAULT_ROUNDS = 1000


@dataclass(frozen=True)
class Estimate:
    """A figure with the count it rests on and its 95 % interval (None when undefined)."""

    value: float | None
    n: int
    low: float | None = None
    high: float | None = None


def wilson(successes: int, n: int) -> Estimate:
    """Share ``successes / n`` with its Wilson score interval; all None when ``n == 0``."""
    interval = wilson_interval(successes, n)
    if interval is None:
        return Estimate(None, 0)
    return Estimate(successes / n, n, *interval)


def flip(label: Label) -> Label:
    """The same verdict seen from the other side: A <-> B, TIE stays."""
    return _FLIP[label]


def to_pair_order(winner: Label, swapped: bool) -> Label:
    """A verdict given on the pair shown swapped, in the pair's own order."""
    return _FLIP[winner] if swapped else winner


def check_label(label: str) -> Label:
    """``label`` itself; ValueError unless it is A, B or TIE."""
    if label not in INDEX:
        raise ValueError(f"label must be one of A, B, TIE, got {label!r}")
    return label  # type: ignore[return-value]


def codes(labels: Iterable[str]) -> np.ndarray:
    """Class codes of labels: A 0, B 1, TIE 2."""
    return np.fromiter((INDEX[check_label(x)] for x in labels), dtype=np.int64)


def confusion_matrix(reference: Sequence[str], judge: Sequence[str]) -> np.ndarray:
    """3x3 counts, rows the reference and columns the judge, both in A, B, TIE order."""
    if len(reference) != len(judge):
        raise ValueError(f"{len(reference)} reference labels but {len(judge)} verdicts")
    flat = codes(reference) * 3 + codes(judge)
    return np.bincount(flat, minlength=9).reshape(3, 3)


def boot_estimates(
    values: Sequence[float],
    n: int,
    per_item: np.ndarray,
    statistics: Sequence[Callable[[np.ndarray], np.ndarray]],
    rounds: int,
    seed: int,
) -> list[Estimate]:
    """Estimates of ``values`` (NaN: undefined) with bootstrap intervals over items."""
    intervals = bootstrap_intervals(per_item, statistics, rounds, seed)
    return [
        Estimate(None, n) if math.isnan(v) else Estimate(v, n, *(interval or (None, None)))
        for v, interval in zip(values, intervals, strict=True)
    ]


def boot_estimate(
    value: float,
    n: int,
    per_item: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    rounds: int,
    seed: int,
) -> Estimate:
    """:func:`boot_estimates` of one figure."""
    return boot_estimates([value], n, per_item, [statistic], rounds, seed)[0]
