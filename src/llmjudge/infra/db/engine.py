"""Async engine and session factory. Knows nothing of the web: the request-scoped session
(``DbSession``) lives in ``llmjudge.infra.web``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import uuid4

from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from llmjudge.infra.config import Settings


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


@asynccontextmanager
async def process_engines(settings: Settings) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    """(engine, direct) for a process (the web app, ``llmjudge worker``), disposed on exit.
    Behind a transaction pooler, migrations, the claim connection and the persona loops'
    session-level advisory locks need an unpooled ``direct`` engine (README "PostgreSQL
    poolers"); otherwise ``direct`` is ``engine`` itself."""
    engine = make_engine(
        settings.database_url or "",
        pool_size=settings.db_pool_size,
        pooled=settings.database_pooled,
    )
    direct = (
        make_engine(settings.direct_database_url, pool_size=4)
        if settings.database_pooled
        else engine
    )
    try:
        yield engine, direct
    finally:
        await engine.dispose()
        if direct is not engine:
            await direct.dispose()


# What makes database sessions (``db``): the app keeps one in ``app.state.sessionmaker``.
Sessionmaker = async_sessionmaker[AsyncSession]


def make_sessionmaker(engine: AsyncEngine) -> Sessionmaker:
    return async_sessionmaker(engine, expire_on_commit=False)
