"""Session figures: leaderboard, score distribution, pillar matrix, thread performance,
position bias and findings, computed by the pure analysis modules from a loaded session
and cached. Reads only.

Figures are cached per (figure, session, completed count, parameters): nothing changes
between two completions, and pages poll while a session runs. CPU work runs in
`asyncio.to_thread`, so the event loop never waits on a bootstrap.

About 720 lines as one piece: every figure is a short cached wrapper over a pure function,
and they share the cache, its keys and the session loading.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.analysis.loading import SessionData, load_session_data
from llmjudge.analysis.schemas import (
    AnalysisSession,
    CategoriesOut,
    ClusterChoice,
    FindingsOut,
    LeaderboardRow,
    PillarAggregateOut,
    PillarLabel,
    PillarMatrixOut,
    PositionSwapOut,
    ScoreDistributionOut,
    ScoreKind,
    StyleOut,
    ThreadLeaderboardOut,
    ThreadPerformanceOut,
)
from llmjudge.core.analysis.categories import CategoryReport, category_report, metadata_keys
from llmjudge.core.analysis.findings import Finding, surprise_findings
from llmjudge.core.analysis.leaderboard import (
    Leaderboard,
    PillarMatrix,
    ScoreDistribution,
    leaderboard,
    pillar_matrix,
    score_distribution,
)
from llmjudge.core.analysis.outcomes import Aggregation, aggregate
from llmjudge.core.analysis.performance import ThreadPerformance, thread_performance
from llmjudge.core.analysis.position import position_swap_analysis
from llmjudge.core.ratings.elo import elo_array
from llmjudge.core.ratings.estimators import bradley_terry, pillar_bradley_terry
from llmjudge.core.ratings.report import (
    ELO_BASES,
    LEVELS,
    MAX_STRONG_WEIGHT,
    IntervalMethod,
    RatingOptions,
    TieModel,
)
from llmjudge.core.ratings.style_report import StyleReport, numeric_metadata_keys, style_report
from llmjudge.infra.errors import Conflict, Invalid

__all__ = [
    "BOOTSTRAP_ROUNDS",
    "BT_CONFIDENCE",
    "AnalysisCache",
    "categories_out",
    "findings",
    "pillar_matrix_out",
    "position_swap",
    "rating_options",
    "score_distribution_out",
    "style_out",
    "thread_leaderboard",
    "thread_performance_out",
]

T = TypeVar("T")
BT_CONFIDENCE = 0.95
BOOTSTRAP_ROUNDS = 200  # the default of the API and the page: one shared computation
SEED = 0  # bootstrap seed: the same data gives the same intervals on every poll


# -- rating options from a query --------------------------------------------------------

RoundsQuery = Annotated[
    int, Query(ge=0, le=2000, description="bootstrap resamples for the BT intervals (0: none)")
]
LEVELS_TEXT = ", ".join(f"{v:g}" for v in LEVELS)


def rating_query_raw(
    bootstrap_rounds: RoundsQuery = BOOTSTRAP_ROUNDS,
    level: Annotated[
        float,
        Query(
            ge=0.5,
            le=0.99,
            description=f"level of every interval (usual: {LEVELS_TEXT}); default 0.95",
        ),
    ] = BT_CONFIDENCE,
    interval: Annotated[
        IntervalMethod,
        Query(
            description="bootstrap: percentile interval of the cluster bootstrap; sandwich: "
            "Wald interval from the cluster-robust standard error (ties half, mean anchor)"
        ),
    ] = "bootstrap",
    clusters: Annotated[
        ClusterChoice,
        Query(
            description="what is resampled together: pair (every verdict on one pair of "
            "threads: swaps and repetitions; the honest default), swap (an original and "
            "its swapped twin), none (verdicts as independent: too narrow when they are not)"
        ),
    ] = "pair",
    ties: Annotated[
        TieModel,
        Query(
            description="half: a tie is half a win; davidson: Davidson's tie model, with "
            "its fitted tie parameter nu reported"
        ),
    ] = "half",
    strong_weight: Annotated[
        float,
        Query(
            ge=1,
            le=MAX_STRONG_WEIGHT,
            description="wins a strong verdict (A>>B) counts as; 1 = off (default), "
            "Arena-Hard uses 3",
        ),
    ] = 1.0,
    elo_base: Annotated[
        int,
        Query(
            ge=1000,
            le=1500,
            description="the score of the anchor (the mean, or the baseline): 1000 or 1500",
        ),
    ] = 1500,
    baseline_thread: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9]{0,10}$",
            description="a thread id: anchor the thread scores on it (empty: the mean)",
        ),
    ] = None,
    baseline_pillar: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9]{0,10}$",
            description="a pillar id: anchor the pillar scores on it (empty: the mean)",
        ),
    ] = None,
) -> dict[str, Any]:
    """Every rating choice a leaderboard takes, as its query gave them (bounded, not yet
    checked together): the keyword arguments of rating_options."""
    return {
        "bootstrap_rounds": bootstrap_rounds,
        "level": level,
        "interval": interval,
        "clusters": clusters,
        "tie_model": ties,
        "strong_weight": strong_weight,
        "base": _elo_base(elo_base),
        # an id, or None for an empty value (a form's "the mean" choice)
        "baseline_thread": _id_or_none(baseline_thread, "baseline_thread"),
        "baseline_pillar": _id_or_none(baseline_pillar, "baseline_pillar"),
    }


def _elo_base(value: int) -> float:
    if float(value) not in ELO_BASES:
        raise Invalid("elo_base must be 1000 or 1500")
    return float(value)


def _id_or_none(value: str | None, name: str) -> int | None:
    if not value:
        return None
    found = int(value)
    if not 1 <= found <= 2**31 - 1:
        raise Invalid(f"{name} must be an id between 1 and 2^31 - 1")
    return found


RatingQuery = Annotated[dict[str, Any], Depends(rating_query_raw)]


def rating_query(raw: RatingQuery) -> RatingOptions:
    """The rating options of a query; 422 for a combination the ratings refuse (sandwich
    with Davidson or a baseline)."""
    return rating_options(**raw)


Rating = Annotated[RatingOptions, Depends(rating_query)]


# -- cache --------------------------------------------------------------------------------


class AnalysisCache:
    """Small LRU caches of loaded sessions and computed figures, keyed by (what, version)
    where the version is the session's completed count. Entries are tasks, so concurrent
    requests share one computation, and while one version of a figure is being computed a
    request for a newer version shares it too (a result at most one computation behind):
    polls of a running session never pile up work."""

    def __init__(
        self, *, max_figures: int = 64, max_sessions: int = 2, max_computing: int = 2
    ) -> None:
        # At most this many figure computations run at once (threads share one GIL and the
        # cores with the workers); more requests for distinct figures wait their turn
        # instead of each starting a bootstrap (issue 14).
        self.computing = asyncio.Semaphore(max_computing)
        self._figures: OrderedDict[Hashable, asyncio.Task[Any]] = OrderedDict()
        self._sessions: OrderedDict[Hashable, asyncio.Task[Any]] = OrderedDict()
        self._running: dict[Hashable, asyncio.Task[Any]] = {}
        self._max_figures, self._max_sessions = max_figures, max_sessions
        self.computed = 0  # figures and loads started (tests read it)

    async def _get(
        self,
        store: OrderedDict[Hashable, asyncio.Task[Any]],
        limit: int,
        key: Hashable,
        version: int,
        make: Callable[[], Awaitable[T]],
    ) -> T:
        task = store.get((key, version))
        if task is not None:
            store.move_to_end((key, version))
        elif (busy := self._running.get((id(store), key))) is not None:
            task = busy
        else:
            task = self._start(store, limit, key, version, make)
        # A waiter that goes away (client disconnect) must not cancel the shared work.
        return await asyncio.shield(task)

    def _start(
        self,
        store: OrderedDict[Hashable, asyncio.Task[Any]],
        limit: int,
        key: Hashable,
        version: int,
        make: Callable[[], Awaitable[T]],
    ) -> asyncio.Task[T]:
        self.computed += 1
        task = asyncio.ensure_future(make())
        store[(key, version)] = task
        while len(store) > limit:
            store.popitem(last=False)
        running = (id(store), key)
        self._running[running] = task

        def finished(done: asyncio.Task[Any]) -> None:
            if self._running.get(running) is done:
                del self._running[running]
            failed = done.cancelled() or done.exception() is not None
            if failed and store.get((key, version)) is done:
                del store[(key, version)]

        task.add_done_callback(finished)
        return task

    async def figure(self, key: Hashable, version: int, make: Callable[[], Awaitable[T]]) -> T:
        return await self._get(self._figures, self._max_figures, key, version, make)

    async def session(self, key: Hashable, version: int, make: Callable[[], Awaitable[T]]) -> T:
        return await self._get(self._sessions, self._max_sessions, key, version, make)


async def _data(
    cache: AnalysisCache, sessionmaker: async_sessionmaker[AsyncSession], session: AnalysisSession
) -> SessionData:
    async def load() -> SessionData:
        # its own database session: a shared load must outlive the request that began it
        async with sessionmaker() as db:
            return await load_session_data(db=db, session=session)

    return await cache.session(session.id, session.completed, load)


async def _figure(
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    key: tuple[Hashable, ...],
    compute: Callable[[SessionData], T],
) -> tuple[SessionData, T]:
    data = await _data(cache, sessionmaker, session)

    async def run() -> T:
        async with cache.computing:
            return await asyncio.to_thread(compute, data)

    # versioned by the data actually used, never by a newer count it may lag behind
    return data, await cache.figure((*key, session.id), data.version, run)


# -- figures ------------------------------------------------------------------------------


def _thread_names(data: SessionData) -> dict[int, str]:
    """How findings and captions name a thread: its title, else its external id."""
    return {t: title or ext for t, (title, ext) in data.threads.items() if title or ext}


def _references(
    data: SessionData, reference_key: str | None, reference_ranking: tuple[str, ...] | None
) -> tuple[dict[int, float] | None, dict[int, float] | None]:
    """(thread id -> reference score from numeric metadata `reference_key`, pillar id ->
    minus its position in `reference_ranking`, best first); Invalid for a name or key
    the session does not have."""
    threads = None
    if reference_key:
        threads = {
            t: float(v)
            for t, meta in data.thread_meta.items()
            if isinstance(v := meta.get(reference_key), int | float) and not isinstance(v, bool)
        }
        if not threads:
            raise Invalid(f"no thread of this session has a numeric metadata {reference_key!r}")
    pillars = None
    if reference_ranking:
        ids = {name: p for p, name in data.pillar_names.items()}
        unknown = [n for n in reference_ranking if n not in ids]
        if unknown:
            raise Invalid(f"reference_ranking names pillars not in this session: {unknown[:5]}")
        pillars = {ids[n]: -float(i) for i, n in enumerate(reference_ranking)}
    return threads, pillars


def _leaderboard(
    data: SessionData,
    aggregation: Aggregation,
    options: RatingOptions,
    reference_key: str | None,
    reference_ranking: tuple[str, ...] | None,
) -> Leaderboard:
    threads, pillars = _references(data, reference_key, reference_ranking)
    try:
        return leaderboard(
            data.table,
            data.thread_pillar,
            data.pillar_names,
            aggregation=aggregation,
            options=options,
            thread_reference=threads,
            pillar_reference=pillars,
            reference_source=reference_key or "",
        )
    except ValueError as exc:  # a baseline that did not play, an option rating refuses
        raise Invalid(str(exc)) from exc


def rating_options(
    *,
    bootstrap_rounds: int = BOOTSTRAP_ROUNDS,
    level: float = BT_CONFIDENCE,
    interval: IntervalMethod = "bootstrap",
    clusters: ClusterChoice = "pair",
    tie_model: TieModel = "half",
    strong_weight: float = 1.0,
    base: float = 1500.0,
    baseline_thread: int | None = None,
    baseline_pillar: int | None = None,
) -> RatingOptions:
    """The options of a leaderboard from its query parameters (the API's and the page's
    defaults are these, so both share one cached computation); Invalid for a combination
    the ratings refuse."""
    options = RatingOptions(
        level=level,
        interval=interval,
        clusters=None if clusters == "none" else clusters,
        bootstrap_rounds=bootstrap_rounds if interval == "bootstrap" else 0,
        tie_model=tie_model,
        strong_weight=strong_weight,
        base=base,
        baseline_thread=baseline_thread,
        baseline_pillar=baseline_pillar,
        seed=SEED,
    )
    try:
        options.validate()
    except ValueError as exc:
        raise Invalid(str(exc)) from exc
    return options


async def _leaderboard_figure(
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    options: RatingOptions,
    reference_key: str | None = None,
    reference_ranking: tuple[str, ...] | None = None,
) -> tuple[SessionData, Leaderboard]:
    return await _figure(
        cache,
        sessionmaker,
        session,
        ("leaderboard", aggregation, options, reference_key, reference_ranking),
        lambda d: _leaderboard(d, aggregation, options, reference_key, reference_ranking),
    )


def _leaderboard_out(
    session: AnalysisSession, data: SessionData, board: Leaderboard
) -> ThreadLeaderboardOut:
    elo = session.calculate_elo
    return ThreadLeaderboardOut(
        session=session,
        aggregation=board.aggregation,
        bootstrap_rounds=board.bootstrap_rounds,
        confidence_level=board.method.level,
        outcome_count=board.outcome_count,
        method=board.method,
        pillar_method=board.pillar_method,
        quality=board.quality,
        pillar_quality=board.pillar_quality,
        entries=[
            LeaderboardRow(
                rank=e.rank,
                thread_id=e.thread_id,
                thread_title=data.threads.get(e.thread_id, (None, None))[0],
                thread_external_id=data.threads.get(e.thread_id, (None, None))[1],
                pillar=PillarLabel(id=e.pillar_id, name=data.pillar_name(e.pillar_id)),
                elo_score=e.elo_score if elo else None,
                bt_score=e.bt_score,
                bt_ci_low=e.bt_ci_low,
                bt_ci_high=e.bt_ci_high,
                rank_low=e.rank_low,
                rank_high=e.rank_high,
                rank_held=e.rank_held,
                matches_played=e.matches_played,
                wins=e.wins,
                losses=e.losses,
                ties=e.ties,
                win_rate=e.win_rate,
                raw_win_rate=e.raw_win_rate,
                avg_confidence=e.avg_confidence,
                avg_likert_scores=e.avg_likert_scores,
            )
            for e in board.entries
        ],
        pillar_aggregates=[
            PillarAggregateOut(
                pillar_id=p.pillar_id,
                name=p.name,
                thread_count=p.thread_count,
                avg_elo=p.avg_elo if elo else None,
                avg_bt=p.avg_bt,
                bt_score=p.bt_score,
                bt_ci_low=p.bt_ci_low,
                bt_ci_high=p.bt_ci_high,
                bt_rank=p.bt_rank,
            )
            for p in board.pillar_aggregates
        ],
    )


async def thread_leaderboard(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    bootstrap_rounds: int,
    options: RatingOptions | None = None,
    reference_key: str | None = None,
    reference_ranking: tuple[str, ...] | None = None,
) -> ThreadLeaderboardOut:
    """The leaderboard with `options` (rating_options()); `bootstrap_rounds` overrides
    theirs (0: no intervals)."""
    opts = options or rating_options()
    if opts.interval == "bootstrap":
        opts = dataclasses.replace(opts, bootstrap_rounds=bootstrap_rounds)
    data, board = await _leaderboard_figure(
        cache, sessionmaker, session, aggregation, opts, reference_key, reference_ranking
    )
    return _leaderboard_out(session, data, board)


async def style_out(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    options: RatingOptions,
    metadata_keys: tuple[str, ...] = (),
) -> StyleOut:
    """Pillar ranking with style held out beside the raw one, and the style coefficients."""

    def compute(d: SessionData) -> tuple[StyleReport, list[str]]:
        numeric = numeric_metadata_keys(d.thread_meta)
        unknown = [k for k in metadata_keys if k not in numeric]
        if unknown:
            raise Invalid(
                f"not numeric metadata of this session's threads: {unknown[:5]}; "
                f"choose among {numeric[:20]}"
            )
        try:
            report = style_report(
                aggregate(d.table, aggregation),
                d.thread_pillar,
                d.pillar_names,
                d.style_features,
                d.thread_meta,
                options,
                metadata_keys=metadata_keys,
            )
        except ValueError as exc:
            raise Invalid(str(exc)) from exc
        return report, numeric

    _, (report, numeric) = await _figure(
        cache, sessionmaker, session, ("style", aggregation, options, metadata_keys), compute
    )
    return StyleOut(
        session=session, aggregation=aggregation, available_metadata=numeric, style=report
    )


async def categories_out(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    options: RatingOptions,
    key: str,
) -> CategoriesOut:
    """Pillar ranking per value of thread metadata `key`, and the category x pillar
    win-rate matrix (columns: the overall pillar ranking)."""

    def compute(d: SessionData) -> tuple[CategoryReport, list[str]]:
        keys = metadata_keys(d.thread_meta)
        table = aggregate(d.table, aggregation)
        overall = [
            r.player_id
            for r in pillar_bradley_terry(table, d.thread_pillar, bootstrap_rounds=0).ratings
        ]
        try:
            report = category_report(
                table,
                d.thread_pillar,
                d.pillar_names,
                d.thread_meta,
                key,
                options,
                pillar_order=overall,
            )
        except ValueError as exc:
            raise Invalid(str(exc)) from exc
        return report, keys

    _, (report, keys) = await _figure(
        cache, sessionmaker, session, ("categories", aggregation, options, key), compute
    )
    return CategoriesOut(
        session=session, aggregation=aggregation, available_keys=keys, categories=report
    )


def _distribution(
    data: SessionData, aggregation: Aggregation, score: ScoreKind, bins: int
) -> ScoreDistribution:
    table = aggregate(data.table, aggregation)
    if score == "elo":
        values = dict(zip(table.players.tolist(), elo_array(table).tolist(), strict=True))
    else:
        values = {r.player_id: r.score for r in bradley_terry(table, bootstrap_rounds=0).ratings}
    return score_distribution(values, data.thread_pillar, data.pillar_names, bins=bins)


async def score_distribution_out(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    score: ScoreKind | None,
    bins: int,
) -> ScoreDistributionOut:
    """Per pillar distribution of thread scores: Elo, or Bradley-Terry where the session
    does not calculate Elo (or when asked)."""
    if score == "elo" and not session.calculate_elo:
        raise Conflict(f"session {session.id} does not calculate Elo; ask for score=bt")
    kind: ScoreKind = score or ("elo" if session.calculate_elo else "bt")
    _, dist = await _figure(
        cache,
        sessionmaker,
        session,
        ("distribution", aggregation, kind, bins),
        lambda d: _distribution(d, aggregation, kind, bins),
    )
    return ScoreDistributionOut(
        session=session,
        aggregation=aggregation,
        score=kind,
        bin_edges=dist.bin_edges,
        pillars=dist.pillars,
    )


def _matrix(data: SessionData, aggregation: Aggregation) -> PillarMatrix:
    table = aggregate(data.table, aggregation)
    ranked = [
        r.player_id
        for r in pillar_bradley_terry(table, data.thread_pillar, bootstrap_rounds=0).ratings
    ]
    rest = [p for p in data.pillar_ids if p not in set(ranked)]
    return pillar_matrix(table, data.thread_pillar, data.pillar_names, order=ranked + rest)


async def pillar_matrix_out(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
) -> PillarMatrixOut:
    """Each pillar's record against each other pillar; pillars best first (pillar BT)."""
    _, matrix = await _figure(
        cache,
        sessionmaker,
        session,
        ("matrix", aggregation),
        lambda d: _matrix(d, aggregation),
    )
    return PillarMatrixOut(
        session=session, aggregation=aggregation, pillars=matrix.pillars, cells=matrix.cells
    )


