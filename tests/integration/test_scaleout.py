"""Scale-out: `llmjudge worker` processes and the server on one database share a session.

The judge is a fake OpenAI server in this process whose responder counts the calls per
ordered pair of threads (each thread's content carries a ``[[marker]]``), so "judged once"
is checked at the provider, independently of the engine's own accounting. The app runs no
worker pool of its own unless a test starts one (as `llmjudge serve` would).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from llmjudge.app import create_app
from llmjudge.infra.config import Settings
from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.providers.llm import TEST_PROMPT
from llmjudge.sessions.run.jobs import comparison_pool
from tests.conftest import ADMIN_TOKEN, REPO, make_client
from tests.fakes.servers import FakeOpenAI, FakeState

pytestmark = pytest.mark.slow

CRITERIA = ["quality"]
_MARK = re.compile(r"<thread_([ab])>.*?\[\[([a-z]+-\d+)\]\]", re.S)


# -- a judge that counts its calls -----------------------------------------------------------


def verdict(winner: str) -> str:
    return json.dumps(
        {
            "winner": winner,
            "confidence": 0.75,
            "scores": {"A": {"quality": 4}, "B": {"quality": 3}},
            "reasoning": "A is clearer.",
        }
    )


@dataclass
class CountingJudge:
    """A FakeOpenAI whose answers are counted per (marker A, marker B)."""

    fake: FakeOpenAI
    model_id: int = 0
    provider_id: int = 0
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)

    def respond(self, body: dict[str, Any]) -> str:
        if body["messages"][-1]["content"] == TEST_PROMPT:
            return "OK"
        marks = dict(_MARK.findall(body["messages"][-1]["content"]))
        pair = (marks["a"], marks["b"])
        self.calls[pair] += 1
        return verdict("A" if pair[0] < pair[1] else "B")


@contextlib.asynccontextmanager
async def counting_judge(
    client: httpx.AsyncClient, name: str, *, latency_s: float = 0.02, **provider: Any
) -> AsyncIterator[CountingJudge]:
    """A running counting judge registered as provider + model ``name`` through the API."""
    fake = FakeOpenAI(FakeState(api_key=None, latency_s=latency_s, keep_requests=False))
    judge = CountingJudge(fake)
    fake.state.responder = judge.respond
    await fake.start()
    try:
        body = {
            "name": name,
            "kind": "openai",
            "base_url": fake.base_url,
            "max_concurrency": 64,
            "settings": {"backoff_base_s": 0.01, "backoff_max_s": 0.05},
        }
        r = await client.post("/api/providers", json=body | provider)
        assert r.status_code == 201, r.text
        judge.provider_id = r.json()["id"]
        r = await client.post(
            "/api/models",
            json={"provider_id": judge.provider_id, "name": name, "model": "fake-model"},
        )
        assert r.status_code == 201, r.text
        judge.model_id = r.json()["id"]
        # A provider that has answered before, as in production: sessions start without the
        # fail-fast test call, so the faults a test injects all reach judge calls.
        r = await client.post(f"/api/providers/{judge.provider_id}/test", json={})
        assert r.status_code == 200 and r.json()["ok"], r.text
        fake.state.count = 0
        fake.state.requests.clear()
        yield judge
    finally:
        await fake.stop()


async def seed_marked_threads(
    client: httpx.AsyncClient, prefix: str, per_pillar: int, pillars: int = 3
) -> list[int]:
    """``pillars`` pillars of ``per_pillar`` threads whose contents carry ``[[prefix-i]]``."""
    rows = [
        {
            "pillar": f"{prefix}{i % pillars}",
            "external_id": f"{prefix}-{i}",
            "content": f"[[{prefix}-{i}]] Answer number {i}.",
        }
        for i in range(per_pillar * pillars)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    listed = (await client.get("/api/pillars")).json()
    return [p["id"] for p in listed if re.fullmatch(rf"{prefix}\d+", p["name"])]


@contextlib.asynccontextmanager
async def session_on_server(
    server: EmbeddedPostgres,
    data_dir: Path,
    name: str,
    *,
    worker_count: int,
    latency_s: float = 0.25,
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient, CountingJudge, int]]:
    """An app with its worker pool on a dedicated (already started) server, running a
    216-comparison session of ``name``'s counting judge: for tests that stop the server.
    Each call takes ``latency_s`` so that the session is still running when a test, on a
    busy machine, gets round to stopping the server (216/8 lanes x 0.25 s is about 7 s)."""
    await server.ensure_database()
    settings = Settings(
        database_url=server.url(), data_dir=data_dir, admin_token=ADMIN_TOKEN, lease_seconds=5
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        make_client(app, ADMIN_TOKEN) as client,
        counting_judge(client, name, latency_s=latency_s) as judge,
    ):
        pillar_ids = await seed_marked_threads(client, name[:2], per_pillar=6)  # 216
        sid = await create_session(
            client, pillar_ids=pillar_ids, worker_count=worker_count, judge_model_id=judge.model_id
        )
        yield app, client, judge, sid


async def create_session(client: httpx.AsyncClient, **body: Any) -> int:
    """A started round-robin session judged 8 at a time per process, unless `body` says
    otherwise."""
    base = {
        "session_name": "scale",
        "criteria": CRITERIA,
        "auto_start": True,
        "comparison_mode": "round_robin",
        "worker_count": 8,
    }
    r = await client.post("/api/sessions", json=base | body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def poll(check: Callable[[], Awaitable[bool]], limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.1)


async def session_row(app: FastAPI, sid: int) -> dict[str, Any]:
    async with app.state.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT status, total, completed, failed, input_tokens, output_tokens "
                    "FROM judge_sessions WHERE id = :id"
                ),
                {"id": sid},
            )
        ).one()
    return dict(row._mapping)


async def wait_ended(app: FastAPI, sid: int, limit_s: float = 90) -> dict[str, Any]:
    """Wait (reading the database, so a restarting server is fine) for the session's end."""
    out: dict[str, Any] = {}

    async def ended() -> bool:
        try:
            out.update(await session_row(app, sid))
        except Exception:  # the database may be restarting
            return False
        return out["status"] in ("completed", "failed", "cancelled")

    await poll(ended, limit_s, f"session {sid} to end")
    return out


