"""Judge verdicts as analysis input: the `Outcome` contract, its columnar form, aggregation.

Every analysis function accepts either a sequence of `Outcome` or an `OutcomeTable`
(build the table once with `as_table` and pass it around when calling several).
The table is sorted canonically by (completed_order, comparison_id), so every result,
including seeded bootstraps, is independent of the order the outcomes arrive in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np

Winner = Literal["A", "B", "TIE"]
Aggregation = Literal["all", "swap_consistent", "majority"]
AGGREGATIONS: tuple[Aggregation, ...] = ("all", "swap_consistent", "majority")

_SCORE_OF_WINNER = {"A": 1.0, "B": 0.0, "TIE": 0.5}
_NO_GROUP = -1


@dataclass(frozen=True)
class Outcome:
    """One judge verdict on a pair; `winner` is a position, not a thread."""

    comparison_id: int
    thread_a: int  # thread shown in position A
    thread_b: int
    winner: Winner
    confidence: float | None = None
    scores_a: Mapping[str, float] = field(default_factory=dict)  # criterion -> Likert 1..5
    scores_b: Mapping[str, float] = field(default_factory=dict)
    swap_group: int | None = None  # an original and its swapped twin share it
    is_swap: bool = False
    repetition: int = 0
    completed_order: float = 0.0  # completion time as epoch seconds
    strength: int = 0  # 2 a strong verdict (A>>B), 1 a weak one (A>B), 0 unknown or a tie
    prob_a: float | None = None  # the judge's P(A is better), where it gave one


@dataclass(frozen=True, eq=False)
class OutcomeTable:
    """Columnar outcomes; players (threads, or pillars after `map_players`) are 0..n-1.

    `score_a` is the result for the player in position A: 1 win, 0 loss, 0.5 tie.
    `prob_a` is the judge's probability that A is better, where it gave one (log
    probabilities, an imported preference); the ratings read `rating_score`, which is
    that probability as a fractional result where it exists and `score_a` elsewhere.
    Missing values are NaN (confidence, scores, prob_a) or -1 (swap_group).
    """

    players: np.ndarray  # (n,) int64, sorted external ids
    a: np.ndarray  # (m,) int64 index into players
    b: np.ndarray
    score_a: np.ndarray  # (m,) float64
    comparison_id: np.ndarray  # (m,) int64
    confidence: np.ndarray  # (m,) float64
    criteria: tuple[str, ...]  # sorted criterion names
    scores_a: np.ndarray  # (m, c) float64
    scores_b: np.ndarray
    swap_group: np.ndarray  # (m,) int64
    is_swap: np.ndarray  # (m,) bool
    repetition: np.ndarray  # (m,) int64
    completed_order: np.ndarray  # (m,) float64
    # (m,) int8: 2 strong (A>>B), 1 weak (A>B), 0 unknown; see ratings.verdict_weights
    strength: np.ndarray
    prob_a: np.ndarray  # (m,) float64 in [0, 1], NaN where the judge gave no probability

    @property
    def rating_score(self) -> np.ndarray:
        """The result the ratings fit for A: the judge's probability that A is better
        where it gave one (p wins for A, 1 - p for B), else 1 / 0.5 / 0 (`score_a`)."""
        if not np.any(~np.isnan(self.prob_a)):
            return self.score_a
        return np.where(np.isnan(self.prob_a), self.score_a, self.prob_a)

    def __len__(self) -> int:
        return int(self.a.size)

    @property
    def n_players(self) -> int:
        return int(self.players.size)

    @classmethod
    def from_columns(
        cls,
        *,
        comparison_id: Sequence[int] | np.ndarray,
        thread_a: Sequence[int] | np.ndarray,
        thread_b: Sequence[int] | np.ndarray,
        score_a: Sequence[float] | np.ndarray,
        confidence: Sequence[float] | np.ndarray | None = None,
        criteria: Sequence[str] = (),
        scores_a: np.ndarray | None = None,
        scores_b: np.ndarray | None = None,
        swap_group: Sequence[int] | np.ndarray | None = None,
        is_swap: Sequence[bool] | np.ndarray | None = None,
        repetition: Sequence[int] | np.ndarray | None = None,
        completed_order: Sequence[float] | np.ndarray | None = None,
        strength: Sequence[int] | np.ndarray | None = None,
        prob_a: Sequence[float] | np.ndarray | None = None,
    ) -> OutcomeTable:
        """Build from parallel columns (e.g. straight from database rows).

        `score_a` is 1/0/0.5 for A wins/B wins/tie; missing confidence or scores are NaN,
        missing swap groups -1. `scores_a`/`scores_b` are (m, len(criteria)) arrays.
        `strength` is 2 for a strong verdict, 1 for a weak one, 0 when unknown.
        `prob_a` is P(A is better) in [0, 1], NaN where the judge gave none.
        """
        ta = np.asarray(thread_a, dtype=np.int64)
        tb = np.asarray(thread_b, dtype=np.int64)
        m = ta.size
        if np.any(ta == tb):
            raise ValueError("an outcome compares a thread with itself")
        players, inverse = np.unique(np.concatenate([ta, tb]), return_inverse=True)
        n_crit = len(criteria)
        empty_scores = np.full((m, n_crit), np.nan)
        crit_order = sorted(range(n_crit), key=lambda k: criteria[k])
        table = cls(
            players=players.astype(np.int64),
            a=inverse[:m].astype(np.int64),
            b=inverse[m:].astype(np.int64),
            score_a=np.asarray(score_a, dtype=np.float64),
            comparison_id=np.asarray(comparison_id, dtype=np.int64),
            confidence=_column(confidence, m, np.nan, np.float64),
            criteria=tuple(criteria[i] for i in crit_order),
            scores_a=(empty_scores if scores_a is None else np.asarray(scores_a, float))[
                :, crit_order
            ],
            scores_b=(empty_scores if scores_b is None else np.asarray(scores_b, float))[
                :, crit_order
            ],
            swap_group=_column(swap_group, m, _NO_GROUP, np.int64),
            is_swap=_column(is_swap, m, False, np.bool_),
            repetition=_column(repetition, m, 0, np.int64),
            completed_order=_column(completed_order, m, 0.0, np.float64),
            strength=_column(strength, m, 0, np.int8),
            prob_a=_column(prob_a, m, np.nan, np.float64),
        )
        bad = ~np.isin(table.score_a, (0.0, 0.5, 1.0))
        if np.any(bad):
            raise ValueError("score_a must be 1 (A wins), 0 (B wins) or 0.5 (tie)")
        given = table.prob_a[~np.isnan(table.prob_a)]
        if np.any((given < 0.0) | (given > 1.0)):
            raise ValueError("prob_a must lie in [0, 1] (or be NaN: no probability)")
        return table._canonical()

    @classmethod
    def from_outcomes(cls, outcomes: Iterable[Outcome]) -> OutcomeTable:
        items = list(outcomes)
        criteria = sorted({c for o in items for c in (*o.scores_a, *o.scores_b)})
        col = {c: i for i, c in enumerate(criteria)}
        scores_a = np.full((len(items), len(criteria)), np.nan)
        scores_b = np.full((len(items), len(criteria)), np.nan)
        for row, o in enumerate(items):
            for c, v in o.scores_a.items():
                scores_a[row, col[c]] = v
            for c, v in o.scores_b.items():
                scores_b[row, col[c]] = v
        return cls.from_columns(
            comparison_id=[o.comparison_id for o in items],
            thread_a=[o.thread_a for o in items],
            thread_b=[o.thread_b for o in items],
            score_a=[_SCORE_OF_WINNER[o.winner] for o in items],
            confidence=[np.nan if o.confidence is None else o.confidence for o in items],
            criteria=criteria,
            scores_a=scores_a,
            scores_b=scores_b,
            swap_group=[_NO_GROUP if o.swap_group is None else o.swap_group for o in items],
            is_swap=[o.is_swap for o in items],
            repetition=[o.repetition for o in items],
            completed_order=[o.completed_order for o in items],
            strength=[o.strength for o in items],
            prob_a=[np.nan if o.prob_a is None else o.prob_a for o in items],
        )

    def take(self, rows: np.ndarray) -> OutcomeTable:
        """Rows selected by index or mask; the player index is kept as is."""
        kept = {"players": self.players, "criteria": self.criteria}
        columns = {
            f.name: getattr(self, f.name)[rows]
            for f in dataclasses.fields(self)
            if f.name not in kept
        }
        return OutcomeTable(**columns, **kept)

    def map_players(self, mapping: Mapping[int, int]) -> OutcomeTable:
        """Relabel players (e.g. thread -> pillar); outcomes within one new player are dropped."""
        new_ids = map_ids(self.players, mapping)
        na, nb = new_ids[self.a], new_ids[self.b]
        keep = na != nb
        kept = self.take(keep)
        players, inverse = np.unique(np.concatenate([na[keep], nb[keep]]), return_inverse=True)
        m = len(kept)
        return dataclasses.replace(kept, players=players, a=inverse[:m], b=inverse[m:])

    def _canonical(self) -> OutcomeTable:
        order = np.lexsort((self.comparison_id, self.completed_order))
        return self.take(order)


def as_table(outcomes: OutcomeTable | Iterable[Outcome]) -> OutcomeTable:
    return outcomes if isinstance(outcomes, OutcomeTable) else OutcomeTable.from_outcomes(outcomes)


def map_ids(ids: np.ndarray, mapping: Mapping[int, int]) -> np.ndarray:
    """mapping[id] for each id, as an int64 array; a missing id is a caller error."""
    missing = [int(i) for i in ids if int(i) not in mapping]
    if missing:
        raise KeyError(f"no mapping for ids {missing[:10]}")
    return np.fromiter((mapping[int(i)] for i in ids), dtype=np.int64, count=ids.size)


def winner_index(table: OutcomeTable) -> np.ndarray:
    """Player index of each outcome's winner, -1 for a tie."""
    return np.where(table.score_a == 1.0, table.a, np.where(table.score_a == 0.0, table.b, -1))


