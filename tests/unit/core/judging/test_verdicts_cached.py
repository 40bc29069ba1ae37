"""The verdict reader's cached helpers (issue 14, throughput) are exactly the expressions
they replace, on any input a judge may send, adversarial keys included."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.judging import verdicts
from llmjudge.core.judging.verdicts import parse_verdict

_KEYS = st.sampled_from(
    ["winner", " Winner ", "WINNER", "winner\n", "win ner", "winners", "A", "b", "Thread_A"]
) | st.text(max_size=8)
_SIDES = st.sampled_from(
    ["A", " b ", "'A'", '"B"', "Assistant A", "thread_b", "Response-A", "tie", "C", "draw"]
) | st.text(max_size=10)
_NAMES = st.sampled_from(["quality", " Quality ", "counsellor-coherence", "a  b", "x\t-y"]) | (
    st.text(max_size=12)
)


def _old_side(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    word = verdicts._SIDE_PREFIX.sub("", value.strip().strip("\"'").strip()).upper()
    return verdicts._WINNER_WORDS.get(word)


@settings(max_examples=500, deadline=None)
@given(_SIDES | st.integers() | st.none())
def test_side_is_the_old_normalisation(value: Any) -> None:
    assert verdicts._side(value) == _old_side(value)
    assert verdicts._side(value) == _old_side(value)  # and so from the cache


@settings(max_examples=500, deadline=None)
@given(_NAMES)
def test_criterion_key_is_the_old_normalisation(name: str) -> None:
    assert verdicts._criterion_key(name) == re.sub(r"[\s\-]+", "_", name.strip().lower())


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(_KEYS | st.integers(), st.integers(), max_size=6))
def test_has_winner_is_the_old_key_test(obj: dict[Any, Any]) -> None:
    assert verdicts._has_winner(obj) == ("winner" in verdicts._lower_keys(obj))


@settings(max_examples=300, deadline=None)
@given(
    winner=_SIDES,
    scores=st.dictionaries(
        _SIDES, st.dictionaries(_NAMES, st.integers(0, 6) | st.text(max_size=2)), max_size=3
    ),
    criteria=st.lists(_NAMES, max_size=4),
    nested=st.booleans(),
)
def test_repeated_reads_agree(
    winner: str, scores: dict[str, Any], criteria: list[str], nested: bool
) -> None:
    """Caches never leak one answer into the next: reading twice, or after other answers,
    gives the same verdict or the same error."""
    obj: dict[str, Any] = {"winner": winner, "scores": scores, "reasoning": "r"}
    if nested:
        obj["extra"] = {"Winner": "B"}  # a later-starting object with a winner key wins
    text = json.dumps(obj)

    def read() -> Any:
        try:
            return parse_verdict(text, criteria)
        except verdicts.VerdictParseError as exc:
            return str(exc)

    first = read()
    parse_verdict('{"winner": "A", "scores": {"A": {"quality": 5}}}', ["Quality"])
    assert read() == first


_VERDICT_VALUES = st.recursive(
    st.sampled_from(["A", "b", "TIE", "{", "[[B]]", 4, 0.7, None, "Assistant B is better."]),
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(["winner", "A", "B", "quality", "confidence"]), inner)
    ),
    max_leaves=8,
)


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["winner", "Winner", "confidence", "scores", "reasoning"]),
        _VERDICT_VALUES,
        max_size=5,
    ),
    st.sampled_from(["", "  ", "\n", " Thread B is better."]),
)
def test_one_json_object_reads_as_the_scan_reads_it(obj: dict[str, Any], tail: str) -> None:
    """The one-decode reading of an answer that is one JSON object finds what the scan of
    every brace finds."""
    text = json.dumps(obj) + tail
    scanned = next(
        (
            (f.value, f.end)
            for f in verdicts.json_objects(text, nested=True)
            if verdicts._has_winner(f.value)
        ),
        None,
    )
    assert verdicts._last_json_verdict(text) == scanned
