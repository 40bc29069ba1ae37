"""Tournament pages: configure a session (with a live estimate), watch it run, explore its
results; and the comparisons of one thread.

Each page is paired with partial routes (``/sessions/{id}/partials/<x>``) that HTMX swaps
in. Server-sent events (``/api/sessions/{id}/events``) only say *what* changed:
``static/sessions.js`` turns them into throttled ``lj:refresh`` triggers on the elements
that name the events in ``data-refresh-on``, and HTMX fetches the fresh fragment. The one
exception is the worker lanes of the live page, which render the judge's streamed text
straight from the events. Every action here calls the same service functions as its
``/api/sessions`` twin.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from markupsafe import Markup
from pydantic import ValidationError
from sqlalchemy import case, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge import charts
from llmjudge.analysis import service as analysis
from llmjudge.analysis.api import get_cache
from llmjudge.analysis.schemas import AnalysisSession, LeaderboardRow, ThreadLeaderboardOut
from llmjudge.catalog import service as catalog
from llmjudge.catalog.models import Pillar, Thread
from llmjudge.catalog.schemas import PillarOut
from llmjudge.errors import Conflict, Invalid, NotFound
from llmjudge.events.hub import EventHub
from llmjudge.judging.prompts import criterion_label
from llmjudge.providers import service as providers
from llmjudge.providers.schemas import ModelOut
from llmjudge.sessions import service
from llmjudge.sessions.models import Comparison, JudgeSession
from llmjudge.sessions.pairing import count_plan
from llmjudge.sessions.schemas import Mode, SessionIn, SessionOut
from llmjudge.web import DbSession, is_htmx, render, templates

router = APIRouter(include_in_schema=False)

MODES: tuple[tuple[Mode, str, str], ...] = (
    ("pillar_sample", "Pillar sample", "each pair of pillars: a sample of threads from each"),
    ("round_robin", "Round robin", "every thread against every thread of the other pillars"),
    ("free_for_all", "Free for all", "every thread against every other thread"),
)
TABS: tuple[tuple[str, str], ...] = (
    ("overview", "Overview"),
    ("leaderboard", "Leaderboard"),
    ("distribution", "Elo distribution"),
    ("matrix", "Pillar matrix"),
    ("position", "Position bias"),
    ("performance", "Thread performance"),
    ("findings", "Findings"),
)
TAB_NAMES = tuple(name for name, _ in TABS)
ACTIONS: dict[str, Callable[..., Any]] = {
    "start": service.start_session,
    "pause": service.pause_session,
    "resume": service.resume_session,
    "cancel": service.cancel_session,
    "retry-failed": service.retry_failed,
}
ACTIVE = ("running", "paused")
MAX_LANES = 64  # lanes drawn before any worker reports; more appear as workers do
QUEUE_SHOWN = 10
RECENT_SHOWN = 8
CHART_TOP = 20  # threads in the leaderboard chart
TABLE_ROWS = 200  # rows of the leaderboard and performance tables
SWAP_PAIRS_SHOWN = 20
SWAP_PAIRS_SCANNED = 500  # as the API's default page, so both share one cached figure
BOOTSTRAP_ROUNDS = 200  # as the API's default: the same figures on page and API
THREAD_COMPARISONS = 50
LABELS_MAX = 500
FIELD_LABELS = {
    "session_name": "Session name",
    "pillar_ids": "Pillars",
    "comparison_mode": "Comparison mode",
    "samples_per_pillar": "Samples per pillar",
    "repetitions_per_pair": "Repetitions",
    "max_threads_per_pillar": "Max threads per pillar",
    "position_swap": "Position swap",
    "sampling": "Sampling",
    "worker_count": "Workers",
    "calculate_elo": "Elo",
    "judge_model_id": "Judge model",
    "baseline_pillar_id": "Baseline pillar",
    "match_by_prompt_key": "Match by prompt",
    "criteria": "Criteria",
    "prompt_template": "Prompt template",
    "seed": "Seed",
    "form": "Form",
}
_INT_FIELDS = (
    "samples_per_pillar",
    "repetitions_per_pair",
    "max_threads_per_pillar",
    "worker_count",
    "judge_model_id",
    "baseline_pillar_id",
    "seed",
)
_TEXT_FIELDS = ("session_name", "comparison_mode", "sampling", "prompt_template")
_CHECKBOXES = ("position_swap", "calculate_elo", "match_by_prompt_key")
Errors = dict[str, list[str]]
Cache = analysis.AnalysisCache
Maker = async_sessionmaker[AsyncSession]


# -- pure helpers -------------------------------------------------------------------------


def session_form(form: Any) -> dict[str, Any]:
    """SessionIn fields from the configuration form (a starlette ``FormData`` or a dict of
    lists): an unticked box is False, an empty box is the field's default, criteria are
    comma separated; the baseline is dropped in free-for-all, where the form disables it."""

    def values(name: str) -> list[str]:
        got = form.getlist(name) if hasattr(form, "getlist") else form.get(name, [])
        return [str(v).strip() for v in (got if isinstance(got, list) else [got])]

    def first(name: str) -> str:
        found = values(name)
        return found[0] if found else ""

    out: dict[str, Any] = {"pillar_ids": [v for v in values("pillar_ids") if v]}
    for name in (*_TEXT_FIELDS, *_INT_FIELDS):
        if value := first(name):
            out[name] = value
    if "session_name" not in out:
        out["session_name"] = ""
    for name in _CHECKBOXES:
        out[name] = bool(first(name))
    if criteria := first("criteria"):
        out["criteria"] = [c.strip() for c in criteria.split(",") if c.strip()]
    if out.get("comparison_mode") == "free_for_all":
        out.pop("baseline_pillar_id", None)
    return out


def field_errors(exc: ValidationError) -> Errors:
    """Messages by form field ("form" for whole-form checks), without echoing the input."""
    errors: Errors = {}
    for e in exc.errors(include_input=False, include_url=False):
        loc = e["loc"]
        name = str(loc[0]) if loc and str(loc[0]) in FIELD_LABELS else "form"
        message = e["msg"].removeprefix("Value error, ")
        if name == "pillar_ids" and e["type"] == "too_short":
            message = "choose at least one pillar"
        errors.setdefault(name, []).append(message)
    return errors


def default_values(pillars: Sequence[PillarOut], now: datetime) -> dict[str, Any]:
    """The form's starting values: SessionIn's defaults, every non-empty pillar chosen."""
    fields = SessionIn.model_fields
    return {
        "session_name": f"Tournament {now:%Y-%m-%d %H:%M}",
        "pillar_ids": [p.id for p in pillars if p.thread_count > 0],
        "criteria": list(fields["criteria"].default_factory()),  # type: ignore[misc]
        **{
            name: fields[name].default
            for name in (*_INT_FIELDS, *_CHECKBOXES, "comparison_mode", "sampling")
        },
    }


def mode_counts(
    data: SessionIn, sizes: Mapping[int, int]
) -> dict[str, tuple[int | None, str | None]]:
    """Comparisons each mode would make with the other options as they are: (count, None),
    or (None, why not). Key-matched plans cannot be counted from sizes: (None, None)."""
    base = service.plan_options(data, 0)
    counts: dict[str, tuple[int | None, str | None]] = {}
    for mode, _, _ in MODES:
        baseline = None if mode == "free_for_all" else base.baseline_pillar_id
        options = dataclasses.replace(base, mode=mode, baseline_pillar_id=baseline)
        if options.match_by_prompt_key:
            counts[mode] = (None, None)
            continue
        try:
            counts[mode] = (count_plan(sizes, options), None)
        except ValueError as exc:
            counts[mode] = (None, str(exc))
    return counts


def eta_seconds(done: int, total: int, started_at: datetime | None, now: datetime) -> float | None:
    """Seconds left at the rate so far; None before the first result or when finished."""
    if started_at is None or done <= 0 or done >= total:
        return None
    elapsed = (now - started_at).total_seconds()
    return elapsed / done * (total - done) if elapsed > 0 else None


def duration_text(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


SortKey = Literal[
    "rank", "thread", "pillar", "bt", "elo", "record", "win_rate", "confidence", "score"
]
SORT_KEYS: tuple[SortKey, ...] = (
    "rank",
    "thread",
    "pillar",
    "bt",
    "elo",
    "record",
    "win_rate",
    "confidence",
    "score",
)
# Direction a header sorts in on the first click: text ascending, numbers best first.
SORT_FIRST_DESC = frozenset({"bt", "elo", "record", "win_rate", "confidence", "score"})


def avg_score(row: LeaderboardRow) -> float | None:
    """The mean of a thread's average Likert scores over the criteria it was scored on."""
    present = [v for v in row.avg_likert_scores.values() if v is not None and math.isfinite(v)]
    return sum(present) / len(present) if present else None


