"""Benchmark: live events to many SSE clients of one session running at full speed.

Run: .venv/bin/python bench/events.py [--clients 100] [--slow 10] [--concurrency 64]
     [--latency-ms 200] [--separate-worker] [--pollers 0 | --mix]

On an embedded PostgreSQL with a fake judge in its own process (see throughput.py), a live
``llmjudge serve`` (its own worker pool judging; with ``--separate-worker`` the web process
only serves and one ``llmjudge worker`` judges) runs three sessions of the same size:

- A: nobody listening;
- B: ``clients`` subscribers of ``GET /api/sessions/{id}/events``, of which ``slow`` never
  read a byte (a 4 KiB receive buffer, so the server's writes to them stall at once) and
  the others read everything;
- C: nobody listening again (drift of the machine between A and B).

For every ``comparison_complete`` a reading client receives, the delay is its arrival time
minus the event's ``ts`` (when the worker published it, after writing the result). A client
that blocked a worker would show as B slower than A and C; a client that slowed the others
would show in their delays.

``--mix`` is the load mix of the hardening review: during B, 100 reading SSE clients (none
stalled) and 200 HTTP clients polling ``GET /api/sessions/{id}`` (each: request, answer,
``--poll-s`` pause, again), whose answer times are reported. Everything stays on 127.0.0.1,
client counts are capped (``MAX_CLIENTS``) and every session is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np
import psutil
import throughput as tp

MAX_CLIENTS = 1000  # per kind: the bench must never turn into a flood
SESSION_LIMIT_S = 600.0
_TS = re.compile(rb'"ts": ([0-9.]+)')
COMPLETE = b"event: comparison_complete"


@dataclass
class Listener:
    """What one reading client saw."""

    delays: list[float] = field(default_factory=list)
    events: int = 0
    chunks: int = 0  # socket reads with data: ~ the server's writes to this client
    ready: asyncio.Event = field(default_factory=asyncio.Event)


async def listen(http: aiohttp.ClientSession, url: str, out: Listener) -> None:
    """Read the stream until cancelled; record the delay of each completion."""
    async with http.get(url, headers={"Accept": "text/event-stream"}) as resp:
        resp.raise_for_status()
        buffer = b""
        async for chunk in resp.content.iter_any():
            now = time.time()
            out.chunks += 1
            buffer += chunk
            *blocks, buffer = buffer.split(b"\r\n\r\n")
            for block in blocks:
                out.events += 1
                if COMPLETE in block:
                    match = _TS.search(block)
                    if match:
                        out.delays.append(now - float(match.group(1)))
                elif b"event: ready" in block:
                    out.ready.set()


async def stalled_client(port: int, path: str) -> socket.socket:
    """A subscriber that sends its request and never reads the answer."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
        f"Authorization: Bearer {tp.ADMIN_TOKEN}\r\n\r\n"
    )
    await asyncio.get_running_loop().sock_sendall(sock, request.encode())
    return sock


async def poll(http: aiohttp.ClientSession, url: str, pause_s: float, out: list[float]) -> None:
    """One polling client until cancelled: the answer time of each request."""
    while True:
        start = time.perf_counter()
        async with http.get(url) as resp:
            await resp.read()
            resp.raise_for_status()
        out.append(time.perf_counter() - start)
        await asyncio.sleep(pause_s)


async def run_session(api: httpx.AsyncClient, sid: int) -> dict[str, Any]:
    (await api.post(f"/api/sessions/{sid}/start")).raise_for_status()
    async with asyncio.timeout(SESSION_LIMIT_S):
        while True:
            out = (await api.get(f"/api/sessions/{sid}")).json()
            if out["status"] in ("completed", "failed", "cancelled"):
                return out
            await asyncio.sleep(0.5)


@dataclass
class Run:
    rate: float
    failed: int
    serve_cpu: float  # share of one core, over the session
    listeners: list[Listener]
    seconds: float = 0.0
    polls: list[float] = field(default_factory=list)  # answer times of the pollers


async def measure(
    engine: tp.Engine,
    url: str,
    serve_pid: int,
    k: int,
    workers: int,
    clients: int,
    slow: int,
    pollers: int = 0,
    poll_s: float = 0.5,
    lanes: str = "",
) -> Run:
    clients, slow, pollers = (
        min(clients, MAX_CLIENTS),
        min(slow, clients),
        min(pollers, MAX_CLIENTS),
    )
    port = int(url.rsplit(":", 1)[1])
    headers = {"Authorization": f"Bearer {tp.ADMIN_TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as sync_api:
        sid = engine.session(sync_api, k, workers, "round_robin")
    path = f"/api/sessions/{sid}/events" + (f"?lanes={lanes}" if lanes else "")
    listeners = [Listener() for _ in range(clients - slow)]
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        aiohttp.ClientSession(url, headers=headers, connector=connector) as http,
        httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as api,
    ):
        readers = [asyncio.create_task(listen(http, path, li)) for li in listeners]
        stalled = [await stalled_client(port, path) for _ in range(slow)]
        async with asyncio.timeout(60):
            await asyncio.gather(*(li.ready.wait() for li in listeners))
        polls: list[float] = []
        pollers_tasks = [
            asyncio.create_task(poll(http, f"/api/sessions/{sid}", poll_s, polls))
            for _ in range(pollers)
        ]
        proc = psutil.Process(serve_pid)
        cpu0 = sum(proc.cpu_times()[:2])
        out = await run_session(api, sid)
        cpu1 = sum(proc.cpu_times()[:2])
        for task in pollers_tasks:
            task.cancel()
        await asyncio.sleep(2.0)  # the last events on their way
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, *pollers_tasks, return_exceptions=True)
        for sock in stalled:
            sock.close()
    seconds = (tp.timestamp(out["finished_at"]) - tp.timestamp(out["started_at"])).total_seconds()
    return Run(
        out["total"] / seconds, out["failed"], (cpu1 - cpu0) / seconds, listeners, seconds, polls
    )


