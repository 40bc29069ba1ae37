"""Session analysis JSON API: leaderboards, distributions, pillar matrix, thread
performance, position bias, findings, exports. Reads only (the import of judgments made
elsewhere is a sessions route).

Every figure is computed from the comparisons completed so far, so it is available while
a session runs; results are cached until the next comparison completes.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, TypedDict

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.analysis import exports, figures, leaderboards
from llmjudge.analysis.baseline import BaselineOut, baseline_report
from llmjudge.analysis.cache import AnalysisCache, get_cache
from llmjudge.analysis.grading import DEFAULT_REFERENCE_KEY, ScoresOut, scores_report
from llmjudge.analysis.loading import get_analysis_session
from llmjudge.analysis.options import Rating
from llmjudge.analysis.schemas import (
    AnalysisSession,
    CategoriesOut,
    ExportFormat,
    ExportTable,
    FindingsOut,
    PillarMatrixOut,
    PositionSwapOut,
    ScoreDistributionOut,
    ScoreKind,
    StyleOut,
    ThreadLeaderboardOut,
    ThreadPerformanceOut,
)
from llmjudge.core.analysis.outcomes import Aggregation
from llmjudge.infra.web import ID_MAX, DbSession, Offset

router = APIRouter(prefix="/api/sessions", tags=["analysis"])

AggregationQuery = Annotated[
    Aggregation,
    Query(
        description="all: every verdict; swap_consistent: one outcome per swap pair (a tie "
        "when the two orders disagree); majority: one outcome per thread pair by majority"
    ),
]
ReferenceKeyQuery = Annotated[
    str | None,
    Query(
        max_length=100,
        description="numeric thread metadata to compare the thread ranking with "
        "(Spearman, Kendall), e.g. a benchmark's quality score",
    ),
]
ReferenceRankingQuery = Annotated[
    str | None,
    Query(
        max_length=4000,
        description="pillar names, best first, separated by commas: a reference ranking "
        "to compare the pillar ranking with (Spearman, Kendall)",
    ),
]


def _ranking(text: str | None) -> tuple[str, ...] | None:
    names = tuple(n.strip() for n in (text or "").split(",") if n.strip())
    return names or None


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


class FigureSource(TypedDict):
    """What every figure is computed from: the session, its loads' cache and a way to
    open a database session for them (one shared load outlives the request)."""

    cache: AnalysisCache
    sessionmaker: async_sessionmaker[AsyncSession]
    session: AnalysisSession


def figure_source(session: Session, cache: Cache, maker: Maker) -> FigureSource:
    return {"cache": cache, "sessionmaker": maker, "session": session}


Source = Annotated[FigureSource, Depends(figure_source)]


@router.get("/{session_id}/thread-leaderboard", response_model=ThreadLeaderboardOut)
async def thread_leaderboard(
    source: Source,
    rating: Rating,
    aggregation: AggregationQuery = "all",
    reference_key: ReferenceKeyQuery = None,
    reference_ranking: ReferenceRankingQuery = None,
) -> ThreadLeaderboardOut:
    """Threads ranked by Bradley-Terry on the Elo scale with intervals at `level` (cluster
    bootstrap by default), sorted by score within a rank; the sequential Elo beside it
    (order-dependent); records, confidence and Likert averages; pillar averages and the
    pillar-level ranking; how the scores were made (`method`) and whether the tournament
    resolves its ranking (`quality`)."""
    return await leaderboards.thread_leaderboard(
        **source,
        aggregation=aggregation,
        bootstrap_rounds=rating.bootstrap_rounds,
        options=rating,
        reference_key=reference_key,
        reference_ranking=_ranking(reference_ranking),
    )


@router.get("/{session_id}/style", response_model=StyleOut)
async def style(
    source: Source,
    rating: Rating,
    aggregation: AggregationQuery = "all",
    metadata: Annotated[
        list[str] | None,
        Query(
            max_length=10,
            description="numeric thread metadata keys to add as covariates (repeat the "
            "parameter); `available_metadata` lists them",
        ),
    ] = None,
) -> StyleOut:
    """Style control: the pillar ranking with answer length and markdown density held
    out (Bradley-Terry with covariates), beside the raw ranking over the same comparisons,
    with each covariate's coefficient and interval; says why when it is not identified."""
    return await figures.style_out(
        **source,
        aggregation=aggregation,
        options=rating,
        metadata_keys=tuple(dict.fromkeys(metadata or ())),
    )


@router.get("/{session_id}/categories", response_model=CategoriesOut)
async def categories(
    source: Source,
    rating: Rating,
    aggregation: AggregationQuery = "all",
    key: Annotated[
        str, Query(min_length=1, max_length=100, description="the thread metadata key")
    ] = "category",
) -> CategoriesOut:
    """Per category (each value of thread metadata `key`): the pillar ranking with
    intervals, and the category x pillar win-rate matrix."""
    return await figures.categories_out(
        **source,
        aggregation=aggregation,
        options=rating,
        key=key,
    )


@router.get("/{session_id}/elo-distribution", response_model=ScoreDistributionOut)
async def elo_distribution(
    source: Source,
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
        **source,
        aggregation=aggregation,
        score=score,
        bins=bins,
    )


