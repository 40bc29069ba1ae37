"""Probability-weighted grades (G-Eval): sum s * softmax over the scale's tokens where the
grade is written, checked against numpy; multi-digit values, the last rating, likert
criteria, and replies whose probabilities cannot weight their grade."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from llmjudge.core.judging.calls import ScoreReader, read_reply
from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.core.judging.scores import ScoreParseError, read_score
from llmjudge.core.judging.weighted import grade_distribution, read_weighted_score, spelled

MT_BENCH = VerdictFormat(kind="score", weighted=True)  # 1-10, "[[7]]"
LIKERT = VerdictFormat(kind="likert", weighted=True)  # 1-5 per criterion


def _tokens(*pieces: str | tuple[str, dict[str, float]]) -> list[Any]:
    """Generated tokens; a piece with alternatives is (chosen, {token: logprob})."""
    out: list[Any] = []
    for piece in pieces:
        if isinstance(piece, str):
            out.append((piece, 0.0, [(piece, 0.0)]))
        else:
            chosen, alternatives = piece
            out.append((chosen, alternatives[chosen], list(alternatives.items())))
    return out


def _text(positions: list[Any]) -> str:
    return "".join(p[0] for p in positions)


def _expected(values_logprobs: dict[float, list[float]]) -> float:
    """sum s * softmax, computed with numpy from the scale's tokens' log probabilities."""
    values = np.array([v for v, lps in values_logprobs.items() for _ in lps])
    logits = np.array([lp for lps in values_logprobs.values() for lp in lps])
    p = np.exp(logits - logits.max())
    return float((values * p / p.sum()).sum())


def test_the_grade_is_the_mean_of_the_scale_under_the_softmax_of_its_tokens() -> None:
    alts = {"7": -0.3, "8": -1.5, "6": -2.0, " 7": -2.5, "]]": -3.0, "The": -4.0}
    positions = _tokens("Rating", ":", " [[", ("7", alts), "]]")
    score = read_weighted_score(_text(positions), positions, MT_BENCH)
    # "7" and " 7" both read 7; "]]" and "The" are no value of the scale and leave the sum.
    assert score.value == pytest.approx(_expected({7: [-0.3, -2.5], 8: [-1.5], 6: [-2.0]}))
    assert 7 < score.value < 8
    assert read_score(_text(positions), MT_BENCH).value == 7  # the grade as written


def test_a_token_holding_text_before_the_number_compares_alternatives_with_the_same_text() -> None:
    alts = {"[[7": -0.2, "[[8": -1.9, "[[ 9": -2.2, "8": -1.0, "[[": -3.0}
    positions = _tokens("Rating: ", ("[[7", alts), "]]")
    found = read_weighted_score(_text(positions), positions, MT_BENCH)
    # "8" alone is not what would follow "Rating: " here (the grade needs "[["): left out.
    assert found.value == pytest.approx(_expected({7: [-0.2], 8: [-1.9], 9: [-2.2]}))


def test_ten_as_one_token_counts_as_ten() -> None:
    positions = _tokens("[[", ("10", {"10": -0.1, "9": -2.5, "1": -5.0}), "]]")
    found = read_weighted_score(_text(positions), positions, MT_BENCH)
    assert found.value == pytest.approx(_expected({10: [-0.1], 9: [-2.5], 1: [-5.0]}))


def test_ten_written_as_one_then_zero_is_split_by_the_next_position() -> None:
    first = {"1": -0.2, "9": -1.7, "8": -2.5, "]]": -4.0}
    second = {"0": -0.1, "]]": -2.4, "1": -4.0, " ": -5.0}
    positions = _tokens("[[", ("1", first), ("0", second), "]]")
    found = read_weighted_score(_text(positions), positions, MT_BENCH)
    # Chain rule: P(10) = P("1") P("0" | "1"), P(1) = P("1") P(the number ends | "1");
    # "11" is off the scale and leaves the continuation's sum.
    q = np.exp([second["0"], second["]]"], second[" "]])
    q /= q.sum()
    p_one = math.exp(first["1"])
    weights = {10: p_one * q[0], 1: p_one * (q[1] + q[2])}
    weights |= {9: math.exp(first["9"]), 8: math.exp(first["8"])}
    total = sum(weights.values())
    assert found.value == pytest.approx(sum(v * w / total for v, w in weights.items()))
    distribution = grade_distribution(positions, *spelled(positions), (2, 4), range(1, 11))
    assert distribution.position == 1
    assert sum(distribution.probabilities.values()) == pytest.approx(1.0)


def test_one_as_an_alternative_to_another_grade_counts_as_one() -> None:
    # What would have followed "1" is unknown where the judge wrote 7: it counts as 1
    # (the documented choice), not as 10.
    positions = _tokens("[[", ("7", {"7": -0.5, "1": -1.0}), "]]")
    found = read_weighted_score(_text(positions), positions, MT_BENCH)
    assert found.value == pytest.approx(_expected({7: [-0.5], 1: [-1.0]}))


def test_the_last_rating_is_weighted_not_the_quoted_example() -> None:
    positions = _tokens(
        "Format: [[", ("5", {"5": -0.01, "1": -5.0}), "]]. Verdict: [[",
        ("8", {"8": -0.4, "9": -1.2}), "]]",
    )  # fmt: skip
    found = read_weighted_score(_text(positions), positions, MT_BENCH)
    assert found.value == pytest.approx(_expected({8: [-0.4], 9: [-1.2]}))


def test_likert_weights_each_criterion_where_it_is_written() -> None:
    positions = _tokens(
        "accuracy: [[", ("4", {"4": -0.2, "5": -1.8, "3": -2.6}), "]]\nclarity: [[",
        ("2", {"2": -0.7, "3": -0.9}), "]]",
    )  # fmt: skip
    found = read_weighted_score(_text(positions), positions, LIKERT, ["accuracy", "clarity"])
    accuracy = _expected({4: [-0.2], 5: [-1.8], 3: [-2.6]})
    clarity = _expected({2: [-0.7], 3: [-0.9]})
    assert found.criteria == pytest.approx({"accuracy": accuracy, "clarity": clarity})
    assert found.value == pytest.approx((accuracy + clarity) / 2)


@given(
    low=st.integers(0, 5),
    width=st.integers(1, 12),
    data=st.data(),
)
def test_a_weighted_grade_lies_on_the_scale_and_equals_the_written_one_when_sure(
    low: int, width: int, data: st.DataObject
) -> None:
    high = low + width
    fmt = VerdictFormat(kind="score", scale=(low, high), weighted=True)
    chosen = data.draw(st.integers(low, high))
    others = data.draw(st.dictionaries(st.integers(0, high + 5), st.floats(-30, 0), max_size=8))
    alts = {str(v): lp for v, lp in others.items()} | {"]]": -1.0, "Hmm": -0.5}
    alts[str(chosen)] = data.draw(st.floats(-30, 0))
    positions = _tokens("Rating: [[", (str(chosen), alts), "]]")
    found = read_weighted_score(_text(positions), positions, fmt)
    assert low <= found.value <= high
    on_scale = {int(t): [lp] for t, lp in alts.items() if t.isdigit() and low <= int(t) <= high}
    assert found.value == pytest.approx(_expected(on_scale))
    # One token holding all the scale's mass: the weighted grade is the written one.
    sure = _tokens("Rating: [[", (str(chosen), {str(chosen): -0.1, "]]": -2.5}), "]]")
    assert read_weighted_score(_text(sure), sure, fmt).value == chosen


@given(
    first=st.dictionaries(
        st.sampled_from([str(v) for v in range(12)] + ["]]", "x"]), st.floats(-20, 0)
    ),
    second=st.dictionaries(
        st.sampled_from([str(v) for v in range(10)] + ["]]", " "]), st.floats(-20, 0)
    ),
    p_one=st.floats(-20, 0),
    p_zero=st.floats(-20, 0),
)
def test_ten_written_over_two_tokens_stays_on_the_scale(
    first: dict[str, float], second: dict[str, float], p_one: float, p_zero: float
) -> None:
    positions = _tokens("[[", ("1", first | {"1": p_one}), ("0", second | {"0": p_zero}), "]]")
    found = grade_distribution(positions, *spelled(positions), (2, 4), range(1, 11))
    assert set(found.probabilities) <= set(range(1, 11))
    assert sum(found.probabilities.values()) == pytest.approx(1.0)
    assert 1 <= read_weighted_score(_text(positions), positions, MT_BENCH).value <= 10


@pytest.mark.parametrize(
    ("positions", "text", "needle"),
    [
        (None, "Rating: [[7]]", "carries no token log probabilities"),
        ([], "Rating: [[7]]", "carries no token log probabilities"),
        (_tokens("Rating: [[", "6", "]]"), "Rating: [[7]]", "spell the grade 6, its text 7"),
        (_tokens("I cannot grade this."), "Rating: [[7]]", "do not spell a grade"),
        (_tokens("no rating"), "no rating", "no score in the answer"),
        (_tokens("[[", "7", ".", "5", "]]"), "[[7.5]]", "whole numbers; the judge wrote '7.5'"),
        (_tokens("[[", ("7", {"7": -math.inf}), "]]"), "[[7]]", "holds a finite log"),
        (_tokens("[[", "12", "]]"), "[[12]]", "outside the scale"),
        (_tokens("[[", *["0"] * 5000, "7", "]]"), f"[[{'0' * 5000}7]]", "more digits than 10"),
        ([("[[7]]",)], "[[7]]", "malformed"),
        ([("[[7]]", "x", [])], "[[7]]", "malformed"),
        ([("[[7]]", -0.1, [("[[7]]",)])], "[[7]]", "malformed"),
        ([("[[7]]", -0.1, [(7, -0.1)])], "[[7]]", "malformed"),
    ],
)
def test_a_reply_whose_probabilities_cannot_weight_its_grade_is_unreadable(
    positions: Any, text: str, needle: str
) -> None:
    with pytest.raises(ScoreParseError, match=None) as caught:
        read_weighted_score(text, positions, MT_BENCH)
    assert needle in str(caught.value)
    # Through the reader: the comparison gets the reason, no grade.
    result = read_reply(ScoreReader(MT_BENCH), text, logprobs=positions)
    assert result.verdict is None and needle in (result.parse_error or "")


def test_the_reader_weights_only_when_the_format_says_so() -> None:
    positions = _tokens("[[", ("7", {"7": -0.5, "9": -0.9}), "]]")
    weighted = read_reply(ScoreReader(MT_BENCH), "[[7]]", logprobs=positions)
    plain = read_reply(ScoreReader(VerdictFormat(kind="score")), "[[7]]", logprobs=positions)
    assert weighted.verdict is not None and plain.verdict is not None
    assert weighted.verdict.value == pytest.approx(_expected({7: [-0.5], 9: [-0.9]}))
    assert plain.verdict.value == 7


def test_the_format_asks_for_log_probabilities_only_when_weighted() -> None:
    assert MT_BENCH.reads_logprobs and MT_BENCH.top_logprobs == 20
    plain = VerdictFormat(kind="score")
    assert not plain.reads_logprobs and plain.top_logprobs is None
    assert VerdictFormat.model_validate({"kind": "score"}).weighted is False  # stored formats


@pytest.mark.parametrize(
    ("fmt", "needle"),
    [
        ({"kind": "tags", "weighted": True}, "score and likert formats"),
        ({"kind": "json", "weighted": True}, "score and likert formats"),
        ({"kind": "score", "scale": [-5, 5], "weighted": True}, "from 0 up"),
        ({"kind": "score", "scale": [0, 2.5], "weighted": True}, "whole numbers"),
        ({"kind": "score", "weighted": "yes"}, "valid boolean"),
    ],
)
def test_a_weighted_option_that_cannot_apply_is_refused(fmt: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as caught:
        VerdictFormat.model_validate(fmt)
    assert needle in str(caught.value)
