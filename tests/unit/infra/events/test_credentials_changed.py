"""`credentials_changed`: a stream re-checks its credentials when auth announces a change,
not only every `recheck_s`; the announcement itself never reaches the client."""

from __future__ import annotations

import asyncio
import json

from llmjudge.infra.events.hub import (
    CREDENTIALS_CHANGED,
    CREDENTIALS_TOPIC,
    Event,
    EventHub,
    credentials_changed_payload,
    decode_payload,
)
from llmjudge.infra.events.sse import event_frames


def _changed(i: int = 0) -> Event:
    return Event(CREDENTIALS_TOPIC, CREDENTIALS_CHANGED, {}, f"c-{i}")


def _progress(i: int) -> Event:
    return Event("session:1", "comparison_complete", {"i": i}, f"o-{i}")


async def test_subscribing_also_to_credentials_and_leaving_cleanly() -> None:
    hub = EventHub("postgresql://unused/db")
    async with hub.subscribe("session:1", also=(CREDENTIALS_TOPIC,)) as sub:
        assert hub.subscriber_count(CREDENTIALS_TOPIC) == 1
        hub.dispatch(_progress(1))
        hub.dispatch(_changed())
        hub.dispatch(Event("session:2", "comparison_complete", {}, "o-x"))  # not followed
        sub.close()
        assert [e.type async for e in sub] == ["comparison_complete", CREDENTIALS_CHANGED]
    assert hub.subscriber_count(CREDENTIALS_TOPIC) == 0
    assert hub.subscriber_count("session:1") == 0


async def test_an_announcement_rechecks_at_once_and_ends_a_revoked_stream() -> None:
    hub = EventHub("postgresql://unused/db")
    checks: list[bool] = []
    valid = True

    async def recheck() -> bool:
        checks.append(valid)
        return valid

    async with hub.subscribe("session:1", also=(CREDENTIALS_TOPIC,)) as sub:
        frames: list[bytes] = []

        async def read() -> None:
            async for frame in event_frames(
                sub, min_interval_s=0.0, recheck=recheck, recheck_s=3600.0
            ):
                frames.append(frame)

        reader = asyncio.create_task(read())
        hub.dispatch(_progress(1))
        hub.dispatch(_changed(1))  # still valid: the stream goes on
        await asyncio.sleep(0.05)
        assert checks == [True] and not reader.done()
        hub.dispatch(_progress(2))
        valid = False
        hub.dispatch(_changed(2))
        async with asyncio.timeout(1.0):
            await reader
    text = b"".join(frames).decode()
    assert checks == [True, False]
    assert '"i": 1' in text and '"i": 2' in text and "event: closed" in text
    assert CREDENTIALS_CHANGED not in text


def test_the_announcement_payload_decodes_to_the_event() -> None:
    first, second = credentials_changed_payload(), credentials_changed_payload()
    assert first != second  # PostgreSQL folds identical payloads of one transaction
    event = decode_payload(first)
    assert event is not None
    assert (event.topic, event.type, event.data) == (CREDENTIALS_TOPIC, CREDENTIALS_CHANGED, {})
    assert json.loads(first)["y"] == CREDENTIALS_CHANGED
