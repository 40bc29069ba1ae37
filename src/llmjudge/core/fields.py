"""One dataclass built from another's same-named fields.

So a result type is not copied into the next field by field: the core's counterpart of
pydantic's ``from_attributes``."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def build_from(cls: type[T], source: object, /, **values: Any) -> T:
    """A ``cls`` (a dataclass) with ``values``, its other fields read from ``source``'s
    attributes of the same name. A field neither given nor on ``source`` keeps its
    default (or is reported missing by ``cls``)."""
    taken = {
        f.name: getattr(source, f.name)
        for f in fields(cls)  # type: ignore[arg-type]
        if f.name not in values and hasattr(source, f.name)
    }
    return cls(**taken, **values)
