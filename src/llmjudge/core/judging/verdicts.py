"""Parse a judge model's raw answer into a :class:`Verdict`.

Three answer shapes are understood, checked in this order of authority:

1. **JSON** (what llmjudge's own prompt asks for)::

       {"winner": "A" | "B" | "TIE", "confidence": 0..1,
        "scores": {"A": {criterion: 1..5}, "B": {...}}, "reasoning": "..."}

   The object may sit in a ```json fence or among prose; the last object
   that has a ``winner`` key is used. Leniency:

   - ``winner`` ignores case and a leading "Assistant"/"Thread"/"Response";
     "C", "draw" and "equal" mean a tie.
   - ``confidence`` in [0, 1] is taken as is; a value in (1, 100] is read as
     a percentage (``85`` -> 0.85), and so is a string such as ``"85%"``.
     A 1-5 confidence scale is *not* guessed: 3 means 3 %. Missing or null
     gives ``None``; anything else (negative, > 100, words) is an error.
   - ``scores`` may also be criterion-major (``{crit: {"A": 4, "B": 3}}``);
     criteria may be missing; names match the requested criteria ignoring
     case, spaces and hyphens, and unrequested ones are dropped. A Likert
     score outside 1..5 is an error.

2. **Tags** from MT-Bench and Arena-Hard: ``[[A]]``, ``[[B]]``, ``[[C]]``
   (tie), quoted ``[["C"]]``, and relations such as ``[[A>>B]]`` (strong),
   ``[[A>B]]`` (weak), ``[[A=B]]`` (tie), ``[[B>A]]``, ``[[A<B]]``. The
   last tag wins, because judges often quote the instructions (and their
   tags) before answering. If the answer *ends* with several tags that
   disagree, separated only by punctuation, "or" or "and" (``[[A]] or
   [[B]]``), the judge did not decide: that is an error, not a coin flip.

3. **Free text** when there is neither: a verdict phrase such as
   "Assistant B is better", "Therefore, Assistant A provided a better
   answer", "the final verdict is: Assistant A", "it's a tie" or "both are
   equally good", looked for in the last three sentences only. It is
   accepted when every verdict phrase there agrees, or when the last
   verdict sentence is an unambiguous conclusion ("Therefore/Overall/In
   conclusion ..."). Conflicting phrases in one sentence ("A is better
   than... no, B is better"), negated or hedged phrases ("it is not clear
   whether Assistant A is better") and no phrase at all raise
   :class:`VerdictParseError`: the parser never guesses.

When an answer holds both a JSON verdict and a tag, the one that ends
later wins; a free-text verdict written after it that names a different
winner makes the answer ambiguous.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from llmjudge.core.text.replies import json_objects, whole_object

__all__ = ["Verdict", "VerdictParseError", "Winner", "parse_tags", "parse_verdict"]

Winner = Literal["A", "B", "TIE"]
Format = Literal["json", "tag", "text", "labels", "logprobs"]
Strength = Literal["strong", "weak"]


@dataclass(frozen=True)
class Verdict:
    winner: Winner
    confidence: float | None
    scores_a: dict[str, float] = field(default_factory=dict)
    scores_b: dict[str, float] = field(default_factory=dict)
    reasoning: str = ""
    format: Format = "text"
    strength: Strength | None = None
    prob_a: float | None = None  # P(A is better), where the judge gives a probability


class VerdictParseError(ValueError):
    """The judge's answer holds no unambiguous verdict; the message says why."""


def parse_verdict(text: str, criteria: Sequence[str] = ()) -> Verdict:
    """Read the verdict in ``text``; raise :class:`VerdictParseError` if there is none."""
    if not isinstance(text, str):
        raise VerdictParseError(f"judge response must be text, got {type(text).__name__}")
    if not text.strip():
        raise VerdictParseError("empty judge response")

    json_hit = _last_json_verdict(text)
    tag_hit = _last_tag(text)
    if json_hit is None and tag_hit is None:
        winner = _free_text_winner(text)
        return Verdict(winner=winner, confidence=None, reasoning=text.strip(), format="text")

    if json_hit is not None and (tag_hit is None or json_hit[1] >= tag_hit.end):
        obj, end = json_hit
        verdict = _verdict_from_json(obj, criteria)
    else:
        assert tag_hit is not None
        end = tag_hit.end
        verdict = _tag_verdict(text, tag_hit)
    _check_trailing_text(text[end:], verdict.winner)
    return verdict


