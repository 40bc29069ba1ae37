"""The event hub outlives whatever a lost server raises (issue 14): under uvloop a dropped
connection can surface as ``asyncpg.InternalClientError``, which is no ``PostgresError`` or
``InterfaceError``; the publisher and the listener must reconnect, not die."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from llmjudge.infra.events import hub as hub_module
from llmjudge.infra.events.hub import EventHub, listen_forever


class FakeConn:
    def __init__(self, *, fail_execute: bool = False) -> None:
        self.fail_execute = fail_execute
        self.executed: list[list[str]] = []
        self.listeners: list[Any] = []
        self.closed = False

    def is_closed(self) -> bool:
        return self.closed

    async def close(self) -> None:
        self.closed = True

    async def execute(self, _sql: str, _channel: str, batch: list[str]) -> None:
        if self.fail_execute:
            raise asyncpg.InternalClientError("unexpected connection_lost() call")
        self.executed.append(batch)

    def add_termination_listener(self, cb: Any) -> None:
        pass

    async def add_listener(self, channel: str, cb: Any) -> None:
        self.listeners.append(cb)

    async def fetchval(self, _sql: str) -> int:
        return 1


def _connects(monkeypatch: pytest.MonkeyPatch, results: list[Any]) -> list[Any]:
    made: list[Any] = []

    async def connect(_dsn: str) -> Any:
        item = results.pop(0) if results else FakeConn()
        if isinstance(item, BaseException):
            raise item
        made.append(item)
        return item

    monkeypatch.setattr(hub_module.asyncpg, "connect", connect)
    return made


async def test_the_publisher_reconnects_after_an_internal_client_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _connects(
        monkeypatch,
        [asyncpg.InternalClientError("boom"), FakeConn(fail_execute=True), FakeConn()],
    )
    hub = EventHub("postgresql://x/y", listen=False, reconnect_max_s=0.05)
    await hub.start()
    try:
        hub.publish_nowait("session:1", "comparison_complete", {"comparison_id": 1})
        async with asyncio.timeout(5):
            await hub._outbox_empty.wait()  # set once the batch went out
        assert hub.published == 1
    finally:
        await hub.stop()
    assert len(made) == 2 and made[0].closed
    assert len(made[1].executed) == 1 and "comparison_complete" in made[1].executed[0][0]


async def test_the_listener_resubscribes_after_an_internal_client_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _connects(monkeypatch, [asyncpg.InternalClientError("boom"), FakeConn()])
    got: list[str] = []
    ready = asyncio.Event()
    task = asyncio.create_task(
        listen_forever("postgresql://x/y", "ch", got.append, ready=ready, reconnect_max_s=0.05)
    )
    try:
        async with asyncio.timeout(5):
            await ready.wait()
        made[0].listeners[0](None, 1, "ch", "hello")
        assert got == ["hello"] and not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
