"""Request-bound helpers shared by the sessions API and its pages."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from llmjudge.infra.errors import bounded_id
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
    """The ids of a comma-separated list, empty items skipped; an id no row can have (0,
    beyond int4, thousands of digits) is Invalid (422), as the schema's id bounds say."""
    return [bounded_id(i, name="each of ids") for i in ids.split(",") if i]
