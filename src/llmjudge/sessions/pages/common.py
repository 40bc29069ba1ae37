"""What every tournament page shares: the event hub. (A session that does not exist is
answered by the app's page-error handler: infra.web.error_page.)"""

from __future__ import annotations

from fastapi import Request

from llmjudge.infra.events.hub import EventHub


def hub(request: Request) -> EventHub | None:
    return getattr(request.app.state, "events", None)
