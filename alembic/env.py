"""Alembic environment, async (SQLAlchemy asyncio + asyncpg).

Called two ways: by `llmjudge db upgrade` / app start with a live connection passed in
`config.attributes["connection"]`, or by the `alembic` command with a URL.
"""

import asyncio

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from alembic import context
from llmjudge.models import Base

target_metadata = Base.metadata


def do_run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations(url: str) -> None:
    engine = create_async_engine(url)
    async with engine.connect() as connection:
        await connection.run_sync(do_run_migrations)
    await engine.dispose()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        do_run_migrations(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        from llmjudge.infra.config import get_settings

        url = get_settings().database_url
    if not url:
        raise SystemExit(
            "No database URL: set LLMJUDGE_DATABASE_URL or use `llmjudge db upgrade`, "
            "which starts the embedded server."
        )
    asyncio.run(run_async_migrations(url))


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported")
run_migrations_online()