def parse_tags(text: str) -> Verdict:
    """Read MT-Bench / Arena-Hard verdict tags only (no JSON, no prose fallback).

    The last tag wins, final tags that disagree are an error, and text after the tag
    must not name another winner, as in :func:`parse_verdict`.
    """
    if not isinstance(text, str):
        raise VerdictParseError(f"judge response must be text, got {type(text).__name__}")
    if not text.strip():
        raise VerdictParseError("empty judge response")
    tag = _last_tag(text)
    if tag is None:
        raise VerdictParseError("no verdict tag such as [[A]], [[B]], [[C]] or [[A>B]]")
    _check_trailing_text(text[tag.end :], tag.winner)
    return _tag_verdict(text, tag)


# --------------------------------------------------------------------------- JSON


def _last_json_verdict(text: str) -> tuple[dict[str, Any], int] | None:
    """The last-starting JSON object with a ``winner`` key, and where it ends."""
    whole = whole_object(text)
    # The usual answer, one JSON object, read in one decode: the scan below would find it
    # unless an object inside it has a winner (then the scan decides).
    if whole is not None and not any(_has_winner(obj) for obj in whole[1]):
        found = whole[0]
        return (found.value, found.end) if _has_winner(found.value) else None
    for found in json_objects(text, nested=True):
        if _has_winner(found.value):
            return found.value, found.end
    return None


def _has_winner(obj: Mapping[Any, Any]) -> bool:
    """``"winner" in _lower_keys(obj)``, without building the dict for every object tried."""
    return "winner" in obj or any(str(k).strip().lower() == "winner" for k in obj)


def _lower_keys(obj: Mapping[Any, Any]) -> dict[str, Any]:
    return {str(k).strip().lower(): v for k, v in obj.items()}


_SIDE_PREFIX = re.compile(r"^(?:assistant|thread|response|answer|model)[\s_-]*", re.IGNORECASE)
_WINNER_WORDS: dict[str, Winner] = {
    "A": "A",
    "B": "B",
    "TIE": "TIE",
    "C": "TIE",
    "DRAW": "TIE",
    "EQUAL": "TIE",
}


def _side(value: Any) -> Winner | None:
    """Normalise "a", "Assistant A", "thread_b", "tie", "C" ...; None if not a side."""
    if not isinstance(value, str):
        return None
    return _side_word(value)


# Pure functions of short strings that every verdict repeats (its sides, the session's
# criteria): cached, as a verdict is read at hundreds a second. Bounded, since a judge may
# answer with any key.
@functools.lru_cache(maxsize=4096)
def _side_word(value: str) -> Winner | None:
    word = _SIDE_PREFIX.sub("", value.strip().strip("\"'").strip()).upper()
    return _WINNER_WORDS.get(word)


