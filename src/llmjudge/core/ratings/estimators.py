"""Bradley-Terry ratings of threads or pillars, on the Elo scale, ranked by their intervals.

The short form of :func:`~llmjudge.core.ratings.report.rating_report` (ties as half wins,
the mean at 1500): scores, intervals and ranks only. The solver is :mod:`.bradley_terry`,
the intervals :mod:`.intervals`, Elo itself :mod:`.elo`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable, as_table, map_ids
from llmjudge.core.fields import build_from
from llmjudge.core.ratings.bradley_terry import DEFAULT_BOOTSTRAP_ROUNDS, DEFAULT_PRIOR
from llmjudge.core.ratings.intervals import ClusterBy, comparison_clusters
from llmjudge.core.ratings.report import rating_report


@dataclass(frozen=True)
class Rating:
    player_id: int  # thread id, or pillar id for pillar ratings
    score: float  # Elo scale, mean 1500
    ci_low: float | None  # None without bootstrap
    ci_high: float | None
    rank: int


@dataclass(frozen=True)
class BTRatings:
    """Bradley-Terry ratings, best first."""

    ratings: list[Rating]
    bootstrap_rounds: int
    confidence: float
    prior: float

    def by_player(self) -> dict[int, Rating]:
        return {r.player_id: r for r in self.ratings}


def bradley_terry(
    outcomes: OutcomeTable | Iterable[Outcome],
    *,
    bootstrap_rounds: int = DEFAULT_BOOTSTRAP_ROUNDS,
    seed: int = 0,
    confidence: float = 0.95,
    prior: float = DEFAULT_PRIOR,
    weights: np.ndarray | None = None,
    clusters: ClusterBy | np.ndarray | None = None,
) -> BTRatings:
    """Bradley-Terry scores on the Elo scale with percentile bootstrap intervals: the
    :func:`~llmjudge.core.ratings.report.rating_report` of the outcomes, ties as half wins,
    the mean at 1500, in its order (by rank, then score, then id).

    With bootstrap_rounds=0 there are no intervals and rank = 1 + number of players
    with a strictly higher score. `weights` (m,), aligned with `as_table(outcomes)` rows,
    weights each verdict (see verdict_weights). `clusters` ("pair", "swap" or an (m,)
    array of ids aligned with the table rows) makes the bootstrap resample clusters
    (cluster_bootstrap_bradley_terry); None resamples single comparisons i.i.d. Fewer than
    two clusters give no intervals (fail closed, as the report does).
    """
    table = as_table(outcomes)
    ids = None if clusters is None or isinstance(clusters, str) else np.asarray(clusters)
    report = rating_report(
        table,
        level=confidence,
        clusters=clusters if isinstance(clusters, str) else None,
        cluster_ids=ids,
        bootstrap_rounds=bootstrap_rounds,
        seed=seed,
        prior=prior,
        weights=weights,
    )
    return BTRatings(
        ratings=[build_from(Rating, p) for p in report.players],
        bootstrap_rounds=bootstrap_rounds if table.n_players else 0,
        confidence=confidence,
        prior=prior,
    )


def pillar_bradley_terry(
    outcomes: OutcomeTable | Iterable[Outcome],
    thread_pillar: Mapping[int, int],
    *,
    bootstrap_rounds: int = DEFAULT_BOOTSTRAP_ROUNDS,
    seed: int = 0,
    confidence: float = 0.95,
    prior: float = DEFAULT_PRIOR,
    clusters: ClusterBy | None = None,
) -> BTRatings:
    """Bradley-Terry with pillars as players: every cross-pillar outcome is a game
    between the two pillars; outcomes within one pillar carry no information and are dropped.

    `clusters` is computed on the THREAD table before mapping (a cluster of pillars would
    leave a handful of clusters), so "pair" keeps each pair of threads together.
    """
    table = as_table(outcomes)
    ids: np.ndarray | None = None
    if clusters is not None:
        thread_ids = comparison_clusters(table, clusters)
        new_ids = map_ids(table.players, thread_pillar)
        # map_players keeps the surviving rows in order
        ids = thread_ids[new_ids[table.a] != new_ids[table.b]]
    return bradley_terry(
        table.map_players(thread_pillar),
        bootstrap_rounds=bootstrap_rounds,
        seed=seed,
        confidence=confidence,
        prior=prior,
        clusters=ids,
    )
