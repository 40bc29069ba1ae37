"""`/api/sessions/{id}/baseline`: win rates against a baseline pillar from imported
judgments, checked by hand; only shared prompts count; bad baselines are 422s."""

from __future__ import annotations

import json

import httpx
import pytest


def _jsonl(rows: list[dict]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


async def test_win_rates_against_a_baseline(client: httpx.AsyncClient) -> None:
    rows = [
        {"pillar": f"bl-{name}", "external_id": f"bl-{name}-{q}", "prompt_key": f"blq{q}",
         "content": [{"role": "user", "content": f"question {q}"},
                     {"role": "assistant", "content": "x" * size}]}
        for name, size in (("base", 100), ("long", 400), ("short", 50))
        for q in range(6)
    ]  # fmt: skip
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", _jsonl(rows))})
    assert r.status_code == 200, r.text
    threads = {t["external_id"]: t["id"] for t in (await client.get(
        "/api/threads", params={"q": "bl-", "limit": 100})).json()["items"]}  # fmt: skip
    judgments = []
    for q in range(6):
        base, long, short = (threads[f"bl-{n}-{q}"] for n in ("base", "long", "short"))
        # long beats the base on every prompt, shown in both orders
        judgments += [{"thread_a": long, "thread_b": base, "verdict": "A"},
                      {"thread_a": base, "thread_b": long, "verdict": "B"}]  # fmt: skip
        # short: wins q0-q1, ties q2, loses q3-q5 (shown base first)
        verdict = "B" if q < 2 else "TIE" if q == 2 else "A"
        judgments.append({"thread_a": base, "thread_b": short, "verdict": verdict})
    # a pair on two different prompts: not a shared prompt, left out
    judgments.append(
        {"thread_a": threads["bl-long-0"], "thread_b": threads["bl-base-1"], "verdict": "A"}
    )
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", _jsonl(judgments))},
        data={"session_name": "baseline"},
    )
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    pillars = {p["name"]: p["id"] for p in (await client.get("/api/pillars")).json()}

    out = await client.get(
        f"/api/sessions/{sid}/baseline", params={"pillar_id": pillars["bl-base"]}
    )
    assert out.status_code == 200, out.text
    body = out.json()
    assert body["baseline_pillar_name"] == "bl-base" and body["left_out"] == 1
    got = {p["pillar_name"]: p for p in body["pillars"]}
    assert set(got) == {"bl-long", "bl-short"}
    long, short = got["bl-long"], got["bl-short"]
    assert (long["judgments"], long["prompts"], long["win_rate"]) == (12, 6, 1.0)
    assert (short["judgments"], short["prompts"]) == (6, 6)
    assert short["win_rate"] == pytest.approx((2 + 0.5) / 6)
    assert short["win_rate_low"] <= short["win_rate"] <= short["win_rate_high"]
    assert (long["mean_length"], long["baseline_mean_length"]) == (400, 100)
    assert short["lc_win_rate"] is not None and 0 < short["lc_win_rate"] < 1
    assert [p["pillar_name"] for p in body["pillars"]][0] == "bl-long"

    bad = await client.get(f"/api/sessions/{sid}/baseline", params={"pillar_id": 2**31 - 1})
    assert bad.status_code == 422 and "is not in session" in bad.text
    assert (await client.get(f"/api/sessions/{sid}/baseline")).status_code == 422
    assert (
        await client.get("/api/sessions/999999/baseline", params={"pillar_id": 1})
    ).status_code == 404

    page = await client.get(f"/sessions/{sid}/results", params={"tab": "baseline"})
    assert page.status_code == 200 and 'id="no-baseline"' in page.text  # choose one first
    assert f'<option value="{pillars["bl-short"]}">bl-short</option>' in page.text
    part = await client.get(
        f"/sessions/{sid}/partials/results/baseline", params={"baseline": pillars["bl-base"]}
    )
    assert 'id="baseline-table"' in part.text and "Length-controlled win rate against" in part.text
    table = part.text.split('id="baseline-table"')[1]
    row = table.split(">bl-short<")[1].split("</tr>")[0]
    assert "41.7%" in row and " to " in row  # (2 + 0.5) / 6, with its interval
    assert "1 comparisons with the baseline answer different prompts" in part.text
    bad = await client.get(f"/sessions/{sid}/partials/results/baseline", params={"baseline": "x"})
    assert 'id="tab-error"' in bad.text and "must be a pillar id" in bad.text