def aggregate(outcomes: OutcomeTable | Iterable[Outcome], how: Aggregation) -> OutcomeTable:
    """Apply an aggregation choice before ratings.

    - `all`: every verdict counts.
    - `swap_consistent`: each swap group (an original and its swapped twin) yields ONE
      outcome: its winner when all verdicts in the group name the same thread (or all tie),
      a TIE when they disagree. Outcomes without a swap group pass through unchanged.
      (A swap group must hold verdicts on one pair of threads.)
    - `majority`: all verdicts on the same unordered pair (repetitions and swaps alike)
      yield ONE outcome: a thread wins if it won more than half of the verdicts, else TIE.

    A merged outcome keeps the orientation, comparison id and repetition of its first
    original (non-swap) verdict, takes the latest completion time, and averages confidence,
    each thread's Likert scores and the judge's probability (turned to the merged
    orientation: a swap pair's mean is the order-balanced probability) over the group.
    """
    table = as_table(outcomes)
    if how == "all":
        return table
    if how == "swap_consistent":
        singles = table.swap_group == _NO_GROUP
        key = np.where(singles, -1 - np.arange(len(table)), table.swap_group)
        uniq, groups = np.unique(key, return_inverse=True)
        winners = winner_index(table)
        lo = np.full(uniq.size, np.iinfo(np.int64).max)
        hi = np.full(uniq.size, -2)
        np.minimum.at(lo, groups, winners)
        np.maximum.at(hi, groups, winners)
        group_winner = np.where(lo == hi, lo, -1)
        return _collapse(table, groups, group_winner)
    if how == "majority":
        n = table.n_players
        key = np.minimum(table.a, table.b) * n + np.maximum(table.a, table.b)
        uniq, groups = np.unique(key, return_inverse=True)
        lo_player, hi_player = uniq // n, uniq % n
        winners = winner_index(table)
        votes = np.bincount(groups, minlength=uniq.size)
        lo_wins = np.bincount(groups, weights=winners == lo_player[groups], minlength=uniq.size)
        hi_wins = np.bincount(groups, weights=winners == hi_player[groups], minlength=uniq.size)
        group_winner = np.where(
            2 * lo_wins > votes, lo_player, np.where(2 * hi_wins > votes, hi_player, -1)
        )
        return _collapse(table, groups, group_winner, keep_swap_group=False)
    raise ValueError(f"unknown aggregation {how!r}; choose one of {AGGREGATIONS}")


