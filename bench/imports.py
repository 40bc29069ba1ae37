"""Memory of `llmjudge serve` during thread imports: one and several 1M-row CSV uploads.

Not a pass/fail test: it prints the server process's resident memory before the uploads
(`base`), its peak while they run (`peak`, sampled every 50 ms, and the kernel's VmHWM), and
the difference (`added`), beside the size of the uploads. Each scenario runs in a fresh
`llmjudge serve` (no worker pool) on one embedded PostgreSQL in a temporary directory; each
upload has its own pillars, so every row is a new thread.

    .venv/bin/python bench/imports.py [--rows 1000000] [--parallel 1 4]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import tempfile
import threading
import time
from pathlib import Path

import httpx
from throughput import ADMIN_TOKEN, Child, free_port, hwm_mb, spawn

MIB = 1_048_576


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_csv(path: Path, rows: int, tag: str) -> int:
    """A thread CSV of ``rows`` short answers in 10 pillars of its own; returns its size."""
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write("pillar,external_id,content\n")
        for i in range(rows):
            f.write(f"{tag}p{i % 10},e{i},Answer number {i} is fine.\n")
    return path.stat().st_size


async def migrate(url: str, pg: object) -> None:
    from llmjudge.infra.db.engine import make_engine
    from llmjudge.infra.db.migrate import upgrade

    await pg.ensure_database()  # type: ignore[attr-defined]
    engine = make_engine(url, pool_size=1)
    await upgrade(engine)
    await engine.dispose()


class Sampler(threading.Thread):
    """The largest VmRSS of ``pid`` seen while running."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.05)


def upload(url: str, path: Path) -> tuple[int, float, str]:
    start = time.monotonic()
    with (
        path.open("rb") as f,
        httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=3600
        ) as http,
    ):
        r = http.post("/api/threads/import", files={"file": (path.name, f, "text/csv")})
    return r.status_code, time.monotonic() - start, r.text[:200]


def scenario(tmp: Path, env: dict[str, str], files: list[Path]) -> None:
    port = free_port()
    serve_env = env | {
        "LLMJUDGE_WORKERS_ENABLED": "false",
        "LLMJUDGE_MAX_CONCURRENT_IMPORTS": str(len(files)),
    }
    server: Child = spawn(
        ["-m", "llmjudge.cli", "serve", "--port", str(port)],
        tmp / f"serve-{len(files)}.log",
        serve_env,
    )
    try:
        server.wait_for("Uvicorn running", 120)
        time.sleep(1.0)  # start-up settles
        base = rss_mb(server.pid)
        sampler = Sampler(server.pid)
        sampler.start()
        url = f"http://127.0.0.1:{port}"
        with concurrent.futures.ThreadPoolExecutor(len(files)) as pool:
            results = list(pool.map(lambda p: upload(url, p), files))
        sampler.stop.set()
        sampler.join()
        hwm = hwm_mb(server.pid)
    finally:
        server.stop()
    size = sum(p.stat().st_size for p in files) / MIB
    peak = max(sampler.peak, hwm)
    codes = [c for c, _, _ in results]
    slowest = max(s for _, s, _ in results)
    print(
        f"{len(files):>8} {size:>9.1f} {base:>8.0f} {sampler.peak:>8.0f} {hwm:>8.0f} "
        f"{peak - base:>9.0f} {(peak - base) / size:>7.1f} {slowest:>7.1f}  {codes}",
        flush=True,
    )
    for code, _, text in results:
        if code != 200:
            print(f"         refused: {code} {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from llmjudge.infra.db.embedded import EmbeddedPostgres

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="llmjudge-bench-imports-") as name:
        tmp = Path(name)
        pg = EmbeddedPostgres(tmp / "pgdata")
        pg.start()
        try:
            asyncio.run(migrate(pg.url(), pg))
            env = {
                "LLMJUDGE_DATABASE_URL": pg.url(),
                "LLMJUDGE_ADMIN_TOKEN": ADMIN_TOKEN,
                "LLMJUDGE_DATA_DIR": str(tmp / "data"),
                "LLMJUDGE_MAX_IMPORT_ROWS": str(args.rows),
                "LLMJUDGE_MAX_UPLOAD_BYTES": str(256 * MIB),
            }
            print(f"{args.rows:,} rows per upload; MiB of the server process (VmRSS)")
            print("parallel  upload MiB    base  sampled    VmHWM     added   x up  slowest s")
            batch = 0
            for n in args.parallel:
                files = []
                for _ in range(n):
                    batch += 1
                    path = tmp / f"threads{batch}.csv"
                    write_csv(path, args.rows, f"b{batch}")
                    files.append(path)
                scenario(tmp, env, files)
                for path in files:
                    path.unlink()
        finally:
            pg.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
