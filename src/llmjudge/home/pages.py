"""Home page."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from llmjudge.catalog import list_pillars
from llmjudge.demo import load_demo
from llmjudge.infra.web import DbSession, render
from llmjudge.sessions import list_sessions, session_panels

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
async def home(request: Request, db: DbSession):
    pillars = await list_pillars(db=db)
    recent = await list_sessions(db=db, limit=5) if pillars else []
    panels = await session_panels(db=db, session_ids=[s.id for s in recent])
    return render(request, "home.html", pillars=pillars, sessions=recent, panels=panels)


@router.get("/docs", response_class=HTMLResponse)
async def api_docs(request: Request):
    """Interactive API documentation (vendored Swagger UI on /openapi.json)."""
    return render(request, "docs.html")


@router.post("/demo")
async def load_demo_page(db: DbSession):
    await load_demo(db=db)
    return RedirectResponse("/", status_code=303)
