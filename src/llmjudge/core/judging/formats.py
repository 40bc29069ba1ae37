"""Verdict formats as data: how a session reads its judge's answers.

A session's judge may be llmjudge's own (it answers JSON) or one published elsewhere,
whose prompt and answer reading must run unchanged. A :class:`VerdictFormat` says which:

- ``json``: today's reading, :func:`~llmjudge.core.judging.verdicts.parse_verdict` (a JSON
  verdict, else tags, else an unambiguous closing sentence);
- ``tags``: MT-Bench / Arena-Hard tags only (``[[A]]``, ``[[C]]``, ``[[A>>B]]`` ...; the
  last tag wins and disagreeing final tags are an error), with no JSON or prose fallback;
- ``labels``: an ordered list of regular-expression rules, each naming a winner (A, B or
  TIE relative to the answer as shown) and a strength (1, or 2 for "much better"), read
  from the answer with surrounding whitespace stripped under a ``match`` policy:
  ``rule_order`` (the first rule, in list order, whose pattern occurs anywhere: how most
  published judges are read), ``first`` (the rule whose match starts earliest) or
  ``last`` (the one that starts latest); equal starts go to the earlier rule;
- ``logprobs``: the judge's token log probabilities (``core.judging.logprobs``): a token
  map says which answer tokens mean A, B and a tie; the verdict is the most probable
  label at the first mapped position, and P(A is better) is stored beside it. Only
  providers that return log probabilities can serve it (OpenAI-compatible servers).

- ``score`` (single-answer grading): a number read by ``pattern`` (a regular expression
  whose first group captures it; default MT-Bench's ``[[7]]``, the last match wins) on the
  declared ``scale`` (min, max; default 1 to 10). A number outside the scale is a parse
  failure with the reason, never clipped;
- ``likert`` (single-answer grading per criterion): one ``criterion: [[n]]`` line per
  criterion on ``scale`` (default 1 to 5); the grade is their mean. Reading:
  ``core.judging.scores``. Either with ``weighted: true``: the probability-weighted grade
  of G-Eval, read from the judge's token log probabilities where it wrote the grade
  (``core.judging.weighted``; whole-number scales from 0 up, OpenAI-compatible judges
  only, as for ``logprobs``).

What no rule reads is a :class:`VerdictParseError` (``on_unparsed="fail"``) or, when the
format says ``on_unparsed="tie"``, a tie marked as unparsed: never a guess.

Run time: rule patterns are user data, so they are compiled with the ``regex`` package
and every search runs under a time limit (``regex``'s ``timeout=``; an answer that runs
past it is a parse error whatever ``on_unparsed`` says, since no rule was read to the
end). Validation also probes each pattern on long runs of single characters and rejects
one that blows the limit there (exponential ones such as ``(a+)+$``), so they fail at
creation with a clear message instead of on every answer; merely quadratic patterns are
accepted and left to the time limit. Many answers read together (an upload of raw
judgments) also share one :class:`SearchBudget`, so a quadratic pattern cannot spend the
per-answer limit on every row: once the shared budget is spent the search raises
:class:`SearchBudgetSpent`, and the caller fails the upload as a whole.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from llmjudge.core.judging.logprobs import MAX_TOP_LOGPROBS, TokenMap
from llmjudge.core.judging.verdicts import (
    Format,
    Verdict,
    VerdictParseError,
    Winner,
    parse_tags,
    parse_verdict,
)

__all__ = [
    "DEFAULT_SCALES",
    "DEFAULT_SCORE_PATTERN",
    "MAX_PATTERN_LENGTH",
    "SCORE_KINDS",
    "MAX_RULES",
    "SEARCH_BUDGET_S",
    "UPLOAD_BUDGET_BASE_S",
    "UPLOAD_BUDGET_PER_CHAR_S",
    "UPLOAD_BUDGET_PER_ROW_S",
    "LabelRule",
    "ParsedVerdict",
    "SearchBudget",
    "SearchBudgetSpent",
    "VerdictFormat",
    "parse_with_format",
]

FormatKind = Literal["json", "tags", "labels", "logprobs", "score", "likert"]
# The kinds that grade one thread alone (mode single) instead of choosing between two.
SCORE_KINDS: tuple[FormatKind, ...] = ("score", "likert")
DEFAULT_SCALES: dict[FormatKind, tuple[float, float]] = {"score": (1, 10), "likert": (1, 5)}
# MT-Bench's single-answer rating, "Rating: [[5]]" (the last one wins).
DEFAULT_SCORE_PATTERN = r"\[\[\s*(-?\d+(?:\.\d+)?)\s*\]\]"
MatchPolicy = Literal["rule_order", "first", "last"]
OnUnparsed = Literal["fail", "tie"]
Strength = Literal[1, 2]

MAX_RULES = 64
MAX_PATTERN_LENGTH = 2_000
# All rule searches on one answer share this budget (seconds). Linear patterns read a
# 500k-character answer in a few milliseconds; a pattern that needs more is broken.
SEARCH_BUDGET_S = 0.25
# All searches of one upload share a budget: the base, plus an allowance per row and per
# character of answer read. A linear rule reads about 3 ns a character, so the allowances
# leave a healthy upload (even 16 rules that never match) far from it, while a quadratic
# pattern fails the upload in about a second instead of spending SEARCH_BUDGET_S on every
# row (minutes of CPU on a large file). Upload limits bound the total.
UPLOAD_BUDGET_BASE_S = 1.0
UPLOAD_BUDGET_PER_ROW_S = 0.0005
UPLOAD_BUDGET_PER_CHAR_S = 50e-9
# Validation probes: runs of one character, long enough that exponential backtracking
# blows the probe limit. Quadratic patterns (``b+a`` on a run of b) pass: they are common,
# harmless on answers of normal length, and bounded by SEARCH_BUDGET_S on hostile ones.
_PROBE_LENGTH = 2_000
_PROBE_TIMEOUT_S = 0.05
_PROBE_DEFAULT_CHARS = "a A1 \n"
_MAX_PROBE_CHARS = 24


class SearchBudgetSpent(Exception):
    """The shared :class:`SearchBudget` ran out during a search; ``rule`` and ``pattern``
    name the rule that was searching."""

    def __init__(self, rule: int, pattern: str, budget_s: float) -> None:
        super().__init__(
            f"the verdict pattern is too slow for this upload: rule {rule} ({pattern!r}) "
            f"used up the {budget_s:.2f} s all answers of the upload may spend on verdict "
            "patterns; anchor it or simplify it (avoid several unbounded quantifiers such as "
            "'.*' in one pattern, e.g. match on the last line only) or upload fewer rows"
        )
        self.rule = rule
        self.pattern = pattern
        self.budget_s = budget_s


class SearchBudget:
    """Search time shared by every answer read for one request or upload.

    Only time spent inside rule searches counts (measured with ``clock``), so parsing the
    rest of a file costs nothing. :meth:`add_row` grants a row's allowance; each search
    then runs under ``min(its per-answer limit, what is left)``.
    """

    def __init__(
        self,
        base_s: float = UPLOAD_BUDGET_BASE_S,
        per_row_s: float = UPLOAD_BUDGET_PER_ROW_S,
        per_char_s: float = UPLOAD_BUDGET_PER_CHAR_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.granted_s = base_s
        self.per_row_s = per_row_s
        self.per_char_s = per_char_s
        self.used_s = 0.0
        self.clock = clock

    def add_row(self, chars: int = 0) -> None:
        """Grant the allowance of one row whose answer has ``chars`` characters."""
        self.granted_s += self.per_row_s + self.per_char_s * max(0, chars)

    @property
    def left_s(self) -> float:
        return max(0.0, self.granted_s - self.used_s)

    def charge(self, seconds: float) -> None:
        self.used_s += max(0.0, seconds)


@functools.lru_cache(maxsize=512)
def _compile(pattern: str, ignore_case: bool) -> regex.Pattern[str]:
    # V0: the same syntax and semantics as Python's re, which users already know.
    flags = regex.V0 | (regex.IGNORECASE if ignore_case else 0)
    return regex.compile(pattern, flags)


def _probe(compiled: regex.Pattern[str], pattern: str) -> None:
    """Reject a pattern that backtracks catastrophically on a run of one character."""
    literal = [c for c in dict.fromkeys(pattern) if c.isprintable() and not c.isspace()]
    chars = list(dict.fromkeys(_PROBE_DEFAULT_CHARS + "".join(literal)))[:_MAX_PROBE_CHARS]
    for char in chars:
        # The tail keeps an end-anchored pattern from matching at once.
        probe = char * _PROBE_LENGTH + "\x00"
        try:
            compiled.search(probe, timeout=_PROBE_TIMEOUT_S)
        except TimeoutError:
            raise ValueError(
                f"pattern backtracks catastrophically (over {_PROBE_TIMEOUT_S:g} s on a run "
                f"of {_PROBE_LENGTH:,} {char!r}); avoid nested or overlapping quantifiers "
                "such as (a+)+ or \\s*\\s*"
            ) from None


class LabelRule(BaseModel):
    """One reading of a judge's answer: where ``pattern`` occurs, ``winner`` won."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str = Field(min_length=1, max_length=MAX_PATTERN_LENGTH)
    winner: Winner
    strength: Strength = 1
    ignore_case: StrictBool = False

    @model_validator(mode="after")
    def _valid_pattern(self) -> LabelRule:
        try:
            compiled = _compile(self.pattern, self.ignore_case)
        except (regex.error, OverflowError, RecursionError) as exc:
            raise ValueError(
                f"pattern {self.pattern!r} is not a valid regular expression: {exc}"
            ) from None
        if compiled.search("") is not None:
            raise ValueError(
                f"pattern {self.pattern!r} matches an empty answer, so it would read every "
                "answer as a verdict"
            )
        _probe(compiled, self.pattern)
        return self

    @property
    def compiled(self) -> regex.Pattern[str]:
        return _compile(self.pattern, self.ignore_case)


