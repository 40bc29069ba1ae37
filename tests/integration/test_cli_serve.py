"""`llmjudge serve` as a user runs it: embedded server, crash recovery, external URL."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.conftest import ADMIN_TOKEN, drop_database

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(
    data_dir: Path, port: int, env: dict[str, str] | None = None, *extra: str
) -> subprocess.Popen:
    full_env = {k: v for k, v in os.environ.items() if k != "LLMJUDGE_DATABASE_URL"}
    full_env["LLMJUDGE_ADMIN_TOKEN"] = ADMIN_TOKEN
    full_env.update(env or {})
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmjudge.cli",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            *extra,
        ],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"serve exited with {proc.returncode}:\n{out}")
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("serve did not become healthy in time")


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(30)
    finally:
        if proc.stdout:
            proc.stdout.close()


def test_serve_demo_embedded_then_crash_and_restart(tmp_path: Path):
    data = tmp_path / "data"
    port = free_port()
    proc = start_serve(data, port, None, "--demo")
    try:
        wait_healthy(port, proc)
        pillars = httpx.get(f"http://127.0.0.1:{port}/api/pillars", headers=AUTH).json()
        assert len(pillars) == 6 and sum(p["thread_count"] for p in pillars) == 60
        assert "Pillars" in httpx.get(f"http://127.0.0.1:{port}/", headers=AUTH).text
    finally:
        # kill -9: the embedded server survives and its pid files go stale.
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
    assert (data / "pgdata" / "postmaster.pid").exists()
    proc = start_serve(data, port)
    try:
        wait_healthy(port, proc)
        assert len(httpx.get(f"http://127.0.0.1:{port}/api/pillars", headers=AUTH).json()) == 6
    finally:
        assert stop(proc) == 0
    # A clean stop stops the embedded server too.
    assert not EmbeddedPostgres(data / "pgdata").is_running()


async def _sql(dsn: str, query: str) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


def test_database_url_is_honoured(tmp_path: Path, pg):
    """With LLMJUDGE_DATABASE_URL set (here: the test run's PostgreSQL, a second server),
    serve uses it and never starts an embedded server in its data directory."""
    asyncio.run(_sql(pg.dsn("postgres"), 'CREATE DATABASE "external_url"'))
    data = tmp_path / "data"
    port = free_port()
    proc = start_serve(data, port, {"LLMJUDGE_DATABASE_URL": pg.url("external_url")})
    try:
        wait_healthy(port, proc)
        r = httpx.post(
            f"http://127.0.0.1:{port}/api/pillars", json={"name": "on-external"}, headers=AUTH
        )
        assert r.status_code == 201
    finally:
        assert stop(proc) == 0
    assert not (data / "pgdata").exists()
    try:
        assert (
            asyncio.run(_sql(pg.dsn("external_url"), "SELECT name FROM pillars")) == "on-external"
        )
    finally:
        asyncio.run(drop_database(pg, "external_url"))
