"""One call for a leaderboard's ratings with every rigor option the user can pick.

rating_report(table, ...) fits Bradley-Terry (ties as half wins, or Davidson's tie
model), optionally weights strong verdicts, puts scores on the Elo scale anchored on the
mean or a baseline player, gives intervals at a stated level (cluster bootstrap or
sandwich), ranks by non-overlapping intervals, sorts by score within a rank, and reports
the tournament's quality (separability, rank stability). The service layer maps
`RatingReport` to its schemas; nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from llmjudge.core.analysis.outcomes import OutcomeTable
from llmjudge.core.analysis.quality import Separability, rank_stability, separability
from llmjudge.core.ratings.bradley_terry import (
    DEFAULT_BOOTSTRAP_ROUNDS,
    DEFAULT_PRIOR,
    PairIndex,
    cluster_bootstrap_bradley_terry,
    cluster_resamples,
    fit_bradley_terry,
)
from llmjudge.core.ratings.elo import ELO_BASE, ELO_SCALE, elo_scale
from llmjudge.core.ratings.intervals import (
    DEFAULT_LEVEL,
    ClusterBy,
    comparison_clusters,
    leaderboard_order,
    normal_interval,
    percentile_interval,
    ranks_from_intervals,
    sandwich_bradley_terry,
    verdict_weights,
)
from llmjudge.core.ratings.ties import fit_davidson

TieModel = Literal["half", "davidson"]
IntervalMethod = Literal["bootstrap", "sandwich"]
TIE_MODELS: tuple[TieModel, ...] = ("half", "davidson")
MIN_CLUSTERS = 2  # below it, no interval (and no claim that two players differ)
INTERVAL_METHODS: tuple[IntervalMethod, ...] = ("bootstrap", "sandwich")


@dataclass(frozen=True)
class RatedPlayer:
    player_id: int
    score: float  # Elo scale
    ci_low: float | None  # None without intervals (bootstrap_rounds=0)
    ci_high: float | None
    rank: int  # 1 + players whose interval lies wholly above this one's
    rank_low: float | None  # bootstrap percentile band of its rank; None otherwise
    rank_high: float | None
    held_share: float | None  # share of bootstrap rounds with exactly its point rank
    comparisons: float  # weighted verdicts it took part in


@dataclass(frozen=True)
class RatingReport:
    players: list[RatedPlayer]  # by rank, then score (best first), then id
    level: float
    interval: IntervalMethod
    clusters: str  # "pair", "swap" or "none" (i.i.d.)
    cluster_count: int
    bootstrap_rounds: int
    tie_model: TieModel
    nu: float | None  # Davidson's tie parameter, with its interval at `level`
    nu_low: float | None
    nu_high: float | None
    strong_weight: float  # weight of a strong verdict (1 = off)
    base: float
    baseline_id: int | None  # player anchored at `base`; None = the mean is
    separability: Separability | None  # None without intervals
    top_separability: Separability | None  # among the top_k by score; None if n <= top_k
    mean_rank_shift: float | None  # mean |bootstrap rank - rank|; None without bootstrap
    comparisons: int


def rating_report(
    table: OutcomeTable,
    *,
    level: float = DEFAULT_LEVEL,
    interval: IntervalMethod = "bootstrap",
    clusters: ClusterBy | None = "pair",
    bootstrap_rounds: int = DEFAULT_BOOTSTRAP_ROUNDS,
    seed: int = 0,
    prior: float = DEFAULT_PRIOR,
    weights: np.ndarray | None = None,
    strong_weight: float = 1.0,
    tie_model: TieModel = "half",
    base: float = ELO_BASE,
    baseline_id: int | None = None,
    top_k: int = 10,
    cluster_ids: np.ndarray | None = None,
) -> RatingReport:
    """Ratings of `table`'s players; `weights` (m,) aligned with the table's rows (see
    ratings.verdict_weights, and pass the `strong_weight` used so the report says so).

    interval="sandwich" needs tie_model="half" and gives Wald intervals from the
    cluster-robust standard error; rank stability then is not available.
    `cluster_ids` (m,) overrides `clusters` with ids computed elsewhere: pillars as players
    still resample thread pairs (comparison_clusters of the thread table, before
    map_players), not pillar pairs.
    """
    if tie_model not in TIE_MODELS:
        raise ValueError(f"unknown tie model {tie_model!r}; choose one of {TIE_MODELS}")
    if interval not in INTERVAL_METHODS:
        raise ValueError(f"unknown interval {interval!r}; choose one of {INTERVAL_METHODS}")
    if interval == "sandwich" and tie_model == "davidson":
        raise ValueError("sandwich intervals are available for ties as half wins only")
    if interval == "sandwich" and baseline_id is not None:
        # the sandwich gives errors of mean-centred strengths, not of theta_i - theta_base
        raise ValueError("sandwich intervals are anchored on the mean; use the bootstrap")
    n, m = table.n_players, len(table)
    w = np.ones(m) if weights is None else np.asarray(weights, np.float64)
    baseline = None
    if baseline_id is not None:
        baseline = int(np.searchsorted(table.players, baseline_id))
        if baseline >= n or table.players[baseline] != baseline_id:
            raise ValueError(f"baseline {baseline_id} is not among the rated players")
    if cluster_ids is not None:
        ids = np.unique(np.asarray(cluster_ids), return_inverse=True)[1].ravel()
    else:
        ids = np.arange(m) if clusters is None else comparison_clusters(table, clusters)
    cluster_count = int(ids.max()) + 1 if m else 0
    # Ties as half wins: a verdict with the judge's probability p counts p wins for A and
    # 1 - p for B (fractional outcomes). Davidson models ties as their own outcome, so it
    # reads the hard verdicts.
    score = table.score_a if tie_model == "davidson" else table.rating_score
    pairs = PairIndex.build(table.a, table.b, score, n)
    nu = nu_low = nu_high = None

    if tie_model == "davidson":
        dav = fit_davidson(
            table.a, table.b, table.score_a, n, weights=w, prior=prior, level=level, pairs=pairs
        )
        theta, nu, nu_low, nu_high = dav.theta, dav.nu, dav.nu_low, dav.nu_high
    else:
        wins, games = pairs.totals(w)
        theta = fit_bradley_terry(pairs, wins, games, prior=prior)
    scores = elo_scale(theta, base=base, baseline=baseline)
    samples: np.ndarray | None = None
    low = high = None
    rounds = 0
    if n and interval == "bootstrap" and bootstrap_rounds > 0:
        rounds = bootstrap_rounds
        if tie_model == "half":
            raw = cluster_bootstrap_bradley_terry(
                pairs, theta, ids, rounds=rounds, seed=seed, prior=prior, weights=w
            )
        else:
            raw = np.empty((rounds, n))
            for i, row_weights in enumerate(cluster_resamples(ids, rounds, seed, w)):
                raw[i] = fit_davidson(
                    table.a,
                    table.b,
                    table.score_a,
                    n,
                    weights=row_weights,
                    prior=prior,
                    pairs=pairs,
                ).theta
        samples = elo_scale(raw, base=base, baseline=baseline)
        low, high = percentile_interval(samples, level)
    elif n and interval == "sandwich":
        se = sandwich_bradley_terry(
            table.a, table.b, score, n, theta, ids, weights=w, prior=prior, seed=seed
        )
        low, high = normal_interval(scores, ELO_SCALE * se, level)
    # one cluster resamples to itself: a zero-width interval would claim certainty
    has_intervals = (
        low is not None and bool(np.all(np.isfinite(low))) and cluster_count >= MIN_CLUSTERS
    )
    if not has_intervals:
        low = high = None  # fail closed: no interval, no claim of separation
    ranks = (
        ranks_from_intervals(low, high) if has_intervals else ranks_from_intervals(scores, scores)
    )
    stability = rank_stability(scores, samples, level=level) if samples is not None else None
    order = leaderboard_order(ranks, scores, table.players)
    played = np.bincount(table.a, w, n) + np.bincount(table.b, w, n)
    players = [
        RatedPlayer(
            player_id=int(table.players[i]),
            score=float(scores[i]),
            ci_low=None if low is None or not np.isfinite(low[i]) else float(low[i]),
            ci_high=None if high is None or not np.isfinite(high[i]) else float(high[i]),
            rank=int(ranks[i]),
            rank_low=None if stability is None else float(stability.rank_low[i]),
            rank_high=None if stability is None else float(stability.rank_high[i]),
            held_share=None if stability is None else float(stability.held_share[i]),
            comparisons=float(played[i]),
        )
        for i in order.tolist()
    ]
    return RatingReport(
        players=players,
        level=level,
        interval=interval,
        clusters="none" if clusters is None else str(clusters),
        cluster_count=cluster_count,
        bootstrap_rounds=rounds,
        tie_model=tie_model,
        nu=nu,
        nu_low=nu_low,
        nu_high=nu_high,
        strong_weight=strong_weight,
        base=base,
        baseline_id=baseline_id,
        separability=None if low is None else separability(low, high),
        top_separability=None
        if low is None or high is None or n <= top_k
        else separability(low, high, scores=scores, top_k=top_k),
        mean_rank_shift=None if stability is None else stability.overall_mean_abs_shift,
        comparisons=m,
    )


# --- what the user picks, and what the ratings mean ------------------------------------

LEVELS: tuple[float, ...] = (0.8, 0.9, 0.95, 0.99)
ELO_BASES: tuple[float, ...] = (1000.0, 1500.0)
MAX_STRONG_WEIGHT = 10.0


@dataclass(frozen=True)
class RatingOptions:
    """Every choice behind a leaderboard's ratings; hashable, so it keys the figure cache
    (the page and the API build it from the same defaults and share one computation)."""

    level: float = DEFAULT_LEVEL
    interval: IntervalMethod = "bootstrap"
    clusters: ClusterBy | None = "pair"  # None: comparisons resampled as independent
    bootstrap_rounds: int = DEFAULT_BOOTSTRAP_ROUNDS
    tie_model: TieModel = "half"
    strong_weight: float = 1.0  # 1: a strong verdict counts as one win (off)
    base: float = ELO_BASE
    baseline_thread: int | None = None  # None: the mean thread scores `base`
    baseline_pillar: int | None = None  # None: the mean pillar scores `base`
    seed: int = 0

    def validate(self) -> None:
        """ValueError for a combination rating_report refuses, before any work."""
        if not 0.5 <= self.level < 1.0:
            raise ValueError("the interval level must lie in [0.5, 1)")
        if self.tie_model not in TIE_MODELS:
            raise ValueError(f"unknown tie model {self.tie_model!r}; choose one of {TIE_MODELS}")
        if self.interval not in INTERVAL_METHODS:
            raise ValueError(
                f"unknown interval {self.interval!r}; choose one of {INTERVAL_METHODS}"
            )
        if self.interval == "sandwich" and self.tie_model == "davidson":
            raise ValueError("sandwich intervals are available for ties as half wins only")
        if self.interval == "sandwich" and (
            self.baseline_thread is not None or self.baseline_pillar is not None
        ):
            raise ValueError("sandwich intervals are anchored on the mean; use the bootstrap")
        if not 1.0 <= self.strong_weight <= MAX_STRONG_WEIGHT:
            raise ValueError(f"strong_weight must lie in [1, {MAX_STRONG_WEIGHT:g}]")


def rate(
    table: OutcomeTable,
    options: RatingOptions,
    *,
    baseline_id: int | None = None,
    cluster_ids: np.ndarray | None = None,
    prior: float = DEFAULT_PRIOR,
) -> RatingReport:
    """rating_report of `table` with `options`; strong verdicts weighted from
    `table.strength`."""
    options.validate()
    # the options are rating_report's arguments, but for the baselines (the caller picks
    # the thread's or the pillar's as baseline_id)
    chosen = dataclasses.asdict(options)
    del chosen["baseline_thread"], chosen["baseline_pillar"]
    return rating_report(
        table,
        **chosen,
        prior=prior,
        weights=verdict_weights(table.strength, options.strong_weight),
        baseline_id=baseline_id,
        cluster_ids=cluster_ids,
    )


def quality_advice(report: RatingReport, what: str = "threads") -> str:
    """One line on whether the tournament resolves its ranking, and what to do if not."""
    sep = report.separability
    if sep is None or sep.share is None:
        return (
            f"No intervals, so no claim that any two {what} differ: turn on the bootstrap "
            "or the sandwich interval."
        )
    shift = report.mean_rank_shift
    moved = "" if shift is None else f"; ranks move {shift:.1f} places on average across resamples"
    line = (
        f"{sep.share:.0%} of the {sep.pairs:,} pairs of {what} are separated at "
        f"{report.level:.0%}{moved}. "
    )
    if sep.share >= 0.8:
        return line + "The ranking is well resolved."
    return line + (
        f"Buy more comparisons if you need to tell close {what} apart: intervals shrink "
        "roughly with the square root of the comparisons per pair."
    )
