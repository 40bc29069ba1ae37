"""The results page of a session: one tab server-rendered (overview, leaderboard, Elo
distribution, pillar matrix, position bias, thread performance, findings), the others as
partials, with their charts. Every figure comes from `analysis.figures`, the same
functions as its `/api/sessions/{id}/<figure>` twin, with the API's default parameters so
both share one cached computation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge import charts
from llmjudge.analysis import figures as analysis
from llmjudge.analysis.figures import AnalysisCache, get_cache
from llmjudge.analysis.loading import get_analysis_session
from llmjudge.analysis.schemas import AnalysisSession, ThreadLeaderboardOut
from llmjudge.errors import Conflict, Invalid, NotFound
from llmjudge.references import service as references
from llmjudge.sessions import service
from llmjudge.sessions.pages.common import missing
from llmjudge.sessions.pages.formatting import (
    SORT_FIRST_DESC,
    SortKey,
    avg_score,
    sort_rows,
    thread_name,
)
from llmjudge.web import DbSession, render

router = APIRouter(include_in_schema=False)

TABS: tuple[tuple[str, str], ...] = (
    ("overview", "Overview"),
    ("leaderboard", "Leaderboard"),
    ("distribution", "Elo distribution"),
    ("matrix", "Pillar matrix"),
    ("position", "Position bias"),
    ("performance", "Thread performance"),
    ("findings", "Findings"),
    ("agreement", "Agreement"),
)
TAB_NAMES = tuple(name for name, _ in TABS)
CHART_TOP = 20  # threads in the leaderboard chart
TABLE_ROWS = 200  # rows of the leaderboard and performance tables
SWAP_PAIRS_SHOWN = 20
SWAP_PAIRS_SCANNED = 500  # as the API's default page, so both share one cached figure
BOOTSTRAP_ROUNDS = 200  # as the API's default: the same figures on page and API
Cache = AnalysisCache
Maker = async_sessionmaker[AsyncSession]


def _tab_of(tab: str) -> str:
    return tab if tab in TAB_NAMES else "overview"


@router.get("/sessions/{session_id}/results", response_class=HTMLResponse)
async def results_page(
    request: Request,
    session_id: int,
    db: DbSession,
    tab: str = "overview",
    sort: SortKey = "rank",
    dir: Literal["asc", "desc"] | None = None,
):
    """The results, one tab server-rendered; the other tabs load as partials."""
    tab = _tab_of(tab)
    try:
        body = await _tab_context(request, db, session_id, tab, sort, dir)
    except NotFound as exc:
        return missing(request, str(exc))
    return render(request, "sessions/results.html", tabs=TABS, tab=tab, **body)


@router.get("/sessions/{session_id}/partials/results/{tab}", response_class=HTMLResponse)
async def results_tab(
    request: Request,
    session_id: int,
    tab: str,
    db: DbSession,
    sort: SortKey = "rank",
    dir: Literal["asc", "desc"] | None = None,
):
    """One results tab; the tab bar comes along out of band to mark the active tab."""
    tab = _tab_of(tab)
    body = await _tab_context(request, db, session_id, tab, sort, dir)
    return render(request, "sessions/_tab.html", tabs=TABS, tab=tab, oob=True, **body)


async def _tab_context(
    request: Request,
    db: AsyncSession,
    session_id: int,
    tab: str,
    sort: SortKey,
    direction: Literal["asc", "desc"] | None,
) -> dict[str, Any]:
    s = await service.get_session(db=db, session_id=session_id)
    session = await get_analysis_session(db=db, session_id=session_id)
    await db.close()  # figures load through their own database sessions
    ctx: dict[str, Any] = {"s": s, "a": session, "tab_error": None}
    if session.completed == 0 and tab != "overview":
        return ctx
    cache = get_cache(request)
    maker = request.app.state.sessionmaker
    build = _TAB_BUILDERS[tab]
    try:
        if tab == "agreement":
            ctx |= await _agreement(request, maker, session_id)
        else:
            ctx |= await build(cache=cache, maker=maker, session=session)
    except (Invalid, Conflict) as exc:  # the analysis refuses: say why, keep the page
        ctx["tab_error"] = str(exc)
    if tab == "leaderboard" and "board" in ctx:
        desc = (sort in SORT_FIRST_DESC) if direction is None else direction == "desc"
        rows = sort_rows(ctx["board"].entries, sort, desc)
        ctx |= {"rows": rows[:TABLE_ROWS], "sort": sort, "desc": desc}
    return ctx


async def _leaderboard(
    cache: Cache, maker: Maker, session: AnalysisSession
) -> ThreadLeaderboardOut:
    return await analysis.thread_leaderboard(
        cache=cache,
        sessionmaker=maker,
        session=session,
        aggregation="all",
        bootstrap_rounds=BOOTSTRAP_ROUNDS,
    )


def _bt_chart(
    labels: Sequence[str],
    scores: Sequence[float],
    intervals: Sequence[tuple[float | None, float | None]],
    title: str,
    width: int = 640,
) -> Markup:
    """Bradley-Terry scores as bars around the 1500 mean, with their intervals."""
    errors = [(lo - 1500, hi - 1500) for lo, hi in intervals if lo is not None and hi is not None]
    return charts.bar_chart(
        list(labels),
        [v - 1500 for v in scores],
        title=title,
        value_format="{:+.0f}",
        errors=errors if len(errors) == len(scores) else None,
        width=width,
    )


def _thread_label(title: str | None, external_id: str | None, thread_id: int, pillar: str) -> str:
    """Pillar first: bar labels are cut short, and threads of different pillars often share
    a title (the same prompt answered by several models)."""
    return f"{pillar} · {thread_name(title, external_id, thread_id)}"


async def _overview(*, cache: Cache, maker: Maker, session: AnalysisSession) -> dict[str, Any]:
    if session.completed == 0:
        return {}
    board = await _leaderboard(cache, maker, session)
    position = await analysis.position_swap(
        cache=cache, sessionmaker=maker, session=session, pairs_limit=0, pairs_offset=0
    )
    found = await analysis.findings(
        cache=cache, sessionmaker=maker, session=session, aggregation="all"
    )
    pillars = [p for p in board.pillar_aggregates if p.bt_score is not None]
    chart = _bt_chart(
        [p.name for p in pillars],
        [p.bt_score for p in pillars],  # type: ignore[misc]
        [(p.bt_ci_low, p.bt_ci_high) for p in pillars],
        "Pillar ranking: Bradley-Terry score − 1500 (95% interval)",
    )
    return {"board": board, "position": position, "found": found, "pillar_chart": chart}


async def _leaderboard_tab(
    *, cache: Cache, maker: Maker, session: AnalysisSession
) -> dict[str, Any]:
    board = await _leaderboard(cache, maker, session)
    top = board.entries[:CHART_TOP]
    chart = _bt_chart(
        [
            _thread_label(e.thread_title, e.thread_external_id, e.thread_id, e.pillar.name)
            for e in top
        ],
        [e.bt_score for e in top],
        [(e.bt_ci_low, e.bt_ci_high) for e in top],
        f"Top {len(top)} threads: Bradley-Terry score − 1500 (95% interval)",
        width=880,
    )
    return {"board": board, "chart": chart, "avg_score": avg_score}


async def _distribution(*, cache: Cache, maker: Maker, session: AnalysisSession) -> dict[str, Any]:
    dist = await analysis.score_distribution_out(
        cache=cache, sessionmaker=maker, session=session, aggregation="all", score=None, bins=10
    )
    label = "Elo" if dist.score == "elo" else "Bradley-Terry score"
    chart = charts.histogram_chart(
        {p.name: p.histogram for p in dist.pillars},
        dist.bin_edges,
        title=f"{label} of threads, by pillar",
        x_label=label,
        y_label="Threads",
        width=1040,
    )
    return {"dist": dist, "chart": chart, "score_label": label}


async def _matrix(*, cache: Cache, maker: Maker, session: AnalysisSession) -> dict[str, Any]:
    matrix = await analysis.pillar_matrix_out(
        cache=cache, sessionmaker=maker, session=session, aggregation="all"
    )
    names = [p.name for p in matrix.pillars]
    chart = charts.heatmap_chart(
        names,
        names,
        [[c.win_rate if c is not None else None for c in row] for row in matrix.cells],
        [[c.n if c is not None else 0 for c in row] for row in matrix.cells],
        title="Win rate of the row pillar against the column pillar",
    )
    return {"matrix": matrix, "chart": chart}


async def _position(*, cache: Cache, maker: Maker, session: AnalysisSession) -> dict[str, Any]:
    position = await analysis.position_swap(
        cache=cache,
        sessionmaker=maker,
        session=session,
        pairs_limit=SWAP_PAIRS_SCANNED,
        pairs_offset=0,
    )
    summary, bias = position.summary, position.position_bias
    chart = None
    if summary.total_swap_pairs:
        total = summary.total_swap_pairs
        other = max(0, summary.inconsistent - bias.primacy_count - bias.recency_count)
        chart = charts.bar_chart(
            ["Same winner", "Tie both times", "Primacy", "Recency", "Other"],
            [
                summary.consistent_wins / total,
                summary.consistent_ties / total,
                bias.primacy_count / total,
                bias.recency_count / total,
                other / total,
            ],
            title=f"{total} swap pairs: does the verdict survive swapping the order?",
        )
    # The pairs worth reading first: those whose verdict changed with the order.
    pairs = sorted(position.pairs, key=lambda p: p.classification == "consistent")
    return {"position": position, "chart": chart, "pairs": pairs[:SWAP_PAIRS_SHOWN]}


async def _performance(*, cache: Cache, maker: Maker, session: AnalysisSession) -> dict[str, Any]:
    perf = await analysis.thread_performance_out(
        cache=cache, sessionmaker=maker, session=session, aggregation="all"
    )
    return {"perf": perf, "threads": perf.threads[:TABLE_ROWS]}


async def _findings(*, cache: Cache, maker: Maker, session: AnalysisSession) -> dict[str, Any]:
    found = await analysis.findings(
        cache=cache, sessionmaker=maker, session=session, aggregation="all"
    )
    return {"found": found}


async def _agreement(request: Request, maker: Maker, session_id: int) -> dict[str, Any]:
    """The judge against reference labels, as ``/api/sessions/{id}/agreement`` gives it."""
    reference = request.query_params.get("reference") or "gold"
    group_by = (request.query_params.get("group_by") or "").strip()[:100] or None
    async with maker() as db:
        report = await references.session_agreement(
            db=db, session_id=session_id, reference=reference[:220], group_by=group_by
        )
        annotators = await references.session_annotators(db=db, session_id=session_id)
    return {"agreement": report, "annotators": annotators}


_TAB_BUILDERS: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
    "overview": _overview,
    "leaderboard": _leaderboard_tab,
    "distribution": _distribution,
    "matrix": _matrix,
    "position": _position,
    "performance": _performance,
    "findings": _findings,
    "agreement": _agreement,
}
