"""Issue 14: the verdict parser and the fence escaping stay linear on hostile answers.

Each parser runs on adversarial inputs of 500,000 characters within a CPU-time bound
(thread time, so a loaded CI machine does not make it flaky); past the bound, a parse must
stay within four times it and no more than about double when its input doubles. The rewritten patterns are
also checked against the old, quadratic ones on short inputs: same matches, same spans.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.judging import verdicts
from llmjudge.core.judging.formats import VerdictFormat, parse_with_format
from llmjudge.core.judging.verdicts import VerdictParseError, parse_verdict
from llmjudge.core.text.fences import THREAD_TAGS

SIZE = 500_000
BOUND_S = 0.5

# The patterns as they were before the fix (quadratic or worse on runs of spaces).
OLD_FENCE_TAG = re.compile(
    r"[<＜﹤]\s*/?\s*thread[\s_\-]*[ab]\b[^<>＜＞﹤﹥]*[>＞﹥]", re.IGNORECASE
)
OLD_TAG = re.compile(
    r"""\[\[\s*(?:
        ["']?\s*(?P<single>[ABC]|TIE)\s*["']?
      | (?P<left>[AB])\s*(?P<op>>>|<<|==|>|<|=)\s*(?P<right>[AB])
    )\s*\]\]""",
    re.VERBOSE | re.IGNORECASE,
)
OLD_TAG_GAP = re.compile(r"[\s,;:/|.\-]*(?:(?:or|and)[\s,;:/|.\-]*)?", re.IGNORECASE)
OLD_VERDICT_SIDE = re.compile(
    r"(?i:verdict)\s*(?i:is)?\s*[:\-]?\s*[\"'“]?\s*(?:(?i:assistant|response|thread)\s+)?"
    r"(?P<x>[AB])\b(?!\s*(?i:tie|draw))"
)
NEW_VERDICT_SIDE = re.compile(verdicts._SIDE_PATTERNS[3])
OLD_VERDICT_TIE = re.compile(r"(?i:\bverdict\s*(?:is)?\s*[:\-]\s*(?:a\s+)?(?:tie|draw)\b)")
NEW_VERDICT_TIE = re.compile(f"(?i:{verdicts._TIE_PATTERNS[1]})")


def _old_sentence_verdicts(sentence: str) -> list[tuple[str, bool]]:
    """The old per-phrase clause reading (quadratic in phrases per sentence)."""
    found = []
    for match in verdicts._VERDICT.finditer(sentence):
        clause = re.split(r"[,;:—–]", sentence[: match.start()])[-1]
        side = next((v for k, v in match.groupdict().items() if k.startswith("x") and v), None)
        found.append(("TIE" if side is None else side, verdicts._HEDGE.search(clause) is not None))
    return found


def _fill(unit: str, head: str = "", tail: str = "", size: int = SIZE) -> str:
    return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


ADVERSARIAL: dict[str, tuple[str, ...]] = {
    "< spaces": (" ", "<"),  # froze /healthz for 115 s at 60,000 spaces
    "</ spaces": (" ", "< /", "x"),
    "<thread spaces": (" ", "<thread", "x"),
    "<thread_a unclosed": ("x", "<thread_a"),
    "many <": ("<",),
    "many <thread_a": ("<thread_a ",),
    "[[ spaces": (" ", "[["),  # 17.7 s at 30,000 spaces
    "[[' spaces": (" ", "[['", "x"),
    "[[A spaces": (" ", "[[A", "x"),
    "[[A> spaces": (" ", "[[A>", "x"),
    "many [": ("[",),
    "tags joined by or": ("[[A]] or ",),
    "tags conflicting": ("[[A]] [[B]] ",),
    "verdict spaces": (" ", "verdict", "x"),
    "verdict is spaces": (" ", "verdict is", "x"),
    "verdict: a spaces": (" ", "the verdict: a", "x"),
    "Assistant spaces": (" ", "Assistant", "x"),
    "Assistant A is the the": ("the ", "Assistant A is ", "x"),
    "both spaces": (" ", "both", "x"),
    "phrases in one sentence": ("Assistant A is better and ",),
    "tag then phrases": ("Assistant B is better and ", "[[A]] "),
    "hedged phrases": ("not Assistant A is better ",),
    "one long word": ("a",),
    "n't words": ("don't ",),
    "json nesting": ("x", '{"a":' * 200 + '"'),
    "json braces": ("{",),
    "json verdicts": ('{"winner": "A"} ',),
    "punctuation": ("!", "", " therefore"),
    "newlines": ("\n",),
}


def _cpu_seconds(parse: Callable[[str], object], text: str) -> float:
    """The least CPU time of three runs: a shared machine only ever adds time (frequency,
    caches), and a quadratic parser is slow on every run."""
    times = []
    for _ in range(3):
        start = time.thread_time()
        try:
            parse(text)
        except VerdictParseError:
            pass
        times.append(time.thread_time() - start)
        if times[-1] < BOUND_S / 2:
            break
    return min(times)


_LABELS = VerdictFormat.model_validate(
    {
        "kind": "labels",
        "match": "last",
        "rules": [
            {"pattern": r"\[\[A>>B\]\]", "winner": "A", "strength": 2},
            {"pattern": r"(?:^|\n) ?Output \(a\)", "winner": "A"},
            {"pattern": r"(?:^|\n) ?Output \(b\)", "winner": "B"},
        ],
    }
)
PARSERS: dict[str, Callable[[str], object]] = {
    "parse_verdict": parse_verdict,
    "neutralise": THREAD_TAGS.neutralise,
    "labels format": lambda text: parse_with_format(text, _LABELS),
}


def assert_linear(parse: Callable[[str], object], *fill: str) -> None:
    text = _fill(*fill)
    assert len(text) >= SIZE - 100
    full = _cpu_seconds(parse, text)
    if full < BOUND_S:
        return
    # A machine busy enough can push a linear parse past the bound; a super-linear one
    # also grows by far more than double when its input doubles.
    half = _cpu_seconds(parse, _fill(*fill, size=SIZE // 2))
    assert full < 4 * BOUND_S and full < 3 * half, (full, half)


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_adversarial_input_is_linear(parser: str, case: str) -> None:
    assert_linear(PARSERS[parser], *ADVERSARIAL[case])


_PIECES = st.sampled_from(
    ["<", "＜", "[[", "[['", "[[A", "[[A>", "verdict", "Assistant A", "both", "{", '{"a":"']
)
_RUNS = st.sampled_from([" ", "\t", "\n", "[", "<", "x", "the ", "and ", "Assistant A is better "])


@settings(max_examples=25, deadline=None)
@given(head=_PIECES, run=_RUNS, tail=st.sampled_from(["", "x", "]]", ">", "A]]", "tie"]))
def test_generated_adversarial_input_is_linear(head: str, run: str, tail: str) -> None:
    for parse in PARSERS.values():
        assert_linear(parse, run, head, tail)


# --------------------------------------------------------------------------- same results

_FENCE_ALPHABET = st.lists(
    st.sampled_from(list("<>/_ -abAB\n\t＜＞﹤﹥x") + ["thread", "THREAD", "</", "< /"]),
    max_size=25,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(_FENCE_ALPHABET)
def test_fence_pattern_matches_the_old_one(text: str) -> None:
    assert THREAD_TAGS.pattern.sub("#", text) == OLD_FENCE_TAG.sub("#", text)


def _tag_matches(pattern: re.Pattern[str], text: str) -> list[tuple[object, ...]]:
    return [(m.span(), m.group("single", "left", "op", "right")) for m in pattern.finditer(text)]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from(list("[] \t\n\"'ABCabc>=<") + ["TIE", "tie", "[[", "]]", " or ", ","]),
        max_size=25,
    ).map("".join)
)
def test_tag_patterns_match_the_old_ones(text: str) -> None:
    assert _tag_matches(verdicts._TAG, text) == _tag_matches(OLD_TAG, text)
    old_gap = OLD_TAG_GAP.fullmatch(text)
    new_gap = verdicts._TAG_GAP.fullmatch(text)
    assert (old_gap is None) == (new_gap is None)


_WORDS = st.lists(
    st.sampled_from(
        ["verdict", "Verdict", "is", "IS", ":", "-", '"', "'", "“", "assistant", "Response", "A"]
        + ["B", "a", "tie", "draw", " ", "  ", "\t", "x", "Assistant", "better", "not", ","]
        + ["I", "prefer", "Both", "are", "equally", "good", "whether", ";", "don't", "It's"]
    ),
    max_size=20,
)


@settings(max_examples=500, deadline=None)
@given(_WORDS.map("".join), _WORDS.map(" ".join))
def test_free_text_patterns_match_the_old_ones(glued: str, spaced: str) -> None:
    for text in (glued, spaced):
        for old, new in ((OLD_VERDICT_SIDE, NEW_VERDICT_SIDE), (OLD_VERDICT_TIE, NEW_VERDICT_TIE)):
            assert [m.span() for m in new.finditer(text)] == [m.span() for m in old.finditer(text)]
    # Hedge words glued to a phrase ("cannotAssistant") are the one place the readings may
    # differ; with words apart the per-sentence bisection equals the old clause re-reading.
    assert [(p.winner, p.hedged) for p in verdicts._sentence_verdicts(spaced)] == (
        _old_sentence_verdicts(spaced)
    )