class VerdictFormat(BaseModel):
    """How to read a judge's answer; see the module docstring.

    Accepts a bare kind as shorthand: ``VerdictFormat.model_validate("tags")``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FormatKind = "json"
    rules: tuple[LabelRule, ...] = Field(default=(), max_length=MAX_RULES)
    match: MatchPolicy = "rule_order"
    on_unparsed: OnUnparsed = "fail"
    tokens: TokenMap | None = None  # the logprobs kind's token map
    # score kinds only: the number's pattern (its first group) and the scale it must be on
    pattern: str | None = Field(default=None, min_length=1, max_length=MAX_PATTERN_LENGTH)
    scale: tuple[float, float] | None = None
    # score kinds only: the grade is the mean of the scale's values weighted by the judge's
    # token probabilities where it wrote the grade (G-Eval)
    weighted: StrictBool = False

    @property
    def grades(self) -> bool:
        """Whether this format grades one thread (mode single) rather than a pair."""
        return self.kind in SCORE_KINDS

    @property
    def score_scale(self) -> tuple[float, float]:
        return self.scale or DEFAULT_SCALES.get(self.kind, (1, 10))

    @property
    def score_pattern(self) -> regex.Pattern[str]:
        return _compile(self.pattern or DEFAULT_SCORE_PATTERN, False)

    @model_validator(mode="before")
    @classmethod
    def _bare_kind(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data

    @field_validator("rules", mode="before")
    @classmethod
    def _list_of_rules(cls, value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value

    @model_validator(mode="after")
    def _rules_fit_kind(self) -> VerdictFormat:
        if self.kind == "labels" and not self.rules:
            raise ValueError("a labels verdict format needs at least one rule")
        if self.kind != "labels" and self.rules:
            raise ValueError(f"rules apply to the labels format only, not to {self.kind!r}")
        if self.kind == "logprobs" and self.tokens is None:
            raise ValueError(
                'a logprobs verdict format needs a token map, e.g. "tokens": {"a": ["m"], '
                '"b": ["M"]}'
            )
        if self.kind != "logprobs" and self.tokens is not None:
            raise ValueError(
                f"a token map applies to the logprobs format only, not to {self.kind!r}"
            )
        if self.kind == "logprobs" and self.on_unparsed != "fail":
            raise ValueError("a logprobs verdict format never counts an unread reply as a tie")
        if not self.grades:
            if self.pattern is not None or self.scale is not None:
                raise ValueError("pattern and scale apply to the score and likert formats only")
            if self.weighted:
                raise ValueError(
                    "weighted (a probability-weighted grade) applies to the score and likert "
                    f"formats of single-answer grading only, not to {self.kind!r}"
                )
            return self
        if self.on_unparsed != "fail":
            raise ValueError("a score that cannot be read is a failure: on_unparsed must be fail")
        if self.scale is not None:
            low, high = self.scale
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(f"scale must be two finite numbers, min < max, not {low}, {high}")
        if self.pattern is not None:
            if self.kind != "score":
                raise ValueError("a pattern applies to the score format only")
            try:
                compiled = _compile(self.pattern, False)
            except (regex.error, OverflowError, RecursionError) as exc:
                raise ValueError(
                    f"pattern {self.pattern!r} is not a valid regular expression: {exc}"
                ) from None
            if compiled.groups < 1:
                raise ValueError(
                    f"pattern {self.pattern!r} needs a group that captures the number, "
                    r"e.g. Score: (\d+)"
                )
            _probe(compiled, self.pattern)
        if self.weighted:
            low, high = self.score_scale
            if not (low >= 0 and float(low).is_integer() and float(high).is_integer()):
                raise ValueError(
                    "a probability-weighted grade reads whole-number tokens: its scale must "
                    f"run between whole numbers from 0 up, not {low:g} to {high:g}"
                )
        return self

    @property
    def reads_logprobs(self) -> bool:
        """Whether the judge's token log probabilities are read (only OpenAI-compatible
        providers return them)."""
        return self.tokens is not None or self.weighted

    @property
    def top_logprobs(self) -> int | None:
        """Alternatives to ask for at each token (None: no log probabilities). A weighted
        grade asks for the most a provider gives, so that every value of a 1-10 scale
        can be among them."""
        if self.tokens is not None:
            return self.tokens.top_logprobs
        return MAX_TOP_LOGPROBS if self.weighted else None


@dataclass(frozen=True)
class ParsedVerdict:
    """A verdict read under a format, in the order the answer was shown.

    ``strength`` is 1 or 2 (2: "much better", from a ``>>`` tag or a strength-2 rule; a
    tie is 1). ``rule`` is the index of the labels rule that matched. ``unparsed`` holds
    the reason when no reading was found and the format turned it into a tie.
    """

    verdict: Verdict
    strength: Strength = 1
    rule: int | None = None
    unparsed: str | None = None

    @property
    def winner(self) -> Winner:
        return self.verdict.winner


def parse_with_format(
    text: str,
    fmt: VerdictFormat,
    criteria: Sequence[str] = (),
    budget: SearchBudget | None = None,
) -> ParsedVerdict:
    """Read ``text`` under ``fmt``; raise :class:`VerdictParseError` if it holds no verdict
    (and the format does not count that as a tie) or if a rule ran out of time.

    With a ``budget`` (many answers read for one upload), the searches also draw on it, and
    :class:`SearchBudgetSpent` is raised once it is spent; without one (live judging, one
    answer per call) only the per-answer limit applies."""
    if not isinstance(text, str):
        raise VerdictParseError(f"judge response must be text, got {type(text).__name__}")
    if fmt.kind == "logprobs":
        raise VerdictParseError(
            "a logprobs verdict format reads the judge's token probabilities, which a text "
            "does not carry; give a probability (preference) or a verdict instead"
        )
    if fmt.grades:
        raise VerdictParseError(f"a {fmt.kind} format grades one answer: it reads no A/B verdict")
    try:
        if fmt.kind == "labels":
            return _read_labels(text, fmt, budget)
        verdict = parse_verdict(text, criteria) if fmt.kind == "json" else parse_tags(text)
    except _Unreadable as exc:  # a rule ran out of time: never a tie
        raise VerdictParseError(str(exc)) from None
    except VerdictParseError as exc:
        if fmt.on_unparsed == "fail":
            raise
        return _unparsed_tie(text, str(exc), fmt.kind)
    return ParsedVerdict(verdict=verdict, strength=2 if verdict.strength == "strong" else 1)


class _Unreadable(Exception):
    """A rule pattern ran past the search budget."""


_VERDICT_FORMAT: dict[FormatKind, Format] = {
    "json": "json",
    "tags": "tag",
    "labels": "labels",
    "logprobs": "logprobs",
    "score": "text",
    "likert": "text",
}


def _unparsed_tie(text: str, reason: str, kind: FormatKind) -> ParsedVerdict:
    verdict = Verdict(
        winner="TIE", confidence=None, reasoning=text.strip(), format=_VERDICT_FORMAT[kind]
    )
    return ParsedVerdict(verdict=verdict, unparsed=reason)


def _read_labels(text: str, fmt: VerdictFormat, budget: SearchBudget | None) -> ParsedVerdict:
    answer = text.strip()
    deadline = time.monotonic() + SEARCH_BUDGET_S
    best: tuple[int, int] | None = None  # (start, rule index)
    for index, rule in enumerate(fmt.rules):
        start = _rule_start(rule, answer, fmt.match, deadline, index, budget)
        if start is None:
            continue
        if fmt.match == "rule_order":
            best = (start, index)
            break
        later = best is None or (start < best[0] if fmt.match == "first" else start > best[0])
        if later:
            best = (start, index)
    if best is None:
        reason = f"no rule of the verdict format matches the answer ({len(fmt.rules)} tried)"
        if fmt.on_unparsed == "fail":
            raise VerdictParseError(reason)
        return _unparsed_tie(text, reason, fmt.kind)
    rule = fmt.rules[best[1]]
    verdict = Verdict(
        winner=rule.winner,
        confidence=None,
        reasoning=answer,
        format="labels",
        strength=("strong" if rule.strength == 2 else "weak") if rule.winner != "TIE" else None,
    )
    return ParsedVerdict(verdict=verdict, strength=rule.strength, rule=best[1])


def _rule_start(
    rule: LabelRule,
    answer: str,
    policy: MatchPolicy,
    deadline: float,
    index: int,
    budget: SearchBudget | None,
) -> int | None:
    """Where ``rule`` matches: its earliest start, or its latest one under ``last``."""
    compiled = rule.compiled

    def search(pos: int) -> regex.Match[str] | None:
        left = deadline - time.monotonic()
        shared = budget.left_s if budget is not None else left
        # Whichever limit binds says what a timeout means: this answer is unreadable, or
        # the whole upload has spent its search time.
        upload_binds = shared < left
        started = budget.clock() if budget is not None else 0.0
        try:
            if min(left, shared) <= 0:
                raise TimeoutError
            return compiled.search(answer, pos, timeout=min(left, shared))
        except TimeoutError:
            if upload_binds and budget is not None:
                raise SearchBudgetSpent(index, rule.pattern, budget.granted_s) from None
            raise _Unreadable(
                f"rule {index} ({rule.pattern!r}) ran past {SEARCH_BUDGET_S:g} s on this "
                f"answer of {len(answer):,} characters"
            ) from None
        finally:
            if budget is not None:
                budget.charge(budget.clock() - started)

    first = search(0)
    if first is None or policy != "last":
        return None if first is None else first.start()
    # "Some match starts at or after p" is monotone in p: bisect for the latest start,
    # O(log n) searches instead of every overlapping match. A search from pos sees the
    # text before it, so anchors and lookbehinds read as in the whole answer.
    lo, hi = first.start(), len(answer)  # a match starts at >= lo; none starts after hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        found = search(mid)
        if found is None:
            hi = mid - 1
        else:
            lo = found.start()
    return lo