@router.get("/{session_id}/pillar-matrix", response_model=PillarMatrixOut)
async def pillar_matrix(source: Source, aggregation: AggregationQuery = "all") -> PillarMatrixOut:
    """Wins, losses, ties and win rate (ties half) of each pillar against each other."""
    return await figures.pillar_matrix_out(**source, aggregation=aggregation)


@router.get("/{session_id}/thread-performance", response_model=ThreadPerformanceOut)
async def thread_performance(
    source: Source, aggregation: AggregationQuery = "all"
) -> ThreadPerformanceOut:
    """Per thread: usage, opponents, record, performance score, consistent winner/loser,
    Likert mean/std per criterion; coverage (over/under-sampled threads, global Likert
    statistics); per pillar sample coverage, repetition overlap and win-rate variance
    against their goals."""
    return await figures.thread_performance_out(**source, aggregation=aggregation)


@router.get("/{session_id}/position-swap-analysis", response_model=PositionSwapOut)
async def position_swap_analysis(
    source: Source,
    pairs_limit: Annotated[int, Query(ge=0, le=5000)] = 500,
    pairs_offset: Offset = 0,
) -> PositionSwapOut:
    """Does the verdict survive swapping the order? Consistency rate, primacy/recency
    counts with a binomial test, Likert stability, interpretation and recommendations, and
    a page of the swap pairs (`pairs_total` of them)."""
    return await figures.position_swap(
        **source,
        pairs_limit=pairs_limit,
        pairs_offset=pairs_offset,
    )


@router.get("/{session_id}/findings", response_model=FindingsOut)
async def findings(source: Source, aggregation: AggregationQuery = "all") -> FindingsOut:
    """Surprises: over/under-performing threads, the most consistent thread, upsets of
    higher-ranked pillars."""
    return await figures.findings(**source, aggregation=aggregation)


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
    rating: Rating,
    format: ExportFormat = "csv",
    table: ExportTable = "comparisons",
    aggregation: AggregationQuery = "all",
) -> Response:
    """Download the comparisons (verdicts, one score column per criterion and side, the
    judge's raw response, costs, thread and pillar names) and the leaderboard. Streamed;
    CSV cells that a spreadsheet would run as formulas are prefixed with `'`.

    Each export says what produced it: JSON has a `provenance` object first; CSV starts
    with `#` lines (`# key: <JSON>`; `pandas.read_csv(path, comment="#")`), then the header.
    Provenance: product version, export time, judge model(s), provider kind, `simulated`,
    prompt template and system prompt hashes, verdict format, criteria, seed, options."""
    stem = f"llmjudge-session-{session.id}"
    query: dict[str, Any] = {"format": format}
    if format == "json" or table == "leaderboard":
        query |= {
            "aggregation": aggregation,
            "bootstrap_rounds": rating.bootstrap_rounds,
            "rating": dataclasses.asdict(rating),
        }
    async with maker() as db:
        provenance = await exports.load_provenance(
            db, session.id, table="all" if format == "json" else table, **query
        )
    if format == "csv" and table == "comparisons":
        return StreamingResponse(
            exports.export_comparisons_csv(
                sessionmaker=maker, session=session, provenance=provenance
            ),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{stem}-comparisons.csv"'},
        )
    board = await leaderboards.thread_leaderboard(
        cache=cache,
        sessionmaker=maker,
        session=session,
        aggregation=aggregation,
        bootstrap_rounds=rating.bootstrap_rounds,
        options=rating,
    )
    if format == "csv":
        return PlainTextResponse(
            exports.export_leaderboard_csv(board, provenance),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{stem}-leaderboard.csv"'},
        )
    return StreamingResponse(
        exports.export_json(
            sessionmaker=maker, session=session, board=board, provenance=provenance
        ),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{stem}.json"'},
    )


@router.get("/{session_id}/baseline", response_model=BaselineOut)
async def baseline(
    session: Session,
    db: DbSession,
    pillar_id: Annotated[
        int, Query(ge=1, le=ID_MAX, description="the baseline pillar, one of the session's")
    ],
) -> BaselineOut:
    """Each pillar's win rate against a baseline pillar over the prompts they share (a tie
    counts half), with a bootstrap interval over prompts, and its length-controlled win
    rate (Dubois et al. 2024: a per-prompt difficulty shared by all pillars and a tanh
    length term per pillar, the length term then set to zero), its length effect and
    average answer lengths. Only comparisons whose two threads share a prompt key count."""
    return await baseline_report(db=db, session=session, baseline_pillar_id=pillar_id)


@router.get("/{session_id}/scores", response_model=ScoresOut)
async def scores(
    session: Session,
    db: DbSession,
    reference_key: Annotated[
        str,
        Query(
            min_length=1,
            max_length=100,
            description="numeric thread metadata holding reference grades on the scale",
        ),
    ] = DEFAULT_REFERENCE_KEY,
) -> ScoresOut:
    """Single-answer grading (comparison_mode single): the mean grade per pillar (over its
    threads, Student-t interval) and per thread (over repetitions), the grades'
    distribution per pillar, agreement with reference grades (Spearman, Pearson, mean
    absolute error, quadratic-weighted kappa; bootstrap intervals over threads), and how
    many pairwise outcomes the grades imply for the leaderboards (same prompt key: the
    higher grade wins)."""
    return await scores_report(db=db, session=session, reference_key=reference_key)