def summary(name: str, run: Run, total: int) -> str:
    line = f"{name:<28} {run.rate:>8.1f}/s  failed {run.failed}  serve CPU {100 * run.serve_cpu:>3.0f}%"
    if run.polls:
        ms = np.asarray(run.polls) * 1000
        line += (
            f"\n{'':<28} GET /api/sessions/{{id}} ms: median {np.median(ms):.0f}, "
            f"p99 {np.percentile(ms, 99):.0f}, max {ms.max():.0f} over {ms.size:,} polls"
        )
    if not run.listeners:
        return line
    seconds = max(run.seconds, 1e-9)
    delays = np.concatenate([np.asarray(li.delays) for li in run.listeners]) * 1000
    got = np.array([len(li.delays) for li in run.listeners])
    return (
        f"{line}\n{'':<28} delay ms: median {np.median(delays):.0f}, "
        f"p99 {np.percentile(delays, 99):.0f}, max {delays.max():.0f} "
        f"over {delays.size:,} deliveries\n{'':<28} comparison_complete received per "
        f"client: min {got.min():,}, median {np.median(got):,.0f} of {total:,}; all events "
        f"per client: median {np.median([li.events for li in run.listeners]):,.0f} "
        f"({np.median([li.events for li in run.listeners]) / seconds:,.0f}/s) in "
        f"{np.median([li.chunks for li in run.listeners]) / seconds:,.1f} reads/s"
    )


async def main_async(args: argparse.Namespace, engine: tp.Engine, k: int) -> None:
    workers = args.concurrency
    with engine.processes(1, web_pool=not args.separate_worker) as (url, children):
        with tp.api(url) as http:
            warm = engine.session(http, k, workers, "pillar_sample", samples_per_pillar=workers)
            tp.run(http, warm)
        serve = children[0].pid
        a = await measure(engine, url, serve, k, workers, 0, 0)
        b = await measure(
            engine,
            url,
            serve,
            k,
            workers,
            args.clients,
            args.slow,
            args.pollers,
            args.poll_s,
            args.lanes,
        )
        c = await measure(engine, url, serve, k, workers, 0, 0)
    total = 2 * k * k
    print(
        f"{total:,} comparisons per session at concurrency {workers}, latency "
        f"{args.latency_ms:.0f} ms; judging in "
        f"{'a separate llmjudge worker' if args.separate_worker else 'the web process'}; "
        f"{os.cpu_count()} CPU cores for everything\n"
    )
    print(summary("A: no clients", a, total))
    name = f"B: {args.clients} clients ({args.slow} stalled)"
    if args.pollers:
        name = f"B: {args.clients} SSE + {args.pollers} pollers"
    print(summary(name, b, total))
    print(summary("C: no clients again", c, total))
    print(f"\nB / mean(A, C) = {b.rate / ((a.rate + c.rate) / 2):.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--slow", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--latency-ms", type=float, default=200.0)
    p.add_argument("--per-slot", type=int, default=50)
    p.add_argument("--chunk-chars", type=int, default=16)
    p.add_argument("--separate-worker", action="store_true")
    p.add_argument("--pollers", type=int, default=0, help="HTTP clients polling the session")
    p.add_argument("--poll-s", type=float, default=0.5, help="each poller's pause")
    p.add_argument("--mix", action="store_true", help="100 SSE clients + 200 pollers")
    p.add_argument("--lanes", default="", help="the SSE clients' ?lanes= (default: all)")
    args = p.parse_args()
    if args.mix:
        args.clients, args.slow, args.pollers = 100, 0, 200
    tmp = Path(tempfile.mkdtemp(prefix="llmjudge-bench-", dir="/tmp"))
    port = tp.free_port()
    fake = tp.spawn(
        [tp.__file__, "fake", str(port), str(args.latency_ms / 1000), str(args.chunk_chars)],
        tmp / "fake.log",
    )
    fake.wait_for("ready")
    k = max(2, round((args.per_slot * args.concurrency / 2) ** 0.5))
    engine: tp.Engine | None = None
    try:
        engine = tp.Engine(tmp, f"http://127.0.0.1:{port}/v1")
        engine.setup([k])
        asyncio.run(main_async(args, engine, k))
    except BaseException:
        print(f"failed: logs kept in {tmp}", file=sys.stderr)
        raise
    finally:
        if engine is not None:
            engine.close()
        fake.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
