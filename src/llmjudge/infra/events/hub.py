"""The event hub: small JSON events over PostgreSQL LISTEN/NOTIFY, fanned out in-process.

Every process that publishes (web app, `llmjudge worker`) queues events in memory; one
publisher task sends them on a dedicated connection, many per round trip
(``SELECT pg_notify(channel, p) FROM unnest($1::text[])``), so a worker never waits on the
database to publish. Every web process LISTENs on one dedicated connection (reconnecting on
loss) and hands each event to the subscribers of its topic through bounded per-subscriber
queues: a slow subscriber loses its oldest events (``workers_status`` snapshots are coalesced
first), and never slows the listener, the publisher or a worker.

Topics name what changed (``session:12``, ``persona:3``); ``*`` subscribes to all of them.

Token streams (``llm_stream``) are most of a busy session's events, and usually nobody
watches them: a web process announces the lanes its subscribers follow (``stream_interest``,
on subscribing and every ``INTEREST_EVERY_S``), and ``wants_stream`` lets a publisher skip
a stream nobody follows, here or in another listening process. A process that hears no
announcements (``listen=False``, its listener down or just started) publishes every stream;
one whose listener comes up asks the others to announce at once, and waits only for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from llmjudge.core.text import fastjson

__all__ = [
    "CHANNEL",
    "COALESCED_TYPES",
    "CREDENTIALS_CHANGED",
    "CREDENTIALS_TOPIC",
    "STREAM_INTEREST",
    "STREAM_TYPES",
    "DeltaBatcher",
    "Event",
    "EventHub",
    "Subscription",
    "asyncpg_dsn",
    "credentials_changed_payload",
    "encode_payload",
    "listen_forever",
]

log = logging.getLogger(__name__)

CHANNEL = "llmjudge_events"
ALL_TOPICS = "*"
# PostgreSQL refuses NOTIFY payloads of 8000 bytes or more.
MAX_PAYLOAD_BYTES = 7900
# Snapshot events: a newer one makes an undelivered older one of the same type worthless.
COALESCED_TYPES = frozenset({"workers_status"})
# Token-stream events: delivered only to subscribers following the event's lane (worker).
STREAM_TYPES = frozenset({"llm_stream"})
# Internal: "this process has subscribers following these lanes of this topic"; heard by
# every listening hub, never handed to a subscriber.
STREAM_INTEREST = "stream_interest"
_INTEREST_MARK = f'"y":"{STREAM_INTEREST}"'  # as encode_payload writes the type
INTEREST_EVERY_S = 2.0
INTEREST_TTL_S = 3 * INTEREST_EVERY_S  # an announcement holds this long
# A process listening for less than this may not have heard every follower yet: it
# publishes every stream until then...
INTEREST_GRACE_S = 1.5 * INTEREST_EVERY_S
# ...or until this long after its own question ("who follows what?", asked as its listener
# comes up) has come back to it: the other processes heard it then, and answer at once.
ANSWERS_GRACE_S = 0.25
_STRING_LIMITS = (2000, 500, 100, 20)
# A token was revoked, a user deactivated or signed out: every open stream re-checks its
# credentials at once (see events.sse) instead of at its next periodic re-check.
CREDENTIALS_TOPIC = "credentials"
CREDENTIALS_CHANGED = "credentials_changed"


def asyncpg_dsn(url: str) -> str:
    """A libpq-style DSN for asyncpg from a SQLAlchemy URL (``postgresql+asyncpg://``)."""
    for prefix in ("postgresql+asyncpg://", "postgres+asyncpg://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


@dataclass(frozen=True, slots=True)
class Event:
    topic: str
    type: str
    data: dict[str, Any]
    id: str  # unique per event ("origin-seq"): usable as an SSE id


def _clip_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    if isinstance(value, dict):
        return {k: _clip_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip_strings(v, limit) for v in value]
    return value


def encode_payload(event: Event) -> str:
    """The NOTIFY payload of ``event``: JSON under the size limit, long strings clipped."""

    def dump(data: Any) -> bytes:
        return fastjson.dumps({"i": event.id, "t": event.topic, "y": event.type, "d": data}, str)

    raw = dump(event.data)
    for limit in _STRING_LIMITS:
        if len(raw) <= MAX_PAYLOAD_BYTES:
            return raw.decode()
        raw = dump(_clip_strings(event.data, limit))
    if len(raw) <= MAX_PAYLOAD_BYTES:
        return raw.decode()
    return dump({"truncated": True}).decode()


def credentials_changed_payload() -> str:
    """The NOTIFY payload of a ``credentials_changed`` event. Sent with ``pg_notify`` inside
    the transaction that changes the credentials, so it goes out only if that commits, and
    reaches every listening process."""
    event = Event(CREDENTIALS_TOPIC, CREDENTIALS_CHANGED, {}, f"credentials-{uuid.uuid4().hex}")
    return encode_payload(event)


def decode_payload(payload: str) -> Event | None:
    try:
        body = json.loads(payload)
        return Event(topic=body["t"], type=body["y"], data=body["d"], id=body["i"])
    except (ValueError, KeyError, TypeError):
        log.warning("ignoring a malformed event payload: %.200s", payload)
        return None


def _follows(lanes: frozenset[str] | None, lane: str) -> bool:
    """Whether a follower of ``lanes`` (None: every lane) shows ``lane``'s token stream."""
    return lanes is None or lane in lanes


class Subscription:
    """A bounded queue of events for one subscriber; iterate it with ``async for``.

    ``lanes``: the worker ids whose token streams (``llm_stream``) this subscriber shows;
    None follows every lane, an empty set none. Streams are most of a busy session's events
    (measured: bench/events.py), and a page shows a few lanes, so the rest are dropped here,
    before they cost a queue slot or a write.
    """

    def __init__(self, topic: str, maxsize: int, lanes: frozenset[str] | None = None) -> None:
        self.topic = topic
        self.lanes = lanes
        self.dropped = 0
        self._queue: deque[Event] = deque()
        self._maxsize = maxsize
        self._ready = asyncio.Event()
        self._closed = False

    def put(self, event: Event) -> None:
        """Never blocks: coalesce a snapshot with its undelivered predecessor, else drop
        the oldest event when full."""
        if event.type in STREAM_TYPES and not _follows(
            self.lanes, str(event.data.get("worker_id"))
        ):
            return
        if event.type in COALESCED_TYPES:
            for i, queued in enumerate(self._queue):
                if queued.type == event.type and queued.topic == event.topic:
                    del self._queue[i]
                    self.dropped += 1
                    break
        if len(self._queue) >= self._maxsize:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append(event)
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def take_all(self) -> list[Event]:
        """Every queued event, at once (a busy subscriber sends them in one write)."""
        events = list(self._queue)
        self._queue.clear()
        return events

    async def get(self) -> Event | None:
        """The next event; None once the hub has stopped (wrap in ``asyncio.timeout``)."""
        while not self._queue:
            if self._closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self._queue.popleft()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        event = await self.get()
        if event is None:
            raise StopAsyncIteration
        return event


class EventHub:
    """Publish events through PostgreSQL and fan them out to local subscribers.

    ``listen=False`` (worker processes) only publishes. ``publish`` never waits for the
    database: it queues (bounded, oldest dropped) and the publisher task sends in batches.
    """

    def __init__(
        self,
        dsn: str,
        *,
        listen: bool = True,
        subscriber_queue: int = 1000,
        outbox_size: int = 50_000,
        batch_size: int = 500,
        reconnect_max_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dsn = asyncpg_dsn(dsn)
        self.listen = listen
        self.subscriber_queue = subscriber_queue
        self.batch_size = batch_size
        self.reconnect_max_s = reconnect_max_s
        self.published = 0
        self.dropped = 0
        self._origin = uuid.uuid4().hex[:8]
        self._seq = itertools.count(1)
        self._outbox: deque[str] = deque(maxlen=outbox_size)
        self._outbox_ready = asyncio.Event()
        self._outbox_empty = asyncio.Event()
        self._subs: dict[str, set[Subscription]] = defaultdict(set)
        self._tasks: list[asyncio.Task[None]] = []
        self._listener_ready = asyncio.Event()
        self._stopping = False
        self._clock = clock
        self._listening_since: float | None = None  # None: not listening now
        self._answers_due: float | None = None  # set when our question came back
        # topic -> origin -> (expires, lanes followed there; None: every lane)
        self._interest: dict[str, dict[str, tuple[float, frozenset[str] | None]]] = {}

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the publisher (and listener); returns once the listener is LISTENing."""
        self._stopping = False
        self._tasks.append(asyncio.create_task(self._run_publisher(), name="events-publisher"))
        if self.listen:
            self._tasks.append(asyncio.create_task(self._run_listener(), name="events-listener"))
            self._tasks.append(asyncio.create_task(self._announce_loop(), name="events-interest"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._listener_ready.wait(), 10)

    async def stop(self, flush_timeout: float = 2.0) -> None:
        """Flush queued events (up to ``flush_timeout``), then close everything."""
        if self._outbox and self._tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._outbox_empty.wait(), flush_timeout)
        self._stopping = True
        self._outbox_ready.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for subs in self._subs.values():
            for sub in subs:
                sub.close()

    # -- publishing -----------------------------------------------------------------------

    def publish_nowait(self, topic: str, type: str, data: dict[str, Any]) -> None:
        if len(self._outbox) == self._outbox.maxlen:
            self.dropped += 1
        event = Event(topic=topic, type=type, data=data, id=f"{self._origin}-{next(self._seq)}")
        # The id also keeps payloads unique: PostgreSQL folds identical payloads sent in one
        # transaction into one notification.
        self._outbox.append(encode_payload(event))
        self._outbox_empty.clear()
        self._outbox_ready.set()

    async def publish(self, topic: str, type: str, data: dict[str, Any]) -> None:
        """Queue one event for every listening process (returns at once)."""
        self.publish_nowait(topic, type, data)

    async def _run_publisher(self) -> None:
        conn: asyncpg.Connection | None = None
        delay = 0.1
        try:
            while not self._stopping:
                if not self._outbox:
                    self._outbox_empty.set()
                    self._outbox_ready.clear()
                    await self._outbox_ready.wait()
                    continue
                try:
                    if conn is None or conn.is_closed():
                        conn = await asyncpg.connect(self.dsn)
                    batch = [
                        self._outbox[i] for i in range(min(self.batch_size, len(self._outbox)))
                    ]
                    await conn.execute(
                        "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", CHANNEL, batch
                    )
                    for _ in batch:
                        self._outbox.popleft()
                    self.published += len(batch)
                    delay = 0.1
                except Exception as exc:  # noqa: BLE001
                    # Any failure (under uvloop a lost server can surface as
                    # InternalClientError, which is no PostgresError): reconnect, never die.
                    log.warning("event publisher: %r; retrying in %.1fs", exc, delay)
                    conn = await _close_quietly(conn)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.reconnect_max_s)
        finally:
            await _close_quietly(conn)

    # -- listening ------------------------------------------------------------------------

    async def _run_listener(self) -> None:
        await listen_forever(
            self.dsn,
            CHANNEL,
            self._on_notify,
            ready=self._listener_ready,
            reconnect_max_s=self.reconnect_max_s,
            on_state=self.listening,
        )

    def listening(self, up: bool) -> None:
        """The listener's state: LISTENing now, or its connection lost."""
        self._listening_since = self._clock() if up else None
        self._answers_due = None
        if up:
            # Ask every listening process to announce its followers now rather than at its
            # next round (no lanes of its own: an older process takes it for "none").
            ask = {"origin": self._origin, "lanes": [], "ask": True}
            self.publish_nowait(ALL_TOPICS, STREAM_INTEREST, ask)
        else:
            self._interest.clear()  # announcements may be missed until it is back

    def _on_notify(self, payload: str) -> None:
        # Without a subscriber here only announcements matter: nothing else is decoded.
        if not self._subs and _INTEREST_MARK not in payload:
            return
        event = decode_payload(payload)
        if event is None:
            return
        if event.type == STREAM_INTEREST:
            self._heard_interest(event)
        else:
            self.dispatch(event)

    # -- who follows token streams ------------------------------------------------------

    def wants_stream(self, topic: str, lane: str) -> bool:
        """Whether an ``llm_stream`` event of ``lane`` (a worker id) on ``topic`` may reach a
        subscriber, in this process or in another that listens. True whenever this process
        cannot know (see the module docstring)."""
        since, due = self._listening_since, self._answers_due
        if not self.listen or since is None:
            return True
        if self._clock() < (due if due is not None else since + INTEREST_GRACE_S):
            return True
        if not self._subs and not self._interest:  # the usual case: nobody watches
            return False
        for t in (topic, ALL_TOPICS):
            if any(_follows(sub.lanes, lane) for sub in self._subs.get(t, ())):
                return True
        now = self._clock()
        for t in (topic, ALL_TOPICS):
            for expires, lanes in self._interest.get(t, {}).values():
                if expires > now and _follows(lanes, lane):
                    return True
        return False

    def _followed(self, topic: str) -> tuple[bool, frozenset[str] | None]:
        """Whether this process's subscribers of ``topic`` follow any lane, and which (None:
        every lane)."""
        lanes: set[str] = set()
        for sub in self._subs.get(topic, ()):
            if sub.lanes is None:
                return True, None
            lanes |= sub.lanes
        return bool(lanes), frozenset(lanes)

    def announce(self, topic: str) -> None:
        """Tell every listening process which lanes of ``topic`` are followed here."""
        follows, lanes = self._followed(topic)
        if follows:
            data = {"origin": self._origin, "lanes": None if lanes is None else sorted(lanes)}
            self.publish_nowait(topic, STREAM_INTEREST, data)

    async def _announce_loop(self) -> None:
        while True:
            await asyncio.sleep(INTEREST_EVERY_S)
            for topic in list(self._subs):
                self.announce(topic)

    def _heard_interest(self, event: Event) -> None:
        origin, lanes = event.data.get("origin"), event.data.get("lanes")
        if not isinstance(origin, str):
            return
        if event.data.get("ask"):
            if origin == self._origin:
                self._answers_due = self._clock() + ANSWERS_GRACE_S
            else:
                for topic in list(self._subs):
                    self.announce(topic)
            return
        if origin == self._origin:
            return
        followed = None if lanes is None else frozenset(str(lane) for lane in lanes)
        now = self._clock()
        by_origin = self._interest.setdefault(event.topic, {})
        for o in [o for o, (expires, _) in by_origin.items() if expires <= now]:
            del by_origin[o]
        by_origin[origin] = (now + INTEREST_TTL_S, followed)
        for t in [t for t, by in self._interest.items() if all(e <= now for e, _ in by.values())]:
            del self._interest[t]  # topics nobody follows any more: the fast "no" above

    def dispatch(self, event: Event) -> None:
        """Hand ``event`` to this process's subscribers of its topic (and of ``*``)."""
        for sub in (*self._subs.get(event.topic, ()), *self._subs.get(ALL_TOPICS, ())):
            sub.put(event)

    @contextlib.asynccontextmanager
    async def subscribe(
        self, topic: str, *, lanes: frozenset[str] | None = None, also: tuple[str, ...] = ()
    ) -> AsyncIterator[Subscription]:
        """``async with hub.subscribe("session:1") as events: async for e in events: ...``
        (``lanes``: see ``Subscription``; ``also``: more topics into the same queue, such as
        ``CREDENTIALS_TOPIC``)."""
        sub = Subscription(topic, self.subscriber_queue, lanes)
        topics = list(dict.fromkeys((topic, *also)))
        for t in topics:
            self._subs[t].add(sub)
        if lanes is None or lanes:
            self.announce(topic)  # other processes' workers stream this lane from now on
        try:
            yield sub
        finally:
            for t in topics:
                subs = self._subs.get(t)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._subs[t]

    def subscriber_count(self, topic: str) -> int:
        return len(self._subs.get(topic, ()))


async def listen_forever(
    dsn: str,
    channel: str,
    on_payload: Callable[[str], None],
    *,
    ready: asyncio.Event | None = None,
    reconnect_max_s: float = 5.0,
    on_state: Callable[[bool], None] | None = None,
) -> None:
    """LISTEN on ``channel`` on a dedicated connection until cancelled, reconnecting with
    backoff when the connection is lost; ``ready`` is set once listening, and ``on_state``
    hears True whenever listening starts and False whenever it stops."""
    delay = 0.1
    while True:
        conn: asyncpg.Connection | None = None
        lost = asyncio.Event()
        try:
            conn = await asyncpg.connect(dsn)
            conn.add_termination_listener(lambda _c, lost=lost: lost.set())
            await conn.add_listener(channel, lambda _c, _pid, _ch, payload: on_payload(payload))
            if ready is not None:
                ready.set()
            if on_state is not None:
                on_state(True)
            delay = 0.1
            while not lost.is_set():
                # A dead peer may not close the socket: probe it now and then.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), 15)
                if not lost.is_set():
                    await asyncio.wait_for(conn.fetchval("SELECT 1"), 10)
            log.warning("LISTEN %s lost its connection; reconnecting", channel)
        except Exception as e:  # noqa: BLE001
            # Whatever a lost server raises (InternalClientError under uvloop included), the
            # listener reconnects with backoff and LISTENs again: it must outlive any outage.
            log.warning("LISTEN %s: %r; reconnecting in %.1fs", channel, e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, reconnect_max_s)
        finally:
            if on_state is not None:
                on_state(False)
            await _close_quietly(conn)


async def _close_quietly(conn: asyncpg.Connection | None) -> None:
    if conn is not None and not conn.is_closed():
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.close(), 2)


class DeltaBatcher:
    """Collects streamed text deltas and publishes them at most every ``interval_s``.

    ``add`` is the ``on_delta`` callback of a model call; ``flush`` sends the rest. Each
    batch is published as ``{**fields, "text": <joined deltas>}`` with event ``type``.
    """

    def __init__(
        self,
        publish: Callable[[str], Awaitable[None] | None],
        *,
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish = publish
        self._interval = interval_s
        self._clock = clock
        self._parts: list[str] = []
        self._last = clock()

    async def add(self, delta: str) -> None:
        self._parts.append(delta)
        if self._clock() - self._last >= self._interval:
            await self.flush()

    async def flush(self) -> None:
        if not self._parts:
            return
        text, self._parts = "".join(self._parts), []
        self._last = self._clock()
        result = self._publish(text)
        if result is not None:
            await result
