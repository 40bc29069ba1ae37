"""The single-flight session summary cache: one query for many concurrent pollers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llmjudge.sessions.reads import SummaryCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _loader(calls: list[int], value: Any, delay: float = 0.01) -> Any:
    async def load() -> Any:
        calls.append(1)
        await asyncio.sleep(delay)
        return value

    return load


async def test_concurrent_pollers_share_one_query() -> None:
    cache, calls = SummaryCache(ttl_s=0.0), []
    out = await asyncio.gather(*(cache.get(1, _loader(calls, "s1")) for _ in range(200)))
    assert out == ["s1"] * 200
    assert len(calls) == 1


async def _shared(cache: SummaryCache, sid: int, load: Any) -> Any:
    """Two concurrent pollers: the answer is shared, hence kept for the TTL."""
    first, _ = await asyncio.gather(cache.get(sid, load), cache.get(sid, load))
    return first


async def test_a_lone_poller_always_reads_afresh() -> None:
    cache, calls = SummaryCache(ttl_s=10.0), []
    for value in ("a", "b", "c"):
        assert await cache.get(1, _loader(calls, value)) == value
    assert len(calls) == 3


async def test_answers_expire_after_the_ttl_and_on_invalidate() -> None:
    clock = Clock()
    cache, calls = SummaryCache(ttl_s=0.5, clock=clock), []
    assert await _shared(cache, 1, _loader(calls, "a")) == "a"
    clock.now = 0.4
    assert await cache.get(1, _loader(calls, "b")) == "a"
    clock.now = 0.6
    assert await cache.get(1, _loader(calls, "c")) == "c"
    assert await _shared(cache, 1, _loader(calls, "c2")) == "c2"
    cache.invalidate(1)
    assert await cache.get(1, _loader(calls, "d")) == "d"
    assert await cache.get(2, _loader(calls, "other")) == "other"  # per session
    assert len(calls) == 5


async def test_a_failed_leader_does_not_fail_its_followers_for_good() -> None:
    cache = SummaryCache(ttl_s=0.0)

    async def boom() -> str:
        await asyncio.sleep(0.01)
        raise RuntimeError("db down")

    leader = asyncio.create_task(cache.get(1, boom))
    await asyncio.sleep(0)
    follower = asyncio.create_task(cache.get(1, _loader([], "ok")))
    with pytest.raises(RuntimeError):
        await leader
    assert await follower == "ok"


async def test_a_cancelled_leader_hands_over_to_a_follower() -> None:
    cache = SummaryCache(ttl_s=0.0)
    leader = asyncio.create_task(cache.get(1, _loader([], "slow", delay=1.0)))
    await asyncio.sleep(0)
    follower = asyncio.create_task(cache.get(1, _loader([], "fresh")))
    await asyncio.sleep(0.01)
    leader.cancel()
    assert await asyncio.wait_for(follower, 2) == "fresh"
