"""What every tournament page shares: the event hub and the not-found page."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse

from llmjudge.infra.events.hub import EventHub
from llmjudge.infra.web import render


def hub(request: Request) -> EventHub | None:
    return getattr(request.app.state, "events", None)


def missing(request: Request, what: str) -> HTMLResponse:
    return render(request, "auth/error.html", status_code=404, title="Not found", message=what)
