"""A quadratic verdict pattern on an upload of raw judgments (issue #28, item 5): the
searches of one upload share one budget, so the import fails fast as a whole with a 422
that names the pattern, instead of spending the per-answer limit on every line."""

from __future__ import annotations

import json
import time

import httpx
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.sessions.models import JudgeSession
from tests.integration.sessions.imports.test_import import import_judgments, import_threads

QUADRATIC = {"kind": "labels", "rules": [{"pattern": "^a.*a.*X", "winner": "A"}]}
LINEAR = {"kind": "labels", "rules": [{"pattern": "Output \\(a\\)", "winner": "A"}]}


async def _threads(client: httpx.AsyncClient) -> list[dict[str, object]]:
    await import_threads(
        client,
        [
            {"pillar": p, "external_id": "slow-1", "prompt_key": "slow", "content": p}
            for p in ("slow-one", "slow-two")
        ],
    )
    a = {"pillar": "slow-one", "external_id": "slow-1"}
    b = {"pillar": "slow-two", "external_id": "slow-1"}
    return [a, b]


async def test_quadratic_pattern_fails_the_upload_fast_with_nothing_stored(
    client: httpx.AsyncClient, db: AsyncSession
) -> None:
    a, b = await _threads(client)
    # The reproduction: 40 lines of 20k characters (took 10.1 s before the budget).
    lines = [{"thread_a": a, "thread_b": b, "judgment": "a" * 20_000} for _ in range(40)]
    before = await db.scalar(select(func.count()).select_from(JudgeSession))
    started = time.perf_counter()
    r = await import_judgments(
        client, lines, name="quadratic", verdict_format=json.dumps(QUADRATIC)
    )
    elapsed = time.perf_counter() - started
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "nothing was imported" in detail["message"]
    [error] = detail["errors"]
    assert error["field"] == "judgment"
    assert "too slow for this upload" in error["message"]
    assert "'^a.*a.*X'" in error["message"] and "anchor" in error["message"]
    # About the 1 s budget (plus the upload itself), far from 40 x 0.25 s.
    assert elapsed < 4.0, elapsed
    assert await db.scalar(select(func.count()).select_from(JudgeSession)) == before


async def test_linear_pattern_reads_the_same_upload(client: httpx.AsyncClient) -> None:
    a, b = await _threads(client)
    text = "a" * 20_000 + "\nOutput (a)"
    lines = [{"thread_a": a, "thread_b": b, "judgment": text} for _ in range(40)]
    r = await import_judgments(client, lines, name="linear", verdict_format=json.dumps(LINEAR))
    assert r.status_code == 201, r.text
    assert r.json()["completed"] == 40, r.text
