"""`llmjudge db ...` next to a running `serve`: it joins the embedded server, never stops it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from alembic.script import ScriptDirectory

from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.infra.db.migrate import alembic_config

pytestmark = pytest.mark.slow


def postmaster_identity(pgdata: Path) -> tuple[str, str]:
    """(pid, start time) from postmaster.pid: a restarted server changes both."""
    lines = (pgdata / "postmaster.pid").read_text().splitlines()
    return lines[0], lines[2]


async def select_one(dsn: str) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT 1")
    finally:
        await conn.close()


def run_db(data_dir: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LLMJUDGE_DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "llmjudge.cli", "db", *command, "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_db_commands_join_the_running_embedded_server(tmp_path: Path):
    data = tmp_path / "data"
    # Started the way `serve` starts it (cli.database): this process owns the server.
    server = EmbeddedPostgres(data / "pgdata")
    server.start()
    try:
        asyncio.run(server.ensure_database())
        before = postmaster_identity(server.pgdata)
        for command in ("upgrade", "current"):
            done = run_db(data, command)
            assert done.returncode == 0, done.stdout + done.stderr
            assert server.is_running()
            assert postmaster_identity(server.pgdata) == before
            assert asyncio.run(select_one(server.dsn())) == 1
            assert "Stopping embedded PostgreSQL" not in done.stderr
        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
        assert f"database revision: {head}; code head: {head}" in done.stdout
    finally:
        server.stop()


def test_db_commands_alone_start_and_stop_their_own_server(tmp_path: Path):
    data = tmp_path / "data"
    done = run_db(data, "upgrade")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Stopping embedded PostgreSQL" in done.stderr
    assert not EmbeddedPostgres(data / "pgdata").is_running()  # nothing left behind