def sort_rows(rows: Sequence[LeaderboardRow], key: SortKey, desc: bool) -> list[LeaderboardRow]:
    """Rows ordered by a column; missing values (no Elo, no scores) always sort last."""
    getters: dict[SortKey, Callable[[LeaderboardRow], Any]] = {
        "rank": lambda r: (r.rank, -r.bt_score),
        "thread": lambda r: (r.thread_title or r.thread_external_id or "").lower(),
        "pillar": lambda r: r.pillar.name.lower(),
        "bt": lambda r: r.bt_score,
        "elo": lambda r: r.elo_score,
        "record": lambda r: (r.wins, -r.losses),
        "win_rate": lambda r: r.win_rate,
        "confidence": lambda r: r.avg_confidence,
        "score": avg_score,
    }
    get = getters[key]
    present = [r for r in rows if get(r) is not None]
    missing = [r for r in rows if get(r) is None]
    return sorted(present, key=get, reverse=desc) + missing


def thread_name(title: str | None, external_id: str | None, thread_id: int) -> str:
    return title or external_id or f"thread {thread_id}"


def likert_dots(score: float | None, scale: int = 5) -> str:
    """●●●○○ for 3 of 5; an empty string without a score."""
    if score is None or not math.isfinite(score):
        return ""
    filled = max(0, min(scale, round(score)))
    return "●" * filled + "○" * (scale - filled)