def _collapse(
    table: OutcomeTable,
    groups: np.ndarray,
    group_winner: np.ndarray,
    *,
    keep_swap_group: bool = True,
) -> OutcomeTable:
    """One outcome per group, oriented like the group's first original verdict."""
    n_groups = group_winner.size
    # representative: first row by (group, is_swap, comparison_id)
    order = np.lexsort((table.comparison_id, table.is_swap, groups))
    first = np.ones(order.size, dtype=bool)
    first[1:] = groups[order][1:] != groups[order][:-1]
    rep = order[first]  # indexed by group id, since groups are 0..n_groups-1 in sorted order
    rep_a, rep_b = table.a[rep], table.b[rep]
    score = np.where(group_winner == rep_a, 1.0, np.where(group_winner == rep_b, 0.0, 0.5))
    # each thread's Likert scores and the confidence averaged over the group
    same_side = table.a == rep_a[groups]
    oriented = np.where(same_side, table.prob_a, 1.0 - table.prob_a)
    side_a = np.where(same_side[:, None], table.scores_a, table.scores_b)
    side_b = np.where(same_side[:, None], table.scores_b, table.scores_a)
    last = np.full(n_groups, -np.inf)
    np.maximum.at(last, groups, table.completed_order)
    out = table.take(rep)
    return dataclasses.replace(
        out,
        score_a=score,
        confidence=_group_nanmean(groups, table.confidence[:, None], n_groups)[:, 0],
        prob_a=_group_nanmean(groups, oriented[:, None], n_groups)[:, 0],
        scores_a=_group_nanmean(groups, side_a, n_groups),
        scores_b=_group_nanmean(groups, side_b, n_groups),
        swap_group=out.swap_group if keep_swap_group else np.full(n_groups, _NO_GROUP),
        is_swap=np.zeros(n_groups, dtype=bool),
        completed_order=last,
    )._canonical()


