"""Verdict formats as data: json, tags and ordered regex label rules."""

from __future__ import annotations

import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llmjudge.core.judging.formats import LabelRule, VerdictFormat, parse_with_format
from llmjudge.core.judging.verdicts import VerdictParseError, parse_verdict


def labels(*rules: dict[str, object], **options: object) -> VerdictFormat:
    return VerdictFormat.model_validate({"kind": "labels", "rules": list(rules), **options})


OUTPUT_AB = labels(
    {"pattern": r"Output \(a\)", "winner": "A"},
    {"pattern": r"Output \(b\)", "winner": "B"},
)
FIVE_LEVELS = labels(
    {"pattern": r"\[\[A>>B\]\]", "winner": "A", "strength": 2},
    {"pattern": r"\[\[A>B\]\]", "winner": "A", "strength": 1},
    {"pattern": r"\[\[A=B\]\]", "winner": "TIE"},
    {"pattern": r"\[\[B>A\]\]", "winner": "B", "strength": 1},
    {"pattern": r"\[\[B>>A\]\]", "winner": "B", "strength": 2},
)
CHOICE_FIRST_LINE = labels(
    {"pattern": r"^Choice: A\b", "winner": "A"},
    {"pattern": r"^Choice: B\b", "winner": "B"},
)
BARE = labels(
    {"pattern": r"^1$", "winner": "A"},
    {"pattern": r"^2$", "winner": "B"},
    {"pattern": r"^tie$", "winner": "TIE", "ignore_case": True},
)


# --------------------------------------------------------------------------- examples


@pytest.mark.parametrize(
    ("text", "winner"),
    [
        ("Output (a)", "A"),
        ("Output (b)", "B"),
        ("  Output (b) is better.\n", "B"),
        # rule_order: the first rule that occurs anywhere wins, wherever it occurs
        ("Output (b) is fine, but Output (a) is better.", "A"),
    ],
)
def test_output_a_b(text: str, winner: str) -> None:
    parsed = parse_with_format(text, OUTPUT_AB)
    assert (parsed.winner, parsed.strength, parsed.verdict.format) == (winner, 1, "labels")
    assert parsed.verdict.reasoning == text.strip()


@pytest.mark.parametrize("text", ["output (a)", "Output (c)", "Output a", ""])
def test_output_a_b_unparsed_fails(text: str) -> None:
    with pytest.raises(VerdictParseError, match="no rule"):
        parse_with_format(text, OUTPUT_AB)


def test_ignore_case_is_per_rule() -> None:
    fmt = labels({"pattern": r"Output \(a\)", "winner": "A", "ignore_case": True})
    assert parse_with_format("OUTPUT (A) wins", fmt).winner == "A"


@pytest.mark.parametrize(
    ("text", "winner"),
    [
        ("Choice: A\nBecause it follows the instruction.", "A"),
        ("Choice: B", "B"),
        ("\n  Choice: B\nreasons", "B"),  # the answer is stripped first
    ],
)
def test_choice_on_first_line(text: str, winner: str) -> None:
    assert parse_with_format(text, CHOICE_FIRST_LINE).winner == winner


@pytest.mark.parametrize("text", ["Reasons first.\nChoice: A", "Choice: AB", "choice: A"])
def test_choice_elsewhere_is_unparsed(text: str) -> None:
    with pytest.raises(VerdictParseError):
        parse_with_format(text, CHOICE_FIRST_LINE)


@pytest.mark.parametrize(
    ("tag", "winner", "strength", "rule"),
    [
        ("[[A>>B]]", "A", 2, 0),
        ("[[A>B]]", "A", 1, 1),
        ("[[A=B]]", "TIE", 1, 2),
        ("[[B>A]]", "B", 1, 3),
        ("[[B>>A]]", "B", 2, 4),
    ],
)
def test_five_levels(tag: str, winner: str, strength: int, rule: int) -> None:
    parsed = parse_with_format(f"My final verdict is {tag}.", FIVE_LEVELS)
    assert (parsed.winner, parsed.strength, parsed.rule) == (winner, strength, rule)
    expected_strength = {2: "strong", 1: "weak"}[strength] if winner != "TIE" else None
    assert parsed.verdict.strength == expected_strength


