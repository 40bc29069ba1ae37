"""Position-swap analysis: does the judge's verdict survive showing the pair the other way round?

A swap pair is an original comparison (is_swap False) and its twin (is_swap True, same
swap_group) that shows the same two threads in swapped positions. Read as positions
(first verdict, second verdict):

- consistent: (A, B), (B, A) - the same thread wins both times - and (TIE, TIE);
- primacy (favours the first position): (A, A), (A, TIE), (TIE, A);
- recency (favours the second position): (B, B), (B, TIE), (TIE, B).

Groups without exactly one original and one swapped twin of the same threads are left
out and counted as `unpaired`.

Where the judge gives probabilities (``prob_a``), the bias is also measured on them: for a
swap pair showing X first, then Y first, P(X better | X first) - P(X better | X second)
= prob_a(original) + prob_a(twin) - 1, the shift in P(first position wins) between the two
orders (0 for an order-blind judge, > 0 primacy, < 0 recency); its mean over the pairs
with both probabilities, with a bootstrap interval over pairs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable, Winner, as_table, opt_float
from llmjudge.core.analysis.quality import BIAS_ALPHA, Bias, dominant_position_bias
from llmjudge.core.fields import build_from
from llmjudge.core.stats import bootstrap_intervals

SwapClass = Literal["consistent", "primacy", "recency"]
Level = Literal["excellent", "good", "fair", "poor", "insufficient"]

_WINNERS: tuple[Winner, ...] = ("A", "B", "TIE")
_CLASSES: tuple[SwapClass, ...] = ("consistent", "primacy", "recency")
# _CLASS_OF[first][second] as indices into _WINNERS / _CLASSES
_CLASS_OF = np.array(
    [
        [1, 0, 1],  # A then A / B / TIE
        [0, 2, 2],  # B then ...
        [1, 2, 0],  # TIE then ...
    ]
)
LEVELS: tuple[tuple[float, Level], ...] = (
    (0.8, "excellent"),
    (0.6, "good"),
    (0.4, "fair"),
    (0.0, "poor"),
)
# The headline a page shows for a level. A grade word alone misleads here: "Fair" reads as
# "unbiased" beside a judge whose verdict flips with the order half the time.
HEADLINES: dict[Level, str] = {
    "excellent": "Robust to answer order",
    "good": "Mostly robust to answer order",
    "fair": "Sensitive to answer order",
    "poor": "Decided by answer order",
    "insufficient": "Not measured",
}
STABLE_DELTA = 1.0  # a Likert score that moves by at most one point is stable
SHIFT_ROUNDS = 1000
MIN_SHIFT_PAIRS = 2  # one pair resamples to itself: no interval below this


@dataclass(frozen=True)
class SwapPair:
    swap_group: int
    original_id: int
    swapped_id: int
    thread_a: int  # as shown in the original
    thread_b: int
    first: Winner
    second: Winner
    classification: SwapClass
    winner_thread: int | None  # the thread both verdicts chose; None for ties and bias


@dataclass(frozen=True)
class SwapSummary:
    total_swap_pairs: int
    consistency_rate: float | None  # consistent / total; None without pairs
    consistent_wins: int
    consistent_ties: int
    inconsistent: int
    unpaired: int  # swap-group outcomes left out (twin missing or malformed group)


@dataclass(frozen=True)
class PositionBias:
    primacy_count: int
    recency_count: int
    # named only when the exact two-sided binomial test of primacy vs recency rejects at
    # `alpha` (quality.dominant_position_bias); "none" otherwise
    dominant_bias: Bias
    p_value: float | None  # that test's p-value; None if both counts are 0
    leaning: Bias = "none"  # the larger count, whatever the evidence; "none" when equal
    alpha: float = BIAS_ALPHA


@dataclass(frozen=True)
class LikertStability:
    criterion: str
    mean_delta: float | None  # mean |score in original - score in swap| for the same thread
    stability_rate: float | None  # share of deltas <= 1
    n: int  # thread scores compared


@dataclass(frozen=True)
class ProbabilityShift:
    """Mean shift of P(first position wins) between the two orders (module docstring)."""

    mean_shift: float | None  # None without a swap pair holding two probabilities
    low: float | None  # 95 % bootstrap interval over pairs; None below MIN_SHIFT_PAIRS
    high: float | None
    pairs: int  # swap pairs with a probability in both orders


@dataclass(frozen=True)
class Interpretation:
    level: Level  # excellent >= 80%, good >= 60%, fair >= 40%, else poor
    message: str
    recommendations: list[str]


@dataclass(frozen=True)
class PositionAnalysis:
    summary: SwapSummary
    position_bias: PositionBias
    likert_stability: list[LikertStability]
    interpretation: Interpretation
    pairs: list[SwapPair]  # by swap group; at most max_pairs
    probability_shift: ProbabilityShift


def position_swap_analysis(
    outcomes: OutcomeTable | Iterable[Outcome], *, max_pairs: int | None = None
) -> PositionAnalysis:
    table = as_table(outcomes)
    first, second, unpaired = _swap_pairs(table)
    code = {1.0: 0, 0.0: 1, 0.5: 2}
    first_code = np.select([table.score_a[first] == s for s in code], list(code.values()))
    second_code = np.select([table.score_a[second] == s for s in code], list(code.values()))
    classes = _CLASS_OF[first_code, second_code]
    counts = np.bincount(classes, minlength=3)
    consistent_ties = int(np.sum((first_code == 2) & (second_code == 2)))
    total = int(first.size)
    rate = counts[0] / total if total else None
    bias = _bias(int(counts[1]), int(counts[2]))
    listed = first.size if max_pairs is None else min(max_pairs, first.size)
    return PositionAnalysis(
        summary=SwapSummary(
            total_swap_pairs=total,
            consistency_rate=None if rate is None else float(rate),
            consistent_wins=int(counts[0]) - consistent_ties,
            consistent_ties=consistent_ties,
            inconsistent=int(counts[1] + counts[2]),
            unpaired=unpaired,
        ),
        position_bias=bias,
        likert_stability=_likert_stability(table, first, second),
        interpretation=interpret_consistency(
            None if rate is None else float(rate), bias.dominant_bias
        ),
        pairs=[
            _pair(table, int(f), int(s), int(fc), int(sc), int(c))
            for f, s, fc, sc, c in zip(
                first[:listed],
                second[:listed],
                first_code[:listed],
                second_code[:listed],
                classes[:listed],
                strict=True,
            )
        ],
        probability_shift=probability_shift(table, first, second),
    )


def probability_shift(
    table: OutcomeTable, first: np.ndarray, second: np.ndarray, *, seed: int = 0
) -> ProbabilityShift:
    """The shift of P(first position wins) over swap pairs (rows ``first``, ``second``)."""
    shift = table.prob_a[first] + table.prob_a[second] - 1.0
    shift = shift[~np.isnan(shift)]
    n = int(shift.size)
    if n == 0:
        return ProbabilityShift(None, None, None, 0)
    interval = None
    if n >= MIN_SHIFT_PAIRS:
        parts = np.column_stack([np.ones(n), shift])
        interval = bootstrap_intervals(
            parts, [lambda sums: sums[:, 1] / sums[:, 0]], SHIFT_ROUNDS, seed
        )[0]
    low, high = interval or (None, None)
    return ProbabilityShift(float(shift.mean()), low, high, n)


def _swap_pairs(table: OutcomeTable) -> tuple[np.ndarray, np.ndarray, int]:
    """Row indices of (original, swapped twin) per complete swap group, and the count of
    swap-group rows left out."""
    grouped = np.flatnonzero(table.swap_group >= 0)
    groups, inverse = np.unique(table.swap_group[grouped], return_inverse=True)
    originals = np.bincount(inverse, weights=~table.is_swap[grouped], minlength=groups.size)
    swaps = np.bincount(inverse, weights=table.is_swap[grouped], minlength=groups.size)
    complete = (originals == 1) & (swaps == 1)
    rows = grouped[complete[inverse]]
    order = np.lexsort((table.is_swap[rows], table.swap_group[rows]))
    first, second = rows[order][0::2], rows[order][1::2]
    mirrored = (table.a[first] == table.b[second]) & (table.b[first] == table.a[second])
    first, second = first[mirrored], second[mirrored]
    return first, second, int(grouped.size - 2 * first.size)


def _bias(primacy: int, recency: int) -> PositionBias:
    leaning: Bias = "primacy" if primacy > recency else "recency" if recency > primacy else "none"
    test = dominant_position_bias(primacy, recency)
    return build_from(
        PositionBias,
        test,  # p_value, alpha
        primacy_count=primacy,
        recency_count=recency,
        dominant_bias=test.dominant,
        leaning=leaning,
    )


def _likert_stability(
    table: OutcomeTable, first: np.ndarray, second: np.ndarray
) -> list[LikertStability]:
    out = []
    for k, criterion in enumerate(table.criteria):
        # thread shown as A first is B in the twin, and vice versa
        delta = np.abs(
            np.concatenate(
                [
                    table.scores_a[first, k] - table.scores_b[second, k],
                    table.scores_b[first, k] - table.scores_a[second, k],
                ]
            )
        )
        delta = delta[~np.isnan(delta)]
        out.append(
            LikertStability(
                criterion=criterion,
                mean_delta=opt_float(delta.mean()) if delta.size else None,
                stability_rate=float(np.mean(delta <= STABLE_DELTA)) if delta.size else None,
                n=int(delta.size),
            )
        )
    return out


def _pair(table: OutcomeTable, f: int, s: int, fc: int, sc: int, c: int) -> SwapPair:
    winner: int | None = None
    if _CLASSES[c] == "consistent" and fc != 2:
        winner = int(table.players[table.a[f] if fc == 0 else table.b[f]])
    return SwapPair(
        swap_group=int(table.swap_group[f]),
        original_id=int(table.comparison_id[f]),
        swapped_id=int(table.comparison_id[s]),
        thread_a=int(table.players[table.a[f]]),
        thread_b=int(table.players[table.b[f]]),
        first=_WINNERS[fc],
        second=_WINNERS[sc],
        classification=_CLASSES[c],
        winner_thread=winner,
    )


def consistency_level(rate: float) -> Level:
    return next(level for threshold, level in LEVELS if rate >= threshold)


def interpret_consistency(rate: float | None, dominant_bias: Bias = "none") -> Interpretation:
    """Level and advice for a swap consistency rate (share of pairs that agree)."""
    if rate is None:
        return Interpretation(
            level="insufficient",
            message="No complete swap pairs: position bias cannot be measured.",
            recommendations=[
                "Enable position swap for the session so every pair is judged in both orders."
            ],
        )
    level = consistency_level(rate)
    message = {
        "excellent": "The judge is robust to answer order",
        "good": "The judge is mostly robust to answer order",
        "fair": "Answer order often changes the judge's verdict",
        "poor": "Answer order changes the judge's verdict more often than not",
    }[level] + f" ({rate:.0%} of swap pairs agree)."
    advice = {
        "excellent": [
            "Single-order judging is reliable here; keep a small share of swapped "
            "comparisons to watch for drift.",
        ],
        "good": [
            "Rank with swap-consistent aggregation so a pair that flips with the order "
            "counts as a tie.",
            "Average each thread's Likert scores over both orders.",
        ],
        "fair": [
            "Use majority voting over both orders and repetitions before ranking.",
            "Average Likert scores over both orders and annotate flipped pairs as ties.",
            "Add few-shot examples to the judge prompt that show equal answers in both orders.",
        ],
        "poor": [
            "Do not trust single-order verdicts: judge every pair in both orders and count "
            "disagreements as ties.",
            "Use majority voting over several repetitions.",
            "Revise the judge prompt with few-shot examples, or try a stronger judge model.",
        ],
    }[level]
    if level != "excellent" and dominant_bias == "primacy":
        advice.append(
            "The judge favours the answer shown first (primacy): tell it explicitly that "
            "order carries no information, and balance which thread is shown first."
        )
    elif level != "excellent" and dominant_bias == "recency":
        advice.append(
            "The judge favours the answer shown last (recency): ask it to summarise both "
            "answers before deciding, and balance which thread is shown first."
        )
    return Interpretation(level=level, message=message, recommendations=advice)