async def thread_performance_out(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
) -> ThreadPerformanceOut:
    def compute(d: SessionData) -> ThreadPerformance:
        return thread_performance(
            aggregate(d.table, aggregation), d.thread_pillar, d.pillar_sizes, d.pillar_names
        )

    data, perf = await _figure(cache, sessionmaker, session, ("performance", aggregation), compute)
    return ThreadPerformanceOut(
        session=session,
        aggregation=aggregation,
        threads=perf.threads,
        coverage_stats=perf.coverage,
        pillars=perf.pillars,
        thread_labels=data.labels(t.thread_id for t in perf.threads),
    )


async def position_swap(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    pairs_limit: int,
    pairs_offset: int,
) -> PositionSwapOut:
    """Swap consistency over every verdict (no aggregation: it needs both orders)."""
    listed = pairs_offset + pairs_limit
    data, analysis = await _figure(
        cache,
        sessionmaker,
        session,
        ("position", listed),
        lambda d: position_swap_analysis(d.table, max_pairs=listed),
    )
    pairs = analysis.pairs[pairs_offset:]
    return PositionSwapOut(
        session=session,
        summary=analysis.summary,
        position_bias=analysis.position_bias,
        likert_stability=analysis.likert_stability,
        interpretation=analysis.interpretation,
        pairs_total=analysis.summary.total_swap_pairs,
        pairs_offset=pairs_offset,
        pairs_limit=pairs_limit,
        pairs=pairs,
        thread_labels=data.labels(t for p in pairs for t in (p.thread_a, p.thread_b)),
    )


async def findings(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
) -> FindingsOut:
    def compute(d: SessionData) -> list[Finding]:
        return surprise_findings(
            aggregate(d.table, aggregation),
            d.thread_pillar,
            d.pillar_names,
            thread_names=_thread_names(d),
        )

    data, found = await _figure(cache, sessionmaker, session, ("findings", aggregation), compute)
    return FindingsOut(
        session=session,
        aggregation=aggregation,
        findings=found,
        thread_labels=data.labels(f.thread_id for f in found),
    )


def get_cache(request: Request) -> AnalysisCache:
    """One cache per application (tests run several apps against different databases)."""
    cache = getattr(request.app.state, "analysis_cache", None)
    if cache is None:
        cache = request.app.state.analysis_cache = AnalysisCache()
    return cache
