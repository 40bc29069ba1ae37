"""Run Alembic migrations from code (app start, CLI, tests)."""

from __future__ import annotations

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from alembic import command
from llmjudge.infra.config import PROJECT_ROOT

# Serialise concurrent starters (server + worker processes) on one database.
_LOCK_KEY = 0x6C6C6D6A  # "llmj"


def alembic_config() -> Config:
    cfg = Config(str(PROJECT_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    return cfg


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    cfg = alembic_config()

    def run(conn: Connection) -> None:
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_LOCK_KEY})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    async with engine.begin() as conn:
        await conn.run_sync(run)


async def current(engine: AsyncEngine) -> tuple[str | None, str]:
    """(revision in the database, head revision of the code)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head() or ""

    def read(conn: Connection) -> str | None:
        return MigrationContext.configure(conn).get_current_revision()

    async with engine.connect() as conn:
        rev = await conn.run_sync(read)
    return rev, head
