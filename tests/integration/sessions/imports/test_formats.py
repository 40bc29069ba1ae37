"""`POST /api/sessions/import?format=fastchat|arena_hard`: judgment files people already have
become finished sessions on MT-Bench-style threads (models are pillars)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from tests.integration.sessions.imports.test_import import import_threads

DATA = Path(__file__).resolve().parents[3] / "data"
MODELS = ("vicuna-13b-v1.3", "alpaca-13b", "gpt-4", "claude-v1", "gpt-3.5-turbo")
TEMPLATE = "mtbench-{question_id}-{model}"


@pytest.fixture(scope="module")
async def threads(client: httpx.AsyncClient) -> None:
    await import_threads(
        client,
        [
            {
                "pillar": model,
                "external_id": f"mtbench-{q}-{model}",
                "prompt_key": str(q),
                "content": f"{model} answers question {q}.",
            }
            for model in MODELS
            for q in (81, 82)
        ],
    )


async def _import(client: httpx.AsyncClient, name: str, fmt: str, **form: str) -> httpx.Response:
    return await client.post(
        f"/api/sessions/import?format={fmt}",
        files={"file": (name, (DATA / name).read_bytes())},
        data={"session_name": f"{fmt} import", "external_id": TEMPLATE, **form},
    )


async def test_fastchat_pairwise_file(client: httpx.AsyncClient, threads: None) -> None:
    r = await _import(client, "fastchat_pair.jsonl", "fastchat")
    assert r.status_code == 201, r.text
    out = r.json()
    # 5 lines x 2 games; the "error" game is stored as failed with its text.
    assert (out["total"], out["completed"], out["failed"], out["swap_pairs"]) == (10, 9, 1, 5)
    assert [f["line"] for f in out["parse_failures"]] == [5]
    session = (await client.get(f"/api/sessions/{out['session_id']}")).json()
    assert session["options"]["judge_label"] == "gpt-3.5-turbo-1106 / pair-v2-multi-turn"
    swap = (await client.get(f"/api/sessions/{out['session_id']}/position-swap-analysis")).json()
    assert swap["summary"]["total_swap_pairs"] == 4  # the fifth pair lost a game
    assert swap["summary"]["consistency_rate"] == 1.0
    board = (await client.get(f"/api/sessions/{out['session_id']}/thread-leaderboard")).json()
    wins: dict[str, int] = {}
    for e in board["entries"]:
        model = e["thread_external_id"].split("-", 2)[2]
        wins[model] = wins.get(model, 0) + e["wins"]
    assert wins["vicuna-13b-v1.3"] == 4 and wins["gpt-4"] == 4 and wins["alpaca-13b"] == 1


async def test_arena_hard_file(client: httpx.AsyncClient, threads: None, db: AsyncSession) -> None:
    r = await _import(client, "arena_hard_judgment.jsonl", "arena_hard", baseline="gpt-3.5-turbo")
    assert r.status_code == 201, r.text
    out = r.json()
    assert (out["total"], out["completed"], out["failed"], out["swap_pairs"]) == (6, 5, 1, 3)
    session = (await client.get(f"/api/sessions/{out['session_id']}")).json()
    assert session["options"]["judge_label"] == "gpt-4-1106-preview"
    # "A>>B" is kept as strength 2, "A>B" as 1, a tie has none (comparisons.strength).
    expected = sorted(
        (2 if ">>" in g["score"] or "<<" in g["score"] else 1 if g["score"][1] != "=" else 0)
        for line in (DATA / "arena_hard_judgment.jsonl").read_text().splitlines()
        for g in json.loads(line)["games"]
        if g.get("score")
    )
    stored = await db.scalars(
        text(
            "SELECT coalesce(strength, 0) FROM comparisons WHERE session_id = :s AND status = 'completed'"
        ),
        {"s": out["session_id"]},
    )
    assert sorted(stored) == expected and 2 in expected
    # ... and visible where users read verdicts: the comparisons API and the export
    sid = out["session_id"]
    listed = (await client.get(f"/api/sessions/{sid}/comparisons?limit=100")).json()
    done = [c for c in listed["items"] if c["status"] == "completed"]
    assert sorted(c["strength"] or 0 for c in done) == expected
    export = (await client.get(f"/api/sessions/{sid}/export?format=csv")).text
    body = export[export.index("\ncomparison_id,") + 1 :]  # after the "# ..." header block
    exported = [r for r in csv.DictReader(io.StringIO(body)) if r["status"] == "completed"]
    assert sorted(int(r["strength"] or 0) for r in exported) == expected


async def test_unknown_threads_and_bad_lines_are_row_errors(
    client: httpx.AsyncClient, threads: None
) -> None:
    # The default external_id ({question_id}) names no thread here: every row says so.
    r = await client.post(
        "/api/sessions/import?format=arena_hard",
        files={"file": ("a.jsonl", (DATA / "arena_hard_judgment.jsonl").read_bytes())},
        data={"session_name": "wrong ids", "baseline": "gpt-3.5-turbo"},
    )
    assert r.status_code == 422
    errors = r.json()["detail"]["errors"]
    assert errors and all(e["field"] in ("thread_a", "thread_b") for e in errors)
    assert "no thread with external_id '81' in pillar 'gpt-3.5-turbo'" in {
        e["message"] for e in errors
    }
    bad = b'{"question_id": 81, "model_1": "gpt-4"}\nnot json\n'
    r = await client.post(
        "/api/sessions/import?format=fastchat",
        files={"file": ("f.jsonl", bad)},
        data={"session_name": "bad"},
    )
    assert r.status_code == 422
    assert [(e["line"], e["field"]) for e in r.json()["detail"]["errors"]] == [
        (1, "model_2"),
        (2, "json"),
    ]
    r = await client.post(
        "/api/sessions/import?format=excel",
        files={"file": ("f.jsonl", bad)},
        data={"session_name": "bad"},
    )
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "format"]
