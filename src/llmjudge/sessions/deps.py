"""Request-bound helpers shared by the sessions API and its pages."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from llmjudge.infra.events.hub import EventHub
from llmjudge.sessions import control


def get_hub(request: Request) -> EventHub | None:
    return getattr(request.app.state, "events", None)


Hub = Annotated[EventHub | None, Depends(get_hub)]


def get_tester(request: Request) -> control.ConnectionTester | None:
    """The LLM service, for the test call before a session first uses a provider."""
    return getattr(request.app.state, "llm", None)


Tester = Annotated[control.ConnectionTester | None, Depends(get_tester)]


def parse_ids(ids: str) -> list[int]:
    """The ids of a checked comma-separated list; empty items and ids no row can have
    (beyond int4) are skipped."""
    return [n for n in (int(i) for i in ids.split(",") if i) if 0 < n < 2**31]
