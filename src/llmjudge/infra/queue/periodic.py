"""The one way a background loop runs: ``Periodic`` calls an async ``tick`` every
``interval_s`` (the first after ``first_s``), or at once after ``wake()``.

- Every wait has a little jitter, so processes started together do not hit the database in
  step.
- A failing tick (the database away, a bug) is logged and never ends the loop; the next try
  comes after ``retry_s``, doubling with each failure in a row up to ``interval_s`` (or
  ``retry_max_s``), and the interval again after a success.
- ``stop()`` (procrastinate's shutdown): the stop event ends the waiting at once; a tick in
  progress gets ``stop_timeout_s`` to finish, then it is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["Periodic"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Periodic:
    name: str
    tick: Callable[[], Awaitable[object]]
    interval_s: float
    first_s: float | None = None  # None: one interval
    retry_s: float | None = None  # the first retry after a failure; None: one interval
    retry_max_s: float | None = None  # None: the larger of interval and first retry
    jitter: float = 0.1  # each wait is off by up to this fraction, either way
    stop_timeout_s: float = 5.0
    failures: int = field(default=0, init=False)  # ticks failed in a row
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    _stop: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.first_s = self.interval_s if self.first_s is None else self.first_s
        self.retry_s = self.interval_s if self.retry_s is None else self.retry_s
        if self.retry_max_s is None:
            self.retry_max_s = max(self.interval_s, self.retry_s)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._loop(), name=self.name)

    def wake(self) -> None:
        """Tick now rather than at the end of the current wait."""
        self._wake.set()

    async def stop(self, timeout_s: float | None = None) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        self._wake.set()
        timeout = self.stop_timeout_s if timeout_s is None else timeout_s
        _, pending = await asyncio.wait({task}, timeout=timeout)
        if pending:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def next_delay(self) -> float:
        """The wait before the next tick: the interval, or the backoff after failures."""
        if self.failures:
            assert self.retry_s is not None and self.retry_max_s is not None  # __post_init__
            base = min(self.retry_max_s, self.retry_s * 2 ** (self.failures - 1))
        else:
            base = self.interval_s
        return base * (1 + random.uniform(-self.jitter, self.jitter))

    async def _loop(self) -> None:
        delay = self.first_s or 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, delay))
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                await self.tick()
            except Exception as exc:  # the database away, or a bug: keep the loop alive
                self.failures += 1
                level = logging.WARNING if self.failures > 1 else logging.ERROR
                log.log(
                    level,
                    "%s failed (%d in a row): %s",
                    self.name,
                    self.failures,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                    exc_info=self.failures == 1,  # the traceback once, not on every retry
                )
            else:
                self.failures = 0
            delay = self.next_delay()
