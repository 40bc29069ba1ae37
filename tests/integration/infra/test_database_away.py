"""The database going away (issue 14): the embedded server dies mid-session, the
supervisor restarts it, API calls meanwhile are JSON 503s with Retry-After, /healthz names
no error text, and live updates resume: a subscriber gets comparison_complete again."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from llmjudge.infra.db.embedded import EmbeddedPostgres, Supervisor
from llmjudge.sessions.run.judging import session_topic
from tests.integration.test_scaleout import (
    comparison_rows,
    poll,
    session_on_server,
    wait_ended,
)

pytestmark = pytest.mark.slow


async def test_a_dead_embedded_server_is_restarted_and_live_updates_resume(
    tmp_path: Path,
) -> None:
    server = EmbeddedPostgres(tmp_path / "pgdata")
    server.start()
    supervisor = Supervisor(server, interval_s=0.5, max_restarts=2, window_s=60)
    try:
        async with session_on_server(server, tmp_path / "data", "ddead", worker_count=8) as (
            app,
            client,
            judge,
            sid,
        ):
            async with app.state.events.subscribe(session_topic(sid)) as events:
                done_before: list[int] = []

                async def mid_run() -> bool:
                    rows = await comparison_rows(app, sid)
                    done_before.append(sum(r["status"] == "completed" for r in rows))
                    return done_before[-1] >= 30

                await poll(mid_run, 60, "the session to be mid-run")
                assert done_before[-1] < 216 - 50  # plenty left to do after the restart
                supervisor.start()
                # A crash, as far as clients can tell: no shutdown checkpoint, all cut off.
                await asyncio.to_thread(server.stop, "immediate")
                down = await client.get(f"/api/sessions/{sid}")
                health = await client.get("/healthz")
                events.take_all()
                restarted_at = time.monotonic()
                await poll(lambda: _true(server.is_running()), 60, "the supervisor to restart")
                assert len(supervisor.restarts) == 1

                async def complete_after_restart() -> bool:
                    try:
                        event = await asyncio.wait_for(events.get(), 1)
                    except TimeoutError:
                        return False
                    return event is not None and event.type == "comparison_complete"

                await poll(complete_after_restart, 60, "comparison_complete after the restart")
                assert time.monotonic() > restarted_at
                out = await wait_ended(app, sid, limit_s=120)
    finally:
        supervisor.stop()
        server.stop()
    assert down.status_code == 503, down.text
    assert down.headers.get("retry-after") and down.json()["detail"].startswith("the database")
    assert health.status_code == 503
    assert health.json() == {"status": "error", "database": "unreachable"}
    assert (out["status"], out["completed"]) == ("completed", 216)


async def _true(value: bool) -> bool:
    return value


def test_the_supervisor_gives_up_after_its_budget(tmp_path: Path) -> None:
    class Dead(EmbeddedPostgres):
        starts = 0

        def is_running(self) -> bool:
            return False

        def start(self) -> None:
            Dead.starts += 1
            raise RuntimeError("cannot start")

    sup = Supervisor(Dead(tmp_path / "none"), max_restarts=3, window_s=60)
    assert [sup.check_once() for _ in range(5)] == [False] * 5
    assert Dead.starts == 3 and sup.gave_up
