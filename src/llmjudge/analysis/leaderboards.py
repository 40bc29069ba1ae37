"""The leaderboards of a session: threads ranked with intervals and the pillar figures
(the Overview's), computed from a loaded session, cached and, for a finished session,
stored (``analysis.stored``). Reads only."""

from __future__ import annotations

import dataclasses

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.analysis.cache import FINISHED, AnalysisCache, cached_figure
from llmjudge.analysis.loading import SessionData
from llmjudge.analysis.options import rating_options
from llmjudge.analysis.schemas import (
    AnalysisSession,
    LeaderboardRow,
    PillarAggregateOut,
    PillarLabel,
    ThreadLeaderboardOut,
)
from llmjudge.analysis.stored import stored_figure
from llmjudge.core.analysis.leaderboard import (
    Leaderboard,
    LeaderboardEntry,
    PillarAggregate,
    leaderboard,
)
from llmjudge.core.analysis.outcomes import Aggregation
from llmjudge.core.ratings.report import RatingOptions
from llmjudge.infra.errors import Invalid, value_errors_as_invalid

__all__ = ["pillar_leaderboard", "thread_leaderboard"]


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
