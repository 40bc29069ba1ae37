"""An in-process ``ResponseCache`` for gateway tests (the service's cache is ``PgCache``)."""

from __future__ import annotations

from llmjudge.providers.base import ChatResult


class MemoryCache:
    def __init__(self) -> None:
        self.entries: dict[str, ChatResult] = {}

    async def get(self, key: str) -> ChatResult | None:
        return self.entries.get(key)

    async def put(self, key: str, result: ChatResult) -> None:
        self.entries[key] = result
