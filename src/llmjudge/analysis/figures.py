"""Session figures: style, categories, score distribution, pillar matrix, thread
performance, position bias and findings (the leaderboards: ``analysis.leaderboards``),
computed by the pure analysis modules from a loaded session, cached (``analysis.cache``)
and, for a finished session, stored (``analysis.stored``). Reads only. Which of them are public is
said once, by the package (``llmjudge.analysis.__all__``)."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.analysis.cache import AnalysisCache, cached_figure
from llmjudge.analysis.loading import SessionData
from llmjudge.analysis.schemas import (
    AnalysisSession,
    CategoriesOut,
    FindingsOut,
    PillarMatrixOut,
    PositionSwapOut,
    ScoreDistributionOut,
    ScoreKind,
    StyleOut,
    ThreadPerformanceOut,
)
from llmjudge.analysis.stored import stored_figure
from llmjudge.core.analysis.categories import CategoryReport, category_report, metadata_keys
from llmjudge.core.analysis.findings import Finding, surprise_findings
from llmjudge.core.analysis.leaderboard import (
    PillarMatrix,
    ScoreDistribution,
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
