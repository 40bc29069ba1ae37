"""Session analysis JSON API: leaderboards, distributions, pillar matrix, thread
performance, position bias, findings, exports. Reads only (the import of judgments made
elsewhere is a sessions route).

Every figure is computed from the comparisons completed so far, so it is available while
a session runs; results are cached until the next comparison completes.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from pydantic import AfterValidator
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.analysis import exports, figures
from llmjudge.analysis.figures import AnalysisCache, get_cache
from llmjudge.analysis.loading import get_analysis_session
from llmjudge.analysis.outcomes import Aggregation
from llmjudge.analysis.schemas import (
    AnalysisSession,
    ExportFormat,
    ExportTable,
    FindingsOut,
    PillarMatrixOut,
    PositionSwapOut,
    ScoreDistributionOut,
    ScoreKind,
    ThreadLeaderboardOut,
    ThreadPerformanceOut,
)
from llmjudge.web import DbSession

router = APIRouter(prefix="/api/sessions", tags=["analysis"])

AggregationQuery = Annotated[
    Aggregation,
    Query(
        description="all: every verdict; swap_consistent: one outcome per swap pair (a tie "
        "when the two orders disagree); majority: one outcome per thread pair by majority"
    ),
]
# A few fixed choices, not any number: each value is a cache key and a bootstrap of its
# own, so free values would let polls start unbounded distinct computations.
BOOTSTRAP_CHOICES = (0, 100, 200, 500, 1000, 2000)


def _one_of_the_choices(rounds: int) -> int:
    if rounds not in BOOTSTRAP_CHOICES:
        raise ValueError(
            f"bootstrap_rounds must be one of {', '.join(map(str, BOOTSTRAP_CHOICES))}"
        )
    return rounds


RoundsQuery = Annotated[
    int,
    Query(
        ge=0,
        le=2000,
        description="bootstrap resamples for the BT intervals (0: none); one of "
        + ", ".join(map(str, BOOTSTRAP_CHOICES)),
    ),
    AfterValidator(_one_of_the_choices),
]


def get_sessionmaker(request: Request) -> async_sessionmaker[AsyncSession]:
    return request.app.state.sessionmaker


async def get_session(
    session_id: Annotated[int, Path(ge=1, le=2**31 - 1, description="a session id")],
    db: DbSession,
) -> AnalysisSession:
    """The session, read fresh (404 for an unknown id); the connection is then released."""
    found = await get_analysis_session(db=db, session_id=session_id)
    await db.close()
    return found


Cache = Annotated[AnalysisCache, Depends(get_cache)]
Maker = Annotated[async_sessionmaker[AsyncSession], Depends(get_sessionmaker)]
Session = Annotated[AnalysisSession, Depends(get_session)]


@router.get("/{session_id}/thread-leaderboard", response_model=ThreadLeaderboardOut)
async def thread_leaderboard(
    session: Session,
    cache: Cache,
    maker: Maker,
    aggregation: AggregationQuery = "all",
    bootstrap_rounds: RoundsQuery = 200,
) -> ThreadLeaderboardOut:
    """Threads ranked by Bradley-Terry (with bootstrap intervals), with Elo, records,
    confidence and Likert averages; pillar averages and the pillar-level BT ranking."""
    return await figures.thread_leaderboard(
        cache=cache,
        sessionmaker=maker,
        session=session,
        aggregation=aggregation,
        bootstrap_rounds=bootstrap_rounds,
    )


@router.get("/{session_id}/elo-distribution", response_model=ScoreDistributionOut)
async def elo_distribution(
    session: Session,
    cache: Cache,
    maker: Maker,
    aggregation: AggregationQuery = "all",
    score: Annotated[
        ScoreKind | None,
        Query(description="unset: Elo, or BT where the session does not calculate Elo"),
    ] = None,
    bins: Annotated[int, Query(ge=1, le=100)] = 10,
) -> ScoreDistributionOut:
    """Per pillar: its threads' scores, mean, median, standard deviation, min, max and a
    histogram over bins shared by all pillars."""
    return await figures.score_distribution_out(
        cache=cache,
        sessionmaker=maker,
        session=session,
        aggregation=aggregation,
        score=score,
        bins=bins,
    )


@router.get("/{session_id}/pillar-matrix", response_model=PillarMatrixOut)
async def pillar_matrix(
    session: Session, cache: Cache, maker: Maker, aggregation: AggregationQuery = "all"
) -> PillarMatrixOut:
    """Wins, losses, ties and win rate (ties half) of each pillar against each other."""
    return await figures.pillar_matrix_out(
        cache=cache, sessionmaker=maker, session=session, aggregation=aggregation
    )


@router.get("/{session_id}/thread-performance", response_model=ThreadPerformanceOut)
async def thread_performance(
    session: Session, cache: Cache, maker: Maker, aggregation: AggregationQuery = "all"
) -> ThreadPerformanceOut:
    """Per thread: usage, opponents, record, performance score, consistent winner/loser,
    Likert mean/std per criterion; coverage (over/under-sampled threads, global Likert
    statistics); per pillar sample coverage, repetition overlap and win-rate variance
    against their goals."""
    return await figures.thread_performance_out(
        cache=cache, sessionmaker=maker, session=session, aggregation=aggregation
    )


@router.get("/{session_id}/position-swap-analysis", response_model=PositionSwapOut)
async def position_swap_analysis(
    session: Session,
    cache: Cache,
    maker: Maker,
    pairs_limit: Annotated[int, Query(ge=0, le=5000)] = 500,
    pairs_offset: Annotated[int, Query(ge=0)] = 0,
) -> PositionSwapOut:
    """Does the verdict survive swapping the order? Consistency rate, primacy/recency
    counts with a binomial test, Likert stability, interpretation and recommendations, and
    a page of the swap pairs (`pairs_total` of them)."""
    return await figures.position_swap(
        cache=cache,
        sessionmaker=maker,
        session=session,
        pairs_limit=pairs_limit,
        pairs_offset=pairs_offset,
    )


@router.get("/{session_id}/findings", response_model=FindingsOut)
async def findings(
    session: Session, cache: Cache, maker: Maker, aggregation: AggregationQuery = "all"
) -> FindingsOut:
    """Surprises: over/under-performing threads, the most consistent thread, upsets of
    higher-ranked pillars."""
    return await figures.findings(
        cache=cache, sessionmaker=maker, session=session, aggregation=aggregation
    )


@router.get(
    "/{session_id}/export",
    response_model=None,
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/csv": {}, "application/json": {}},
            "description": "CSV: the comparisons (or `table=leaderboard`); JSON: "
            "{session, comparisons, leaderboard}",
        }
    },
)
async def export(
    session: Session,
    cache: Cache,
    maker: Maker,
    format: ExportFormat = "csv",
    table: ExportTable = "comparisons",
    aggregation: AggregationQuery = "all",
    bootstrap_rounds: RoundsQuery = 200,
) -> Response:
    """Download the comparisons (verdicts, one score column per criterion and side, costs,
    thread and pillar names) and the leaderboard. Streamed; CSV cells that a spreadsheet
    would run as formulas are prefixed with `'`."""
    stem = f"llmjudge-session-{session.id}"
    if format == "csv" and table == "comparisons":
        return StreamingResponse(
            exports.export_comparisons_csv(sessionmaker=maker, session=session),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{stem}-comparisons.csv"'},
        )
    board = await figures.thread_leaderboard(
        cache=cache,
        sessionmaker=maker,
        session=session,
        aggregation=aggregation,
        bootstrap_rounds=bootstrap_rounds,
    )
    if format == "csv":
        return PlainTextResponse(
            exports.export_leaderboard_csv(board),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{stem}-leaderboard.csv"'},
        )
    return StreamingResponse(
        exports.export_json(sessionmaker=maker, session=session, board=board),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{stem}.json"'},
    )
