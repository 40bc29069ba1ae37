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

__all__ = ["MAX_JSON_ATTEMPTS", "JsonObject", "json_objects", "whole_object"]

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


def whole_object(
    text: str, *, max_attempts: int = MAX_JSON_ATTEMPTS
) -> tuple[JsonObject, list[dict[str, Any]]] | None:
    """``text`` in one decode when it is one JSON object and nothing else (what a judge
    asked for JSON, or held to a schema, answers), with the objects inside it; None when
    it is anything else.

    Only when every brace of the text opens one of the object's own objects (none sits in
    a string or under a key given twice) and there are at most ``max_attempts`` of them:
    then ``json_objects(text, nested=True)`` yields exactly the inner objects, then the
    whole, and a caller can check them without decoding each again (the scan decodes the
    text once per brace)."""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if not text.startswith("{", start) or not text.endswith("}", 0, end):
        return None
    braces = text.count("{", start, end)
    if braces > max_attempts:
        return None
    hit = _decode(text, start)
    if hit is None or hit[1] != end or not isinstance(hit[0], dict):
        return None
    inner: list[dict[str, Any]] = []
    values: list[Any] = list(hit[0].values())
    while values:
        value = values.pop()
        if isinstance(value, dict):
            inner.append(value)
            values.extend(value.values())
        elif isinstance(value, list):
            values.extend(value)
    if len(inner) + 1 != braces:
        return None
    return JsonObject(hit[0], start, end), inner
