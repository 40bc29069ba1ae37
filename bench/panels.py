"""Benchmark: what a judge panel costs the engine per comparison, against one judge.

Run: /work/venv/bin/python bench/panels.py [--comparisons 800] [--workers 32] [--latency-ms 100]

One process runs the web app with its in-process worker pool on an embedded PostgreSQL (a
temporary directory, removed after). The judges are simulator providers (each member its own
provider, seed and prices) answering after a fixed latency, so the engine's own work is what
is measured. Three sessions of the same plan (round robin of two pillars with position
swap), run one after the other:

- ``single``: one judge (the baseline);
- ``majority-3``: a panel of three, asked concurrently, votes stored per member;
- ``cascade-3``: three in order, stop when the member's confidence >= 0.8.

Per session: wall time, comparisons/s, judge calls per comparison, calls in flight (peak,
and time-averaged while any is in flight), CPU milliseconds per comparison of this Python process
(engine + app) and of the PostgreSQL server processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import text

from llmjudge.app import create_app
from llmjudge.infra.config import Settings
from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.db.migrate import upgrade

ADMIN = "bench-admin-token-not-secret"


class InFlight:
    """Counts judge calls in flight around the gateway's ``chat``."""

    def __init__(self, llm: Any) -> None:
        self.now = 0
        self.peak = 0
        self.calls = 0
        # Time-weighted: the integral of calls in flight over the time any was in flight.
        self.area = 0.0
        self.busy = 0.0
        self._t = time.perf_counter()
        inner = llm.chat

        async def chat(**kw: Any) -> Any:
            self._tick(+1)
            self.calls += 1
            self.peak = max(self.peak, self.now)
            try:
                return await inner(**kw)
            finally:
                self._tick(-1)

        llm.chat = chat

    def _tick(self, delta: int) -> None:
        t = time.perf_counter()
        if self.now > 0:
            self.area += self.now * (t - self._t)
            self.busy += t - self._t
        self._t = t
        self.now += delta

    def reset(self) -> None:
        self.peak = self.calls = 0
        self.area = self.busy = 0.0

    @property
    def mean(self) -> float:
        return self.area / self.busy if self.busy else 0.0


def _pg_cpu() -> dict[int, float]:
    """CPU seconds of every PostgreSQL process now, by pid (backends come and go: a delta
    is taken per pid, a new one counting from zero)."""
    out = {}
    for p in psutil.process_iter(["name"]):
        if (p.info["name"] or "").startswith("postgres"):
            try:
                t = p.cpu_times()
            except psutil.NoSuchProcess:
                continue
            out[p.pid] = t.user + t.system
    return out


def _pg_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(max(0.0, v - before.get(pid, 0.0)) for pid, v in after.items())


async def _wait_ended(app: Any, sid: int) -> None:
    """Poll the session's status with one cheap query every 0.1 s (not through the API,
    whose requests would add CPU proportional to the wall time)."""
    async with app.state.engine.connect() as conn:
        while True:
            status = await conn.scalar(
                text("SELECT status FROM judge_sessions WHERE id = :id"), {"id": sid}
            )
            await conn.rollback()
            if status in ("completed", "failed", "cancelled"):
                return
            await asyncio.sleep(0.1)


async def _idle_cpu_per_s(seconds: float = 3.0) -> float:
    """CPU seconds per second this process spends with no session running (the pool's
    polling, heartbeats): subtracted per second of wall time from each measurement."""
    me = psutil.Process()
    c0, t0 = sum(me.cpu_times()[:2]), time.perf_counter()
    await asyncio.sleep(seconds)
    return (sum(me.cpu_times()[:2]) - c0) / (time.perf_counter() - t0)


