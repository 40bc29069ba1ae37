"""A mapped row's column values as a mapping, for response schemas that validate a row
together with the fields it does not carry itself (counts, joined names, flags)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sqlalchemy import inspect


def columns(row: object) -> dict[str, Any]:
    """The loaded column attributes of an ORM row by attribute name. Nothing is loaded
    here (no relationship, no expired column: under asyncio a lazy load is an error), so
    a schema field whose column is not loaded fails validation as missing."""
    state = inspect(row)
    unloaded = state.unloaded
    return {a.key: getattr(row, a.key) for a in state.mapper.column_attrs if a.key not in unloaded}


def for_dataclass(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that name a field of the dataclass ``cls`` (its keyword
    arguments, from a row's columns and what is computed beside them)."""
    return {f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values}
