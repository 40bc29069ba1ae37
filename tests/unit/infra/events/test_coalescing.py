"""Per-subscriber coalescing: token streams only for followed lanes, writes in frames."""

from __future__ import annotations

import asyncio
import time

from llmjudge.infra.events.hub import Event, EventHub, Subscription
from llmjudge.infra.events.sse import event_frames, parse_lanes


def _ev(i: int, type: str = "comparison_complete", worker: str = "w0") -> Event:
    return Event("session:1", type, {"i": i, "worker_id": worker}, f"o-{i}")


async def test_streams_of_unfollowed_lanes_never_reach_the_queue() -> None:
    sub = Subscription("session:1", maxsize=100, lanes=frozenset({"w1"}))
    sub.put(_ev(1, "llm_stream", "w0"))
    sub.put(_ev(2, "llm_stream", "w1"))
    sub.put(_ev(3, "comparison_complete", "w0"))  # progress: always delivered
    sub.put(_ev(4, "comparison_start", "w2"))
    sub.close()
    assert [e.data["i"] async for e in sub] == [2, 3, 4]
    assert sub.dropped == 0


async def test_no_lanes_means_no_streams_and_none_means_all() -> None:
    hub = EventHub("postgresql://unused/db")
    async with (
        hub.subscribe("session:1", lanes=frozenset()) as quiet,
        hub.subscribe("session:1") as every,
    ):
        for i in range(10):
            hub.dispatch(_ev(i, "llm_stream", f"w{i % 3}"))
        hub.dispatch(_ev(99))
        quiet.close()
        every.close()
        assert [e.data["i"] async for e in quiet] == [99]
        assert len([e async for e in every]) == 11


def test_parse_lanes() -> None:
    assert parse_lanes(None) is None
    assert parse_lanes("all") is None
    assert parse_lanes("none") == frozenset()
    assert parse_lanes("") == frozenset()
    assert parse_lanes("a:1, b:2,,") == frozenset({"a:1", "b:2"})


async def test_a_burst_goes_out_in_a_few_frames_with_every_event() -> None:
    """500 events/s for 0.6 s reach a subscriber in at most 1 + 0.6 / 0.2 + 1 frames."""
    sub = Subscription("session:1", maxsize=10_000)
    frames: list[bytes] = []

    async def read() -> None:
        async for frame in event_frames(sub, min_interval_s=0.2):
            frames.append(frame)

    reader = asyncio.create_task(read())
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < 0.6:
        sub.put(_ev(n))
        n += 1
        await asyncio.sleep(0.002)
    await asyncio.sleep(0.3)
    sub.close()
    await asyncio.wait_for(reader, 2)
    assert n > 100
    assert 2 <= len(frames) <= 5
    body = b"".join(frames)
    assert body.count(b"event: comparison_complete") == n  # nothing lost, only batched


async def test_frames_stop_when_the_client_is_gone() -> None:
    sub = Subscription("session:1", maxsize=100)
    sub.put(_ev(1))

    async def gone() -> bool:
        return True

    assert [f async for f in event_frames(sub, min_interval_s=0.0, disconnected=gone)] == []
