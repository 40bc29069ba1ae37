"""The one scanner for JSON objects in a model's reply.

Models wrap their JSON in prose or code fences, echo the prompt's example object before
their own, or nest objects. A reply is scanned at its opening braces with a bounded number
of decode attempts, so a hostile or rambling reply cannot make reading it quadratic, and a
deeply nested value is survived (RecursionError counts as unreadable). Objects come the
LAST-starting first: a reply's final object is its answer. Two scopes:

- ``nested=True``: every brace starts a candidate, tried from the end (the last
  ``max_attempts`` braces), lazily: an object inside another comes before it (pairwise
  verdicts: the object that holds ``winner`` may sit inside a wrapper);
- ``nested=False``: top-level objects only, read from the front (the first
  ``max_attempts`` decode attempts): an object nested in one found is part of it (persona
  replies: ``{"label": ..., "extra": {"label": ...}}`` is read as the outer label).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_JSON_ATTEMPTS", "JsonObject", "json_objects"]

MAX_JSON_ATTEMPTS = 200
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class JsonObject:
    value: dict[str, Any]
    start: int  # where it starts in the text
    end: int  # where it ends


def _decode(text: str, start: int) -> tuple[Any, int] | None:
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):  # ValueError covers JSONDecodeError
        return None


def json_objects(
    text: str, *, nested: bool, max_attempts: int = MAX_JSON_ATTEMPTS
) -> Iterator[JsonObject]:
    """JSON objects in ``text``, the last-starting first (see the module docstring)."""
    if nested:
        start = len(text)
        for _ in range(max_attempts):
            start = text.rfind("{", 0, start)
            if start == -1:
                return
            hit = _decode(text, start)
            if hit is not None and isinstance(hit[0], dict):
                yield JsonObject(hit[0], start, hit[1])
        return
    found: list[JsonObject] = []
    start = text.find("{")
    attempts = 0
    while start != -1 and attempts < max_attempts:
        attempts += 1
        hit = _decode(text, start)
        if hit is None:
            start = text.find("{", start + 1)
            continue
        if isinstance(hit[0], dict):
            found.append(JsonObject(hit[0], start, hit[1]))
        start = text.find("{", hit[1])  # past this object: nested ones are part of it
    yield from reversed(found)
