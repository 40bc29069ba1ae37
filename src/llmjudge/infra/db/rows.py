"""A row by its primary key or a NotFound, and a mapped row's column values as a mapping,
for response schemas that validate a row together with the fields it does not carry itself
(counts, joined names, flags)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from sqlalchemy import inspect
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import NotFound

RowT = TypeVar("RowT")


async def get_or_not_found(db: AsyncSession, model: type[RowT], row_id: object, what: str) -> RowT:
    """The ``model`` row whose primary key is ``row_id``; else NotFound "<what> <id> not found"
    (a 404 at the API), the answer every read, change and delete by id gives for a missing row."""
    row = await db.get(model, row_id)
    if row is None:
        raise NotFound(f"{what} {row_id} not found")
    return row


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
