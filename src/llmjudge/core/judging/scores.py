"""Reading a grade: one thread judged alone (single-answer grading) under a score format.

``score``: the format's ``pattern`` (first group: the number; default MT-Bench's
``[[7]]``) read anywhere in the answer, the last match winning (judges often quote the
instructions, and their example rating, before grading). ``likert``: one
``criterion: [[n]]`` line per criterion, the grade their mean. Every number must lie on the
declared scale: one outside it is a :class:`ScoreParseError` saying so, never clipped, and
so is an answer with no number, a number that is not finite, or a missing criterion.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import regex

from llmjudge.core.judging.formats import SEARCH_BUDGET_S, VerdictFormat, _compile
from llmjudge.core.judging.verdicts import VerdictParseError

__all__ = ["Score", "ScoreParseError", "grade_spans", "read_score", "scale_text"]


class ScoreParseError(VerdictParseError):
    """The answer holds no grade on the scale; the message says why."""


@dataclass(frozen=True, slots=True)
class Score:
    """A grade on the format's scale, with the per-criterion grades (likert)."""

    value: float
    criteria: dict[str, float] = field(default_factory=dict)
    reasoning: str = ""


def scale_text(scale: tuple[float, float]) -> str:
    return f"{scale[0]:g} to {scale[1]:g}"


def _number(text: str, scale: tuple[float, float], what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ScoreParseError(f"{what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ScoreParseError(f"{what} {text!r} is not a finite number")
    low, high = scale
    if not low <= value <= high:
        raise ScoreParseError(f"{what} {value:g} is outside the scale {scale_text(scale)}")
    return value


def _last(pattern: regex.Pattern[str], text: str) -> regex.Match[str] | None:
    try:
        found = None
        for found in pattern.finditer(text, timeout=SEARCH_BUDGET_S):  # noqa: B007
            pass
        return found
    except TimeoutError:
        raise ScoreParseError(
            f"the score pattern ran past {SEARCH_BUDGET_S:g} s on this answer of "
            f"{len(text):,} characters"
        ) from None


def _criterion_pattern(name: str) -> regex.Pattern[str]:
    # "accuracy: [[4]]", "- Accuracy - [[4]]", "**accuracy**: [[4]]"; spaces or
    # underscores between words alike.
    words = r"[\s_-]+".join(regex.escape(w) for w in regex.split(r"[\s_-]+", name) if w)
    return _compile(rf"(?<![A-Za-z0-9]){words}\W{{0,6}}\[\[\s*(-?\d+(?:\.\d+)?)\s*\]\]", True)


def read_score(text: str, fmt: VerdictFormat, criteria: Sequence[str] = ()) -> Score:
    """The grade in ``text`` under the score format ``fmt``; raises
    :class:`ScoreParseError` when there is none on the scale."""
    return grade_spans(text, fmt, criteria)[0]


def grade_spans(
    text: str, fmt: VerdictFormat, criteria: Sequence[str] = ()
) -> tuple[Score, dict[str, tuple[int, int]]]:
    """:func:`read_score`, with where each number was written in ``text`` (character
    offsets; key ``""`` for a score format's one number, else the criterion's name): a
    probability-weighted grade reads the judge's tokens there."""
    if not fmt.grades:
        raise ValueError(f"{fmt.kind!r} is not a score format")
    if not isinstance(text, str) or not text.strip():
        raise ScoreParseError("empty judge response")
    scale = fmt.score_scale
    answer = text.strip()
    lead = len(text) - len(text.lstrip())
    if fmt.kind == "score":
        found = _last(fmt.score_pattern, answer)
        if found is None:
            hint = "a rating such as [[7]]" if fmt.pattern is None else f"{fmt.pattern!r}"
            raise ScoreParseError(f"no score in the answer (looked for {hint})")
        value = _number(found.group(1), scale, "score")
        return Score(value, reasoning=answer), {"": _span(found, lead)}
    if not criteria:
        raise ScoreParseError("a likert format needs the session's criteria")
    grades: dict[str, float] = {}
    spans: dict[str, tuple[int, int]] = {}
    missing = []
    for name in criteria:
        found = _last(_criterion_pattern(name), answer)
        if found is None:
            missing.append(name)
        else:
            grades[name] = _number(found.group(1), scale, f"{name} score")
            spans[name] = _span(found, lead)
    if missing:
        raise ScoreParseError(f"no score for {', '.join(missing)} (as '{missing[0]}: [[n]]')")
    return Score(sum(grades.values()) / len(grades), grades, answer), spans


def _span(found: regex.Match[str], lead: int) -> tuple[int, int]:
    start, end = found.span(1)
    return start + lead, end + lead