@pytest.mark.parametrize(
    ("text", "winner"), [("1", "A"), ("2", "B"), ("Tie", "TIE"), ("TIE", "TIE"), (" 2\n", "B")]
)
def test_bare_labels(text: str, winner: str) -> None:
    assert parse_with_format(text, BARE).winner == winner


@pytest.mark.parametrize("text", ["12", "1 or 2", "Tied", "3"])
def test_bare_labels_reject_anything_else(text: str) -> None:
    with pytest.raises(VerdictParseError):
        parse_with_format(text, BARE)


# --------------------------------------------------------------------------- match policy

MIXED = "Output (b) looked good. On reflection, Output (a) is better. Output (b) is not."


@pytest.mark.parametrize(
    ("match", "winner", "rule"), [("rule_order", "A", 0), ("first", "B", 1), ("last", "B", 1)]
)
def test_match_policies(match: str, winner: str, rule: int) -> None:
    fmt = OUTPUT_AB.model_copy(update={"match": match})
    parsed = parse_with_format(MIXED, fmt)
    assert (parsed.winner, parsed.rule) == (winner, rule)


def test_last_uses_the_latest_start_even_for_overlapping_matches() -> None:
    # "ab" on "abab": non-overlapping matches start at 0 and 2; "bab" starts at 1.
    fmt = labels({"pattern": "bab", "winner": "B"}, {"pattern": "ab", "winner": "A"}, match="last")
    assert parse_with_format("abab", fmt).winner == "A"
    fmt = labels({"pattern": "aa", "winner": "A"}, {"pattern": "ba", "winner": "B"}, match="last")
    # "aa" occurs at 1 and 2 in "baaa": the latest start (2) beats "ba" at 0.
    assert parse_with_format("baaa", fmt).winner == "A"


def test_equal_starts_go_to_the_earlier_rule() -> None:
    for match in ("first", "last"):
        fmt = labels(
            {"pattern": "Output", "winner": "B"},
            {"pattern": r"Output \(a\)", "winner": "A"},
            match=match,
        )
        assert parse_with_format("Output (a)", fmt).rule == 0


def test_last_respects_anchors() -> None:
    fmt = labels({"pattern": r"^A", "winner": "A"}, {"pattern": r"B$", "winner": "B"}, match="last")
    assert parse_with_format("A then A then B", fmt).winner == "B"
    assert parse_with_format("A then A then B.", fmt).winner == "A"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "x", "ab", "ba", " "]), max_size=12).map("".join),
    st.sampled_from(["rule_order", "first", "last"]),
)
def test_match_policies_against_brute_force(text: str, match: str) -> None:
    patterns = ["ab", "b+a", "xa?"]
    fmt = labels(
        {"pattern": "ab", "winner": "A"},
        {"pattern": "b+a", "winner": "B"},
        {"pattern": "xa?", "winner": "TIE"},
        match=match,
    )
    answer = text.strip()
    starts = [
        [i for i in range(len(answer) + 1) if re.compile(p).match(answer, i)] for p in patterns
    ]
    found = [(s, i) for i, s in enumerate(starts) if s]
    if not found:
        with pytest.raises(VerdictParseError):
            parse_with_format(text, fmt)
        return
    if match == "rule_order":
        expected = found[0][1]
    elif match == "first":
        expected = min((s[0], i) for s, i in found)[1]
    else:
        expected = min((-s[-1], i) for s, i in found)[1]
    assert parse_with_format(text, fmt).rule == expected


# --------------------------------------------------------------------------- on_unparsed


def test_on_unparsed_tie_is_marked() -> None:
    fmt = OUTPUT_AB.model_copy(update={"on_unparsed": "tie"})
    parsed = parse_with_format("I cannot decide.", fmt)
    assert parsed.winner == "TIE" and parsed.rule is None
    assert parsed.unparsed is not None and "no rule" in parsed.unparsed
    # a read answer is not marked
    assert parse_with_format("Output (a)", fmt).unparsed is None


