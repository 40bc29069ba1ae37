"""What reproducible adaptive rounds cost in wall time: an adaptive session against a
free-for-all of the same number of judge calls, same workers, same judge latency.

An adaptive round is planned when the previous one is done (so a seeded session picks the
same pairs whatever the worker timing): the workers wait for each round's slowest call and
for the planner. The baseline, measured in the same run, is a free-for-all of the demo's
threads, whose queue never waits. Both use the built-in simulated judge at ``--latency-ms``
(jitter half of it), in this process, on an embedded PostgreSQL in a temporary directory.
Printed per worker count: calls, wall seconds, calls per second, rounds, and the adaptive
session's calls per second as a share of the free-for-all's.

    .venv/bin/python bench/adaptive_rounds.py [--workers 16 64] [--latency-ms 200]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from harness import app_client, demo_pillars, embedded_postgres

TOKEN = "bench-adaptive-rounds-token"


async def run_session(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[int, float, int]:
    """(calls, wall seconds from the create request to the end, rounds)."""
    start = time.perf_counter()
    r = await client.post("/api/sessions", json=body | {"auto_start": True})
    r.raise_for_status()
    sid = r.json()["id"]
    while True:
        s = (await client.get(f"/api/sessions/{sid}")).json()
        if s["status"] in ("completed", "failed", "cancelled"):
            break
        await asyncio.sleep(0.05)
    wall = time.perf_counter() - start
    assert s["status"] == "completed", s
    rounds = 0
    if body["comparison_mode"] == "adaptive":
        state = (await client.get(f"/api/sessions/{sid}/adaptive")).json()
        rounds = len(state.get("rounds", []))
    return int(s["completed"]) + int(s["failed"]), wall, rounds


async def bench(client: httpx.AsyncClient, workers: list[int], latency_ms: float) -> None:
    pillars = await demo_pillars(client, latency_ms, latency_ms / 2)
    print(f"simulated judge: {latency_ms:.0f} ms a call (jitter {latency_ms / 2:.0f} ms)")
    print(f"{'workers':>7} {'session':<13} {'calls':>6} {'wall s':>7} {'calls/s':>8} {'rounds':>6}")
    for w in workers:
        base = {"pillar_ids": pillars, "worker_count": w, "seed": 7, "position_swap": False}
        ffa = base | {"session_name": f"ffa {w}", "comparison_mode": "free_for_all"}
        calls, wall, _ = await run_session(client, ffa)
        adaptive = base | {
            "session_name": f"adaptive {w}",
            "comparison_mode": "adaptive",
            "adaptive": {"rule": "budget", "budget_comparisons": calls},
        }
        a_calls, a_wall, rounds = await run_session(client, adaptive)
        print(f"{w:>7} {'free-for-all':<13} {calls:>6} {wall:>7.1f} {calls / wall:>8.1f}")
        print(
            f"{w:>7} {'adaptive':<13} {a_calls:>6} {a_wall:>7.1f} {a_calls / a_wall:>8.1f}"
            f" {rounds:>6}   {(a_calls / a_wall) / (calls / wall):.2f} of the free-for-all",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--latency-ms", type=float, default=200.0)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bench-adaptive-rounds-") as name,
        embedded_postgres(Path(name)) as pg,
    ):

        async def run() -> None:
            async with app_client(pg, Path(name), TOKEN) as (_, client):
                await bench(client, args.workers, args.latency_ms)

        asyncio.run(run())


if __name__ == "__main__":
    main()
