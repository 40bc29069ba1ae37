"""Token buckets and the per-provider limiter, mostly on a virtual clock (fast, exact)."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.providers.ratelimit import ProviderLimiter, TokenBucket


class VirtualClock:
    """Time that advances only when someone sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)


async def grant_times(
    limiter: ProviderLimiter, clock: VirtualClock, callers: int, until: float, tokens: int = 0
) -> list[float]:
    """Run ``callers`` loops taking slots until the virtual clock passes ``until``."""
    grants: list[float] = []

    async def caller() -> None:
        while True:
            async with limiter.slot(tokens):
                if clock.now > until:
                    return
                grants.append(clock.now)

    await asyncio.gather(*(caller() for _ in range(callers)))
    return grants


async def test_rpm_held_with_one_second_burst() -> None:
    """rpm=600 with 50 callers for 3 s: burst 10, then exactly 10 per second."""
    clock = VirtualClock()
    limiter = ProviderLimiter(600, None, 64, clock=clock, sleep=clock.sleep)
    grants = await grant_times(limiter, clock, callers=50, until=3.0)
    expected = 10 + 10 * 3.0
    assert abs(len(grants) - expected) <= 0.1 * expected
    assert sum(1 for t in grants if t == 0.0) == 10  # the burst
    steady = grants[10:]
    assert (len(steady) - 1) / (steady[-1] - steady[0]) == pytest.approx(10.0, rel=0.01)


async def test_tpm_held() -> None:
    """tpm=6000 (100/s, capacity 100), 50 tokens a call: 2 calls at once, then 2 per second."""
    clock = VirtualClock()
    limiter = ProviderLimiter(None, 6000, 64, clock=clock, sleep=clock.sleep)
    grants = await grant_times(limiter, clock, callers=20, until=5.25, tokens=50)
    assert len(grants) == 2 + 2 * 5
    assert grants[:2] == [0.0, 0.0]


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.5, 50),
    burst=st.floats(1, 20),
    amounts=st.lists(st.floats(0.1, 30), min_size=1, max_size=40),
)
async def test_bucket_never_grants_more_than_burst_plus_rate(
    rate: float, burst: float, amounts: list[float]
) -> None:
    clock = VirtualClock()
    bucket = TokenBucket(rate, burst, clock=clock, sleep=clock.sleep)
    taken = 0.0
    for amount in amounts:
        await bucket.acquire(amount)
        taken += amount
        # Oversized requests may run the bucket into debt by at most their excess.
        slack = max(0.0, amount - burst)
        assert taken <= burst + rate * clock.now + slack + 1e-6


async def test_waiters_are_served_in_arrival_order() -> None:
    """A big request queued among small ones is not starved."""
    clock = VirtualClock()
    bucket = TokenBucket(10, 10, clock=clock, sleep=clock.sleep)
    await bucket.acquire(10)  # empty it
    order: list[str] = []

    async def take(name: str, amount: float) -> None:
        await bucket.acquire(amount)
        order.append(name)

    names = ["s1", "s2", "big", "s3", "s4"]
    amounts = [1, 1, 10, 1, 1]
    await asyncio.gather(*(take(n, a) for n, a in zip(names, amounts, strict=True)))
    assert order == names


async def test_report_refunds_and_charges_actual_usage() -> None:
    clock = VirtualClock()
    limiter = ProviderLimiter(None, 60_000, 4, clock=clock, sleep=clock.sleep)
    assert limiter.tokens is not None
    async with limiter.slot(800) as slot:
        assert limiter.tokens.available == pytest.approx(200)
        slot.report(100)
    assert limiter.tokens.available == pytest.approx(900)
    async with limiter.slot(100) as slot:
        slot.report(1500)  # more than estimated: the bucket goes into debt
    assert limiter.tokens.available == pytest.approx(900 - 1500)


async def test_oversized_request_passes_and_leaves_debt() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(10, 10, clock=clock, sleep=clock.sleep)
    await bucket.acquire(25)
    assert clock.now == 0.0 and bucket.available == pytest.approx(-15)
    await bucket.acquire(1)
    assert clock.now == pytest.approx(1.6)


async def test_cancelled_waiter_takes_nothing() -> None:
    bucket = TokenBucket(1, 1)  # real time: this waiter would wait ~1 s
    await bucket.acquire(1)
    waiter = asyncio.create_task(bucket.acquire(1))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert 0 <= bucket.available < 0.1  # refilled since, but nothing was taken


async def test_concurrency_cap_is_never_exceeded() -> None:
    limiter = ProviderLimiter(None, None, 3)
    peak = 0

    async def work() -> None:
        nonlocal peak
        async with limiter.slot():
            peak = max(peak, limiter.in_flight)
            await asyncio.sleep(0.005)

    await asyncio.gather(*(work() for _ in range(30)))
    assert peak == 3 and limiter.in_flight == 0


async def test_real_clock_rate_without_blocking_the_loop() -> None:
    """rpm=1200 (20/s, burst 20) for 1 s on the real clock, while another task keeps ticking."""
    limiter = ProviderLimiter(1200, None, 64)
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    start = time.perf_counter()
    grants: list[float] = []

    async def caller() -> None:
        while time.perf_counter() - start <= 1.0:
            async with limiter.slot():
                elapsed = time.perf_counter() - start
                if elapsed <= 1.0:
                    grants.append(elapsed)

    tick_task = asyncio.create_task(ticker())
    await asyncio.gather(*(caller() for _ in range(5)))
    done.set()
    await tick_task
    assert abs(len(grants) - 40) <= 4
    assert ticks >= 50  # the loop stayed responsive while callers waited


def test_invalid_bucket_rejected() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0, 10)
