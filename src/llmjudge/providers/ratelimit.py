"""Per-provider limits: requests per minute, tokens per minute, and concurrent calls.

Both per-minute limits are continuous-refill token buckets. A bucket's capacity (its burst)
is ``burst_s`` seconds of its rate, 1 s by default: a fresh or idle provider may send one
second's worth at once, after which the rate is held exactly. A small burst keeps short
windows honest (``rpm=600`` allows at most 10 + 10/s, never a minute's 600 at once), which is
what a provider's own sliding window tolerates best.

Waiting is asyncio-only (``asyncio.sleep``) and first come, first served: each bucket's waiters
queue on an ``asyncio.Lock``, which hands over in arrival order, so a large request is never
starved by a stream of small ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

DEFAULT_BURST_S = 1.0
_EPSILON = 1e-9

# Injectable time, so tests can run the buckets on a virtual clock.
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class TokenBucket:
    def __init__(
        self,
        rate_per_s: float,
        capacity: float,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if rate_per_s <= 0 or capacity <= 0:
            raise ValueError("rate and capacity must be positive")
        self.rate = rate_per_s
        self.capacity = capacity
        self._clock = clock
        self._sleep = sleep
        self._tokens = capacity
        self._stamp = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    @property
    def available(self) -> float:
        self._refill()
        return self._tokens

    async def acquire(self, amount: float = 1.0) -> None:
        """Wait until ``amount`` can be taken, then take it.

        An amount above the capacity waits for a full bucket and leaves it in debt, so one
        oversized request still passes while the long-run rate stays exact.
        """
        need = min(amount, self.capacity)
        async with self._lock:
            while True:
                self._refill()
                # Tolerance: a wait of exactly the shortfall can refill to a hair under it.
                if self._tokens >= need - _EPSILON:
                    self._tokens -= amount
                    return
                await self._sleep((need - self._tokens) / self.rate)

    def set_rate(self, rate_per_s: float, capacity: float) -> None:
        """A new rate (this process's share changed): tokens over the new capacity go."""
        if rate_per_s <= 0 or capacity <= 0:
            raise ValueError("rate and capacity must be positive")
        self._refill()
        self.rate, self.capacity = rate_per_s, capacity
        self._tokens = min(self._tokens, capacity)

    def adjust(self, delta: float) -> None:
        """Charge ``delta`` more (or refund when negative), e.g. actual minus estimated usage."""
        self._refill()
        self._tokens = min(self.capacity, self._tokens - delta)


class Slot:
    """Handed out by ``ProviderLimiter.slot``; ``report`` corrects the token estimate."""

    def __init__(self, bucket: TokenBucket | None, estimated_tokens: int) -> None:
        self._bucket = bucket
        self._charged = estimated_tokens

    def report(self, actual_tokens: int) -> None:
        if self._bucket is not None:
            self._bucket.adjust(actual_tokens - self._charged)
        self._charged = actual_tokens


class ProviderLimiter:
    def __init__(
        self,
        rpm: int | None,
        tpm: int | None,
        max_concurrency: int,
        *,
        burst_s: float = DEFAULT_BURST_S,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.rpm, self.tpm, self.burst_s = rpm, tpm, burst_s
        self.share = 1.0
        self.requests = _bucket(rpm, burst_s, clock, sleep)
        self.tokens = _bucket(tpm, burst_s, clock, sleep)
        self._semaphore = asyncio.Semaphore(max(1, max_concurrency))
        self.in_flight = 0

    def set_share(self, share: float) -> None:
        """Hold this process to ``share`` (0-1] of the configured per-minute limits: the
        provider's limit is for everyone, and ``providers.shares`` splits it among the live
        processes."""
        share = min(1.0, max(share, 1e-6))
        if share == self.share:
            return
        self.share = share
        for bucket, per_minute in ((self.requests, self.rpm), (self.tokens, self.tpm)):
            if bucket is not None and per_minute:
                rate = per_minute * share / 60.0
                bucket.set_rate(rate, max(1.0, rate * self.burst_s))

    @asynccontextmanager
    async def slot(self, estimated_tokens: int = 0) -> AsyncIterator[Slot]:
        """Rate limits first, then a concurrency place, held for the body of the block."""
        if self.requests is not None:
            await self.requests.acquire(1)
        charged = 0
        if self.tokens is not None and estimated_tokens > 0:
            await self.tokens.acquire(estimated_tokens)
            charged = estimated_tokens
        async with self._semaphore:
            self.in_flight += 1
            try:
                yield Slot(self.tokens, charged)
            finally:
                self.in_flight -= 1


def _bucket(
    per_minute: int | None, burst_s: float, clock: Clock, sleep: Sleep
) -> TokenBucket | None:
    if not per_minute:
        return None
    rate = per_minute / 60.0
    return TokenBucket(rate, max(1.0, rate * burst_s), clock=clock, sleep=sleep)
