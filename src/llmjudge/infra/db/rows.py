"""A mapped row's column values as a mapping, for response schemas that validate a row
together with the fields it does not carry itself (counts, joined names, flags)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import inspect


def columns(row: object) -> dict[str, Any]:
    """Every column attribute of an ORM row by attribute name (relationships are left out,
    so nothing is lazy-loaded; an expired column is reloaded like any attribute read)."""
    return {a.key: getattr(row, a.key) for a in inspect(row).mapper.column_attrs}