def _verdict_from_json(raw: dict[str, Any], criteria: Sequence[str]) -> Verdict:
    obj = _lower_keys(raw)
    winner = _side(obj["winner"])
    if winner is None:
        raise VerdictParseError(f"JSON verdict has an invalid winner {obj['winner']!r}")
    scores_a, scores_b = _read_scores(obj.get("scores"), criteria)
    reasoning = obj.get("reasoning")
    return Verdict(
        winner=winner,
        confidence=_read_confidence(obj.get("confidence")),
        scores_a=scores_a,
        scores_b=scores_b,
        reasoning="" if reasoning is None else str(reasoning).strip(),
        format="json",
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _read_confidence(value: Any) -> float | None:
    if value is None:
        return None
    percent = isinstance(value, str) and value.strip().endswith("%")
    number = _number(value.strip()[:-1] if percent else value)
    if number is None or number < 0 or number > 100 or (percent and number > 100):
        raise VerdictParseError(f"confidence {value!r} is not a number in 0..1 or 0..100")
    if percent or number > 1:
        return number / 100
    return number


_CRITERION_SEPARATORS = re.compile(r"[\s\-]+")


@functools.lru_cache(maxsize=4096)
def _criterion_key(name: str) -> str:
    return _CRITERION_SEPARATORS.sub("_", name.strip().lower())


@functools.lru_cache(maxsize=256)
def _wanted(criteria: tuple[str, ...]) -> dict[str, str]:
    """Requested criteria by their matching key (shared: callers only read it)."""
    return {_criterion_key(c): c for c in criteria}


def _read_scores(value: Any, criteria: Sequence[str]) -> tuple[dict[str, float], dict[str, float]]:
    if value is None:
        return {}, {}
    if not isinstance(value, Mapping):
        raise VerdictParseError("scores must be an object of per-thread criterion scores")
    by_side: dict[str, dict[str, Any]] = {"A": {}, "B": {}}
    sides = {key: _side(key) for key in value}
    if value and all(side in ("A", "B") for side in sides.values()):
        for key, per_criterion in value.items():  # {"A": {crit: n}, "B": {...}}
            if not isinstance(per_criterion, Mapping):
                raise VerdictParseError(f"scores for {key!r} must be an object")
            by_side[str(sides[key])].update({str(c): n for c, n in per_criterion.items()})
    else:
        for crit, per_side in value.items():  # {crit: {"A": n, "B": n}}
            if not isinstance(per_side, Mapping):
                raise VerdictParseError(f"scores for {crit!r} must name threads A and B")
            for key, score in per_side.items():
                side = _side(key)
                if side not in ("A", "B"):
                    raise VerdictParseError(f"scores for {crit!r} name an unknown thread {key!r}")
                by_side[side][str(crit)] = score
    wanted = _wanted(tuple(criteria))
    return _likert(by_side["A"], wanted, "A"), _likert(by_side["B"], wanted, "B")


def _likert(raw: Mapping[str, Any], wanted: Mapping[str, str], side: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, score in raw.items():
        key = _criterion_key(name)
        if wanted and key not in wanted:
            continue  # the caller asked for specific criteria; extras are noise
        number = _number(score)
        if number is None or not 1 <= number <= 5:
            raise VerdictParseError(f"score {score!r} for {name!r} of {side} is not a Likert 1..5")
        out[wanted.get(key, name)] = number
    return out


# --------------------------------------------------------------------------- tags

# Linear time: no two quantifiers can share a character (the old ``\s*["']?\s*`` split a
# run of spaces every possible way: 17.7 s on "[[" + 30,000 spaces), and each quantifier is
# possessive because the token after it can never start with what it repeats.
_TAG = re.compile(
    r"""\[\[\s*+(?:
        (?:["']\s*+)?(?P<single>[ABC]|TIE)\s*+(?:["']\s*+)?
      | (?P<left>[AB])\s*+(?P<op>>>|<<|==|>|<|=)\s*+(?P<right>[AB])\s*+
    )\]\]""",
    re.VERBOSE | re.IGNORECASE,
)
# What may separate two tags for them to count as one final, joint answer.
_TAG_GAP = re.compile(r"[\s,;:/|.\-]*+(?:(?:or|and)[\s,;:/|.\-]*+)?", re.IGNORECASE)


@dataclass(frozen=True)
class _Tag:
    winner: Winner
    strength: Strength | None
    start: int
    end: int


def _read_tag(match: re.Match[str]) -> _Tag:
    single = match.group("single")
    if single is not None:
        winner = _side(single)
        assert winner is not None
        return _Tag(winner, None, match.start(), match.end())
    left, op, right = match.group("left").upper(), match.group("op"), match.group("right").upper()
    if left == right:
        raise VerdictParseError(f"malformed verdict tag {match.group(0)!r}")
    if op in ("=", "=="):
        return _Tag("TIE", None, match.start(), match.end())
    better = left if op in (">", ">>") else right
    strength: Strength = "strong" if len(op) == 2 else "weak"
    return _Tag(better, strength, match.start(), match.end())  # type: ignore[arg-type]


def _tag_verdict(text: str, tag: _Tag) -> Verdict:
    parts = (text[: tag.start].strip(), text[tag.end :].strip())
    return Verdict(
        winner=tag.winner,
        confidence=None,
        reasoning="\n".join(part for part in parts if part),
        format="tag",
        strength=tag.strength,
    )


def _last_tag(text: str) -> _Tag | None:
    matches = list(_TAG.finditer(text))
    if not matches:
        return None
    last = _read_tag(matches[-1])
    # Walk back over tags that end the answer together with the last one.
    for previous, following in zip(reversed(matches[:-1]), reversed(matches[1:]), strict=True):
        if not _TAG_GAP.fullmatch(text, previous.end(), following.start()):
            break
        if _read_tag(previous).winner != last.winner:
            raise VerdictParseError(
                f"the answer ends with conflicting verdict tags "
                f"{previous.group(0)!r} and {matches[-1].group(0)!r}"
            )
    return last


# --------------------------------------------------------------------------- free text

_SUBJECT = r"(?i:assistant|response|answer|thread|model|output)\s+(?P<x>[AB])\b"
_POSSESSIVE = r"(?:(?:'s|’s)\s+(?i:response|answer|reply|output|thread))?"
_INTENSIFIER = r"(?:(?i:clearly|slightly|significantly|much|overall|definitely|the)\s+)*"
_SIDE_PATTERNS = [
    # "Assistant A is better", "Assistant B's response is the better one"
    _SUBJECT
    + _POSSESSIVE
    + r"\s+(?i:is|was)\s+"
    + _INTENSIFIER
    + r"(?i:better|superior|preferable|preferred|the\s+winner|winner)\b",
    # "Assistant A provided a better answer"
    _SUBJECT + r"\s+(?i:provides|provided|gives|gave|offers|offered|delivers|delivered|has|had)\s+"
    r"(?:(?i:a|the)\s+)?(?:(?i:much|clearly|slightly|significantly)\s+)?(?i:better|superior)\s+"
    r"(?i:answers?|responses?|replies|reply)\b",
    # "Assistant B wins", "Assistant A outperforms ..."
    _SUBJECT + r"\s+(?i:wins|won|outperforms|outperformed)\b",
    # "the final verdict is: Assistant A", "Verdict: B"
    r"(?i:verdict)\s*+(?:(?i:is)\s*+)?(?:[:\-]\s*+)?(?:[\"'“]\s*+)?"
    r"(?:(?i:assistant|response|thread)\s++)?(?P<x>[AB])\b(?!\s*+(?i:tie|draw))",
    # "I prefer Assistant B"
    r"\bI\s+(?:(?i:would)\s+)?(?i:choose|prefer|pick|select)\s+"
    r"(?:(?i:assistant|response|answer|thread)\s+)?(?P<x>[AB])\b",
]
_TIE_PATTERNS = [
    r"\b(?:it'?s|it’s|it\s+is|this\s+is|that\s+is|(?:result|outcome|verdict)\s+is|declare\s+it|"
    r"call\s+it|ends\s+in|results\s+in)\s+a\s+(?:tie|draw)\b",
    r"\bverdict\s*+(?:is\s*+)?[:\-]\s*+(?:a\s++)?(?:tie|draw)\b",
    r"\bboth\b[^.!?\n]{0,80}?\b(?:are|were|is|performed|did)\s+(?:equally|similarly)\s+"
    r"(?:good|well|strong|helpful|effective|valid|accurate|matched)\b",
    r"\bneither\s+(?:assistant|response|answer|one)\b[^.!?\n]{0,40}?\bis\s+(?:clearly\s+)?better\b",
]
# One pass finds every phrase in order; side groups are named x0, x1, ... and
# tie groups tie0, tie1, ... (the letters A/B stay case-sensitive on purpose:
# a lower-case "a" is an article).
_VERDICT = re.compile(
    "|".join(f"(?:{p})".replace("(?P<x>", f"(?P<x{i}>") for i, p in enumerate(_SIDE_PATTERNS))
    + "|"
    + "|".join(f"(?P<tie{i}>(?i:{p}))" for i, p in enumerate(_TIE_PATTERNS))
)
_HEDGE = re.compile(
    r"\b(?:not|never|whether|if|unclear|uncertain|cannot|can't|can’t|hard\s+to\s+say|"
    r"difficult\s+to\s+say|\w+n't|\w+n’t)\b",
    re.IGNORECASE,
)
_CONCLUSION = re.compile(
    r"^\W*(?:therefore|thus|hence|overall|in\s+conclusion|in\s+summary|ultimately|to\s+conclude|"
    r"in\s+the\s+end|so|(?:my\s+|the\s+)?final\s+verdict)\b",
    re.IGNORECASE,
)
_CLAUSE_BREAK = re.compile(r"[,;:—–]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_TAIL_SENTENCES = 3


@dataclass(frozen=True)
class _Phrase:
    winner: Winner
    hedged: bool  # negated or conditional: "I'm not sure Assistant A is better"


def _sentence_verdicts(sentence: str) -> list[_Phrase]:
    """Verdict phrases in one sentence, in order.

    A phrase is hedged when a hedge word lies in its clause before it. Clause breaks and
    hedge words are found once per sentence and looked up by bisection, so a sentence of
    thousands of phrases stays linear (re-reading the clause per phrase was quadratic).
    """
    matches = list(_VERDICT.finditer(sentence))
    if not matches:
        return []
    breaks = [m.end() for m in _CLAUSE_BREAK.finditer(sentence)]
    hedges = [(m.start(), m.end()) for m in _HEDGE.finditer(sentence)]
    hedge_starts = [start for start, _ in hedges]
    found: list[_Phrase] = []
    for match in matches:
        # Only the clause that holds the phrase: "as if they were five, A is better" is fine.
        n_breaks = bisect.bisect_right(breaks, match.start())
        clause_start = breaks[n_breaks - 1] if n_breaks else 0
        # Hedge matches never overlap, so the first one in the clause ends first.
        first = bisect.bisect_left(hedge_starts, clause_start)
        hedged = first < len(hedges) and hedges[first][1] <= match.start()
        side = next((v for k, v in match.groupdict().items() if k.startswith("x") and v), None)
        winner: Winner = "TIE" if side is None else side  # type: ignore[assignment]
        found.append(_Phrase(winner, hedged=hedged))
    return found


def _free_text_winner(text: str) -> Winner:
    sentences = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
    with_verdict = [
        (sentence, phrases)
        for sentence in sentences[-_TAIL_SENTENCES:]
        if (phrases := _sentence_verdicts(sentence))
    ]
    if not with_verdict:
        raise VerdictParseError("no verdict tag, JSON verdict or verdict sentence at the end")
    last_sentence, last_phrases = with_verdict[-1]
    if any(p.hedged for p in last_phrases):
        raise VerdictParseError(f"the verdict is hedged or negated: {last_sentence!r}")
    winners = {p.winner for p in last_phrases}
    if len(winners) > 1:
        raise VerdictParseError(f"conflicting verdicts in {last_sentence!r}")
    winner = winners.pop()
    if _CONCLUSION.search(last_sentence):
        return winner  # "Therefore, ..." settles what the sentences before it weighed
    if any(p.hedged or p.winner != winner for _, phrases in with_verdict for p in phrases):
        raise VerdictParseError("the closing sentences do not agree on a winner")
    return winner


def _check_trailing_text(after: str, winner: Winner) -> None:
    """Text after the verdict must not name another winner."""
    for sentence in _SENTENCE_END.split(after):
        for phrase in _sentence_verdicts(sentence):
            if not phrase.hedged and phrase.winner != winner:
                raise VerdictParseError(
                    f"text after the verdict names a different winner: {sentence.strip()!r}"
                )