def percent(value: float | None, digits: int = 0) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value * 100:.{digits}f}%"


def number(value: float | None, fmt: str = "{:.0f}") -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return fmt.format(value)


templates.env.filters["likert_dots"] = likert_dots
templates.env.filters["percent"] = percent
templates.env.filters["number"] = number
templates.env.filters["duration"] = duration_text
templates.env.globals["criterion_label"] = criterion_label


# -- shared loaders -----------------------------------------------------------------------


def _hub(request: Request) -> EventHub | None:
    return getattr(request.app.state, "events", None)


def _missing(request: Request, what: str) -> HTMLResponse:
    return render(request, "auth/error.html", status_code=404, title="Not found", message=what)


async def _judge_models(db: AsyncSession) -> list[ModelOut]:
    """Judge choices: the built-in simulated judge first."""
    models = await providers.list_models(db=db)
    return sorted(models, key=lambda m: (m.name != service.BUILTIN_JUDGE, m.provider_name, m.name))


async def _estimate_context(db: AsyncSession, values: dict[str, Any]) -> dict[str, Any]:
    """The estimate fragment's context for the form's values. The name is not needed to
    estimate: a blank one is only reported on "Create"."""
    ctx: dict[str, Any] = {"estimate": None, "errors": {}, "counts": {}}
    try:
        data = SessionIn.model_validate(values | {"session_name": "estimate"})
    except ValidationError as exc:
        ctx["errors"] = field_errors(exc)
        return ctx
    try:
        ctx["estimate"] = await service.estimate_new(db=db, data=data)
    except Invalid as exc:
        ctx["errors"] = {"form": [str(exc)]}
    sizes = {
        p.id: p.thread_count for p in await catalog.list_pillars(db=db) if p.id in data.pillar_ids
    }
    counts = mode_counts(data, sizes)
    if ctx["estimate"] is not None:  # the chosen mode's count is the estimate's own
        counts[data.comparison_mode] = (ctx["estimate"].total_comparisons, None)
    for mode, (count, why) in counts.items():
        if count is None and why is None:  # key-matched: only a built plan can tell
            counts[mode] = await _mode_estimate(db, data, mode)
    ctx["counts"] = counts
    return ctx


