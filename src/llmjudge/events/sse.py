"""Server-sent events from a hub topic, for any domain's ``/events`` route."""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from llmjudge.events.hub import Event, EventHub

__all__ = ["encode_event", "sse_response"]

# Every subscriber of a topic sends the same bytes for an event: encode each event once per
# process (ids are unique), not once per subscriber (measured: bench/events.py).
_ENCODED: OrderedDict[str, bytes] = OrderedDict()
_ENCODED_MAX = 10_000


def encode_event(event: Event) -> bytes:
    """The SSE bytes of ``event``: ``event`` = its type, ``data`` = its JSON, ``id`` = its id."""
    data = _ENCODED.get(event.id)
    if data is None:
        data = ServerSentEvent(
            data=json.dumps(event.data, default=str), event=event.type, id=event.id
        ).encode()
        _ENCODED[event.id] = data
        if len(_ENCODED) > _ENCODED_MAX:
            _ENCODED.popitem(last=False)
    return data


def sse_response(
    request: Request,
    hub: EventHub,
    topic: str,
    *,
    ping_s: float = 15.0,
    recheck_s: float | None = None,
) -> EventSourceResponse:
    """Stream ``topic``'s events (see ``encode_event``). The first event, ``ready``, says
    the subscription is live. Events queued while a write was in progress go out together
    in the next write, so a busy stream costs one write per batch, not one per event.

    Every ``recheck_s`` (default: setting ``sse_recheck_s``) the stream asks the app's
    ``principal_still_allowed`` whether its credentials still hold, and ends if not: a
    revoked token or a deactivated user stops receiving within that time."""
    settings = getattr(request.app.state, "settings", None)
    every = recheck_s if recheck_s is not None else getattr(settings, "sse_recheck_s", 30.0)
    still_allowed: Callable[[Request], Awaitable[bool]] | None = getattr(
        request.app.state, "principal_still_allowed", None
    )

    async def stream() -> AsyncIterator[ServerSentEvent | bytes]:
        async with hub.subscribe(topic) as events:
            yield ServerSentEvent(data=json.dumps({"topic": topic}), event="ready")
            next_check = time.monotonic() + every
            while True:
                try:
                    event = await asyncio.wait_for(
                        events.get(), max(0.0, next_check - time.monotonic())
                    )
                except TimeoutError:
                    event = None
                    if await request.is_disconnected():
                        return
                else:
                    if event is None or await request.is_disconnected():
                        return
                    yield b"".join(encode_event(e) for e in (event, *events.take_all()))
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + every
                    if still_allowed is not None and not await still_allowed(request):
                        yield ServerSentEvent(
                            data=json.dumps({"reason": "credentials revoked"}), event="closed"
                        )
                        return

    # X-Accel-Buffering: proxies (nginx) must not buffer a live stream.
    return EventSourceResponse(stream(), ping=ping_s, headers={"X-Accel-Buffering": "no"})