async def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-panels-"))
    pg = EmbeddedPostgres(tmp / "pgdata")
    pg.start()
    try:
        await pg.ensure_database("bench")
        engine = make_engine(pg.url("bench"), pool_size=2)
        await upgrade(engine)
        await engine.dispose()
        settings = Settings(database_url=pg.url("bench"), data_dir=tmp / "data", admin_token=ADMIN)
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport,
                base_url="http://bench",
                headers={"Authorization": f"Bearer {ADMIN}"},
                timeout=120,
            ) as client:
                await bench(app, client, args)
    finally:
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def bench(app: Any, client: httpx.AsyncClient, args: argparse.Namespace) -> None:
    per_pillar = 1
    while 2 * per_pillar * per_pillar < args.comparisons:
        per_pillar += 1
    rows = [
        {
            "pillar": f"bp{i % 2}",
            "external_id": f"bp-{i}",
            "content": f"answer {i} " * 40,
            "metadata": {"quality": (i % 7) / 7},
        }
        for i in range(2 * per_pillar)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    r.raise_for_status()
    pillars = [
        p["id"] for p in (await client.get("/api/pillars")).json() if p["name"] in ("bp0", "bp1")
    ]
    models = []
    for k in range(3):
        r = await client.post(
            "/api/providers",
            json={
                "name": f"bench-sim-{k}",
                "kind": "simulator",
                "max_concurrency": 1024,
                "settings": {"seed": k, "latency_ms_mean": args.latency_ms, "latency_ms_jitter": 0},
            },
        )
        r.raise_for_status()
        r = await client.post(
            "/api/models",
            json={
                "provider_id": r.json()["id"],
                "name": f"bench-judge-{k}",
                "model": "judge",
                "input_price_per_million": 0.5 * (k + 1),
                "output_price_per_million": 1.5 * (k + 1),
            },
        )
        r.raise_for_status()
        models.append(r.json()["id"])
    flight = InFlight(app.state.llm)
    me = psutil.Process()
    base = {
        "pillar_ids": pillars,
        "comparison_mode": "round_robin",
        "criteria": ["quality"],
        "worker_count": args.workers,
        "auto_start": True,
    }
    configs: list[tuple[str, dict[str, Any]]] = [
        ("single", {"judge_model_id": models[0]}),
        (
            "majority-3",
            {"panel": {"members": [{"model_id": m} for m in models], "rule": "majority"}},
        ),
        (
            "cascade-3",
            {
                "panel": {
                    "members": [{"model_id": m} for m in models],
                    "rule": "cascade",
                    "cascade": {"rule": "confidence", "threshold": 0.8},
                }
            },
        ),
    ]
    idle = await _idle_cpu_per_s()
    print(f"idle engine CPU: {1000 * idle:.2f} ms per second (subtracted)")
    results = []
    for name, extra in [("warm-up", {"judge_model_id": models[0]}), *configs]:
        flight.reset()
        cpu0 = sum(me.cpu_times()[:2])
        pg0 = _pg_cpu()
        t0 = time.perf_counter()
        r = await client.post("/api/sessions", json=base | extra | {"session_name": name})
        r.raise_for_status()
        sid = r.json()["id"]
        await _wait_ended(app, sid)
        wall = time.perf_counter() - t0
        cpu = max(0.0, sum(me.cpu_times()[:2]) - cpu0 - idle * wall)
        s = (await client.get(f"/api/sessions/{sid}")).json()
        pg_cpu = _pg_delta(pg0, _pg_cpu())
        n = s["completed"] + s["failed"]
        if name == "warm-up":
            continue
        results.append(
            {
                "session": name,
                "comparisons": n,
                "failed": s["failed"],
                "wall_s": wall,
                "per_s": n / wall,
                "calls_per_comparison": flight.calls / n,
                "peak_in_flight": flight.peak,
                "mean_in_flight": flight.mean,
                "cpu_ms_per_comparison": 1000 * cpu / n,
                "pg_cpu_ms_per_comparison": 1000 * pg_cpu / n,
                "cost_usd": s["cost_usd"],
            }
        )
    single = results[0]
    print(
        f"\n{'session':<12}{'n':>6}{'wall s':>8}{'cmp/s':>8}{'calls/cmp':>10}{'peak fl':>9}"
        f"{'mean fl':>9}{'cpu ms':>8}{'pg ms':>7}{'cpu x':>7}"
    )
    for r in results:
        print(
            f"{r['session']:<12}{r['comparisons']:>6}{r['wall_s']:>8.2f}{r['per_s']:>8.1f}"
            f"{r['calls_per_comparison']:>10.2f}{r['peak_in_flight']:>9}{r['mean_in_flight']:>9.1f}"
            f"{r['cpu_ms_per_comparison']:>8.2f}{r['pg_cpu_ms_per_comparison']:>7.2f}"
            f"{r['cpu_ms_per_comparison'] / single['cpu_ms_per_comparison']:>7.2f}"
        )
    for r in results[1:]:
        extra_calls = r["calls_per_comparison"] - single["calls_per_comparison"]
        per_call = (r["cpu_ms_per_comparison"] - single["cpu_ms_per_comparison"]) / max(
            extra_calls, 1e-9
        )
        print(f"{r['session']}: {per_call:.2f} ms engine CPU per extra member call")
    if args.json:
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=int, default=800)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--json", default=None, help="write the figures here as JSON")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
