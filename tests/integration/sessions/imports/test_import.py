"""Import of judgments made elsewhere: parsing rules, swap pairing, row errors, and the
real MT-Bench judgments analysed end to end."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select

from llmjudge.core.tournaments.pairing import PlanArrays
from llmjudge.sessions.imports.parsing import (
    KnownThread,
    ParsedJudgment,
    assign_swap_groups,
    parse_judgment_file,
    resolve_judgments,
)
from llmjudge.sessions.models import Comparison, ComparisonVote, JudgeSession
from llmjudge.sessions.plans import PLAN_COLUMNS, RESULT_COLUMNS, StoredResult, insert_plan

# -- pure -----------------------------------------------------------------------------


def parse(*lines: dict[str, Any]) -> Any:
    data = "\n".join(json.dumps(line) for line in lines).encode()
    return parse_judgment_file(data, max_rows=100, max_chars=10_000)


def test_parse_verdicts_and_raw_judgments() -> None:
    out = parse(
        {"thread_a": 1, "thread_b": 2, "verdict": "b", "confidence": 0.7},
        {"thread_a": 1, "thread_b": 2, "judgment": "Assistant A is better overall. [[A]]"},
        {"thread_a": 1, "thread_b": 2, "judgment": "I cannot decide."},
        {"thread_a": {"pillar": "p", "external_id": 81}, "thread_b": 2, "verdict": "TIE"},
        {
            "thread_a": 1,
            "thread_b": 2,
            "judgment": '{"winner": "A", "confidence": 0.8, "scores": {"A": {"clarity": 4}, '
            '"B": {"clarity": 2}}}',
            "scores_b": {"clarity": 3},
        },
    )
    assert out.errors == []
    first, tagged, unreadable, ref, scored = out.rows
    assert (first.winner, first.confidence, first.parse_error) == ("B", 0.7, None)
    assert (tagged.winner, tagged.raw_response) == ("A", "Assistant A is better overall. [[A]]")
    assert unreadable.winner is None and unreadable.parse_error
    assert ref.thread_a == ("p", "81")
    # explicit scores override the parsed ones
    assert (scored.winner, scored.confidence) == ("A", 0.8)
    assert (scored.scores_a, scored.scores_b) == ({"clarity": 4}, {"clarity": 3})


def test_row_errors_name_line_and_field() -> None:
    out = parse(
        {"thread_a": "x", "thread_b": 2, "verdict": "A"},
        {"thread_a": 1, "thread_b": 2, "verdict": "C?"},
        {"thread_a": 1, "thread_b": 2},
        {"thread_a": 1, "thread_b": 2, "verdict": "A", "judgment": "[[A]]"},
        {"thread_a": 1, "thread_b": 2, "verdict": "A", "scores_a": {"clarity": 9}},
        {"thread_a": 1, "thread_b": 2, "verdict": "A", "winer": "A"},
        {"thread_a": 1, "thread_b": 2, "verdict": "A", "scores_a": {"9lives": 3}},
        {"thread_a": {"pillar": "p"}, "thread_b": 2, "verdict": "A"},
    )
    found = {(e.line, e.field) for e in out.errors}
    assert found == {
        (1, "thread_a"),
        (2, "verdict"),
        (3, "verdict"),
        (4, "verdict"),
        (5, "scores_a.clarity"),
        (6, "winer"),
        (7, "scores"),
        (8, "thread_a.external_id"),
    }
    # line 7 is well-formed; its criterion name is what the file-wide check rejects
    assert [r.line for r in out.rows] == [7]


def test_file_level_errors() -> None:
    assert parse_judgment_file(b"", max_rows=10, max_chars=100).errors[0].field == "file"
    assert parse_judgment_file(b"\xff\xfe", max_rows=10, max_chars=100).errors[0].field == "file"
    many = b"\n".join(b'{"thread_a": 1, "thread_b": 2, "verdict": "A"}' for _ in range(3))
    assert parse_judgment_file(many, max_rows=2, max_chars=100).errors[0].line == 3
    assert parse_judgment_file(b"[1]", max_rows=2, max_chars=100).errors[0].field == "json"


def _row(line: int, a: int, b: int, **kw: Any) -> ParsedJudgment:
    fields: dict[str, Any] = {
        "winner": "A",
        "parse_error": None,
        "raw_response": None,
        "reasoning": None,
        "confidence": None,
        "scores_a": {},
        "scores_b": {},
        "repetition": 0,
        "swap_label": None,
        "group": None,
    }
    return ParsedJudgment(line=line, thread_a=a, thread_b=b, **(fields | kw))


def test_automatic_pairing_rule() -> None:
    pairs = [(1, 2), (1, 2), (2, 1), (3, 1), (2, 1), (1, 3), (2, 1)]
    groups, swapped, errors = assign_swap_groups(
        pairs, [None] * 7, [None] * 7, [0] * 7, list(range(1, 8))
    )
    assert errors == []
    # (2,1) on line 3 is the swap of the earliest open (1,2), line 1; line 5 of line 2;
    # line 7 finds no open (1,2) left and opens its own group
    assert groups == [0, 1, 0, 2, 1, 2, 3]
    assert swapped == [False, False, True, False, True, True, False]
    # different groups or repetitions never pair
    groups, swapped, _ = assign_swap_groups(
        [(1, 2), (2, 1), (2, 1)], [None] * 3, ["x", "y", "x"], [0, 0, 1], [1, 2, 3]
    )
    assert swapped == [False, False, False] and len(set(groups)) == 3


def test_explicit_swap_groups() -> None:
    groups, swapped, errors = assign_swap_groups(
        [(1, 2), (5, 6), (2, 1), (1, 2), (6, 5)],
        ["g", "h", "g", "g", "h"],
        [None] * 5,
        [0] * 5,
        [1, 2, 3, 4, 5],
    )
    assert groups[:3] == [0, 1, 0] and swapped[:3] == [False, False, True]
    assert [e.line for e in errors] == [4]  # a third line in group "g"
    _, _, errors = assign_swap_groups([(1, 2), (1, 2)], ["g", "g"], [None, None], [0, 0], [1, 2])
    assert [e.line for e in errors] == [2] and "swap" in errors[0].message


@given(
    st.lists(
        st.tuples(
            st.integers(0, 4), st.integers(0, 4), st.sampled_from([None, "x"]), st.integers(0, 1)
        ).filter(lambda t: t[0] != t[1]),
        max_size=40,
    )
)
def test_automatic_groups_are_original_plus_mirrored_twin(
    rows: list[tuple[int, int, str | None, int]],
) -> None:
    pairs = [(a, b) for a, b, _, _ in rows]
    groups, swapped, errors = assign_swap_groups(
        pairs,
        [None] * len(rows),
        [g for *_, g, _ in rows],
        [r for *_, r in rows],
        [] if not rows else list(range(1, len(rows) + 1)),
    )
    assert errors == []
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    assert sorted(members) == list(range(len(members)))
    for rows_of_group in members.values():
        assert len(rows_of_group) <= 2
        first = rows_of_group[0]
        assert not swapped[first]
        if len(rows_of_group) == 2:
            second = rows_of_group[1]
            assert swapped[second]
            assert pairs[second] == pairs[first][::-1]
            assert rows[second][2:] == rows[first][2:]  # same group and repetition


def test_resolve_reports_unknown_threads_and_self_pairs() -> None:
    known = {
        1: KnownThread(id=1, pillar_id=10),
        2: KnownThread(id=2, pillar_id=20),
        ("p", "one"): KnownThread(id=1, pillar_id=10),
    }
    resolved, errors = resolve_judgments(
        [_row(1, 1, 2), _row(2, ("p", "one"), 1), _row(3, 7, ("q", "x")), _row(4, 2, 1)], known
    )
    assert [(e.line, e.field) for e in errors] == [
        (2, "thread_b"),
        (3, "thread_a"),
        (3, "thread_b"),
    ]
    assert "no thread with id 7" in errors[1].message
    assert "'x' in pillar 'q'" in errors[2].message
    assert [(r.swap_group, r.is_swap) for r in resolved] == [(0, False), (0, True)]


# -- through the API --------------------------------------------------------------------


async def import_threads(client: httpx.AsyncClient, rows: list[dict[str, Any]]) -> None:
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text


async def import_judgments(
    client: httpx.AsyncClient, lines: list[dict[str, Any]], name: str = "imported", **form: str
) -> httpx.Response:
    body = "\n".join(json.dumps(line) for line in lines).encode()
    return await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", body)},
        data={"session_name": name, **form},
    )


@pytest.fixture(scope="module")
async def small(client: httpx.AsyncClient) -> dict[str, int]:
    await import_threads(
        client,
        [
            {"pillar": "imp-x", "external_id": "a", "content": "a"},
            {"pillar": "imp-x", "external_id": "b", "content": "b"},
            {"pillar": "imp-y", "external_id": "c", "content": "c"},
        ],
    )
    items = (await client.get("/api/threads", params={"q": "", "limit": 500})).json()["items"]
    return {t["external_id"]: t["id"] for t in items if t["pillar_name"].startswith("imp-")}


async def test_import_creates_a_completed_session(
    client: httpx.AsyncClient, app: Any, small: dict[str, int]
) -> None:
    c_ref = {"pillar": "imp-y", "external_id": "c"}
    lines = [
        {"thread_a": small["a"], "thread_b": c_ref, "verdict": "A", "scores_a": {"clarity": 4}},
        {"thread_a": c_ref, "thread_b": small["a"], "verdict": "B", "scores_b": {"clarity": 5}},
        {"thread_a": small["b"], "thread_b": small["c"], "judgment": "[[B]]"},
        {"thread_a": small["c"], "thread_b": small["b"], "judgment": "[[A]] or [[B]]"},
        {"thread_a": small["a"], "thread_b": small["b"], "judgment": ""},
    ]
    r = await import_judgments(client, lines, "outside", judge_label="gpt-x")
    assert r.status_code == 201, r.text
    out = r.json()
    assert (out["total"], out["completed"], out["failed"], out["swap_pairs"]) == (5, 3, 2, 2)
    assert out["criteria"] == ["clarity"]
    assert [f["line"] for f in out["parse_failures"]] == [4, 5]
    sid = out["session_id"]

    session = (await client.get(f"/api/sessions/{sid}")).json()
    assert (session["status"], session["total"], session["completed"], session["failed"]) == (
        "completed",
        5,
        3,
        2,
    )
    assert session["options"]["source"] == "import"
    assert session["options"]["judge_label"] == "gpt-x"
    assert session["comparison_mode"] == "imported"
    # Re-judging the failed lines would mix our judge's verdicts into someone else's.
    r = await client.post(f"/api/sessions/{sid}/retry-failed")
    assert r.status_code == 409 and "imported" in r.json()["detail"]
    assert (await client.get(f"/api/sessions/{sid}")).json()["failed"] == 2
    for url in (f"/sessions/{sid}", f"/sessions/{sid}/results", f"/api/sessions/{sid}/estimate"):
        r = await client.get(url)
        assert r.status_code in (200, 409), (url, r.status_code, r.text[:300])
    async with app.state.sessionmaker() as db:
        stored = (
            await db.execute(
                select(Comparison.status, Comparison.parse_error, Comparison.raw_response)
                .where(Comparison.session_id == sid)
                .order_by(Comparison.queue_position)
            )
        ).all()
        s = await db.get(JudgeSession, sid)
        assert s is not None and s.criteria == ["clarity"]
        # every judgment is also the judge's member-0 vote, as when a session runs
        votes = (
            await db.execute(
                select(ComparisonVote.member, ComparisonVote.status, ComparisonVote.raw_response)
                .join(Comparison, Comparison.id == ComparisonVote.comparison_id)
                .where(ComparisonVote.session_id == sid)
                .order_by(Comparison.queue_position)
            )
        ).all()
    assert [row[0] for row in stored] == ["completed"] * 3 + ["failed"] * 2
    assert [(m, st) for m, st, _ in votes] == [(0, "voted")] * 3 + [(0, "missing")] * 2
    assert [raw for *_, raw in votes] == [row[2] for row in stored]
    assert stored[3][1] and stored[3][2] == "[[A]] or [[B]]"  # the text and why it failed

    swap = (await client.get(f"/api/sessions/{sid}/position-swap-analysis")).json()
    assert swap["session"]["comparison_mode"] == "imported"
    # the a/c pair agrees; the b/c twin failed, so that pair is incomplete
    assert swap["summary"]["total_swap_pairs"] == 1
    assert swap["summary"]["consistency_rate"] == 1.0
    board = (await client.get(f"/api/sessions/{sid}/thread-leaderboard")).json()
    record = {e["thread_id"]: (e["wins"], e["losses"]) for e in board["entries"]}
    assert record == {small["a"]: (2, 0), small["b"]: (0, 1), small["c"]: (1, 2)}
    top = board["entries"][0]
    assert top["thread_id"] == small["a"] and top["avg_likert_scores"] == {"clarity": 4.5}


def test_one_copy_path_names_each_column_once() -> None:
    assert StoredResult._fields == RESULT_COLUMNS
    assert not set(PLAN_COLUMNS) & set(RESULT_COLUMNS)
    table = {c.name for c in Comparison.__table__.columns}
    assert set(PLAN_COLUMNS) | set(RESULT_COLUMNS) <= table


async def test_insert_plan_refuses_results_that_do_not_fit_the_plan() -> None:
    ints = np.arange(3)
    plan = PlanArrays(ints, ints + 1, ints, ints, ints, ints, np.zeros(3, dtype=bool))
    result = StoredResult(
        "completed", 1, datetime.now(UTC), "A", None, None, None, None, None, None
    )
    with pytest.raises(ValueError, match="2 results for a plan of 3"):
        await insert_plan(None, 1, plan, results=[result, result])  # type: ignore[arg-type]


async def test_import_stores_the_file_as_a_plan_in_file_order(
    client: httpx.AsyncClient, app: Any, small: dict[str, int]
) -> None:
    a, b, c = small["a"], small["b"], small["c"]
    lines = [
        {"thread_a": a, "thread_b": b, "verdict": "A", "repetition": 1},
        {"thread_a": c, "thread_b": a, "verdict": "TIE"},
        {"thread_a": b, "thread_b": a, "verdict": "B", "repetition": 1},
    ]
    r = await import_judgments(client, lines, "as a plan")
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    columns = [getattr(Comparison, name) for name in (*PLAN_COLUMNS, *RESULT_COLUMNS)]
    async with app.state.sessionmaker() as db:
        rows = (
            await db.execute(
                select(*columns)
                .where(Comparison.session_id == sid)
                .order_by(Comparison.queue_position)
            )
        ).all()
    got = [dict(zip((*PLAN_COLUMNS, *RESULT_COLUMNS), row, strict=True)) for row in rows]
    assert [g["queue_position"] for g in got] == [0, 1, 2]
    assert [(g["thread_a_id"], g["thread_b_id"]) for g in got] == [(a, b), (c, a), (b, a)]
    assert [g["repetition"] for g in got] == [1, 0, 1]
    assert [g["is_swap"] for g in got] == [False, False, True]
    assert got[2]["swap_group"] == got[0]["swap_group"] != got[1]["swap_group"]
    assert [g["winner"] for g in got] == ["A", "TIE", "B"]
    assert {(g["status"], g["attempts"]) for g in got} == {("completed", 1)}
    assert len({g["completed_at"] for g in got}) == 1  # Elo replays them in file order
    pillars = (await client.get("/api/threads", params={"limit": 500})).json()["items"]
    pillar_of = {t["id"]: t["pillar_id"] for t in pillars}
    assert [(g["pillar_a_id"], g["pillar_b_id"]) for g in got] == [
        (pillar_of[x], pillar_of[y]) for x, y in [(a, b), (c, a), (b, a)]
    ]


async def test_import_is_all_or_nothing(
    client: httpx.AsyncClient, app: Any, small: dict[str, int]
) -> None:
    async with app.state.sessionmaker() as db:
        before = await db.scalar(select(func.count()).select_from(JudgeSession))
    lines = [
        {"thread_a": small["a"], "thread_b": small["b"], "verdict": "A"},
        {"thread_a": small["a"], "thread_b": 10**8, "verdict": "A"},
        {
            "thread_a": {"pillar": "imp-x", "external_id": "a"},
            "thread_b": small["a"],
            "verdict": "B",
        },
        {"thread_a": small["a"], "thread_b": small["b"], "verdict": "maybe"},
    ]
    r = await import_judgments(client, lines)
    assert r.status_code == 422
    errors = r.json()["detail"]["errors"]
    assert [(e["line"], e["field"]) for e in errors] == [(4, "verdict")]  # parsing first
    r = await import_judgments(client, lines[:3])
    assert r.status_code == 422
    errors = r.json()["detail"]["errors"]
    assert [(e["line"], e["field"]) for e in errors] == [(2, "thread_b"), (3, "thread_b")]
    assert "itself" in errors[1]["message"]
    r = await client.post("/api/sessions/import", files={"file": ("j.jsonl", b"")})
    assert r.status_code == 422  # no session_name
    r = await import_judgments(client, lines[:1], name="   ")
    assert r.status_code == 422 and "blank" in r.text
    async with app.state.sessionmaker() as db:
        after = await db.scalar(select(func.count()).select_from(JudgeSession))
    assert after == before


# -- MT-Bench -----------------------------------------------------------------------------


def mtbench_threads(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines():
        a = json.loads(line)
        content = []
        for question, answer in zip(a["turns"], a["answers"], strict=True):
            content += [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ]
        rows.append(
            {
                "pillar": a["model"],
                "external_id": str(a["question_id"]),
                "prompt_key": str(a["question_id"]),
                "title": f"MT-Bench {a['question_id']} ({a['category']})",
                "content": content,
            }
        )
    return rows


def mtbench_judgments(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        j = json.loads(line)
        qid = str(j["question_id"])
        out.append(
            {
                "thread_a": {"pillar": j["model_a"], "external_id": qid},
                "thread_b": {"pillar": j["model_b"], "external_id": qid},
                "judgment": j["judgment"],
            }
        )
    return out


@pytest.mark.slow
async def test_mtbench_judgments(client: httpx.AsyncClient, mtbench_dir: Path) -> None:
    threads = mtbench_threads(mtbench_dir / "answers.jsonl")
    assert len(threads) == 2480 and len({t["pillar"] for t in threads}) == 31
    await import_threads(client, threads)
    judgments = mtbench_judgments(mtbench_dir / "judgments-gpt-3.5-turbo-1106.jsonl")
    r = await import_judgments(client, judgments, "MT-Bench", judge_label="gpt-3.5-turbo-1106")
    assert r.status_code == 201, r.text
    out = r.json()
    # six judgments are unreadable (empty or undecided): stored as failed, never guessed
    assert (out["total"], out["failed"], out["swap_pairs"]) == (4800, 6, 2400)
    sid = out["session_id"]

    swap = (await client.get(f"/api/sessions/{sid}/position-swap-analysis")).json()
    summary = swap["summary"]
    # published: 69.59% of parsed answers position-consistent; parsing every judgment
    # leaves 2,397 complete pairs, 1,669 of them consistent
    assert abs(summary["consistency_rate"] - 0.6959) < 0.01
    consistent = summary["consistent_wins"] + summary["consistent_ties"]
    assert (summary["total_swap_pairs"], consistent) == (2397, 1669)

    started = time.perf_counter()
    board = (await client.get(f"/api/sessions/{sid}/thread-leaderboard")).json()
    elapsed = time.perf_counter() - started
    assert board["pillar_aggregates"][0]["name"] == "gpt-4"
    assert board["pillar_aggregates"][0]["bt_rank"] == 1
    # both judgments of three answers are unreadable: those threads have no result
    assert len(board["entries"]) == 2480 - 3
    assert elapsed < 30, f"leaderboard with 200 bootstrap rounds took {elapsed:.1f}s"
    print(f"\nMT-Bench leaderboard (200 bootstrap rounds): {elapsed:.2f}s")