def _group_nanmean(groups: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-group mean of each column ignoring NaN; NaN where a group has no value."""
    present = ~np.isnan(values)
    out = np.full((n_groups, values.shape[1]), np.nan)
    for col in range(values.shape[1]):
        mask = present[:, col]
        total = np.bincount(groups[mask], weights=values[mask, col], minlength=n_groups)
        count = np.bincount(groups[mask], minlength=n_groups)
        np.divide(total, count, out=out[:, col], where=count > 0)
    return out


def _column(values: object, m: int, default: object, dtype: type) -> np.ndarray:
    if values is None:
        return np.full(m, default, dtype=dtype)
    return np.asarray(values, dtype=dtype)


@dataclass(frozen=True, eq=False)
class PlayerStats:
    """Per-player tallies of a table (arrays indexed like `table.players`)."""

    matches: np.ndarray  # (n,) int64
    wins: np.ndarray
    losses: np.ndarray
    ties: np.ndarray
    opponents: np.ndarray  # distinct opponents
    confidence_mean: np.ndarray  # (n,) mean confidence of the verdicts it was in; NaN if none
    likert_mean: np.ndarray  # (n, c) NaN where no score
    likert_std: np.ndarray  # (n, c) sample std (ddof=1); NaN below 2 scores
    likert_count: np.ndarray  # (n, c) int64

    @classmethod
    def of(cls, table: OutcomeTable) -> PlayerStats:
        n = table.n_players
        a_won, b_won, tied = table.score_a == 1.0, table.score_a == 0.0, table.score_a == 0.5
        players = np.concatenate([table.a, table.b])
        pair_keys = np.unique(np.minimum(table.a, table.b) * n + np.maximum(table.a, table.b))
        conf = np.concatenate([table.confidence, table.confidence])
        scores = np.concatenate([table.scores_a, table.scores_b])
        c = len(table.criteria)
        mean, std = np.full((n, c), np.nan), np.full((n, c), np.nan)
        count = np.zeros((n, c), dtype=np.int64)
        for col in range(c):
            mask = ~np.isnan(scores[:, col])
            who, values = players[mask], scores[mask, col]
            count[:, col] = np.bincount(who, minlength=n)
            total = np.bincount(who, weights=values, minlength=n)
            np.divide(total, count[:, col], out=mean[:, col], where=count[:, col] > 0)
            squares = np.bincount(who, weights=(values - mean[who, col]) ** 2, minlength=n)
            np.sqrt(squares / np.maximum(count[:, col] - 1, 1), out=std[:, col])
            std[count[:, col] < 2, col] = np.nan
        return cls(
            matches=np.bincount(players, minlength=n),
            wins=np.bincount(table.a[a_won], minlength=n)
            + np.bincount(table.b[b_won], minlength=n),
            losses=np.bincount(table.a[b_won], minlength=n)
            + np.bincount(table.b[a_won], minlength=n),
            ties=np.bincount(table.a[tied], minlength=n) + np.bincount(table.b[tied], minlength=n),
            opponents=np.bincount(pair_keys // n, minlength=n)
            + np.bincount(pair_keys % n, minlength=n),
            confidence_mean=_group_nanmean(players, conf[:, None], n)[:, 0],
            likert_mean=mean,
            likert_std=std,
            likert_count=count,
        )

    # Cached: callers index them per player, and recomputing the whole array per lookup
    # made a 10,000-thread leaderboard quadratic (issue 27).
    @cached_property
    def win_rate(self) -> np.ndarray:
        """(wins + ties/2) / matches: a tie is half a win, as in the ratings."""
        return (self.wins + 0.5 * self.ties) / np.maximum(self.matches, 1)

    @cached_property
    def raw_win_rate(self) -> np.ndarray:
        return self.wins / np.maximum(self.matches, 1)


def opt_float(value: float) -> float | None:
    """A plain float for JSON, None for NaN/inf."""
    value = float(value)
    return value if math.isfinite(value) else None