async def _mode_estimate(
    db: AsyncSession, data: SessionIn, mode: str
) -> tuple[int | None, str | None]:
    baseline = None if mode == "free_for_all" else data.baseline_pillar_id
    try:
        other = SessionIn.model_validate(
            data.model_dump() | {"comparison_mode": mode, "baseline_pillar_id": baseline}
        )
        est = await service.estimate_new(db=db, data=other)
    except (ValidationError, Invalid) as exc:
        return None, str(exc).splitlines()[0]
    return est.total_comparisons, None


async def _form_page(
    request: Request,
    db: AsyncSession,
    values: dict[str, Any],
    *,
    status_code: int = 200,
    create_errors: Errors | None = None,
) -> HTMLResponse:
    pillars = await catalog.list_pillars(db=db)
    chosen = {str(v) for v in values.get("pillar_ids", [])}
    return render(
        request,
        "sessions/new.html",
        status_code=status_code,
        pillars=pillars,
        chosen=chosen,
        values=values,
        modes=MODES,
        models=await _judge_models(db),
        create_errors=create_errors or {},
        field_labels=FIELD_LABELS,
        **await _estimate_context(db, values),
    )


async def _progress_context(db: AsyncSession, session_id: int) -> dict[str, Any]:
    s = await service.get_session(db=db, session_id=session_id)
    now = datetime.now(UTC)
    done = s.completed + s.failed
    end = s.finished_at or now
    elapsed = (end - s.started_at).total_seconds() if s.started_at else None
    return {
        "s": s,
        "done": done,
        "eta": eta_seconds(done, s.total, s.started_at, now) if s.status == "running" else None,
        "elapsed": elapsed,
    }


# -- list and home ------------------------------------------------------------------------


@router.get("/sessions", response_class=HTMLResponse)
async def sessions_page(request: Request, db: DbSession):
    sessions = await service.list_sessions(db=db, limit=200)
    pillars = await catalog.list_pillars(db=db)
    return render(request, "sessions/list.html", sessions=sessions, has_pillars=bool(pillars))


@router.get("/sessions/partials/rows", response_class=HTMLResponse)
async def session_rows(
    request: Request, db: DbSession, limit: Annotated[int, Query(ge=1, le=200)] = 200
):
    """The sessions table (home page and list page poll it while a session runs)."""
    sessions = await service.list_sessions(db=db, limit=limit)
    return render(request, "sessions/_rows.html", sessions=sessions, limit=limit)


# -- configure ----------------------------------------------------------------------------


@router.get("/sessions/new", response_class=HTMLResponse)
async def new_session_page(request: Request, db: DbSession):
    pillars = await catalog.list_pillars(db=db)
    return await _form_page(request, db, default_values(pillars, datetime.now(UTC)))


@router.post("/sessions/new/estimate", response_class=HTMLResponse)
async def estimate_fragment(request: Request, db: DbSession):
    """The summary (threads, comparisons, duration, cost, warnings) and, out of band, each
    mode's comparison count and the duration at the chosen worker count."""
    ctx = await _estimate_context(db, session_form(await request.form()))
    status_code = 422 if ctx["errors"] else 200
    return render(
        request,
        "sessions/_estimate.html",
        status_code=status_code,
        oob=True,
        modes=MODES,
        field_labels=FIELD_LABELS,
        **ctx,
    )


@router.post("/sessions/new")
async def create_session_submit(request: Request, db: DbSession):
    """Create and start; 303 to the live page (HX-Redirect for HTMX). Errors: 422 with the
    error list (HTMX) or the whole form again."""
    values = session_form(await request.form())
    errors: Errors = {}
    try:
        data = SessionIn.model_validate(values | {"auto_start": True})
    except ValidationError as exc:
        errors = field_errors(exc)
    else:
        try:
            created = await service.create_session(db=db, data=data, hub=_hub(request))
        except Invalid as exc:
            errors = {"form": [str(exc)]}
        else:
            url = f"/sessions/{created.id}"
            if is_htmx(request):
                return Response(status_code=200, headers={"HX-Redirect": url})
            return RedirectResponse(url, status_code=303)
    if is_htmx(request):
        return render(
            request,
            "sessions/_create_errors.html",
            status_code=422,
            create_errors=errors,
            field_labels=FIELD_LABELS,
        )
    return await _form_page(request, db, values, status_code=422, create_errors=errors)


