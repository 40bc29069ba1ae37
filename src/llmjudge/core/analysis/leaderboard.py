"""Leaderboard, pillar matrix and per-pillar score distributions.

The leaderboard's scores are Bradley-Terry on the Elo scale (rating_report: intervals at a
stated level, cluster bootstrap by default, ties half or Davidson, strong verdicts
weighted if asked), sorted by score within a rank; the sequential Elo stays beside them as
an order-dependent column. The report says how it was made (RatingMethod) and whether the
tournament resolves its ranking (TournamentQuality).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmjudge.core.analysis.outcomes import (
    Aggregation,
    Outcome,
    OutcomeTable,
    PlayerStats,
    aggregate,
    as_table,
    map_ids,
    opt_float,
)
from llmjudge.core.analysis.quality import reference_agreement
from llmjudge.core.charts.scales import nice_bin_edges
from llmjudge.core.fields import build_from
from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR
from llmjudge.core.ratings.elo import elo_array
from llmjudge.core.ratings.intervals import comparison_clusters
from llmjudge.core.ratings.report import RatingOptions, RatingReport, quality_advice, rate


@dataclass(frozen=True)
class LeaderboardEntry:
    rank: int  # from the Bradley-Terry intervals: 1 + threads surely better
    thread_id: int
    pillar_id: int
    elo_score: float  # sequential Elo: depends on the order of the verdicts
    bt_score: float  # Bradley-Terry on the Elo scale (RatingMethod.base at the anchor)
    bt_ci_low: float | None
    bt_ci_high: float | None
    rank_low: float | None  # bootstrap band of its rank at the level; None otherwise
    rank_high: float | None
    rank_held: float | None  # share of bootstrap rounds with exactly its point rank
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
    # pillars as players (thread pairs still the clusters); None when it has no
    # cross-pillar outcome
    bt_score: float | None
    bt_ci_low: float | None
    bt_ci_high: float | None
    bt_rank: int | None


@dataclass(frozen=True)
class RatingMethod:
    """How the scores were made, said beside them."""

    level: float
    interval: str  # "bootstrap" (percentile) or "sandwich" (cluster-robust Wald)
    clusters: str  # "pair", "swap" or "none"
    cluster_count: int
    bootstrap_rounds: int
    tie_model: str  # "half" or "davidson"
    nu: float | None  # Davidson's tie parameter with its interval; None for "half"
    nu_low: float | None
    nu_high: float | None
    strong_weight: float  # 1 = strong verdicts count as one win (off)
    strong_verdicts: int  # verdicts marked strong in the data
    base: float
    baseline_id: int | None  # player at `base`; None = the mean is
    comparisons: int


@dataclass(frozen=True)
class RankAgreement:
    source: str  # what the reference is (a metadata key, "reference_ranking")
    n: int
    spearman: float | None
    spearman_p: float | None
    kendall: float | None
    kendall_p: float | None


@dataclass(frozen=True)
class TournamentQuality:
    """Is the ranking resolved and stable? One line says what to do about it."""

    separable_share: float | None  # pairs whose intervals do not overlap; None without
    separated_pairs: int
    pairs: int
    top_separable_share: float | None  # among the 10 best by score; None for <= 10 players
    mean_rank_shift: float | None  # mean |bootstrap rank - rank|; None without bootstrap
    reference: RankAgreement | None
    advice: str


@dataclass(frozen=True)
class Leaderboard:
    aggregation: Aggregation
    outcome_count: int  # after aggregation
    bootstrap_rounds: int
    entries: list[LeaderboardEntry]  # by rank, then score (best first)
    pillar_aggregates: list[PillarAggregate]  # by pillar rank, then score
    method: RatingMethod
    pillar_method: RatingMethod
    quality: TournamentQuality
    pillar_quality: TournamentQuality


def rating_method(report: RatingReport, table: OutcomeTable) -> RatingMethod:
    return build_from(
        RatingMethod,
        report,
        nu=_finite(report.nu),
        nu_low=_finite(report.nu_low),
        nu_high=_finite(report.nu_high),
        strong_verdicts=int(np.count_nonzero(table.strength == 2)),
    )


def tournament_quality(
    report: RatingReport,
    what: str,
    reference: Mapping[int, float] | None = None,
    reference_source: str = "",
) -> TournamentQuality:
    """Separability, rank stability and (with `reference`: player id -> reference score,
    higher = better) Spearman / Kendall agreement of the scores with it."""
    agreement = None
    if reference:
        scores = np.array([p.score for p in report.players])
        ref = np.array([reference.get(p.player_id, np.nan) for p in report.players], float)
        found = reference_agreement(scores, ref)
        agreement = build_from(RankAgreement, found, source=reference_source)
    sep, top = report.separability, report.top_separability
    return build_from(
        TournamentQuality,
        report,  # mean_rank_shift
        separable_share=None if sep is None else sep.share,
        separated_pairs=0 if sep is None else sep.separated_pairs,
        pairs=0 if sep is None else sep.pairs,
        top_separable_share=None if top is None else top.share,
        reference=agreement,
        advice=quality_advice(report, what),
    )


def _finite(value: float | None) -> float | None:
    return None if value is None else opt_float(value)


def leaderboard(
    outcomes: OutcomeTable | Iterable[Outcome],
    thread_pillar: Mapping[int, int],
    pillar_names: Mapping[int, str],
    *,
    aggregation: Aggregation = "all",
    options: RatingOptions | None = None,
    bootstrap_rounds: int | None = None,
    seed: int | None = None,
    confidence: float | None = None,
    prior: float = DEFAULT_PRIOR,
    thread_reference: Mapping[int, float] | None = None,
    pillar_reference: Mapping[int, float] | None = None,
    reference_source: str = "",
    threads: bool = True,
) -> Leaderboard:
    """Ratings, records and averages per thread and pillar, after `aggregation`.

    `options` (rating_report.RatingOptions) holds every rating choice; bootstrap_rounds,
    seed and confidence, when given, override its fields. Thread scores anchor on
    options.baseline_thread, pillar scores on options.baseline_pillar (or the mean).
    Pillar ratings resample the thread pairs (the same clusters as the threads).

    `threads=False`: the pillar figures only, the same as in the full leaderboard (no
    entries; the threads' scores, which the pillar averages need, fitted without their
    intervals, so the thread-level method and quality say none). The pillar ranking of a
    10,000-thread session then skips 200 fits of 10,000 threads (issue 27).
    """
    opts = options or RatingOptions()
    opts = dataclasses.replace(
        opts,
        bootstrap_rounds=opts.bootstrap_rounds if bootstrap_rounds is None else bootstrap_rounds,
        seed=opts.seed if seed is None else seed,
        level=opts.level if confidence is None else confidence,
    )
    table = aggregate(outcomes, aggregation)
    pillars = map_ids(table.players, thread_pillar)
    elo = elo_array(table)
    # a thread's score is the point estimate whatever the interval: none is needed here
    thread_opts = (
        opts if threads else dataclasses.replace(opts, interval="bootstrap", bootstrap_rounds=0)
    )
    report = rate(table, thread_opts, baseline_id=opts.baseline_thread, prior=prior)
    stats = PlayerStats.of(table)
    index = {pid: i for i, pid in enumerate(table.players.tolist())}
    entries = []
    for rating in report.players if threads else ():
        i = index[rating.player_id]
        entries.append(
            build_from(
                LeaderboardEntry,
                rating,  # rank, rank_low, rank_high
                thread_id=rating.player_id,
                pillar_id=int(pillars[i]),
                elo_score=float(elo[i]),
                bt_score=rating.score,
                bt_ci_low=rating.ci_low,
                bt_ci_high=rating.ci_high,
                rank_held=rating.held_share,
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
    pillar_report, pillar_table = pillar_ratings(table, thread_pillar, opts, prior=prior)
    return build_from(
        Leaderboard,
        report,  # bootstrap_rounds
        aggregation=aggregation,
        outcome_count=len(table),
        entries=entries,
        pillar_aggregates=_pillar_aggregates(
            table,
            thread_pillar,
            pillar_names,
            elo=elo,
            thread_bt={p.player_id: p.score for p in report.players},
            pillar_report=pillar_report,
        ),
        method=rating_method(report, table),
        pillar_method=rating_method(pillar_report, pillar_table),
        quality=tournament_quality(report, "threads", thread_reference, reference_source),
        pillar_quality=tournament_quality(
            pillar_report, "pillars", pillar_reference, "reference_ranking"
        ),
    )


def pillar_ratings(
    table: OutcomeTable,
    thread_pillar: Mapping[int, int],
    options: RatingOptions,
    *,
    prior: float = DEFAULT_PRIOR,
) -> tuple[RatingReport, OutcomeTable]:
    """Pillars as players: (their report, the pillar table it rated). Outcomes within one
    pillar drop out; the clusters stay thread pairs, computed before the relabelling."""
    keep = map_ids(table.players, thread_pillar)
    cross = keep[table.a] != keep[table.b]
    clusters = (
        comparison_clusters(table, options.clusters)[cross]
        if options.clusters is not None
        else None
    )
    pillar_table = table.map_players(thread_pillar)
    baseline = options.baseline_pillar
    if baseline is not None and baseline not in set(pillar_table.players.tolist()):
        raise ValueError(f"baseline pillar {baseline} has no comparison with another pillar")
    report = rate(pillar_table, options, baseline_id=baseline, cluster_ids=clusters, prior=prior)
    return report, pillar_table


def _pillar_aggregates(
    table: OutcomeTable,
    thread_pillar: Mapping[int, int],
    pillar_names: Mapping[int, str],
    *,
    elo: np.ndarray,
    thread_bt: Mapping[int, float],
    pillar_report: RatingReport,
) -> list[PillarAggregate]:
    pillars = map_ids(table.players, thread_pillar)
    bt_scores = np.array([thread_bt[p] for p in table.players.tolist()])
    pillar_bt = {p.player_id: p for p in pillar_report.players}
    position = {p.player_id: i for i, p in enumerate(pillar_report.players)}
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
    # rated pillars in the report's order (rank, then score), the others by average
    return sorted(
        rows,
        key=lambda r: (position.get(r.pillar_id, len(position)), -r.avg_bt, r.pillar_id),
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
    edges = nice_bin_edges(values, bins)  # round edges: 1400, 1425, ... not 1403.7
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
