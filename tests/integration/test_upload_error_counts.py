"""Every row-file upload (threads, judgments, reference labels, persona pairs) that has
more problems than its answer lists says how many there are and that the list is cut
(#27 item 6: "200 problem(s)" was shown for a file of 3,195): a file of 500 bad rows."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from llmjudge.infra.rowfiles import MAX_ERRORS

BAD = 500
JUDGE_PROMPT = (
    "Input: {input}\nReference: {correct_output}\nAnswer: {answer}\n"
    'Reply with JSON like {{"label": "correct", "reasoning": "...", "confidence": 0.5}}.'
)


def _bad_jsonl() -> bytes:
    return "".join(f"not json {i}\n" for i in range(BAD)).encode()


def _check(r: httpx.Response, outcome: str) -> list[dict[str, Any]]:
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["message"] == f"{BAD} problems; the first {MAX_ERRORS} are listed; {outcome}"
    assert detail["total"] == BAD
    assert len(detail["errors"]) == MAX_ERRORS
    return detail["errors"]


async def test_threads_judgments_and_labels_say_the_total(client: httpx.AsyncClient) -> None:
    files = {"file": ("bad.jsonl", _bad_jsonl())}
    errors = _check(await client.post("/api/threads/import", files=files), "nothing was imported")
    assert [e["line"] for e in errors] == list(range(1, MAX_ERRORS + 1))
    r = await client.post(
        "/api/sessions/import", files=files, data={"session_name": "five hundred bad"}
    )
    _check(r, "nothing was imported")
    _check(await client.post("/api/references/import", files=files), "nothing was imported")


async def test_pairs_say_the_total_in_the_api_and_on_the_page(client: httpx.AsyncClient) -> None:
    models = {m["name"]: m["id"] for m in (await client.get("/api/models")).json()}
    r = await client.post(
        "/api/personas",
        json={
            "name": "Five hundred bad rows",
            "task_prompt": "Answer: {input}",
            "judge_prompt": JUDGE_PROMPT,
            "judge_model_id": models["simulated-judge"],
            "engineer_model_id": models["simulated-engineer"],
        },
    )
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    bad = "input,correct_output\n" + "".join(f"q{i},\n" for i in range(BAD))
    files = {"file": ("pairs.csv", bad.encode())}
    r = await client.post(f"/api/personas/{pid}/training-pairs/upload", files=files)
    errors = _check(r, "nothing was stored")
    assert errors[-1] == {
        "line": MAX_ERRORS + 1,
        "field": "correct_output",
        "message": ("correct_output is empty"),
    }
    page = await client.post(f"/personas/{pid}/data/upload", files=files)
    assert page.status_code == 422
    assert f"{BAD} problems; the first {MAX_ERRORS} are listed; nothing was stored" in page.text
    assert page.text.count("correct_output is empty") == MAX_ERRORS
    # At most the cap: the message stays as it was.
    few = "input,correct_output\nq,\n"
    r = await client.post(
        f"/api/personas/{pid}/training-pairs/upload", files={"file": ("p.csv", few.encode())}
    )
    assert r.json()["detail"]["message"] == "1 problem(s) found; nothing was stored"
    assert r.json()["detail"]["total"] == 1


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
async def test_the_thread_page_says_the_total(client: httpx.AsyncClient, kind: str) -> None:
    if kind == "csv":
        data = ("pillar,content\n" + "".join(f",c{i}\n" for i in range(BAD))).encode()
    else:
        data = _bad_jsonl()
    r = await client.post("/import", files={"file": (f"bad.{kind}", data)})
    assert r.status_code == 422
    assert f"{BAD} problems; the first {MAX_ERRORS} are listed; nothing was imported" in r.text
