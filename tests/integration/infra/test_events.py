"""Events through PostgreSQL: the hub, a session's live events, and the SSE endpoint."""

from __future__ import annotations

import asyncio
import json
import socket
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from llmjudge.infra.events.hub import (
    CHANNEL,
    INTEREST_EVERY_S,
    INTEREST_GRACE_S,
    Event,
    EventHub,
    Subscription,
)
from tests.conftest import ADMIN_TOKEN
from tests.integration.sessions.test_sessions import create, fast_simulator, seed_threads


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    await fast_simulator(client)
    return await seed_threads(client, 4, pillars=2, prefix="ev")


async def next_event(sub: Subscription, limit_s: float = 10) -> Event:
    async with asyncio.timeout(limit_s):
        event = await sub.get()
    assert event is not None
    return event


async def test_events_cross_processes_through_postgres(db_url: str) -> None:
    listener, publisher = EventHub(db_url), EventHub(db_url, listen=False)
    await listener.start()
    await publisher.start()
    try:
        async with listener.subscribe("persona:3") as sub, listener.subscribe("other") as other:
            for i in range(3):
                await publisher.publish("persona:3", "progress", {"i": i})
            await publisher.publish("persona:3", "big", {"text": "x" * 50_000})
            got = [await next_event(sub) for _ in range(4)]
            assert [(e.type, e.data.get("i")) for e in got[:3]] == [
                ("progress", i) for i in (0, 1, 2)
            ]
            assert got[3].type == "big" and 0 < len(got[3].data["text"]) < 8000
            assert len({e.id for e in got}) == 4
            assert other.dropped == 0 and not other._queue
    finally:
        await publisher.stop()
        await listener.stop()
    assert publisher.published == 4


async def test_a_new_process_learns_who_follows_within_a_round_trip(db_url: str) -> None:
    """A process starting beside a watched one asks, hears the answer and stops publishing
    the streams nobody follows well before the announcements' own period."""
    watched = EventHub(db_url)
    await watched.start()
    try:
        async with watched.subscribe("session:1", lanes=frozenset({"w"})):
            await watched.publish("ready", "ping", {})
            newcomer = EventHub(db_url)
            await newcomer.start()
            started = asyncio.get_running_loop().time()
            try:
                async with asyncio.timeout(INTEREST_GRACE_S - 0.5):
                    # wants_stream is a pure question: there is no event to wait on
                    while newcomer.wants_stream("session:1", "unfollowed"):  # noqa: ASYNC110
                        await asyncio.sleep(0.02)
                took = asyncio.get_running_loop().time() - started
                assert newcomer.wants_stream("session:1", "w")  # the answer arrived
                assert took < INTEREST_EVERY_S, took
            finally:
                await newcomer.stop()
    finally:
        await watched.stop()


async def test_the_listener_reconnects_after_losing_its_connection(db_url: str) -> None:
    hub = EventHub(db_url, reconnect_max_s=0.2)
    await hub.start()
    try:
        async with hub.subscribe("t") as sub:
            conn = await asyncpg.connect(hub.dsn)
            try:
                killed = await conn.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query LIKE $1",
                    f'LISTEN "{CHANNEL}"%',
                )
            finally:
                await conn.close()
            assert killed == 1
            # Events sent while it was down are lost (SSE only signals change); keep sending
            # until the new connection hears one.
            async with asyncio.timeout(10):
                while True:
                    await hub.publish("t", "ping", {})
                    try:
                        async with asyncio.timeout(0.3):
                            event = await sub.get()
                    except TimeoutError:
                        continue
                    assert event is not None and event.type == "ping"
                    break
    finally:
        await hub.stop()


async def test_a_session_publishes_start_stream_and_complete_for_every_comparison(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    hub: EventHub = app.state.events
    events: list[Event] = []
    async with hub.subscribe("*") as sub:
        s = await create(
            client,
            pillar_ids=pillars,
            comparison_mode="free_for_all",
            position_swap=False,
            worker_count=2,
            auto_start=True,
        )
        topic = f"session:{s['id']}"
        async with asyncio.timeout(20):
            seen_status = False
            while not seen_status:
                event = await next_event(sub)
                if event.topic == topic:
                    events.append(event)
                seen_status |= event.type == "workers_status" and event.data["remaining"] == 0
    assert s["total"] == 6
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_type[e.type].append(e.data)
    ids = {
        c["id"] for c in (await client.get(f"/api/sessions/{s['id']}/comparisons")).json()["items"]
    }
    assert {d["comparison_id"] for d in by_type["comparison_start"]} == ids
    assert {d["comparison_id"] for d in by_type["comparison_complete"]} == ids
    assert all(d["status"] == "completed" and d["winner"] for d in by_type["comparison_complete"])
    assert {"status": "completed"} in by_type["session_status"]
    streamed: dict[int, str] = defaultdict(str)
    for d in by_type["llm_stream"]:
        streamed[d["comparison_id"]] += d["text"]
    for cid in ids:
        detail = (await client.get(f"/api/sessions/{s['id']}/comparisons/{cid}")).json()
        assert streamed[cid] == detail["raw_response"]  # the stream carried the whole answer
    last = by_type["workers_status"][-1]
    assert (last["completed"], last["total"], last["queue_pending"]) == (6, 6, 0)
    assert isinstance(last["workers"], list) and last["process"] == app.state.pool.prefix


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def server(app: FastAPI) -> AsyncIterator[str]:
    """The test app on a real socket (ASGITransport buffers whole responses)."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve())
    async with asyncio.timeout(10):
        while not srv.started:  # noqa: ASYNC110 - uvicorn offers no event
            await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        await task


async def test_sse_streams_a_sessions_events(
    server: str, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    s = await create(
        client, pillar_ids=pillars, comparison_mode="free_for_all", position_swap=False
    )
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    seen: list[tuple[str, dict[str, Any]]] = []
    async with (
        httpx.AsyncClient(base_url=server, headers=headers, timeout=20) as http,
        http.stream("GET", f"/api/sessions/{s['id']}/events") as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                seen.append((event, json.loads(line.split(":", 1)[1])))
                if event == "ready":  # subscribed: now start the work
                    started = await http.post(f"/api/sessions/{s['id']}/start")
                    assert started.status_code == 200
                if event == "comparison_complete":
                    break
    types = [t for t, _ in seen]
    assert types[0] == "ready" and seen[0][1] == {"topic": f"session:{s['id']}"}
    assert "comparison_start" in types and types[-1] == "comparison_complete"
    assert ("session_status", {"status": "running"}) in seen
    assert (await client.get("/api/sessions/987654/events")).status_code == 404
