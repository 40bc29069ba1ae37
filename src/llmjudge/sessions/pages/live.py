"""The live page of a session: progress, worker lanes, the queue and the latest results;
its partials, and the page twins of the session actions (start, pause, resume, cancel,
retry-failed, delete). Twins: `GET /api/sessions/{id}`, `.../comparisons`, `.../events`
and the `POST /api/sessions/{id}/<action>` routes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import Conflict, Invalid, NotFound
from llmjudge.infra.web import DbSession, is_htmx, refusal, render
from llmjudge.sessions import control, execution, reads
from llmjudge.sessions.adaptive import state as adaptive
from llmjudge.sessions.deps import get_tester, parse_ids
from llmjudge.sessions.models import AdaptiveRound
from llmjudge.sessions.pages.common import hub
from llmjudge.sessions.pages.formatting import eta_seconds
from llmjudge.sessions.schemas import SessionOut

router = APIRouter(include_in_schema=False)

ACTIONS: dict[str, Callable[..., Any]] = {
    "start": control.start_session,
    "pause": control.pause_session,
    "resume": control.resume_session,
    "cancel": control.cancel_session,
    "retry-failed": control.retry_failed,
}
ACTIVE = ("running", "paused")
MAX_LANES = 64  # lanes drawn before any worker reports; more appear as workers do
QUEUE_SHOWN = 10
RECENT_SHOWN = 8


async def _progress_context(db: AsyncSession, session_id: int) -> dict[str, Any]:
    s = await reads.get_session(db=db, session_id=session_id)
    now = datetime.now(UTC)
    done = s.completed + s.failed
    end = s.finished_at or now
    elapsed = (end - s.started_at).total_seconds() if s.started_at else None
    return {
        "s": s,
        "done": done,
        "eta": eta_seconds(done, s.total, s.started_at, now) if s.status == "running" else None,
        "elapsed": elapsed,
        **await _adaptive_progress(db, s),
    }


async def _adaptive_progress(db: AsyncSession, s: SessionOut) -> dict[str, Any]:
    """An adaptive session's total is what its rounds have queued so far: it grows each round,
    so the panel names the round and the cap (the budget in comparisons) it can grow to."""
    if s.comparison_mode != "adaptive":
        return {"adaptive_round": None, "adaptive_cap": None}
    rounds = await db.scalar(
        select(func.count())
        .select_from(AdaptiveRound)
        .where(AdaptiveRound.session_id == s.id, AdaptiveRound.size > 0)
    )
    cap = (s.options.get("adaptive") or {}).get("budget_comparisons")
    return {"adaptive_round": rounds or 0, "adaptive_cap": cap}


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
async def live_page(request: Request, session_id: int, db: DbSession):
    ctx = await _progress_context(db, session_id)
    s: SessionOut = ctx["s"]
    running = await reads.list_comparisons(
        db=db, session_id=session_id, status="running", limit=min(s.worker_count, 256)
    )
    lanes = max(len(running.items), min(s.worker_count, MAX_LANES)) if s.status in ACTIVE else 0
    return render(
        request,
        "sessions/live.html",
        running=running.items,
        lane_count=lanes,
        shown=ADAPTIVE_SHOWN,
        **ctx,
        **await _queue_context(db, s),
        **await _adaptive_context(db, s),
    )


ADAPTIVE_SHOWN = 100  # ranking rows on the live page (the API twin has them all)


async def _adaptive_context(db: AsyncSession, s: SessionOut) -> dict[str, Any]:
    if s.comparison_mode != "adaptive":
        return {"adaptive": None}
    return {"adaptive": await adaptive.adaptive_state(db=db, session_id=s.id)}


@router.get("/sessions/{session_id}/partials/adaptive", response_class=HTMLResponse)
async def adaptive_partial(request: Request, session_id: int, db: DbSession):
    """The current ranking with its intervals, the stopping rule's progress and the spend.
    Twin: `GET /api/sessions/{id}/adaptive`."""
    s = await reads.get_session(db=db, session_id=session_id)
    return render(
        request,
        "sessions/_adaptive.html",
        s=s,
        shown=ADAPTIVE_SHOWN,
        **await _adaptive_context(db, s),
    )


@router.get("/sessions/{session_id}/partials/batches", response_class=HTMLResponse)
async def batches_partial(request: Request, session_id: int, db: DbSession):
    """A batch session's provider jobs and their states. Twin: `GET /api/sessions/{id}/batches`."""
    return render(
        request,
        "sessions/_batches.html",
        batches=await execution.list_batches(db=db, session_id=session_id),
    )


@router.get("/sessions/{session_id}/partials/progress", response_class=HTMLResponse)
async def progress_partial(request: Request, session_id: int, db: DbSession):
    return render(request, "sessions/_progress.html", **await _progress_context(db, session_id))


async def _queue_context(db: AsyncSession, s: SessionOut) -> dict[str, Any]:
    queue = await reads.list_comparisons(
        db=db, session_id=s.id, status="pending", limit=QUEUE_SHOWN
    )
    # The highest queue positions completed: close enough to "the latest" for a glance.
    recent = await reads.list_comparisons(
        db=db,
        session_id=s.id,
        status="completed",
        limit=RECENT_SHOWN,
        offset=max(0, s.counts.completed - RECENT_SHOWN),
    )
    return {"queue": queue, "recent": list(reversed(recent.items))}


@router.get("/sessions/{session_id}/partials/queue", response_class=HTMLResponse)
async def queue_partial(request: Request, session_id: int, db: DbSession):
    s = await reads.get_session(db=db, session_id=session_id)
    return render(request, "sessions/_queue.html", s=s, **await _queue_context(db, s))


@router.get("/sessions/{session_id}/thread-labels")
async def thread_labels(
    session_id: int,
    db: DbSession,
    ids: Annotated[str, Query(max_length=6000, pattern=r"^[0-9,]*$")] = "",
) -> JSONResponse:
    """Titles and pillar names of threads, for the worker lanes (events carry only ids).
    Twin: `GET /api/sessions/{id}/thread-labels`."""
    found = await reads.thread_labels(db=db, ids=parse_ids(ids))
    return JSONResponse({str(t): label.model_dump() for t, label in found.items()})


@router.post("/sessions/{session_id}/delete")
async def delete_session_submit(request: Request, session_id: int, db: DbSession):
    await control.delete_session(db=db, session_id=session_id, hub=hub(request))
    if is_htmx(request):
        return Response(status_code=200, headers={"HX-Redirect": "/sessions"})
    return RedirectResponse("/sessions", status_code=303)


@router.post("/sessions/{session_id}/{action}", response_class=HTMLResponse)
async def session_action(request: Request, session_id: int, action: str, db: DbSession):
    """Start, pause, resume, cancel, retry-failed; answers with the refreshed progress
    panel (a refused transition shows its reason there, with status 409)."""
    run = ACTIONS.get(action)
    if run is None:
        raise NotFound(f"unknown action {action!r}")
    notice, status_code = None, 200
    extra = {"llm": get_tester(request)} if action == "start" else {}
    try:
        result = await run(db=db, session_id=session_id, hub=hub(request), **extra)
    except (Conflict, Invalid) as exc:  # Invalid: the test connection before a first start
        found = refusal(exc)
        notice, status_code = found.message, found.status
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
