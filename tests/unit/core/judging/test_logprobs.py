"""Reading verdicts from token log probabilities: the softmax over mapped tokens at the
first answer position, the hard verdict from its argmax, and the token map's checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from llmjudge.core.judging.calls import PairwiseReader, read_reply
from llmjudge.core.judging.formats import VerdictFormat, parse_with_format
from llmjudge.core.judging.logprobs import (
    NoAnswerToken,
    TokenMap,
    answer_distribution,
    pairwise_probability,
)
from llmjudge.core.judging.verdicts import VerdictParseError

ALPACA = VerdictFormat.model_validate({"kind": "logprobs", "tokens": {"a": "m", "b": "M"}})


def test_alpacaeval_tokens_give_the_softmax_over_m_and_M() -> None:
    positions = [("m", math.log(0.6), [("m", math.log(0.6)), ("M", math.log(0.3)), ("x", -3.0)])]
    found = answer_distribution(positions, TokenMap(a=("m",), b=("M",)).labels())
    assert found.position == 0
    assert found.probabilities == pytest.approx({"A": 2 / 3, "B": 1 / 3})
    assert found.mass == pytest.approx(0.9)
    assert pairwise_probability(found) == ("A", pytest.approx(2 / 3))


@given(
    st.lists(st.floats(-30, 0), min_size=2, max_size=6),
    st.lists(st.floats(-30, 0), min_size=0, max_size=3),
)
def test_the_probability_is_the_softmax_over_every_mapped_token(
    a_and_b: list[float], ties: list[float]
) -> None:
    half = len(a_and_b) // 2
    a_lps, b_lps = a_and_b[:half], a_and_b[half:]
    alts = [(f"a{i}", lp) for i, lp in enumerate(a_lps)]
    alts += [(f" b{i}", lp) for i, lp in enumerate(b_lps)]  # spaces are stripped
    alts += [(f"t{i}\n", lp) for i, lp in enumerate(ties)]
    alts += [("other", -0.01)]  # unmapped: left out of the softmax
    token_map = TokenMap(
        a=tuple(f"a{i}" for i in range(len(a_lps))),
        b=tuple(f"b{i}" for i in range(len(b_lps))),
        tie=tuple(f"t{i}" for i in range(len(ties))) or (),
    )
    chosen = alts[0]
    found = answer_distribution(
        [("\n", -0.1, []), (chosen[0], chosen[1], alts)], token_map.labels()
    )
    every = np.exp(np.array(a_lps + b_lps + ties))
    total = every.sum()
    expected_a = np.exp(a_lps).sum() / total
    expected_tie = np.exp(ties).sum() / total if ties else 0.0
    assert found.position == 1  # the newline is not an answer token
    _, prob_a = pairwise_probability(found)
    assert prob_a == pytest.approx(expected_a + expected_tie / 2, abs=1e-12)
    assert 0.0 <= prob_a <= 1.0


def test_tokens_reading_the_same_add_up_and_the_chosen_token_counts_once() -> None:
    # " m" and "m" both read m; the chosen token is missing from its alternatives (as some
    # compatible servers send it): it still counts, once.
    alts = [(" m", math.log(0.2)), ("M", math.log(0.4))]
    found = answer_distribution([("m", math.log(0.2), alts)], {"m": "A", "M": "B"})
    assert found.probabilities["A"] == pytest.approx(0.4 / 0.8)
    again = answer_distribution(
        [("m", math.log(0.2), [*alts, ("m", math.log(0.2))])], {"m": "A", "M": "B"}
    )
    assert again.probabilities == found.probabilities


def test_the_verdict_is_the_argmax_and_a_tie_counts_half() -> None:
    positions = [
        ("=", math.log(0.5), [("=", math.log(0.5)), ("A", math.log(0.3)), ("B", math.log(0.2))])
    ]
    found = answer_distribution(positions, {"A": "A", "B": "B", "=": "TIE"})
    winner, prob_a = pairwise_probability(found)
    assert winner == "TIE" and prob_a == pytest.approx(0.3 + 0.25)
    even = answer_distribution([("A", -1.0, [("B", -1.0)])], {"A": "A", "B": "B"})
    assert pairwise_probability(even) == ("TIE", 0.5)


def test_case_is_kept_unless_the_map_ignores_it() -> None:
    positions = [("M", math.log(0.7), [("M", math.log(0.7)), ("m", math.log(0.3))])]
    strict = answer_distribution(positions, TokenMap(a=("m",), b=("M",)).labels())
    assert strict.probabilities["B"] == pytest.approx(0.7)
    folded = TokenMap(a=("yes",), b=("no",), ignore_case=True)
    found = answer_distribution([("YES", -0.2, [("No", -2.0)])], folded.labels(), ignore_case=True)
    assert set(found.probabilities) == {"A", "B"}


def test_a_reply_without_a_mapped_token_or_log_probabilities_is_unreadable() -> None:
    with pytest.raises(NoAnswerToken, match="no generated token matches the token map"):
        answer_distribution([("Output", -0.1, []), (" (a)", -0.2, [])], {"m": "A", "M": "B"})
    with pytest.raises(NoAnswerToken, match="carries no token log probabilities"):
        answer_distribution(None, {"m": "A"})
    result = read_reply(PairwiseReader(ALPACA), "Output (a)", logprobs=[("Output (a)", -0.1, [])])
    assert result.verdict is None
    assert "no generated token matches" in (result.parse_error or "")


def test_the_pairwise_reader_stores_the_probability_beside_the_hard_verdict() -> None:
    logprobs = [("M", math.log(0.8), [("M", math.log(0.8)), ("m", math.log(0.1))])]
    result = read_reply(PairwiseReader(ALPACA), "M", logprobs=logprobs)
    assert result.verdict is not None
    assert result.verdict.winner == "B"
    assert result.verdict.prob_a == pytest.approx(0.1 / 0.9)
    assert result.verdict.format == "logprobs"
    # the same reader without a logprobs format reads text exactly as before
    plain = read_reply(
        PairwiseReader(VerdictFormat.model_validate("tags")), "[[B]]", logprobs=logprobs
    )
    assert plain.verdict is not None and plain.verdict.prob_a is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "logprobs"}, "needs a token map"),
        ({"kind": "logprobs", "tokens": {"a": [], "b": ["M"]}}, "at least 1"),
        ({"kind": "logprobs", "tokens": {"a": ["  "], "b": ["M"]}}, "empty once whitespace"),
        ({"kind": "logprobs", "tokens": {"a": ["m"], "b": [" m"]}}, "mapped to both"),
        (
            {"kind": "logprobs", "tokens": {"a": ["yes"], "b": ["YES"], "ignore_case": True}},
            "mapped to both",
        ),
        ({"kind": "logprobs", "tokens": {"a": "m", "b": "M", "top_logprobs": 21}}, "less than"),
        ({"kind": "json", "tokens": {"a": "m", "b": "M"}}, "logprobs format only"),
        ({"kind": "logprobs", "tokens": {"a": "m", "b": "M"}, "on_unparsed": "tie"}, "never"),
    ],
)
def test_invalid_token_maps_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        VerdictFormat.model_validate(data)


def test_a_text_cannot_be_read_under_a_logprobs_format() -> None:
    with pytest.raises(VerdictParseError, match="token probabilities"):
        parse_with_format("m", ALPACA)