@pytest.mark.parametrize("kind", ["json", "tags"])
def test_on_unparsed_tie_for_json_and_tags(kind: str) -> None:
    fmt = VerdictFormat(kind=kind, on_unparsed="tie")  # type: ignore[arg-type]
    parsed = parse_with_format("no verdict here at all", fmt)
    assert parsed.winner == "TIE" and parsed.unparsed
    assert parsed.verdict.format == {"json": "json", "tags": "tag"}[kind]
    with pytest.raises(VerdictParseError):
        parse_with_format("no verdict here at all", VerdictFormat(kind=kind))  # type: ignore[arg-type]


def test_timeout_is_a_failure_even_with_on_unparsed_tie(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmjudge.core.judging import formats

    monkeypatch.setattr(formats, "SEARCH_BUDGET_S", 0.0)
    fmt = OUTPUT_AB.model_copy(update={"on_unparsed": "tie"})
    with pytest.raises(VerdictParseError, match="ran past"):
        parse_with_format("Output (a)", fmt)


# --------------------------------------------------------------------------- json and tags


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"winner": "B", "confidence": 0.8, "scores": {"A": {"q": 3}, "B": {"q": 4}}}),
        "Thinking... [[A>>B]]",
        "Assistant B is better.",
    ],
)
def test_json_kind_is_todays_parser(text: str) -> None:
    parsed = parse_with_format(text, VerdictFormat(), ["q"])
    assert parsed.verdict == parse_verdict(text, ["q"])
    assert parsed.strength == (2 if ">>" in text else 1)


@pytest.mark.parametrize(
    ("text", "winner", "strength"),
    [("[[A]]", "A", 1), ("[[C]]", "TIE", 1), ("[[B>>A]]", "B", 2), ("[[A<B]]", "B", 1)],
)
def test_tags_kind(text: str, winner: str, strength: int) -> None:
    parsed = parse_with_format(f"Explanation. {text}", VerdictFormat.model_validate("tags"))
    assert (parsed.winner, parsed.strength, parsed.verdict.format) == (winner, strength, "tag")


@pytest.mark.parametrize(
    "text", ['{"winner": "A"}', "Assistant A is better.", "[[A]] or [[B]]", "", "   "]
)
def test_tags_kind_reads_tags_only(text: str) -> None:
    with pytest.raises(VerdictParseError):
        parse_with_format(text, VerdictFormat(kind="tags"))