# -- live ---------------------------------------------------------------------------------


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
async def live_page(request: Request, session_id: int, db: DbSession):
    try:
        ctx = await _progress_context(db, session_id)
    except NotFound as exc:
        return _missing(request, str(exc))
    s: SessionOut = ctx["s"]
    running = await service.list_comparisons(
        db=db, session_id=session_id, status="running", limit=min(s.worker_count, 256)
    )
    lanes = max(len(running.items), min(s.worker_count, MAX_LANES)) if s.status in ACTIVE else 0
    return render(
        request,
        "sessions/live.html",
        running=running.items,
        lane_count=lanes,
        **ctx,
        **await _queue_context(db, s),
    )


@router.get("/sessions/{session_id}/partials/progress", response_class=HTMLResponse)
async def progress_partial(request: Request, session_id: int, db: DbSession):
    return render(request, "sessions/_progress.html", **await _progress_context(db, session_id))


async def _queue_context(db: AsyncSession, s: SessionOut) -> dict[str, Any]:
    queue = await service.list_comparisons(
        db=db, session_id=s.id, status="pending", limit=QUEUE_SHOWN
    )
    # The highest queue positions completed: close enough to "the latest" for a glance.
    recent = await service.list_comparisons(
        db=db,
        session_id=s.id,
        status="completed",
        limit=RECENT_SHOWN,
        offset=max(0, s.counts.completed - RECENT_SHOWN),
    )
    return {"queue": queue, "recent": list(reversed(recent.items))}


@router.get("/sessions/{session_id}/partials/queue", response_class=HTMLResponse)
async def queue_partial(request: Request, session_id: int, db: DbSession):
    s = await service.get_session(db=db, session_id=session_id)
    return render(request, "sessions/_queue.html", s=s, **await _queue_context(db, s))


@router.get("/sessions/{session_id}/thread-labels")
async def thread_labels(
    session_id: int,
    db: DbSession,
    ids: Annotated[str, Query(max_length=6000, pattern=r"^[0-9,]*$")] = "",
) -> JSONResponse:
    """Titles and pillar names of threads, for the worker lanes (events carry only ids)."""
    wanted = sorted({int(i) for i in ids.split(",") if i})[:LABELS_MAX]
    threads = await catalog.threads_by_ids(db=db, ids=wanted)
    names = dict((await db.execute(select(Pillar.id, Pillar.name))).all())
    return JSONResponse(
        {
            str(t.id): {
                "title": thread_name(t.title, t.external_id, t.id),
                "pillar": names.get(t.pillar_id, f"pillar {t.pillar_id}"),
            }
            for t in threads.values()
        }
    )


@router.post("/sessions/{session_id}/delete")
async def delete_session_submit(request: Request, session_id: int, db: DbSession):
    await service.delete_session(db=db, session_id=session_id, hub=_hub(request))
    if is_htmx(request):
        return Response(status_code=200, headers={"HX-Redirect": "/sessions"})
    return RedirectResponse("/sessions", status_code=303)


@router.post("/sessions/{session_id}/{action}", response_class=HTMLResponse)
async def session_action(request: Request, session_id: int, action: str, db: DbSession):
    """Start, pause, resume, cancel, retry-failed; answers with the refreshed progress
    panel (a refused transition shows its reason there, with status 409)."""
    run = ACTIONS.get(action)
    if run is None:
        return _missing(request, f"unknown action {action!r}")
    notice, status_code = None, 200
    try:
        result = await run(db=db, session_id=session_id, hub=_hub(request))
    except Conflict as exc:
        notice, status_code = str(exc), 409
    else:
        if action == "retry-failed":
            notice = f"{result.requeued} failed comparison(s) queued again."
    if not is_htmx(request):
        return RedirectResponse(f"/sessions/{session_id}", status_code=303)
    return render(
        request,
        "sessions/_progress.html",
        status_code=status_code,
        notice=notice,
        notice_error=status_code != 200,
        **await _progress_context(db, session_id),
    )


# -- results ------------------------------------------------------------------------------


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
        return _missing(request, str(exc))
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
    session = await analysis.get_analysis_session(db=db, session_id=session_id)
    await db.close()  # figures load through their own database sessions
    ctx: dict[str, Any] = {"s": s, "a": session, "tab_error": None}
    if session.completed == 0 and tab != "overview":
        return ctx
    cache = get_cache(request)
    maker = request.app.state.sessionmaker
    build = _TAB_BUILDERS[tab]
    try:
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


