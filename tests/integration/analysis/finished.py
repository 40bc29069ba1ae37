"""Shared steps of the analysis tests: a finished session whose verdicts the test writes,
and the SQL statements a request runs (the app's background loops left out)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import case, update

from llmjudge.sessions.models import Comparison, JudgeSession

# Set around a request: what it runs (and the tasks it starts) is counted.
_COUNTING: ContextVar[list[str] | None] = ContextVar("counting", default=None)


async def finished_session(app: Any, client: httpx.AsyncClient, tag: str, threads: int) -> int:
    """A round robin of ``threads`` threads over three pillars, every comparison completed
    (the lower thread id wins, except every fourth), the session finished."""
    rows = [
        {
            "pillar": f"{tag}{i % 3}",
            "external_id": f"{tag}-{i}",
            "title": f"{tag} thread {i}",
            "content": f"Answer {i}." * (1 + i % 3),
            "metadata": {"category": "math" if i % 2 else "prose"},
        }
        for i in range(threads)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.is_success, r.text
    pillars = [p["id"] for p in (await client.get("/api/pillars")).json() if tag in p["name"]]
    r = await client.post(
        "/api/sessions",
        json={"session_name": tag, "pillar_ids": pillars, "comparison_mode": "round_robin"},
    )
    assert r.status_code == 201, r.text
    sid = int(r.json()["id"])
    async with app.state.sessionmaker() as db:
        done = await db.execute(
            update(Comparison)
            .where(Comparison.session_id == sid)
            .values(
                status="completed",
                winner=case(
                    ((Comparison.id % 4) == 0, "B"),
                    (Comparison.thread_a_id < Comparison.thread_b_id, "A"),
                    else_="B",
                ),
                confidence=0.7,
                completed_at=datetime.now(UTC),
                attempts=1,
            )
            .returning(Comparison.id)
        )
        s = await db.get(JudgeSession, sid)
        assert s is not None
        s.status, s.completed = "completed", len(done.all())
        s.finished_at = datetime.now(UTC)
        await db.commit()
    return sid


@contextmanager
def statements(app: Any) -> Iterator[list[str]]:
    """The statements run on the app's engine inside the block, by this task and those
    it starts."""
    from sqlalchemy import event

    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        found = _COUNTING.get()
        if found is not None:
            found.append(statement)

    engine = app.state.engine.sync_engine
    event.listen(engine, "before_cursor_execute", count)
    token = _COUNTING.set(seen)
    try:
        yield seen
    finally:
        _COUNTING.reset(token)
        event.remove(engine, "before_cursor_execute", count)
