"""Bradley-Terry ratings of threads or pillars, on the Elo scale, ranked by their intervals.

The primary ranking. The solver is :mod:`.bradley_terry`, the intervals
:mod:`.intervals`, Elo itself :mod:`.elo`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable, as_table, map_ids
from llmjudge.core.ratings.bradley_terry import (
    DEFAULT_PRIOR,
    PairIndex,
    bootstrap_bradley_terry,
    cluster_bootstrap_bradley_terry,
    fit_bradley_terry,
)
from llmjudge.core.ratings.elo import elo_scale
from llmjudge.core.ratings.intervals import (
    ClusterBy,
    comparison_clusters,
    percentile_interval,
    ranks_from_intervals,
)

DEFAULT_BOOTSTRAP_ROUNDS = 200


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
    """Bradley-Terry scores on the Elo scale with percentile bootstrap intervals.

    With bootstrap_rounds=0 there are no intervals and rank = 1 + number of players
    with a strictly higher score. `weights` (m,), aligned with `as_table(outcomes)` rows,
    weights each verdict (see verdict_weights). `clusters` ("pair", "swap" or an (m,)
    array of ids aligned with the table rows) makes the bootstrap resample clusters
    (cluster_bootstrap_bradley_terry); None resamples single comparisons i.i.d.
    """
    table = as_table(outcomes)
    if table.n_players == 0:
        return BTRatings(ratings=[], bootstrap_rounds=0, confidence=confidence, prior=prior)
    pairs = PairIndex.build(table.a, table.b, table.score_a, table.n_players)
    row_weights = None if weights is None else np.asarray(weights, dtype=np.float64)
    wins, games = pairs.totals(row_weights)
    theta = fit_bradley_terry(pairs, wins, games, prior=prior)
    scores = elo_scale(theta)
    if bootstrap_rounds > 0:
        if clusters is None and row_weights is None:
            raw = bootstrap_bradley_terry(
                pairs, theta, rounds=bootstrap_rounds, seed=seed, prior=prior
            )
        else:
            ids = (
                np.arange(len(table))
                if clusters is None
                else comparison_clusters(table, clusters)
                if isinstance(clusters, str)
                else np.unique(np.asarray(clusters), return_inverse=True)[1].ravel()
            )
            raw = cluster_bootstrap_bradley_terry(
                pairs,
                theta,
                ids,
                rounds=bootstrap_rounds,
                seed=seed,
                prior=prior,
                weights=row_weights,
            )
        low, high = percentile_interval(elo_scale(raw), confidence)
        ranks = ranks_from_intervals(low, high)
        ci_low: list[float | None] = low.tolist()
        ci_high: list[float | None] = high.tolist()
    else:
        ranks = ranks_from_intervals(scores, scores)
        ci_low = ci_high = [None] * table.n_players
    order = np.lexsort((table.players, -scores))
    ratings = [
        Rating(
            player_id=int(table.players[i]),
            score=float(scores[i]),
            ci_low=ci_low[i],
            ci_high=ci_high[i],
            rank=int(ranks[i]),
        )
        for i in order.tolist()
    ]
    return BTRatings(
        ratings=ratings,
        bootstrap_rounds=bootstrap_rounds,
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
