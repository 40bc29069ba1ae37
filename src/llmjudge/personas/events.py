"""Training events on the topic ``persona:{id}``: advisory, so a failure to publish is only
logged and never stops the loop or a request."""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.25


class Publisher(Protocol):
    async def publish(self, topic: str, type: str, data: dict[str, Any]) -> None: ...


async def publish(hub: Publisher | None, persona_id: int, type: str, data: dict[str, Any]) -> None:
    """Publish on ``persona:{id}``; events are advisory, so a failure is only logged."""
    if hub is None:
        return
    try:
        await hub.publish(f"persona:{persona_id}", type, {"persona_id": persona_id, **data})
    except Exception:
        log.exception("could not publish %s for persona %s", type, persona_id)


class Progress:
    """Throttled ``{n, total}`` events."""

    def __init__(self, hub: Publisher | None, persona_id: int, type: str, done: int, total: int):
        self.hub, self.persona_id, self.type = hub, persona_id, type
        self.n, self.total = done, total
        self._last = 0.0

    async def step(self, iteration: int) -> None:
        self.n += 1
        t = time.monotonic()
        if self.n == self.total or t - self._last >= PROGRESS_EVERY_S:
            self._last = t
            await publish(
                self.hub,
                self.persona_id,
                self.type,
                {"iteration": iteration, "n": self.n, "total": self.total},
            )
