"""`llmjudge` command line: serve, worker, db, and friends."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from llmjudge.config import Settings, get_settings

log = logging.getLogger("llmjudge")


@contextlib.contextmanager
def database(settings: Settings) -> Iterator[Settings]:
    """Yield settings with a database URL, starting the embedded server when none is set."""
    if settings.database_url:
        yield settings
        return
    from llmjudge.db.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(settings.pgdata)
    print(f"Starting embedded PostgreSQL in {settings.pgdata} ...", file=sys.stderr)
    server.start()
    try:
        asyncio.run(server.ensure_database())
        yield settings.model_copy(update={"database_url": server.url()})
    finally:
        print("Stopping embedded PostgreSQL ...", file=sys.stderr)
        server.stop()


async def _prepare(settings: Settings, *, demo: bool) -> None:
    from llmjudge.db.engine import make_engine, make_sessionmaker
    from llmjudge.db.migrate import upgrade

    engine = make_engine(settings.database_url or "", pool_size=2)
    try:
        await upgrade(engine)
        if demo:
            from llmjudge.demo.service import load_demo

            async with make_sessionmaker(engine)() as db:
                result = await load_demo(db=db)
            print(f"Demo data loaded: {result.total} threads in 6 pillars.", file=sys.stderr)
    finally:
        await engine.dispose()


@contextlib.contextmanager
def graceful_signals() -> Iterator[None]:
    """Uvicorn shuts down on SIGINT/SIGTERM and then re-raises the signal; make that re-raise
    unwind the stack (so the embedded PostgreSQL is stopped) instead of killing the process."""

    def unwind(signum: int, _frame: object) -> None:
        raise SystemExit(0)

    previous = {s: signal.signal(s, unwind) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    if getattr(args, "host", None):
        overrides["host"] = args.host
    if getattr(args, "port", None):
        overrides["port"] = args.port
    return get_settings().model_copy(update=overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from llmjudge.app import create_app

    with database(_settings(args)) as settings:
        asyncio.run(_prepare(settings, demo=args.demo))
        app = create_app(settings, migrate=False)
        print(f"llmjudge serving at http://{settings.host}:{settings.port}", file=sys.stderr)
        with graceful_signals():
            uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from llmjudge.db.engine import make_engine
    from llmjudge.db.migrate import current, upgrade

    async def run(url: str) -> None:
        engine = make_engine(url, pool_size=1)
        try:
            if args.db_command == "upgrade":
                await upgrade(engine)
            rev, head = await current(engine)
            print(f"database revision: {rev or '(empty)'}; code head: {head}")
        finally:
            await engine.dispose()

    with database(_settings(args)) as settings:
        asyncio.run(run(settings.database_url or ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmjudge", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    def data_dir_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--data-dir",
            help="where the embedded PostgreSQL and key files live "
            "(default: /var/lib/llmjudge as root, else ~/.local/share/llmjudge; "
            "env LLMJUDGE_DATA_DIR). Ignored for the database when LLMJUDGE_DATABASE_URL is set.",
        )

    s = sub.add_parser("serve", help="run the web app and workers")
    s.add_argument("--host", help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default 8000)")
    s.add_argument("--demo", action="store_true", help="load the demo data set before serving")
    data_dir_arg(s)
    s.set_defaults(func=cmd_serve)

    d = sub.add_parser("db", help="database migrations")
    d.add_argument("db_command", choices=["upgrade", "current"])
    data_dir_arg(d)
    d.set_defaults(func=cmd_db)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