async def comparison_rows(app: FastAPI, sid: int) -> list[dict[str, Any]]:
    async with app.state.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT c.id, c.status, c.worker_id, c.attempts, c.claimed_at, c.winner, "
                "c.raw_response, c.input_tokens, c.output_tokens, "
                "ta.external_id AS a, tb.external_id AS b "
                "FROM comparisons c JOIN threads ta ON ta.id = c.thread_a_id "
                "JOIN threads tb ON tb.id = c.thread_b_id WHERE c.session_id = :sid"
            ),
            {"sid": sid},
        )
        return [dict(r._mapping) for r in rows]


async def check_books(app: FastAPI, sid: int) -> list[dict[str, Any]]:
    """Every comparison ended, none lost, the session's counters equal to its rows.
    Returns the rows."""
    s = await session_row(app, sid)
    rows = await comparison_rows(app, sid)
    statuses = Counter(r["status"] for r in rows)
    assert len(rows) == s["total"]
    assert set(statuses) <= {"completed", "failed"}, statuses
    assert (s["completed"], s["failed"]) == (statuses["completed"], statuses["failed"])
    assert s["input_tokens"] == sum(r["input_tokens"] for r in rows)
    assert s["output_tokens"] == sum(r["output_tokens"] for r in rows)
    expected = "completed" if statuses["completed"] else "failed"
    assert s["status"] == expected
    return rows


