"""FastChat and Arena-Hard-Auto judgment files as native import rows (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.tournaments.converters import (
    arena_hard_score,
    check_external_id,
    convert,
    convert_arena_hard,
    convert_fastchat,
)
from llmjudge.sessions.imports.parsing import parse_judgment_objects

DATA = Path(__file__).resolve().parents[3] / "data"
TEMPLATE = "mtbench-{question_id}-{model}"


def records(name: str) -> list[tuple[int, dict[str, Any]]]:
    lines = (DATA / name).read_text().splitlines()
    return [(i, json.loads(line)) for i, line in enumerate(lines, start=1)]


def test_fastchat_pairs_become_swap_pairs_with_positions_resolved() -> None:
    source = records("fastchat_pair.jsonl")
    out = convert_fastchat(source, external_id=TEMPLATE)
    assert out.problems == []
    assert out.judges == ["gpt-3.5-turbo-1106 / pair-v2-multi-turn"]
    assert len(out.rows) == 2 * len(source)
    (l1, g1), (l2, g2) = out.rows[0], out.rows[1]
    assert l1 == l2 == 1
    # line 1: vicuna (model_1) won both games; it is A in game 1 and B in game 2.
    assert g1["thread_a"] == {
        "pillar": "vicuna-13b-v1.3",
        "external_id": "mtbench-81-vicuna-13b-v1.3",
    }
    assert g2["thread_a"]["pillar"] == "alpaca-13b"
    assert (g1["verdict"], g2["verdict"]) == ("A", "B")
    assert g1["swap_group"] == g2["swap_group"] and g1["reasoning"] == source[0][1]["g1_judgment"]
    # line 2: gpt-4 (model_2) won both: B in game 1, A in game 2.
    assert (out.rows[2][1]["verdict"], out.rows[3][1]["verdict"]) == ("B", "A")
    # line 5: "error" keeps the raw judgment for the verdict parser; no verdict is invented.
    err, ok = out.rows[8][1], out.rows[9][1]
    assert "verdict" not in err and err["judgment"] == source[4][1]["g1_judgment"]
    assert ok["verdict"] == "B"  # model_1 (alpaca) is B in game 2 and won
    parsed = parse_judgment_objects(out.rows)
    assert parsed.errors == []
    assert [r.winner for r in parsed.rows] == ["A", "B", "B", "A", "A", "B", "B", "A", None, "B"]
    assert parsed.rows[8].parse_error and parsed.rows[8].raw_response


def test_fastchat_problems_name_line_and_field() -> None:
    out = convert_fastchat(
        [
            (1, {"question_id": 1, "model_1": "a"}),
            (2, {"question_id": 1, "model_1": "a", "model_2": "a", "g1_winner": "tie"}),
            (3, {"question_id": 1, "model_1": "a", "model_2": "b", "g1_winner": "tie"}),
        ]
    )
    assert [(p.line, p.field) for p in out.problems] == [
        (1, "model_2"),
        (2, "model_2"),
        (3, "g2_winner"),
    ]
    assert out.rows == []  # a line converts whole or not at all


def test_arena_hard_keeps_strength_and_the_baseline_side() -> None:
    source = records("arena_hard_judgment.jsonl")
    out = convert_arena_hard(source, baseline="gpt-3.5-turbo", external_id=TEMPLATE)
    assert out.problems == [] and out.judges == ["gpt-4-1106-preview"]
    rows = [r for _, r in out.rows]
    assert len(rows) == 6
    first, second = rows[0], rows[1]
    assert first["thread_a"]["pillar"] == "gpt-3.5-turbo" and first["thread_b"]["pillar"] == "gpt-4"
    assert second["thread_a"]["pillar"] == "gpt-4"
    assert (first["verdict"], first["strength"]) == ("B", 2)  # B>>A: the model, much better
    assert (second["verdict"], second["strength"]) == ("A", 1)
    assert rows[2]["verdict"] == "TIE" and "strength" not in rows[2]
    assert first["swap_group"] == second["swap_group"] != rows[2]["swap_group"]
    assert "verdict" not in rows[5] and rows[5]["judgment"].startswith("The judge was cut off")
    parsed = parse_judgment_objects(out.rows)
    assert parsed.errors == []
    assert [r.strength for r in parsed.rows] == [2, 1, None, None, 2, None]
    assert parsed.rows[5].winner is None and parsed.rows[5].raw_response


def test_arena_hard_problems() -> None:
    game = {"score": "A>B", "judgment": "x"}
    out = convert_arena_hard(
        [
            (1, {"model": "m", "games": [game, game]}),
            (2, {"question_id": "q", "model": "gpt-4-0314", "games": [game, game]}),
            (3, {"question_id": "q", "model": "m", "games": []}),
            (4, {"question_id": "q", "model": "m", "games": [{"score": "A?B"}, game]}),
            (5, {"uid": "q", "model": "m", "games": [game, {"score": None}]}),
            (6, {"uid": "q", "model": "m", "games": [game]}),
        ]
    )
    assert [(p.line, p.field) for p in out.problems] == [
        (1, "question_id"),
        (2, "model"),
        (3, "games"),
        (4, "games.0.score"),
        (5, "games.1"),
    ]
    # v2 files name the question "uid"; a single game is a plain comparison.
    assert [line for line, _ in out.rows] == [6] and "swap_group" not in out.rows[0][1]


@pytest.mark.parametrize(
    ("score", "expected"),
    [
        ("A>>B", ("A", 2)),
        ("A>B", ("A", 1)),
        ("A=B", ("TIE", None)),
        ("B>A", ("B", 1)),
        ("B>>A", ("B", 2)),
        ("A<<B", ("B", 2)),
        (" B > A ", ("B", 1)),
        ("A>A", None),
        ("A>>>B", None),
        ("", None),
    ],
)
def test_arena_hard_scores(score: str, expected: tuple[str, int | None] | None) -> None:
    assert arena_hard_score(score) == expected


@given(st.sampled_from(["A", "B"]), st.sampled_from([">>", ">", "=", "<", "<<"]))
def test_a_score_and_its_mirror_name_the_same_winner(left: str, op: str) -> None:
    right = "B" if left == "A" else "A"
    mirror = {">>": "<<", ">": "<", "=": "=", "<": ">", "<<": ">>"}[op]
    assert arena_hard_score(f"{left}{op}{right}") == arena_hard_score(f"{right}{mirror}{left}")


def test_external_id_templates_and_native_passthrough() -> None:
    assert check_external_id("{question_id}") is None
    assert check_external_id(TEMPLATE) is None
    assert "must contain {question_id}" in (check_external_id("{model}") or "")
    assert "unknown placeholder" in (check_external_id("{question_id}-{turn}") or "")
    assert check_external_id("{question_id") is not None
    bad = convert("fastchat", [], external_id="{nope}")
    assert [p.field for p in bad.problems] == ["external_id"]
    native = [(1, {"thread_a": 1, "thread_b": 2, "verdict": "A"})]
    assert convert("native", native).rows == native
