"""The sessions list page, and the sessions table the home and list pages poll."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from llmjudge.catalog import list_pillars
from llmjudge.infra.web import DbSession, render
from llmjudge.sessions import reads

router = APIRouter(include_in_schema=False)


@router.get("/sessions", response_class=HTMLResponse)
async def sessions_page(request: Request, db: DbSession):
    sessions = await reads.list_sessions(db=db, limit=200)
    pillars = await list_pillars(db=db)
    panels = await reads.session_panels(db=db, session_ids=[s.id for s in sessions])
    return render(
        request,
        "sessions/list.html",
        sessions=sessions,
        panels=panels,
        has_pillars=bool(pillars),
    )


@router.get("/sessions/partials/rows", response_class=HTMLResponse)
async def session_rows(
    request: Request, db: DbSession, limit: Annotated[int, Query(ge=1, le=200)] = 200
):
    """The sessions table (home page and list page poll it while a session runs)."""
    sessions = await reads.list_sessions(db=db, limit=limit)
    panels = await reads.session_panels(db=db, session_ids=[s.id for s in sessions])
    return render(request, "sessions/_rows.html", sessions=sessions, panels=panels, limit=limit)