_TAB_BUILDERS: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
    "overview": _overview,
    "leaderboard": _leaderboard_tab,
    "distribution": _distribution,
    "matrix": _matrix,
    "position": _position,
    "performance": _performance,
    "findings": _findings,
}


# -- thread view --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ThreadComparison:
    """One comparison seen from a thread: its side, its opponent, how it ended for it."""

    id: int
    session_id: int
    session_name: str
    side: Literal["A", "B"]
    opponent_id: int
    opponent_name: str
    opponent_pillar: str
    status: str
    outcome: Literal["won", "lost", "tie", "failed"]
    confidence: float | None
    own_scores: dict[str, float]
    opponent_scores: dict[str, float]
    reasoning: str | None
    error: str | None
    completed_at: datetime | None


def outcome_for(side: str, status: str, winner: str | None) -> str:
    if status != "completed" or winner is None:
        return "failed"
    if winner == "TIE":
        return "tie"
    return "won" if winner == side else "lost"


async def thread_comparisons(
    db: AsyncSession, thread_id: int, limit: int
) -> tuple[list[ThreadComparison], dict[str, int]]:
    """The thread's latest finished comparisons, and its won/lost/tie/failed totals."""
    involved = or_(Comparison.thread_a_id == thread_id, Comparison.thread_b_id == thread_id)
    finished = Comparison.status.in_(("completed", "failed"))
    other = case(
        (Comparison.thread_a_id == thread_id, Comparison.thread_b_id),
        else_=Comparison.thread_a_id,
    )
    rows = (
        await db.execute(
            select(Comparison, JudgeSession.name, Thread.title, Thread.external_id, Pillar.name)
            .join(JudgeSession, JudgeSession.id == Comparison.session_id)
            .outerjoin(Thread, Thread.id == other)
            .outerjoin(Pillar, Pillar.id == Thread.pillar_id)
            .where(involved, finished)
            .order_by(Comparison.id.desc())
            .limit(limit)
        )
    ).all()
    items = []
    for c, session_name, title, external_id, pillar in rows:
        side = "A" if c.thread_a_id == thread_id else "B"
        opponent = c.thread_b_id if side == "A" else c.thread_a_id
        own, theirs = (c.scores_a, c.scores_b) if side == "A" else (c.scores_b, c.scores_a)
        items.append(
            ThreadComparison(
                id=c.id,
                session_id=c.session_id,
                session_name=session_name,
                side=side,
                opponent_id=opponent,
                opponent_name=thread_name(title, external_id, opponent),
                opponent_pillar=pillar or "deleted",
                status=c.status,
                outcome=outcome_for(side, c.status, c.winner),  # type: ignore[arg-type]
                confidence=c.confidence,
                own_scores=own or {},
                opponent_scores=theirs or {},
                reasoning=c.reasoning,
                error=c.parse_error or c.error,
                completed_at=c.completed_at,
            )
        )
    side_won = case(
        (Comparison.winner == "TIE", "tie"),
        (
            ((Comparison.winner == "A") & (Comparison.thread_a_id == thread_id))
            | ((Comparison.winner == "B") & (Comparison.thread_b_id == thread_id)),
            "won",
        ),
        (Comparison.winner.in_(("A", "B")), "lost"),
        else_="failed",
    )
    totals = dict(
        (
            await db.execute(
                select(side_won, func.count()).where(involved, finished).group_by(side_won)
            )
        ).all()
    )
    return items, {k: int(totals.get(k, 0)) for k in ("won", "lost", "tie", "failed")}


@router.get("/threads/{thread_id}/comparisons", response_class=HTMLResponse)
async def thread_comparisons_partial(request: Request, thread_id: int, db: DbSession):
    """The comparisons a thread took part in, with the judge's reasoning (thread page)."""
    items, totals = await thread_comparisons(db, thread_id, THREAD_COMPARISONS)
    return render(
        request,
        "sessions/_thread_comparisons.html",
        items=items,
        totals=totals,
        shown=THREAD_COMPARISONS,
    )
