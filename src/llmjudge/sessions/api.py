"""Judge sessions JSON API: create, estimate, control, results, live events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, status
from sse_starlette import EventSourceResponse

from llmjudge.events.hub import EventHub
from llmjudge.events.sse import sse_response
from llmjudge.sessions import service
from llmjudge.sessions.schemas import (
    ComparisonDetail,
    ComparisonPage,
    ComparisonStatus,
    EstimateOut,
    RetryResult,
    SessionIn,
    SessionOut,
    SessionStatus,
    SessionSummary,
)
from llmjudge.sessions.worker import session_topic
from llmjudge.web import DbSession

router = APIRouter(prefix="/api/sessions", tags=["sessions"])


def get_hub(request: Request) -> EventHub | None:
    return getattr(request.app.state, "events", None)


Hub = Annotated[EventHub | None, Depends(get_hub)]


@router.post("", response_model=SessionOut, status_code=status.HTTP_201_CREATED)
async def create_session(data: SessionIn, db: DbSession, hub: Hub) -> SessionOut:
    """Create a session and its comparison plan (draft; `auto_start` starts it)."""
    return await service.create_session(db=db, data=data, hub=hub)


@router.post("/estimate", response_model=EstimateOut)
async def estimate_new(data: SessionIn, db: DbSession) -> EstimateOut:
    """Comparisons, duration by worker count, tokens and cost of a session; nothing stored."""
    return await service.estimate_new(db=db, data=data)


@router.get("", response_model=list[SessionSummary])
async def list_sessions(
    db: DbSession,
    status: SessionStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> list[SessionSummary]:
    """Sessions, newest first, with progress."""
    return await service.list_sessions(db=db, status=status, limit=limit, offset=offset)


@router.get("/{session_id}", response_model=SessionOut)
async def get_session(session_id: int, db: DbSession) -> SessionOut:
    """Status, counts per comparison status, tokens and cost so far, judge model."""
    return await service.get_session(db=db, session_id=session_id)


@router.get("/{session_id}/estimate", response_model=EstimateOut)
async def estimate_session(session_id: int, db: DbSession) -> EstimateOut:
    return await service.estimate_session(db=db, session_id=session_id)


@router.post("/{session_id}/start", response_model=SessionOut)
async def start_session(session_id: int, db: DbSession, hub: Hub) -> SessionOut:
    """draft -> running."""
    return await service.start_session(db=db, session_id=session_id, hub=hub)


@router.post("/{session_id}/pause", response_model=SessionOut)
async def pause_session(session_id: int, db: DbSession, hub: Hub) -> SessionOut:
    """running -> paused: comparisons in flight finish, no new ones start."""
    return await service.pause_session(db=db, session_id=session_id, hub=hub)


@router.post("/{session_id}/resume", response_model=SessionOut)
async def resume_session(session_id: int, db: DbSession, hub: Hub) -> SessionOut:
    """paused -> running."""
    return await service.resume_session(db=db, session_id=session_id, hub=hub)


@router.post("/{session_id}/cancel", response_model=SessionOut)
async def cancel_session(session_id: int, db: DbSession, hub: Hub) -> SessionOut:
    """Pending comparisons are cancelled; those in flight finish and are kept."""
    return await service.cancel_session(db=db, session_id=session_id, hub=hub)


@router.post("/{session_id}/retry-failed", response_model=RetryResult)
async def retry_failed(session_id: int, db: DbSession, hub: Hub) -> RetryResult:
    """Failed comparisons go back to the queue with fresh attempts."""
    return await service.retry_failed(db=db, session_id=session_id, hub=hub)


@router.delete("/{session_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_session(session_id: int, db: DbSession, hub: Hub) -> None:
    """Delete a session and all its comparisons."""
    await service.delete_session(db=db, session_id=session_id, hub=hub)


@router.get("/{session_id}/comparisons", response_model=ComparisonPage)
async def list_comparisons(
    session_id: int,
    db: DbSession,
    status: ComparisonStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> ComparisonPage:
    """Comparisons in queue order, with thread titles and pillar names."""
    return await service.list_comparisons(
        db=db, session_id=session_id, status=status, limit=limit, offset=offset
    )


@router.get("/{session_id}/comparisons/{comparison_id}", response_model=ComparisonDetail)
async def get_comparison(session_id: int, comparison_id: int, db: DbSession) -> ComparisonDetail:
    """One comparison, with the judge's raw response."""
    return await service.get_comparison(db=db, session_id=session_id, comparison_id=comparison_id)


@router.get(
    "/{session_id}/events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def session_events(session_id: int, request: Request, db: DbSession) -> EventSourceResponse:
    """Server-sent events: `ready`, `session_status`, `comparison_start`, `llm_stream`
    (text batches), `comparison_complete`, `comparison_retry`, `workers_status` (about once
    per second per worker process)."""
    await service.get_session(db=db, session_id=session_id)  # 404 for an unknown session
    await db.close()  # hold no connection for the life of the stream
    return sse_response(request, request.app.state.events, session_topic(session_id))
