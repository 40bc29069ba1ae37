"""The one background-loop runner: interval, wake, failures that never end the loop (with
backoff), and a stop that waits for a tick in progress, then cancels it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from llmjudge.infra.queue.periodic import Periodic


async def test_ticks_every_interval_and_at_once_when_woken() -> None:
    ticks: list[float] = []
    loop = asyncio.get_running_loop()

    async def tick() -> None:
        ticks.append(loop.time())

    p = Periodic("t", tick, interval_s=0.05, first_s=0, jitter=0)
    await p.start()
    await asyncio.sleep(0.18)
    assert 3 <= len(ticks) <= 5
    slow = Periodic("slow", tick, interval_s=60, first_s=60)
    await slow.start()
    before = len(ticks)
    await p.stop()
    slow.wake()
    await asyncio.sleep(0.02)
    assert len(ticks) == before + 1  # woken: no waiting out the minute
    await slow.stop()
    assert not slow.running and not p.running


async def test_a_failing_tick_is_logged_and_retried_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    async def tick() -> None:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise OSError("connection refused")

    p = Periodic("flaky", tick, interval_s=0.01, retry_s=0.01, retry_max_s=1, jitter=0)
    with caplog.at_level(logging.WARNING, logger="llmjudge.infra.queue.periodic"):
        await p.start()
        for _ in range(200):
            if calls >= 4:
                break
            await asyncio.sleep(0.01)
        await p.stop()
    assert calls >= 4 and p.failures == 0  # the loop outlived three failures
    failed = [r for r in caplog.records if "flaky failed" in r.getMessage()]
    assert len(failed) == 3 and failed[0].exc_info and not failed[1].exc_info
    assert "connection refused" in failed[2].getMessage()


def test_backoff_doubles_up_to_its_limit_then_the_interval_returns() -> None:
    async def tick() -> None:
        pass

    p = Periodic("b", tick, interval_s=3600, retry_s=60, jitter=0)
    delays = []
    for failures in range(8):
        p.failures = failures
        delays.append(p.next_delay())
    assert delays == [3600, 60, 120, 240, 480, 960, 1920, 3600]
    p.jitter = 0.1
    p.failures = 0
    assert all(3240 <= p.next_delay() <= 3960 for _ in range(50))


async def test_stop_lets_a_tick_finish_within_the_timeout_else_cancels_it() -> None:
    finished: list[str] = []

    def slow(seconds: float, name: str):
        async def tick() -> None:
            await asyncio.sleep(seconds)
            finished.append(name)

        return tick

    quick = Periodic("quick", slow(0.05, "quick"), interval_s=10, first_s=0, stop_timeout_s=1)
    stuck = Periodic("stuck", slow(10, "stuck"), interval_s=10, first_s=0, stop_timeout_s=0.05)
    await quick.start()
    await stuck.start()
    await asyncio.sleep(0.01)  # both ticks are in progress
    await asyncio.wait_for(asyncio.gather(quick.stop(), stuck.stop()), 1)
    assert finished == ["quick"]
