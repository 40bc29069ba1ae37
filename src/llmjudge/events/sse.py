"""Server-sent events from a hub topic, for any domain's ``/events`` route."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from llmjudge.events.hub import EventHub

__all__ = ["sse_response"]


def sse_response(
    request: Request, hub: EventHub, topic: str, *, ping_s: float = 15.0
) -> EventSourceResponse:
    """Stream ``topic``'s events: SSE ``event`` = the event type, ``data`` = its JSON, ``id``
    = the event id. The first event, ``ready``, says the subscription is live."""

    async def stream() -> AsyncIterator[ServerSentEvent]:
        async with hub.subscribe(topic) as events:
            yield ServerSentEvent(data=json.dumps({"topic": topic}), event="ready")
            async for event in events:
                if await request.is_disconnected():
                    return
                yield ServerSentEvent(
                    data=json.dumps(event.data, default=str), event=event.type, id=event.id
                )

    # X-Accel-Buffering: proxies (nginx) must not buffer a live stream.
    return EventSourceResponse(stream(), ping=ping_s, headers={"X-Accel-Buffering": "no"})
