"""Probability-weighted grades (G-Eval; Liu et al. 2023, "G-Eval: NLG Evaluation using
GPT-4 with Better Human Alignment"), pure.

A grader that writes "Rating: [[7]]" was not sure of 7: at the position where it wrote the
grade, its token log probabilities also give 6 and 8 some probability. The weighted grade
is the mean of the scale's values under that distribution, ``sum_s s * p(s)``, with ``p``
the softmax over the tokens there that are a value of the scale, renormalised over those
tokens only (other tokens, "]]" or "The", leave the sum).

Where the grade is written: the text reader (``scores.grade_spans``) reads the reply's
tokens joined together and says where the number it read starts (the last ``[[n]]`` for
MT-Bench, one place per criterion for likert). That is the grade the reply states, even
when the judge first quoted the instructions' example rating, and the text read from the
tokens must give the same grade as the reply's text. The position is the token holding
the number's first character: a token may carry text before the number (``"[[7"``), and
then an alternative counts only if it starts with the same text (``"[[8"``).

Multi-digit values (a 1-10 scale): "10" is one token on OpenAI's tokenizers, two ("1",
"0") on tokenizers that split digits (Llama 2, Mistral). Tokens whose digits are a whole
scale value count as that value. A token whose digits could begin a longer value ("1")
is resolved only where the reply itself went on from it: when the judge wrote "1" then
"0", the next position's alternatives split that "1" by the chain rule, P(10) =
P("1") * P("0" | "1") and P(1) = P("1") * P(the number ends | "1") (a continuation off
the scale, "11", leaves the sum). Where the judge wrote another grade and "1" is only an
alternative, what would have followed it is unknown: it counts as 1. On a digit-splitting
tokenizer that can pull a weighted grade below what the judge meant; OpenAI-compatible
servers running such models should be read with this in mind.

Grades are whole numbers on a scale from 0 up (``VerdictFormat`` checks the scale); a
judge that writes "7.5" is a failure with the reason, as is a reply without log
probabilities or whose grade token holds no finite log probability.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.core.judging.logprobs import Position
from llmjudge.core.judging.scores import Score, ScoreParseError, grade_spans, read_score

__all__ = ["GradeDistribution", "grade_distribution", "read_weighted_score", "spelled"]

_DIGITS = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[.,][0-9]")
_SHOWN_CHARS = 60


@dataclass(frozen=True)
class GradeDistribution:
    """The scale's values at ``position`` (the token where the grade is written),
    renormalised over the tokens there that are a value of the scale."""

    position: int
    probabilities: dict[int, float]

    @property
    def mean(self) -> float:
        return math.fsum(value * p for value, p in self.probabilities.items())


def spelled(positions: Sequence[Position] | None) -> tuple[str, list[int]]:
    """The text the tokens spell and where each token ends in it; raises
    :class:`ScoreParseError` when there are none or one is malformed."""
    if not positions:
        raise ScoreParseError(
            "the reply carries no token log probabilities, which a probability-weighted "
            "grade reads (does this server support logprobs and top_logprobs?)"
        )
    pieces: list[str] = []
    ends: list[int] = []
    for index, position in enumerate(positions):
        if not _well_formed(position):
            raise ScoreParseError(f"token {index} of the reply's log probabilities is malformed")
        pieces.append(position[0])
        ends.append((ends[-1] if ends else 0) + len(position[0]))
    return "".join(pieces), ends


def _well_formed(position: Position) -> bool:
    """(token, log probability, [(alternative, log probability), ...]), as JSON or tuples."""
    try:
        token, logprob, alternatives = position
        float(logprob)
        pairs = [(t, float(lp)) for t, lp in alternatives or ()]
    except (TypeError, ValueError):
        return False
    return isinstance(token, str) and all(isinstance(t, str) for t, _ in pairs)


def _candidates(position: Position) -> dict[str, float]:
    token, logprob, alternatives = position
    # The chosen token is among its own alternatives on OpenAI, not always on compatible
    # servers: counted once either way.
    found: dict[str, float] = {}
    for alt, lp in alternatives or ():
        found[str(alt)] = float(lp)
    found.setdefault(str(token), float(logprob))
    return {t: lp for t, lp in found.items() if math.isfinite(lp)}


def _values_at(
    positions: Sequence[Position],
    index: int,
    prefix: str,
    before: str,
    written: str,
    values: range,
) -> dict[int, float]:
    """P(value) at ``positions[index]``, renormalised over the tokens read as a value of
    the scale. ``before``: digits already written (a continuation: a token that does not
    go on with digits ends the number there); ``prefix``: the chosen token's text before
    the grade, which an alternative must share."""
    if index >= len(positions):  # the reply ended with the number
        return {int(before): 1.0} if before and int(before) in values else {}
    chosen = str(positions[index][0])
    weights: dict[int, list[float]] = {}
    for alt, lp in _candidates(positions[index]).items():
        if before:  # the number goes on only with digits right away
            rest = alt
        else:
            head, pre = alt.lstrip(), prefix.lstrip()
            if not head.startswith(pre):
                continue
            rest = head[len(pre) :].lstrip()
        digits = _DIGITS.match(rest)
        if digits is None:
            if before and int(before) in values:  # the number ended with ``before``
                weights.setdefault(int(before), []).append(lp)
            continue
        number, tail = before + digits.group(), rest[digits.end() :]
        if _DECIMAL.match(tail):
            continue  # "7.5": not a whole value
        if alt == chosen and not tail and len(written) > len(number):
            # The judge went on from this token: the next position splits it.
            for value, p in _values_at(positions, index + 1, "", number, written, values).items():
                if p > 0:
                    weights.setdefault(value, []).append(lp + math.log(p))
        elif int(number) in values:
            weights.setdefault(int(number), []).append(lp)
    if not weights:
        return {}
    top = max(lp for lps in weights.values() for lp in lps)
    summed = {v: math.fsum(math.exp(lp - top) for lp in lps) for v, lps in weights.items()}
    total = math.fsum(summed.values())
    return {v: w / total for v, w in summed.items()}


def grade_distribution(
    positions: Sequence[Position], text: str, ends: list[int], span: tuple[int, int], values: range
) -> GradeDistribution:
    """The distribution over ``values`` where the grade ``text[span]`` is written
    (``text``, ``ends``: :func:`spelled`)."""
    start, end = span
    index = bisect.bisect_right(ends, start)  # the first token that ends after ``start``
    token_start = ends[index] - len(positions[index][0])
    prefix, written = text[token_start:start], text[start:end]
    probabilities = _values_at(positions, index, prefix, "", written, values)
    if not probabilities:
        raise ScoreParseError(
            f"no token at the grade's position ({written!r}, token {index}) holds a finite "
            f"log probability for a value of the scale {values.start} to {values.stop - 1}"
        )
    return GradeDistribution(index, probabilities)


def read_weighted_score(
    text: str,
    positions: Sequence[Position] | None,
    fmt: VerdictFormat,
    criteria: Sequence[str] = (),
) -> Score:
    """The probability-weighted grade of a reply (module docstring): the text's grade
    must read, and the tokens must spell the same grade; the value (and each criterion's,
    for likert) is the weighted mean at the position where it is written."""
    stated = read_score(text, fmt, criteria)
    joined, ends = spelled(positions)
    assert positions is not None  # spelled() refuses none
    try:
        spelt, spans = grade_spans(joined, fmt, criteria)
    except ScoreParseError as exc:
        raise ScoreParseError(f"the reply's tokens do not spell a grade: {exc}") from None
    if spelt.value != stated.value or spelt.criteria != stated.criteria:
        raise ScoreParseError(
            f"the reply's tokens spell the grade {spelt.value:g}, its text "
            f"{stated.value:g}: their log probabilities cannot weight the text's grade"
        )
    low, high = fmt.score_scale
    values = range(int(low), int(high) + 1)
    weighted: dict[str, float] = {}
    for name, span in spans.items():
        written = joined[span[0] : span[1]]
        if not (written.isascii() and written.isdigit()):
            raise ScoreParseError(
                f"a probability-weighted grade reads whole numbers; the judge wrote "
                f"{written[:_SHOWN_CHARS]!r}"
            )
        if len(written) > len(str(values.stop - 1)):  # "0007": each digit one more position
            raise ScoreParseError(
                f"a probability-weighted grade reads the scale's values as written; "
                f"{written[:_SHOWN_CHARS]!r} has more digits than {values.stop - 1}"
            )
        weighted[name] = grade_distribution(positions, joined, ends, span, values).mean
    if fmt.kind == "score":
        return Score(weighted[""], reasoning=stated.reasoning)
    return Score(math.fsum(weighted.values()) / len(weighted), weighted, stated.reasoning)
