"""Declarative base shared by every domain's models."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, ForeignKey, MetaData, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# Stable constraint names so Alembic migrations are reproducible.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def created_at_column() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


def updated_at_column() -> Mapped[datetime]:
    """Set on insert and refreshed by every ORM update of the row."""
    return mapped_column(DateTime(timezone=True), server_default=func.now(), onupdate=func.now())


def child_rows(back_populates: str) -> Any:
    """A parent's rows that go with it: the database's ON DELETE CASCADE deletes them
    (``passive_deletes``), so the ORM need not load them first."""
    return relationship(
        back_populates=back_populates, cascade="all, delete-orphan", passive_deletes=True
    )


def owned_by(table: str, **column: Any) -> Any:
    """A reference to the ``table`` row this row belongs to: deleted with it."""
    return mapped_column(ForeignKey(f"{table}.id", ondelete="CASCADE"), **column)


def refers_to(table: str, **column: Any) -> Any:
    """A reference to a ``table`` row that may go away: it becomes NULL."""
    return mapped_column(ForeignKey(f"{table}.id", ondelete="SET NULL"), **column)
