"""Behind PgBouncer in transaction mode (Debian's `pgbouncer` package): with
`database_pooled` the app starts, serves and judges a session through the pooler, while the
event listener, persona locks and migrations use `database_direct_url`. Without the
setting, asyncpg's named prepared statements clash on shared server connections, which is
why the setting exists (statement caches are per client connection; server connections
are per transaction)."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from llmjudge.infra.config import Settings
from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.events.hub import ALL_TOPICS
from llmjudge.sessions.run.judging import session_topic
from tests.conftest import ADMIN_TOKEN, drop_database, new_database
from tests.integration.sessions.test_sessions import FAST_SIMULATOR, seed_threads

pytestmark = pytest.mark.slow

PGBOUNCER = Path("/usr/sbin/pgbouncer")
SERVER_CONNECTIONS = 3  # few server connections for many clients: sharing is certain


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pgbouncer_bin() -> Path:
    if not PGBOUNCER.exists():
        reason = f"{PGBOUNCER} not found: apt-get install pgbouncer"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the pooler test: {reason}", pytrace=False)
        pytest.skip(reason)
    return PGBOUNCER


@pytest.fixture(scope="module")
async def direct_url(pg: EmbeddedPostgres, template_db: str) -> AsyncIterator[str]:
    name = await new_database(pg, template_db, prefix="pgb")
    yield pg.url(name)
    await drop_database(pg, name)


@pytest.fixture(scope="module")
def pooled_url(
    pgbouncer_bin: Path, direct_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    parts = urlsplit(direct_url)
    query = parse_qs(parts.query)
    socket_dir, pg_port, database = query["host"][0], query["port"][0], parts.path.lstrip("/")
    work = tmp_path_factory.mktemp("pgbouncer")
    port = _free_port()
    config = work / "pgbouncer.ini"
    config.write_text(
        f"""[databases]
{database} = host={socket_dir} port={pg_port} user=postgres dbname={database}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = {SERVER_CONNECTIONS}
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
logfile = {work}/pgbouncer.log
pidfile = {work}/pgbouncer.pid
"""
    )
    command = [str(pgbouncer_bin), str(config)]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        user = pwd.getpwuid(os.stat(socket_dir).st_uid).pw_name
        shutil.chown(work, user=user)
        command[1:1] = ["-u", user]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"pgbouncer did not start:\n{out}", pytrace=False)
            time.sleep(0.1)
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:{port}/{database}"
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture(scope="module")
def settings(
    pooled_url: str, direct_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    return Settings(
        database_url=pooled_url,
        database_pooled=True,
        database_direct_url=direct_url,
        data_dir=tmp_path_factory.mktemp("data"),
        admin_token=ADMIN_TOKEN,
    )


async def _hammer(url: str, *, pooled: bool, clients: int = 24) -> list[BaseException]:
    """Many client connections, each running the same statement in several transactions,
    through the pooler: a cached prepared statement is reused on whichever server
    connection the next transaction gets."""
    engine = make_engine(url, pool_size=clients, pooled=pooled)

    async def one(k: int) -> None:
        async with engine.connect() as conn:
            for j in range(8):
                await conn.execute(
                    text("SELECT CAST(:j AS integer) + CAST(:k AS integer) AS n"), {"j": j, "k": k}
                )
                await conn.commit()

    try:
        results = await asyncio.gather(*(one(k) for k in range(clients)), return_exceptions=True)
    finally:
        await engine.dispose()
    return [r for r in results if isinstance(r, BaseException)]


def test_pooled_needs_a_direct_url() -> None:
    with pytest.raises(ValidationError, match="LLMJUDGE_DATABASE_DIRECT_URL"):
        Settings(database_url="postgresql+asyncpg://u@h/db", database_pooled=True)
    s = Settings(database_url="postgresql+asyncpg://u@h/db")
    assert s.direct_database_url == "postgresql+asyncpg://u@h/db"


async def test_named_statements_clash_without_the_setting(pooled_url: str) -> None:
    failures = await _hammer(pooled_url, pooled=False)
    assert failures, "expected prepared-statement clashes through a transaction pooler"
    assert all(isinstance(f, DBAPIError) for f in failures), failures[:3]
    assert any("prepared statement" in str(f) for f in failures), failures[:3]
    assert await _hammer(pooled_url, pooled=True) == []


async def test_app_serves_and_judges_through_the_pooler(
    app: Any, client: httpx.AsyncClient
) -> None:
    r = await client.get("/healthz")
    assert r.status_code == 200 and r.json()["database"] == "ok", r.text
    # The app's engine is the pooled one; the listener has its own direct connection.
    assert str(app.state.engine.url).startswith("postgresql+asyncpg://postgres@127.0.0.1:")
    providers = (await client.get("/api/providers")).json()
    sim = next(p for p in providers if p["name"] == "Simulator")
    r = await client.patch(f"/api/providers/{sim['id']}", json={"settings": FAST_SIMULATOR})
    assert r.status_code == 200, r.text
    pillar_ids = await seed_threads(client, 12, pillars=3, prefix="pgb")
    responses = await asyncio.gather(*(client.get("/api/pillars") for _ in range(40)))
    assert {r.status_code for r in responses} == {200}
    # Live events travel by NOTIFY on the direct connection: every event here went
    # through PostgreSQL and back, none was handed over in process.
    async with app.state.events.subscribe(ALL_TOPICS) as events:
        r = await client.post(
            "/api/sessions",
            json={
                "session_name": "through pgbouncer",
                "pillar_ids": pillar_ids,
                "comparison_mode": "free_for_all",
                "worker_count": 8,
                "auto_start": True,
            },
        )
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        deadline = time.monotonic() + 60
        while True:
            s = (await client.get(f"/api/sessions/{sid}")).json()
            if s["status"] in ("completed", "failed") or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert s["status"] == "completed" and s["completed"] == s["total"] > 0, s
        async with asyncio.timeout(10):
            heard = [await events.get()]
        heard += events.take_all()
    topics = {e.topic for e in heard if e is not None}
    assert session_topic(sid) in topics, topics
