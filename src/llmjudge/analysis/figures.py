"""Session figures: leaderboard, style, categories, score distribution, pillar matrix,
thread performance, position bias and findings, computed by the pure analysis modules from
a loaded session and cached (``analysis.cache``). Reads only. Which of them are public is
said once, by the package (``llmjudge.analysis.__all__``)."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.analysis.cache import FINISHED, AnalysisCache, cached_figure
from llmjudge.analysis.loading import SessionData
from llmjudge.analysis.options import rating_options
from llmjudge.analysis.schemas import (
    AnalysisSession,
    CategoriesOut,
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
from llmjudge.analysis.stored import stored_figure
from llmjudge.core.analysis.categories import CategoryReport, category_report, metadata_keys
from llmjudge.core.analysis.findings import Finding, surprise_findings
from llmjudge.core.analysis.leaderboard import (
    Leaderboard,
    LeaderboardEntry,
    PillarAggregate,
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
    RatingOptions,
)
from llmjudge.core.ratings.style_report import StyleReport, numeric_metadata_keys, style_report
from llmjudge.infra.errors import Conflict, Invalid, value_errors_as_invalid

T = TypeVar("T")


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
    threads: bool = True,
) -> Leaderboard:
    thread_ref, pillar_ref = _references(data, reference_key, reference_ranking)
    with value_errors_as_invalid():  # a baseline that did not play, an option rating refuses
        return leaderboard(
            data.table,
            data.thread_pillar,
            data.pillar_names,
            aggregation=aggregation,
            options=options,
            thread_reference=thread_ref,
            pillar_reference=pillar_ref,
            reference_source=reference_key or "",
            threads=threads,
        )


async def _leaderboard_figure(
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    options: RatingOptions,
    reference_key: str | None = None,
    reference_ranking: tuple[str, ...] | None = None,
) -> tuple[SessionData, Leaderboard]:
    return await cached_figure(
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

    def row(e: LeaderboardEntry) -> LeaderboardRow:
        title, external_id = data.threads.get(e.thread_id, (None, None))
        return LeaderboardRow.model_validate(
            vars(e)
            | {
                "thread_title": title,
                "thread_external_id": external_id,
                "pillar": PillarLabel(id=e.pillar_id, name=data.pillar_name(e.pillar_id)),
                "elo_score": e.elo_score if elo else None,
            }
        )

    def pillar(p: PillarAggregate) -> PillarAggregateOut:
        return PillarAggregateOut.model_validate(vars(p) | {"avg_elo": p.avg_elo if elo else None})

    return ThreadLeaderboardOut.model_validate(
        vars(board)
        | {
            "session": session,
            "confidence_level": board.method.level,
            "entries": [row(e) for e in board.entries],
            "pillar_aggregates": [pillar(p) for p in board.pillar_aggregates],
        }
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

    async def build() -> ThreadLeaderboardOut:
        data, board = await _leaderboard_figure(
            cache, sessionmaker, session, aggregation, opts, reference_key, reference_ranking
        )
        # converted once per figure (10,000 rows); the session's fresh row goes on each time
        out = cache.converted(
            board, session.calculate_elo, lambda: _leaderboard_out(session, data, board)
        )
        return out.model_copy(update={"session": session})

    params = (aggregation, opts, reference_key, reference_ranking)
    return await stored_figure(
        cache, sessionmaker, session, "leaderboard", params, ThreadLeaderboardOut, build
    )


async def pillar_leaderboard(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    bootstrap_rounds: int,
    options: RatingOptions | None = None,
) -> ThreadLeaderboardOut:
    """The leaderboard's pillar figures alone (ranking, method, quality; no thread
    entries), the same numbers as `thread_leaderboard`'s, without the threads' intervals:
    what the Overview shows. Served from the full leaderboard when that is cached."""
    opts = options or rating_options()
    if opts.interval == "bootstrap":
        opts = dataclasses.replace(opts, bootstrap_rounds=bootstrap_rounds)
    full = ("leaderboard", aggregation, opts, None, None)

    async def build() -> ThreadLeaderboardOut:
        if session.status in FINISHED and (
            cache.finished_figure((*full, session.id), session.completed) is not None
        ):
            data, board = await _leaderboard_figure(cache, sessionmaker, session, aggregation, opts)
        else:
            data, board = await cached_figure(
                cache,
                sessionmaker,
                session,
                ("pillar-leaderboard", aggregation, opts),
                lambda d: _leaderboard(d, aggregation, opts, None, None, threads=False),
            )
        out = cache.converted(
            board,
            ("pillars", session.calculate_elo),
            lambda: _leaderboard_out(session, data, board),
        )
        if board.entries:  # the full leaderboard's: its pillar figures only, as documented
            out = out.model_copy(update={"entries": []})
        return out.model_copy(update={"session": session})

    return await stored_figure(
        cache,
        sessionmaker,
        session,
        "pillar-leaderboard",
        (aggregation, opts),
        ThreadLeaderboardOut,
        build,
    )


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
        with value_errors_as_invalid():
            report = style_report(
                aggregate(d.table, aggregation),
                d.thread_pillar,
                d.pillar_names,
                d.style_features,
                d.thread_meta,
                options,
                metadata_keys=metadata_keys,
            )
        return report, numeric

    params = (aggregation, options, metadata_keys)

    async def build() -> StyleOut:
        _, (report, numeric) = await cached_figure(
            cache, sessionmaker, session, ("style", *params), compute
        )
        return StyleOut(
            session=session, aggregation=aggregation, available_metadata=numeric, style=report
        )

    return await stored_figure(cache, sessionmaker, session, "style", params, StyleOut, build)


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
        with value_errors_as_invalid():
            report = category_report(
                table,
                d.thread_pillar,
                d.pillar_names,
                d.thread_meta,
                key,
                options,
                pillar_order=overall,
            )
        return report, keys

    params = (aggregation, options, key)

    async def build() -> CategoriesOut:
        _, (report, keys) = await cached_figure(
            cache, sessionmaker, session, ("categories", *params), compute
        )
        return CategoriesOut(
            session=session, aggregation=aggregation, available_keys=keys, categories=report
        )

    return await stored_figure(
        cache, sessionmaker, session, "categories", params, CategoriesOut, build
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
    params = (aggregation, kind, bins)

    async def build() -> ScoreDistributionOut:
        _, dist = await cached_figure(
            cache,
            sessionmaker,
            session,
            ("distribution", *params),
            lambda d: _distribution(d, aggregation, kind, bins),
        )
        return ScoreDistributionOut.model_validate(
            vars(dist) | {"session": session, "aggregation": aggregation, "score": kind}
        )

    return await stored_figure(
        cache, sessionmaker, session, "distribution", params, ScoreDistributionOut, build
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

    async def build() -> PillarMatrixOut:
        _, matrix = await cached_figure(
            cache,
            sessionmaker,
            session,
            ("matrix", aggregation),
            lambda d: _matrix(d, aggregation),
        )
        return PillarMatrixOut.model_validate(
            vars(matrix) | {"session": session, "aggregation": aggregation}
        )

    return await stored_figure(
        cache, sessionmaker, session, "matrix", aggregation, PillarMatrixOut, build
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
            aggregate(d.table, aggregation),
            d.thread_pillar,
            d.pillar_sizes,
            d.pillar_names,
            planned_repetitions=session.comparison_mode != "adaptive",
        )

    async def build() -> ThreadPerformanceOut:
        data, perf = await cached_figure(
            cache, sessionmaker, session, ("performance", aggregation), compute
        )

        def convert() -> ThreadPerformanceOut:
            return ThreadPerformanceOut.model_validate(
                vars(perf)
                | {
                    "session": session,
                    "aggregation": aggregation,
                    "coverage_stats": perf.coverage,
                    "thread_labels": data.labels(t.thread_id for t in perf.threads),
                }
            )

        # converted once per figure (a row per thread); the session's fresh row each time
        out = cache.converted(perf, aggregation, convert)
        return out.model_copy(update={"session": session})

    return await stored_figure(
        cache, sessionmaker, session, "performance", aggregation, ThreadPerformanceOut, build
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

    async def build() -> PositionSwapOut:
        data, analysis = await cached_figure(
            cache,
            sessionmaker,
            session,
            ("position", listed),
            lambda d: position_swap_analysis(d.table, max_pairs=listed),
        )
        pairs = analysis.pairs[pairs_offset:]
        labels = data.labels(t for p in pairs for t in (p.thread_a, p.thread_b))
        return PositionSwapOut.model_validate(
            vars(analysis)
            | {
                "session": session,
                "pairs_total": analysis.summary.total_swap_pairs,
                "pairs_offset": pairs_offset,
                "pairs_limit": pairs_limit,
                "pairs": pairs,
                "thread_labels": labels,
            }
        )

    params = (pairs_limit, pairs_offset)
    return await stored_figure(
        cache, sessionmaker, session, "position", params, PositionSwapOut, build
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

    async def build() -> FindingsOut:
        data, found = await cached_figure(
            cache, sessionmaker, session, ("findings", aggregation), compute
        )
        return FindingsOut(
            session=session,
            aggregation=aggregation,
            findings=found,
            thread_labels=data.labels(f.thread_id for f in found),
        )

    return await stored_figure(
        cache, sessionmaker, session, "findings", aggregation, FindingsOut, build
    )