async def judge_accounting(app: FastAPI, sid: int) -> Counter[int]:
    """Accounting rows of judge calls per comparison id."""
    async with app.state.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT comparison_id, count(*) FROM llm_calls "
                "WHERE session_id = :sid AND purpose = 'judge' GROUP BY comparison_id"
            ),
            {"sid": sid},
        )
        return Counter(dict(rows.all()))


# -- worker processes ------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    """A `llmjudge worker` subprocess. Waits are async: the fake judge runs in this loop."""

    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def prefix(self) -> str:
        """The process part of its worker ids (``host:pid``)."""
        return f"{socket.gethostname()}:{self.popen.pid}"

    async def ready(self, limit_s: float = 60) -> None:
        async def started() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"worker exited:\n{self.log.read_text()[-2000:]}")
            return "started (" in self.log.read_text(errors="replace")

        await poll(started, limit_s, f"worker {self.popen.pid} to start")

    async def stop(self) -> int:
        """SIGTERM: drain, give back, flush accounting."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self.popen.wait, 60)

    async def kill(self) -> None:
        self.popen.kill()
        await asyncio.to_thread(self.popen.wait, 10)


def start_worker(
    db_url: str, log: Path, *, lease_s: float = 30.0, concurrency: int = 16
) -> WorkerProcess:
    env = os.environ | {
        "LLMJUDGE_DATABASE_URL": db_url,
        "LLMJUDGE_DATA_DIR": str(log.parent),
        "LLMJUDGE_LEASE_SECONDS": str(lease_s),
    }
    handle = log.open("wb")
    popen = subprocess.Popen(
        [sys.executable, "-m", "llmjudge.cli", "worker", "--concurrency", str(concurrency)],
        cwd=REPO,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )
    handle.close()
    return WorkerProcess(popen, log)


@contextlib.asynccontextmanager
async def worker_processes(
    db_url: str, folder: Path, count: int, **kw: Any
) -> AsyncIterator[list[WorkerProcess]]:
    """``count`` started workers; stopped gracefully at the end (killed if still alive)."""
    procs = [start_worker(db_url, folder / f"worker{i}.log", **kw) for i in range(count)]
    try:
        await asyncio.gather(*(p.ready() for p in procs))
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(Exception):
                await p.stop()
            if p.popen.poll() is None:
                await p.kill()


def held_by(rows: list[dict[str, Any]], prefix: str) -> set[int]:
    return {r["id"] for r in rows if r["worker_id"] and r["worker_id"].startswith(prefix + ":")}


# -- fixtures ----------------------------------------------------------------------------------


# The tests play the workers or start their own pools: no pool inside the app.
IN_PROCESS_WORKERS = False


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    return await seed_marked_threads(client, "so", per_pillar=10)  # 600 comparisons


# -- tests -------------------------------------------------------------------------------------


async def test_three_worker_processes_judge_each_comparison_once(
    app: FastAPI, client: httpx.AsyncClient, db_url: str, pillars: list[int], tmp_path: Path
) -> None:
    async with counting_judge(client, "judge-three") as judge:
        async with worker_processes(db_url, tmp_path, 3, concurrency=8) as procs:
            sid = await create_session(
                client,
                pillar_ids=pillars,
                judge_model_id=judge.model_id,
            )
            out = await wait_ended(app, sid)
        codes = [p.popen.returncode for p in procs]
    assert codes == [0, 0, 0]  # a graceful stop flushed each process's accounting
    assert (out["status"], out["total"], out["completed"], out["failed"]) == (
        "completed",
        600,
        600,
        0,
    )
    rows = await check_books(app, sid)
    # At the provider: each comparison's pair of threads asked exactly once, nothing else.
    assert judge.calls == Counter({(r["a"], r["b"]): 1 for r in rows})
    assert all(r["attempts"] == 1 for r in rows)
    # In the accounting: one judge call per completed comparison, no other.
    assert await judge_accounting(app, sid) == Counter({r["id"]: 1 for r in rows})
    # Spread: every process completed some.
    per_process = Counter(r["worker_id"].rsplit(":", 1)[0] for r in rows)
    assert set(per_process) == {p.prefix for p in procs}
    assert all(n > 0 for n in per_process.values()), per_process
    print(f"\nper process: {sorted(per_process.values())}")


async def test_a_worker_killed_mid_run_loses_nothing(
    app: FastAPI, client: httpx.AsyncClient, db_url: str, pillars: list[int], tmp_path: Path
) -> None:
    """Issue 4: two worker processes plus the server's own pool share one session; one
    worker is killed with SIGKILL mid-run. Its items are claimed again once their lease
    (3 s here) runs out, and every result is counted once."""
    lease_s = 3.0
    server_pool = comparison_pool(
        engine=app.state.engine,
        llm=app.state.llm,
        hub=app.state.events,
        lease_s=lease_s,
        poll_s=0.2,
    )
    async with counting_judge(client, "judge-kill", latency_s=0.1) as judge:
        await server_pool.start()
        try:
            async with worker_processes(
                db_url, tmp_path, 2, concurrency=8, lease_s=lease_s
            ) as procs:
                victim, survivor = procs
                sid = await create_session(
                    client,
                    pillar_ids=pillars,
                    judge_model_id=judge.model_id,
                )

                async def victim_busy() -> bool:
                    rows = await comparison_rows(app, sid)
                    done = sum(r["status"] == "completed" for r in rows)
                    mine = [r for r in rows if r["id"] in held_by(rows, victim.prefix)]
                    return done >= 100 and any(r["status"] == "running" for r in mine)

                await poll(victim_busy, 60, "the victim to be mid-run")
                await victim.kill()
                killed_at = time.time()
                rows = await comparison_rows(app, sid)
                lost = {
                    r["id"]
                    for r in rows
                    if r["status"] == "running" and r["id"] in held_by(rows, victim.prefix)
                }
                victim_done = held_by(rows, victim.prefix) - lost
                out = await wait_ended(app, sid)
                assert await survivor.stop() == 0
        finally:
            await server_pool.stop()
    assert victim.popen.returncode == -signal.SIGKILL
    assert lost, "the victim held nothing when killed"
    assert (out["status"], out["completed"], out["failed"]) == ("completed", 600, 0)
    rows = await check_books(app, sid)
    by_id = {r["id"]: r for r in rows}
    for cid in lost:
        r = by_id[cid]
        # claimed again by a live process, after the lease ran out, at the second attempt
        assert r["attempts"] == 2 and not r["worker_id"].startswith(victim.prefix + ":")
        assert r["claimed_at"].timestamp() > killed_at + lease_s / 3
    assert all(by_id[cid]["attempts"] == 1 for cid in set(by_id) - lost)
    # The victim's finished results stand; only its lost items were asked again.
    assert all(by_id[cid]["worker_id"].startswith(victim.prefix + ":") for cid in victim_done)
    pair_of = {cid: (r["a"], r["b"]) for cid, r in by_id.items()}
    twice = {cid for cid in by_id if judge.calls[pair_of[cid]] == 2}
    assert twice <= lost and max(judge.calls.values()) <= 2
    assert all(judge.calls[pair_of[cid]] >= 1 for cid in by_id)
    accounted = await judge_accounting(app, sid)
    assert {cid for cid, n in accounted.items() if n > 1} <= lost
    workers = Counter(r["worker_id"].rsplit(":", 1)[0] for r in rows)
    assert workers[survivor.prefix] > 0 and workers[server_pool.prefix] > 0
    print(f"\nlost by the victim and judged again: {len(lost)}; per process: {dict(workers)}")


async def test_soak_a_worker_killed_and_the_database_restarted_mid_session(
    tmp_path: Path,
) -> None:
    """Issue 28: the web process (with its own pool) and two `llmjudge worker` processes on
    one dedicated server; one worker is SIGKILLed, then the server is restarted, mid-session.
    Every comparison is completed once, and every judge call of a process that did not crash
    has exactly one accounting row (rows written during the outage are kept and retried)."""
    lease_s = 3.0
    server = EmbeddedPostgres(tmp_path / "pgdata")
    server.start()
    try:
        await server.ensure_database()
        settings = Settings(
            database_url=server.url(),
            data_dir=tmp_path / "data",
            admin_token=ADMIN_TOKEN,
            lease_seconds=int(lease_s),
        )
        app = create_app(settings)
        async with (
            app.router.lifespan_context(app),
            make_client(app, ADMIN_TOKEN) as client,
            counting_judge(client, "judge-soak", latency_s=0.4) as judge,
            worker_processes(server.url(), tmp_path, 2, concurrency=8, lease_s=lease_s) as procs,
        ):
            victim, survivor = procs
            pillar_ids = await seed_marked_threads(client, "sk", per_pillar=10)  # 600
            sid = await create_session(client, pillar_ids=pillar_ids, judge_model_id=judge.model_id)

            async def done_at_least(n: int) -> bool:
                rows = await comparison_rows(app, sid)
                return sum(r["status"] == "completed" for r in rows) >= n

            async def victim_busy() -> bool:
                rows = await comparison_rows(app, sid)
                mine = [r for r in rows if r["id"] in held_by(rows, victim.prefix)]
                return await done_at_least(60) and any(r["status"] == "running" for r in mine)

            await poll(victim_busy, 120, "the victim to be mid-run")
            await victim.kill()
            # Everything the victim ever held: its calls may lack accounting (a crash loses
            # the rows it still buffered), and its lost items are judged again.
            victim_touched = held_by(await comparison_rows(app, sid), victim.prefix)
            await poll(lambda: done_at_least(len(victim_touched) + 150), 120, "progress")
            assert not await done_at_least(600 - 100), "too little left to judge after a restart"
            await asyncio.to_thread(server.stop)
            await asyncio.sleep(2.0)  # calls in flight finish; nothing can be written
            await asyncio.to_thread(server.start)
            out = await wait_ended(app, sid, limit_s=180)
            assert await survivor.stop() == 0  # a graceful stop writes its accounting
            await poll(lambda: app.state.llm.accounting.flush(), 30, "the app's accounting")
            rows = await check_books(app, sid)
            accounted = await judge_accounting(app, sid)
    finally:
        server.stop()
    assert victim.popen.returncode == -signal.SIGKILL
    assert (out["status"], out["completed"], out["failed"]) == ("completed", 600, 0)
    pair_of = {r["id"]: (r["a"], r["b"]) for r in rows}
    assert set(judge.calls) == set(pair_of.values())  # every pair asked, nothing else
    # Every comparison judged once, or again each time its lease ran out: the outage for
    # any of them, the crash too for what the victim held (a pair the victim lost can be
    # judged again just before the outage and lose that lease as well).
    untouched = set(pair_of) - victim_touched
    calls = {cid: judge.calls[pair_of[cid]] for cid in pair_of}
    assert max(calls[cid] for cid in untouched) <= 2
    assert max(calls[cid] for cid in victim_touched) <= 3
    assert len(untouched) > 300
    # Exactly one accounting row per judge call of the processes that did not crash.
    wrong = {
        cid: (accounted[cid], judge.calls[pair_of[cid]])
        for cid in untouched
        if accounted[cid] != judge.calls[pair_of[cid]]
    }
    assert not wrong, f"{len(wrong)} comparisons: (accounting rows, judge calls) {wrong}"
    assert all(
        1 <= accounted[cid] <= judge.calls[pair_of[cid]]
        for cid in victim_touched
        - {r["id"] for r in rows if r["worker_id"].startswith(victim.prefix + ":")}
    )
    workers = Counter(r["worker_id"].rsplit(":", 1)[0] for r in rows)
    print(f"\nvictim touched {len(victim_touched)}; per process: {dict(workers)}")
