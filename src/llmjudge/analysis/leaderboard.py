"""Leaderboard, pillar matrix and per-pillar score distributions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmjudge.analysis.outcomes import (
    Aggregation,
    Outcome,
    OutcomeTable,
    PlayerStats,
    aggregate,
    as_table,
    map_ids,
    opt_float,
)
from llmjudge.analysis.ratings import (
    DEFAULT_BOOTSTRAP_ROUNDS,
    DEFAULT_PRIOR,
    Rating,
    bradley_terry,
    elo_array,
    pillar_bradley_terry,
)


@dataclass(frozen=True)
class LeaderboardEntry:
    rank: int  # from the Bradley-Terry intervals: 1 + threads surely better
    thread_id: int
    pillar_id: int
    elo_score: float
    bt_score: float
    bt_ci_low: float | None
    bt_ci_high: float | None
    matches_played: int
    wins: int
    losses: int
    ties: int
    win_rate: float  # (wins + ties/2) / matches
    raw_win_rate: float  # wins / matches
    avg_confidence: float | None
    avg_likert_scores: dict[str, float | None]


@dataclass(frozen=True)
class PillarAggregate:
    pillar_id: int
    name: str
    thread_count: int  # threads of the pillar on the leaderboard
    avg_elo: float
    avg_bt: float
    # pillars as players (pillar_bradley_terry); None when it has no cross-pillar outcome
    bt_score: float | None
    bt_ci_low: float | None
    bt_ci_high: float | None
    bt_rank: int | None


@dataclass(frozen=True)
class Leaderboard:
    aggregation: Aggregation
    outcome_count: int  # after aggregation
    bootstrap_rounds: int
    entries: list[LeaderboardEntry]  # best first
    pillar_aggregates: list[PillarAggregate]  # best pillar BT first


def leaderboard(
    outcomes: OutcomeTable | Iterable[Outcome],
    thread_pillar: Mapping[int, int],
    pillar_names: Mapping[int, str],
    *,
    aggregation: Aggregation = "all",
    bootstrap_rounds: int = DEFAULT_BOOTSTRAP_ROUNDS,
    seed: int = 0,
    confidence: float = 0.95,
    prior: float = DEFAULT_PRIOR,
) -> Leaderboard:
    """Ratings, records and averages per thread and pillar, after `aggregation`."""
    table = aggregate(outcomes, aggregation)
    pillars = map_ids(table.players, thread_pillar)
    elo = elo_array(table)
    bt = bradley_terry(
        table, bootstrap_rounds=bootstrap_rounds, seed=seed, confidence=confidence, prior=prior
    )
    stats = PlayerStats.of(table)
    index = {pid: i for i, pid in enumerate(table.players.tolist())}
    entries = []
    for rating in sorted(bt.ratings, key=lambda r: (r.rank, -r.score, r.player_id)):
        i = index[rating.player_id]
        entries.append(
            LeaderboardEntry(
                rank=rating.rank,
                thread_id=rating.player_id,
                pillar_id=int(pillars[i]),
                elo_score=float(elo[i]),
                bt_score=rating.score,
                bt_ci_low=rating.ci_low,
                bt_ci_high=rating.ci_high,
                matches_played=int(stats.matches[i]),
                wins=int(stats.wins[i]),
                losses=int(stats.losses[i]),
                ties=int(stats.ties[i]),
                win_rate=float(stats.win_rate[i]),
                raw_win_rate=float(stats.raw_win_rate[i]),
                avg_confidence=opt_float(stats.confidence_mean[i]),
                avg_likert_scores={
                    c: opt_float(stats.likert_mean[i, k]) for k, c in enumerate(table.criteria)
                },
            )
        )
    return Leaderboard(
        aggregation=aggregation,
        outcome_count=len(table),
        bootstrap_rounds=bt.bootstrap_rounds,
        entries=entries,
        pillar_aggregates=_pillar_aggregates(
            table,
            thread_pillar,
            pillar_names,
            elo=elo,
            thread_bt=bt.by_player(),
            bootstrap_rounds=bootstrap_rounds,
            seed=seed,
            prior=prior,
        ),
    )


def _pillar_aggregates(
    table: OutcomeTable,
    thread_pillar: Mapping[int, int],
    pillar_names: Mapping[int, str],
    *,
    elo: np.ndarray,
    thread_bt: Mapping[int, Rating],
    bootstrap_rounds: int,
    seed: int,
    prior: float,
) -> list[PillarAggregate]:
    pillars = map_ids(table.players, thread_pillar)
    bt_scores = np.array([thread_bt[p].score for p in table.players.tolist()])
    pillar_bt = pillar_bradley_terry(
        table, thread_pillar, bootstrap_rounds=bootstrap_rounds, seed=seed, prior=prior
    ).by_player()
    rows = []
    for pillar in np.unique(pillars).tolist():
        members = pillars == pillar
        rating = pillar_bt.get(pillar)
        rows.append(
            PillarAggregate(
                pillar_id=pillar,
                name=pillar_names.get(pillar, f"pillar {pillar}"),
                thread_count=int(members.sum()),
                avg_elo=float(elo[members].mean()),
                avg_bt=float(bt_scores[members].mean()),
                bt_score=None if rating is None else rating.score,
                bt_ci_low=None if rating is None else rating.ci_low,
                bt_ci_high=None if rating is None else rating.ci_high,
                bt_rank=None if rating is None else rating.rank,
            )
        )
    return sorted(
        rows,
        key=lambda r: (r.bt_score is None, -(r.bt_score or 0.0), -r.avg_bt, r.pillar_id),
    )


# --- pillar matrix ---------------------------------------------------------------------


@dataclass(frozen=True)
class MatrixCell:
    """Record of the row pillar's threads against the column pillar's threads."""

    row_pillar: int
    col_pillar: int
    wins: int
    losses: int
    ties: int
    n: int
    win_rate: float | None  # (wins + ties/2) / n; None when n == 0


@dataclass(frozen=True)
class PillarRef:
    pillar_id: int
    name: str
    intra_pillar_matches: int  # outcomes between two threads of this pillar


@dataclass(frozen=True)
class PillarMatrix:
    pillars: list[PillarRef]  # row and column order
    cells: list[list[MatrixCell | None]]  # [row][col]; None on the diagonal


def pillar_matrix(
    outcomes: OutcomeTable | Iterable[Outcome],
    thread_pillar: Mapping[int, int],
    pillar_names: Mapping[int, str],
    *,
    order: Sequence[int] | None = None,
) -> PillarMatrix:
    """Head-to-head records for every ordered pair of pillars.

    Pillars: `order` if given (e.g. best first), else every pillar named in
    `pillar_names` or seen in the outcomes, by id.
    """
    table = as_table(outcomes)
    thread_pillars = map_ids(table.players, thread_pillar)
    ids = (
        list(order)
        if order is not None
        else sorted(set(pillar_names) | set(thread_pillars.tolist()))
    )
    k = len(ids)
    position = {p: i for i, p in enumerate(ids)}
    pos_of_thread = np.array([position.get(p, -1) for p in thread_pillars.tolist()], dtype=int)
    pa = pos_of_thread[table.a] if len(table) else np.zeros(0, dtype=int)
    pb = pos_of_thread[table.b] if len(table) else np.zeros(0, dtype=int)
    shown = (pa >= 0) & (pb >= 0)
    pa, pb, s = pa[shown], pb[shown], table.score_a[shown]

    def counts(mask: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return np.bincount(rows[mask] * k + cols[mask], minlength=k * k).reshape(k, k)

    # each outcome counts for A's pillar against B's and for B's against A's
    wins = counts(s == 1.0, pa, pb) + counts(s == 0.0, pb, pa)
    losses = counts(s == 0.0, pa, pb) + counts(s == 1.0, pb, pa)
    ties = counts(s == 0.5, pa, pb) + counts(s == 0.5, pb, pa)
    same = pa == pb
    intra = np.bincount(pa[same], minlength=k)
    cells: list[list[MatrixCell | None]] = []
    for i in range(k):
        row: list[MatrixCell | None] = []
        for j in range(k):
            if i == j:
                row.append(None)
                continue
            n = int(wins[i, j] + losses[i, j] + ties[i, j])
            row.append(
                MatrixCell(
                    row_pillar=ids[i],
                    col_pillar=ids[j],
                    wins=int(wins[i, j]),
                    losses=int(losses[i, j]),
                    ties=int(ties[i, j]),
                    n=n,
                    win_rate=float(wins[i, j] + 0.5 * ties[i, j]) / n if n else None,
                )
            )
        cells.append(row)
    return PillarMatrix(
        pillars=[
            PillarRef(
                pillar_id=p,
                name=pillar_names.get(p, f"pillar {p}"),
                intra_pillar_matches=int(intra[i]),
            )
            for i, p in enumerate(ids)
        ],
        cells=cells,
    )


# --- distributions ---------------------------------------------------------------------


@dataclass(frozen=True)
class PillarDistribution:
    pillar_id: int
    name: str
    thread_ids: list[int]  # best first
    scores: list[float]  # aligned with thread_ids
    mean: float
    median: float
    std_dev: float  # population standard deviation (ddof=0) of the pillar's threads
    min: float
    max: float
    histogram: list[int]  # counts per bin of the shared edges


@dataclass(frozen=True)
class ScoreDistribution:
    bin_edges: list[float]  # shared by all pillars, so charts are comparable
    pillars: list[PillarDistribution]  # by pillar id


def score_distribution(
    scores: Mapping[int, float],
    thread_pillar: Mapping[int, int],
    pillar_names: Mapping[int, str],
    *,
    bins: int = 10,
) -> ScoreDistribution:
    """Distribution of thread scores (e.g. Elo) per pillar over common histogram bins."""
    threads = np.array(sorted(scores), dtype=np.int64)
    values = np.array([scores[t] for t in threads.tolist()], dtype=np.float64)
    if values.size == 0:
        return ScoreDistribution(bin_edges=[], pillars=[])
    pillars = map_ids(threads, thread_pillar)
    edges = np.histogram_bin_edges(values, bins=bins)
    out = []
    for pillar in np.unique(pillars).tolist():
        members = pillars == pillar
        v = values[members]
        order = np.lexsort((threads[members], -v))
        out.append(
            PillarDistribution(
                pillar_id=pillar,
                name=pillar_names.get(pillar, f"pillar {pillar}"),
                thread_ids=threads[members][order].tolist(),
                scores=v[order].tolist(),
                mean=float(v.mean()),
                median=float(np.median(v)),
                std_dev=float(v.std()),
                min=float(v.min()),
                max=float(v.max()),
                histogram=np.histogram(v, bins=edges)[0].tolist(),
            )
        )
    return ScoreDistribution(bin_edges=edges.tolist(), pillars=out)
