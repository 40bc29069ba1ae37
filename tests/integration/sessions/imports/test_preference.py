"""Imported judgments with a ``preference``: the judge's probability that thread_a is
better, on the probability scale or AlpacaEval's 1-2, stored as ``prob_a`` (a panel's as
its judges' mean) and read by the ratings; a value off its scale is an error naming the
line, and nothing is stored."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.sessions.models import Comparison, JudgeSession
from tests.integration.sessions.imports.test_import import import_judgments, import_threads


def ref(pillar: str, k: int) -> dict[str, str]:
    return {"pillar": pillar, "external_id": f"pref-{k}"}


@pytest.fixture(scope="module")
async def threads(client: httpx.AsyncClient) -> None:
    await import_threads(
        client,
        [
            {"pillar": p, "external_id": f"pref-{k}", "prompt_key": f"q{k}", "content": f"{p} {k}"}
            for p in ("pref-x", "pref-y")
            for k in range(3)
        ],
    )


async def _stored(db: AsyncSession, sid: int) -> list[tuple[Any, ...]]:
    rows = await db.execute(
        text(
            "SELECT c.winner, c.prob_a, v.prob_a FROM comparisons c LEFT JOIN comparison_votes v"
            " ON v.comparison_id = c.id AND v.member = 0"
            " WHERE c.session_id = :s ORDER BY c.queue_position"
        ),
        {"s": sid},
    )
    return [tuple(r) for r in rows.all()]


async def test_probability_and_alpacaeval_scales_are_stored_as_prob_a(
    client: httpx.AsyncClient, threads: None, db: AsyncSession
) -> None:
    lines = [
        {"thread_a": ref("pref-x", 0), "thread_b": ref("pref-y", 0), "preference": 0.8},
        {"thread_a": ref("pref-x", 1), "thread_b": ref("pref-y", 1), "preference": 0.5},
        # a hard verdict beside the probability is kept as given
        {
            "thread_a": ref("pref-x", 2),
            "thread_b": ref("pref-y", 2),
            "preference": 0.3,
            "verdict": "A",
        },
    ]
    r = await import_judgments(client, lines, "probability scale")
    assert r.status_code == 201, r.text
    assert await _stored(db, r.json()["session_id"]) == [
        ("A", 0.8, 0.8),
        ("TIE", 0.5, 0.5),
        ("A", pytest.approx(0.3), pytest.approx(0.3)),
    ]
    alpaca = [
        {"thread_a": ref("pref-x", k), "thread_b": ref("pref-y", k), "preference": p}
        for k, p in enumerate([1.0, 1.75, 2.0])
    ]
    r = await import_judgments(client, alpaca, "alpacaeval", preference_scale="alpacaeval")
    assert r.status_code == 201, r.text
    stored = await _stored(db, r.json()["session_id"])
    assert [w for w, _, _ in stored] == ["A", "B", "B"]
    assert [p for _, p, _ in stored] == pytest.approx([1.0, 0.25, 0.0])
    # The ratings fit the fractional outcomes: y_1 beat x_1 by 0.75 to 0.25, y_2 beat x_2
    # outright. As hard verdicts (B, B) the two gaps would be equal.
    url = f"/api/sessions/{r.json()['session_id']}/thread-leaderboard"
    board = (await client.get(url)).json()
    bt = {e["thread_external_id"] + e["pillar"]["name"]: e["bt_score"] for e in board["entries"]}
    gap_1 = bt["pref-1pref-y"] - bt["pref-1pref-x"]
    gap_2 = bt["pref-2pref-y"] - bt["pref-2pref-x"]
    assert 0 < gap_1 < gap_2 - 50
    assert bt["pref-0pref-x"] - bt["pref-0pref-y"] == pytest.approx(gap_2)
    # the win rate against a baseline is the mean probability (hard verdicts: 2/3)
    pillars = {p["name"]: p["id"] for p in (await client.get("/api/pillars")).json()}
    url = f"/api/sessions/{r.json()['session_id']}/baseline?pillar_id={pillars['pref-x']}"
    versus = (await client.get(url)).json()
    assert versus["pillars"][0]["win_rate"] == pytest.approx((0 + 0.75 + 1) / 3)


async def test_a_panel_of_imported_probabilities_stores_their_mean(
    client: httpx.AsyncClient, threads: None, db: AsyncSession
) -> None:
    lines = [
        {
            "thread_a": ref("pref-x", 0),
            "thread_b": ref("pref-y", 0),
            "preference": p,
            "judge": judge,
        }
        for judge, p in (("one", 0.9), ("two", 0.6))
    ]
    r = await import_judgments(client, lines, "panel of probabilities")
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    assert await db.scalar(select(Comparison.prob_a).where(Comparison.session_id == sid)) == (
        pytest.approx(0.75)
    )
    votes = await db.execute(
        text("SELECT member, prob_a FROM comparison_votes WHERE session_id = :s ORDER BY member"),
        {"s": sid},
    )
    assert [tuple(v) for v in votes.all()] == [(0, 0.9), (1, 0.6)]


@pytest.mark.parametrize(
    ("scale", "value", "needle"),
    [
        ("probability", 1.2, "preference 1.2 is outside the probability scale 0 to 1"),
        ("probability", -0.1, "preference -0.1 is outside the probability scale 0 to 1"),
        ("alpacaeval", 0.5, "preference 0.5 is outside the alpacaeval scale 1 to 2"),
        ("alpacaeval", 2.01, "outside the alpacaeval scale"),
        ("probability", "NaN", "finite number"),
        ("metres", 0.5, "preference_scale"),
    ],
)
async def test_a_preference_off_its_scale_stores_nothing(
    client: httpx.AsyncClient,
    threads: None,
    db: AsyncSession,
    scale: str,
    value: Any,
    needle: str,
) -> None:
    before = await db.scalar(select(func.count()).select_from(JudgeSession))
    good = {"thread_a": ref("pref-x", 0), "thread_b": ref("pref-y", 0), "preference": 1.0}
    bad = {"thread_a": ref("pref-x", 1), "thread_b": ref("pref-y", 1), "preference": value}
    body = [good, bad]
    if value == "NaN":  # JSON has no NaN; Python's json writes it and pydantic must refuse it
        bad["preference"] = float("nan")
    r = await import_judgments(client, body, "bad preference", preference_scale=scale)
    assert r.status_code == 422, r.text
    assert needle in r.text
    if scale != "metres":
        errors = r.json()["detail"]["errors"]
        assert [(e["line"], e["field"]) for e in errors] == [(2, "preference")]
    assert await db.scalar(select(func.count()).select_from(JudgeSession)) == before


async def test_a_logprobs_format_cannot_read_recorded_texts(
    client: httpx.AsyncClient, threads: None
) -> None:
    lines = [{"thread_a": ref("pref-x", 0), "thread_b": ref("pref-y", 0), "judgment": "m"}]
    r = await import_judgments(
        client,
        lines,
        "texts",
        verdict_format='{"kind": "logprobs", "tokens": {"a": "m", "b": "M"}}',
    )
    assert r.status_code == 422 and "import the probabilities as a preference" in r.text
