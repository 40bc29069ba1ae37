"""Server-sent events from a hub topic, for any domain's ``/events`` route."""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from llmjudge.infra.events.hub import (
    CREDENTIALS_CHANGED,
    CREDENTIALS_TOPIC,
    Event,
    EventHub,
    Subscription,
)

__all__ = ["FRAME_INTERVAL_S", "encode_event", "event_frames", "parse_lanes", "sse_response"]

# The least time between two writes to one client. A session at full speed publishes
# hundreds of events per second; written one by one to 100 clients they took the web
# process's event loop (measured: bench/events.py, load mix). Coalesced, a client gets at
# most ~4 writes per second, each carrying every event queued since the last.
FRAME_INTERVAL_S = 0.25

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


def parse_lanes(value: str | None) -> frozenset[str] | None:
    """The ``lanes`` query parameter: absent or ``all`` = every lane, ``none`` or empty =
    none, else comma-separated worker ids."""
    if value is None or value.strip() == "all":
        return None
    if value.strip() == "none":
        return frozenset()
    return frozenset(part.strip() for part in value.split(",") if part.strip())


async def event_frames(
    events: Subscription,
    *,
    min_interval_s: float = FRAME_INTERVAL_S,
    disconnected: Callable[[], Awaitable[bool]] | None = None,
    recheck: Callable[[], Awaitable[bool]] | None = None,
    recheck_s: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[bytes]:
    """The subscription's events as SSE frames, at most one frame per ``min_interval_s``:
    after a frame, events gather for the rest of the interval and go out in one write.

    Every ``recheck_s`` (busy or idle), and at once on a ``credentials_changed`` event (never
    sent to the client), ``recheck`` says whether the client may still listen; if not, a last
    ``closed`` event goes out and the stream ends."""
    last = clock() - min_interval_s
    next_check = clock() + recheck_s
    while True:
        try:
            event = await asyncio.wait_for(events.get(), max(0.0, next_check - clock()))
        except TimeoutError:
            if disconnected is not None and await disconnected():
                return
        else:
            if event is None:
                return
            if event.type == CREDENTIALS_CHANGED:
                next_check = clock()  # re-check now, before any more events go out
            else:
                wait = last + min_interval_s - clock()
                if wait > 0:
                    await asyncio.sleep(wait)
                if disconnected is not None and await disconnected():
                    return
                last = clock()
                batch = [event, *events.take_all()]
                if any(e.type == CREDENTIALS_CHANGED for e in batch):
                    next_check = clock()
                    batch = [e for e in batch if e.type != CREDENTIALS_CHANGED]
                yield b"".join(encode_event(e) for e in batch)
        if clock() >= next_check:
            next_check = clock() + recheck_s
            if recheck is not None and not await recheck():
                closed = {"reason": "credentials revoked"}
                yield ServerSentEvent(data=json.dumps(closed), event="closed").encode()
                return


def sse_response(
    request: Request,
    hub: EventHub,
    topic: str,
    *,
    ping_s: float = 15.0,
    lanes: frozenset[str] | None = None,
    min_interval_s: float = FRAME_INTERVAL_S,
    recheck_s: float | None = None,
) -> EventSourceResponse:
    """Stream ``topic``'s events (see ``encode_event``). The first event, ``ready``, says
    the subscription is live. Writes are coalesced (``event_frames``); ``lanes`` limits the
    token streams to those workers (see ``Subscription``).

    Every ``recheck_s`` (default: setting ``sse_recheck_s``) the stream asks the app's
    ``principal_still_allowed`` whether its credentials still hold, and ends if not; it
    also asks at once when auth announces a change (``credentials_changed``), so a revoked
    token or a deactivated user stops receiving within moments, and within that time even
    if the announcement is lost."""
    settings = getattr(request.app.state, "settings", None)
    every = recheck_s if recheck_s is not None else getattr(settings, "sse_recheck_s", 30.0)
    still_allowed: Callable[[Request], Awaitable[bool]] | None = getattr(
        request.app.state, "principal_still_allowed", None
    )

    async def allowed() -> bool:
        return still_allowed is None or await still_allowed(request)

    async def stream() -> AsyncIterator[ServerSentEvent | bytes]:
        async with hub.subscribe(topic, lanes=lanes, also=(CREDENTIALS_TOPIC,)) as events:
            yield ServerSentEvent(data=json.dumps({"topic": topic}), event="ready")
            async for frame in event_frames(
                events,
                min_interval_s=min_interval_s,
                disconnected=request.is_disconnected,
                recheck=allowed,
                recheck_s=every,
            ):
                yield frame

    # X-Accel-Buffering: proxies (nginx) must not buffer a live stream.
    return EventSourceResponse(stream(), ping=ping_s, headers={"X-Accel-Buffering": "no"})
