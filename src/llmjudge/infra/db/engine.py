"""Async engine and session factory. Knows nothing of the web: the request-scoped session
(``DbSession``) lives in ``llmjudge.infra.web``."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)


def _statement_name() -> str:
    return f"__llmjudge_{uuid4().hex}__"


def pooler_connect_args() -> dict[str, Any]:
    """asyncpg through a transaction-mode pooler (PgBouncer before 1.21, or without
    max_prepared_statements): the next transaction may run on another server connection,
    so no statement is cached, and each prepared statement gets a name no other client
    connection can have already used on that server connection."""
    return {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": _statement_name,
    }


def make_engine(url: str, *, pool_size: int = 20, pooled: bool = False) -> AsyncEngine:
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        # Workers hold no transaction across a model call, so a modest pool serves hundreds.
        pool_timeout=60,
        connect_args=pooler_connect_args() if pooled else {},
    )


# What makes database sessions (``db``): the app keeps one in ``app.state.sessionmaker``.
Sessionmaker = async_sessionmaker[AsyncSession]


def make_sessionmaker(engine: AsyncEngine) -> Sessionmaker:
    return async_sessionmaker(engine, expire_on_commit=False)
