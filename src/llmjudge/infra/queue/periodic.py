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

__all__ = ["Periodic"]

log = logging.getLogger(__name__)


class Periodic:
    def __init__(
        self,
        name: str,
        tick: Callable[[], Awaitable[object]],
        *,
        interval_s: float,
        first_s: float | None = None,
        retry_s: float | None = None,
        retry_max_s: float | None = None,
        jitter: float = 0.1,
        stop_timeout_s: float = 5.0,
    ) -> None:
        self.name = name
        self.tick = tick
        self.interval_s = interval_s
        self.first_s = interval_s if first_s is None else first_s
        self.retry_s = interval_s if retry_s is None else retry_s
        self.retry_max_s = max(interval_s, self.retry_s) if retry_max_s is None else retry_max_s
        self.jitter = jitter
        self.stop_timeout_s = stop_timeout_s
        self.failures = 0  # ticks failed in a row
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

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
            base = min(self.retry_max_s, self.retry_s * 2 ** (self.failures - 1))
        else:
            base = self.interval_s
        return base * (1 + random.uniform(-self.jitter, self.jitter))

    async def _loop(self) -> None:
        delay = self.first_s
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
