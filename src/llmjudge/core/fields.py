"""One dataclass built from another's same-named fields, and a validator shared by schemas.

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


def not_a_boolean(value: Any) -> Any:
    """A before-validator for integer fields: pydantic's lax mode reads JSON true/false as
    1/0; refuse them, while a form's digits still read as a number (pages share schemas)."""
    if isinstance(value, bool):
        raise ValueError("a whole number is needed, not true or false")
    return value
