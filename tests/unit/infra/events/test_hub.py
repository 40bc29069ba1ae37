"""Pure parts of the event hub: payload limits, bounded subscriber queues, token batching."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.infra.events.hub import (
    MAX_PAYLOAD_BYTES,
    DeltaBatcher,
    Event,
    EventHub,
    Subscription,
    asyncpg_dsn,
    decode_payload,
    encode_payload,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3000),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(data=st.dictionaries(st.text(max_size=10), json_values, max_size=6))
def test_payload_always_fits_and_keeps_the_envelope(data: dict) -> None:
    event = Event(topic="session:1", type="llm_stream", data=data, id="o-1")
    payload = encode_payload(event)
    assert len(payload.encode()) <= MAX_PAYLOAD_BYTES
    decoded = decode_payload(payload)
    assert decoded is not None
    assert (decoded.topic, decoded.type, decoded.id) == ("session:1", "llm_stream", "o-1")
    if len(json.dumps(data, ensure_ascii=False).encode()) < MAX_PAYLOAD_BYTES - 100:
        assert decoded.data == data  # small events arrive unchanged


def test_long_text_is_clipped_not_dropped() -> None:
    event = Event("t", "llm_stream", {"comparison_id": 7, "text": "é" * 20_000}, "o-2")
    decoded = decode_payload(encode_payload(event))
    assert decoded is not None
    assert decoded.data["comparison_id"] == 7
    assert decoded.data["text"].startswith("éé") and decoded.data["text"].endswith("…")
    assert len(decoded.data["text"]) < 20_000


def test_malformed_payload_is_ignored() -> None:
    assert decode_payload("not json") is None
    assert decode_payload('{"t": "x"}') is None


def test_dsn_from_sqlalchemy_url() -> None:
    url = "postgresql+asyncpg://postgres@/db?host=%2Ftmp%2Fs&port=5432"
    assert asyncpg_dsn(url) == "postgresql://postgres@/db?host=%2Ftmp%2Fs&port=5432"
    assert asyncpg_dsn("postgresql://u@h/db") == "postgresql://u@h/db"


def _ev(i: int, type: str = "comparison_complete", topic: str = "s") -> Event:
    return Event(topic, type, {"i": i}, f"o-{i}")


async def test_full_subscription_drops_the_oldest() -> None:
    sub = Subscription("s", maxsize=3)
    for i in range(5):
        sub.put(_ev(i))
    sub.close()
    assert [e.data["i"] async for e in sub] == [2, 3, 4]
    assert sub.dropped == 2


async def test_workers_status_is_coalesced() -> None:
    sub = Subscription("s", maxsize=100)
    sub.put(_ev(0, "workers_status"))
    sub.put(_ev(1))
    sub.put(_ev(2, "workers_status"))
    sub.put(_ev(3, "workers_status"))
    sub.close()
    got = [(e.type, e.data["i"]) async for e in sub]
    assert got == [("comparison_complete", 1), ("workers_status", 3)]


async def test_get_waits_for_an_event_and_ends_on_close() -> None:
    sub = Subscription("s", maxsize=10)
    waiter = asyncio.create_task(sub.get())
    await asyncio.sleep(0)
    assert not waiter.done()
    sub.put(_ev(1))
    assert (await waiter).data == {"i": 1}
    closing = asyncio.create_task(sub.get())
    await asyncio.sleep(0)
    sub.close()
    assert await closing is None


async def test_local_dispatch_by_topic_and_wildcard() -> None:
    hub = EventHub("postgresql://unused/db")
    async with hub.subscribe("session:1") as one, hub.subscribe("*") as every:
        assert hub.subscriber_count("session:1") == 1
        hub.dispatch(_ev(1, topic="session:1"))
        hub.dispatch(_ev(2, topic="session:2"))
        one.close()
        every.close()
        assert [e.data["i"] async for e in one] == [1]
        assert [e.data["i"] async for e in every] == [1, 2]
    assert hub.subscriber_count("session:1") == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.text(min_size=1, max_size=5), st.floats(0, 0.3)), min_size=1, max_size=40
    )
)
def test_delta_batcher_keeps_every_character_and_respects_the_interval(
    steps: list[tuple[str, float]],
) -> None:
    clock = FakeClock()
    sent: list[tuple[float, str]] = []
    batcher = DeltaBatcher(lambda t: sent.append((clock.now, t)), interval_s=0.1, clock=clock)

    async def run() -> None:
        for delta, dt in steps:
            clock.now += dt
            await batcher.add(delta)
        await batcher.flush()

    asyncio.run(run())
    assert "".join(t for _, t in sent) == "".join(d for d, _ in steps)
    times = [t for t, _ in sent[:-1]]  # the final flush may come at any time
    assert all(b - a >= 0.1 - 1e-9 for a, b in zip(times, times[1:], strict=False))


async def test_delta_batcher_awaits_async_publishers() -> None:
    got: list[str] = []

    async def publish(text: str) -> None:
        got.append(text)

    batcher = DeltaBatcher(publish, interval_s=10)
    await batcher.add("a")
    await batcher.add("b")
    assert got == []
    await batcher.flush()
    await batcher.flush()  # nothing left: no empty batch
    assert got == ["ab"]


def test_publish_never_blocks_and_bounds_the_outbox() -> None:
    hub = EventHub("postgresql://unused/db", outbox_size=10)
    for i in range(25):
        hub.publish_nowait("s", "x", {"i": i})
    assert hub.dropped == 15
    assert len(hub._outbox) == 10


@pytest.mark.parametrize("size", [1, 7999, 20_000])
def test_payload_of_any_size_is_valid_json(size: int) -> None:
    payload = encode_payload(Event("s", "x", {"text": "a" * size}, "o-1"))
    assert json.loads(payload)["y"] == "x"
