"""Migration tests' shared steps: a fresh database at a revision, and a downgrade."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from sqlalchemy.engine import Connection

from alembic import command
from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.db.migrate import alembic_config, upgrade
from tests.conftest import drop_database


async def migrate(url: str, revision: str = "head") -> None:
    engine = make_engine(url, pool_size=1)
    try:
        await upgrade(engine, revision)
    finally:
        await engine.dispose()


async def downgrade(url: str, revision: str) -> None:
    engine = make_engine(url, pool_size=1)
    cfg = alembic_config()

    def run(conn: Connection) -> None:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)

    try:
        async with engine.begin() as conn:
            await conn.run_sync(run)
    finally:
        await engine.dispose()


@asynccontextmanager
async def database_at(pg: EmbeddedPostgres, name: str, revision: str) -> AsyncIterator[str]:
    """A new database ``name`` migrated to ``revision``; its URL; dropped afterwards."""
    await drop_database(pg, name)
    conn = await asyncpg.connect(pg.dsn("postgres"))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        await migrate(pg.url(name), revision)
        yield pg.url(name)
    finally:
        await drop_database(pg, name)
