"""Provider rate limits across processes: each process that makes model calls keeps a
heartbeat row in ``llm_processes`` and holds itself to 1 / (live processes) of every
provider's configured rpm and tpm.

This splits the rate, it does not pool it: N processes together never send more than the
configured rate (give or take one heartbeat interval after a process starts or dies), but a
busy process cannot borrow an idle one's share. A process that stops deletes its row; one
that dies stops counting after ``ttl_s``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmjudge.infra.queue.periodic import Periodic

__all__ = ["RateShares"]

log = logging.getLogger(__name__)

_BEAT = text(
    "INSERT INTO llm_processes (id, heartbeat_at) VALUES (:id, now()) "
    "ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()"
)
_LIVE = text(
    "SELECT count(*) FROM llm_processes WHERE heartbeat_at > now() - make_interval(secs => :ttl)"
)
_FORGET_DEAD = text(
    "DELETE FROM llm_processes WHERE heartbeat_at < now() - make_interval(secs => :ttl * 10)"
)
_LEAVE = text("DELETE FROM llm_processes WHERE id = :id")


def _process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(eq=False)
class RateShares:
    """A runner (``queue.registry.Runner``): heartbeat every ``interval_s``, then
    ``apply(1 / live processes)`` (e.g. ``Gateway.set_rate_share``)."""

    engine: AsyncEngine
    apply: Callable[[float], None]
    _: KW_ONLY
    interval_s: float = 5.0
    ttl_s: float = 15.0
    id: str = field(default_factory=_process_id, init=False)
    live: int = field(default=1, init=False)
    _loop: Periodic = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # A failed heartbeat (the database away) keeps the last share until one succeeds.
        self._loop = Periodic(
            "llm-rate-shares", self.beat, interval_s=self.interval_s, stop_timeout_s=1.0
        )

    async def beat(self) -> int:
        """One heartbeat; returns (and applies) the live process count."""
        async with self.engine.begin() as conn:
            await conn.execute(_BEAT, {"id": self.id})
            await conn.execute(_FORGET_DEAD, {"ttl": self.ttl_s})
            live = int(await conn.scalar(_LIVE, {"ttl": self.ttl_s}) or 1)
        self.live = max(1, live)
        self.apply(1.0 / self.live)
        return self.live

    async def start(self) -> None:
        # The first share before the first call: a new process must not start at 100%.
        with contextlib.suppress(Exception):
            await self.beat()
        await self._loop.start()

    def wake(self) -> None:
        pass

    async def stop(self) -> None:
        await self._loop.stop()
        with contextlib.suppress(Exception):
            async with self.engine.begin() as conn:
                await conn.execute(_LEAVE, {"id": self.id})