def test_non_text_is_a_parse_error() -> None:
    with pytest.raises(VerdictParseError, match="must be text"):
        parse_with_format(None, OUTPUT_AB)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "labels"}, "at least one rule"),
        ({"kind": "labels", "rules": []}, "at least one rule"),
        ({"kind": "json", "rules": [{"pattern": "x", "winner": "A"}]}, "labels format only"),
        ({"kind": "labels", "rules": [{"pattern": "(a", "winner": "A"}]}, "not a valid regular"),
        ({"kind": "labels", "rules": [{"pattern": "[", "winner": "A"}]}, "not a valid regular"),
        ({"kind": "labels", "rules": [{"pattern": "x?", "winner": "A"}]}, "matches an empty"),
        ({"kind": "labels", "rules": [{"pattern": "", "winner": "A"}]}, "at least 1 character"),
        ({"kind": "labels", "rules": [{"pattern": "(a+)+$", "winner": "A"}]}, "catastroph"),
        ({"kind": "labels", "rules": [{"pattern": r"(\w+\s?)+$", "winner": "A"}]}, "catastroph"),
        ({"kind": "labels", "rules": [{"pattern": "x", "winner": "C"}]}, "winner"),
        ({"kind": "labels", "rules": [{"pattern": "x", "winner": "A", "strength": 3}]}, "strength"),
        ({"kind": "labels", "rules": [{"pattern": "x", "winner": "A", "extra": 1}]}, "extra"),
        ({"kind": "labels", "rules": [{"pattern": "x", "winner": "A"}], "match": "any"}, "match"),
        (
            {"kind": "labels", "rules": [{"pattern": "x", "winner": "A"}], "on_unparsed": "A"},
            "on_unparsed",
        ),
        ({"kind": "xml"}, "kind"),
    ],
)
def test_invalid_formats_are_clear_errors(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        VerdictFormat.model_validate(data)


def test_too_many_rules_and_long_patterns_are_refused() -> None:
    with pytest.raises(ValidationError, match="at most 64"):
        labels(*({"pattern": f"x{i}", "winner": "A"} for i in range(65)))
    with pytest.raises(ValidationError, match="at most 2000"):
        LabelRule(pattern="x" * 2001, winner="A")


def test_format_round_trips_through_json() -> None:
    dumped = FIVE_LEVELS.model_dump(mode="json")
    assert dumped["kind"] == "labels" and dumped["rules"][0]["strength"] == 2
    again = VerdictFormat.model_validate_json(FIVE_LEVELS.model_dump_json())
    assert again == FIVE_LEVELS
    assert VerdictFormat.model_validate("json") == VerdictFormat()


# --------------------------------------------------------------------------- search budget

QUADRATIC = labels({"pattern": "^a.*a.*X", "winner": "A"})


def test_a_spent_budget_fails_the_search() -> None:
    from llmjudge.core.judging.formats import SearchBudget, SearchBudgetSpent

    budget = SearchBudget(base_s=0.0, per_row_s=0.0, per_char_s=0.0)
    with pytest.raises(SearchBudgetSpent, match="too slow for this upload") as caught:
        parse_with_format("Output (a)", OUTPUT_AB, budget=budget)
    assert (caught.value.rule, caught.value.pattern) == (0, r"Output \(a\)")


def test_answers_share_one_budget() -> None:
    from llmjudge.core.judging.formats import SEARCH_BUDGET_S, SearchBudget, SearchBudgetSpent

    # Room for one answer's whole limit and a little more: the first answer is a parse
    # error of its own, the second runs into what is left of the shared budget.
    budget = SearchBudget(base_s=SEARCH_BUDGET_S + 0.05, per_row_s=0.0, per_char_s=0.0)
    with pytest.raises(VerdictParseError, match="ran past"):
        parse_with_format("a" * 20_000, QUADRATIC, budget=budget)
    assert budget.used_s >= SEARCH_BUDGET_S
    started = time.perf_counter()
    with pytest.raises(SearchBudgetSpent):
        parse_with_format("a" * 20_000, QUADRATIC, budget=budget)
    assert time.perf_counter() - started < SEARCH_BUDGET_S
    assert budget.left_s == 0.0


def test_without_a_budget_each_answer_keeps_its_own_limit() -> None:
    # Live judging reads one verdict per call: never an upload's budget error.
    for _ in range(2):
        with pytest.raises(VerdictParseError, match="ran past"):
            parse_with_format("a" * 20_000, QUADRATIC)


def test_a_linear_pattern_barely_touches_the_budget() -> None:
    from llmjudge.core.judging.formats import SearchBudget

    budget = SearchBudget()
    answer = "x" * 20_000 + " Output (b)"
    for _ in range(40):
        budget.add_row(len(answer))
        assert parse_with_format(answer, OUTPUT_AB, budget=budget).winner == "B"
    assert budget.used_s < 0.2 * budget.granted_s


@settings(max_examples=50, deadline=None)
@given(
    base=st.floats(0, 10),
    per_row=st.floats(0, 1),
    per_char=st.floats(0, 1e-6),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("row"), st.integers(-5, 10**6)),
            st.tuples(st.just("search"), st.floats(-1, 5)),
        ),
        max_size=30,
    ),
)
def test_budget_arithmetic(
    base: float, per_row: float, per_char: float, steps: list[tuple[str, float]]
) -> None:
    from llmjudge.core.judging.formats import SearchBudget

    budget = SearchBudget(base_s=base, per_row_s=per_row, per_char_s=per_char)
    granted, charged = base, 0.0
    for kind, amount in steps:
        if kind == "row":
            budget.add_row(int(amount))
            granted += per_row + per_char * max(0, int(amount))
        else:
            budget.charge(amount)
            charged += max(0.0, amount)  # a clock never runs backwards into credit
    assert budget.granted_s == pytest.approx(granted, abs=1e-9)
    assert budget.left_s == pytest.approx(max(0.0, granted - charged), abs=1e-9)
    assert budget.left_s >= 0.0
