"""Answers read from a judge's token log probabilities (pure).

OpenAI-compatible servers (OpenAI, vLLM, llama.cpp's server) return, with ``logprobs: true``
and ``top_logprobs: k``, for each generated token its log probability and the ``k`` most
likely tokens at that position. A judge that answers with one token (AlpacaEval's weighted
judge writes ``m`` or ``M``) then says not only which answer it chose, but how sure it was.

:func:`answer_distribution` is the one reading, for any set of labels: it finds the first
generated position whose token is mapped, and turns the mapped alternatives there into a
distribution over labels (a softmax over the mapped tokens' log probabilities; tokens
that read the same, e.g. ``"m"`` and ``" m"``, add up). Pairwise verdicts map to A, B and
TIE (:class:`TokenMap`); a grader's score tokens (``"1"`` .. ``"10"``) can map to scores
the same way for a probability-weighted score.

A position is ``(token, logprob, alternatives)`` with alternatives ``[(token, logprob)]``,
as lists or tuples (a cached reply comes back from JSON as lists).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

__all__ = [
    "MAX_TOP_LOGPROBS",
    "AnswerDistribution",
    "NoAnswerToken",
    "Position",
    "TokenMap",
    "answer_distribution",
    "pairwise_probability",
]

MAX_TOP_LOGPROBS = 20  # OpenAI's limit for top_logprobs
_MAX_TOKENS_PER_LABEL = 32
_SHOWN_TOKENS = 8

# (token, its log probability, [(alternative token, log probability), ...])
Position = Sequence[Any]


def _key(token: str, ignore_case: bool) -> str:
    token = token.strip()
    return token.casefold() if ignore_case else token


class TokenMap(BaseModel):
    """Which answer tokens mean A, B and a tie; matched after stripping whitespace,
    case-sensitively unless ``ignore_case``. ``top_logprobs``: alternatives asked per
    position (1..20)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    a: tuple[str, ...] = Field(min_length=1, max_length=_MAX_TOKENS_PER_LABEL)
    b: tuple[str, ...] = Field(min_length=1, max_length=_MAX_TOKENS_PER_LABEL)
    tie: tuple[str, ...] = Field(default=(), max_length=_MAX_TOKENS_PER_LABEL)
    ignore_case: StrictBool = False
    top_logprobs: int = Field(default=5, ge=1, le=MAX_TOP_LOGPROBS)

    @field_validator("a", "b", "tie", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if isinstance(value, str):
            return (value,)
        return tuple(value) if isinstance(value, list) else value

    @model_validator(mode="after")
    def _distinct(self) -> TokenMap:
        seen: dict[str, str] = {}
        for label, tokens in (("a", self.a), ("b", self.b), ("tie", self.tie)):
            for token in tokens:
                key = _key(token, self.ignore_case)
                if not key:
                    raise ValueError(
                        f"token map {label}: {token!r} is empty once whitespace is stripped"
                    )
                if seen.get(key, label) != label:
                    raise ValueError(
                        f"token map: {token!r} is mapped to both {seen[key]} and {label}"
                    )
                seen[key] = label
        return self

    def labels(self) -> dict[str, str]:
        """Stripped token -> "A", "B" or "TIE"."""
        out: dict[str, str] = {}
        for label, tokens in (("A", self.a), ("B", self.b), ("TIE", self.tie)):
            out.update((_key(t, self.ignore_case), label) for t in tokens)
        return out


@dataclass(frozen=True)
class AnswerDistribution:
    """The labels' probabilities at ``position`` (the first generated position whose
    token is mapped), renormalised over the mapped alternatives seen there; ``mass`` is
    the probability those alternatives held before renormalising."""

    position: int
    probabilities: dict[str, float]
    mass: float


class NoAnswerToken(ValueError):
    """No generated token is mapped; the message says what was generated."""


def answer_distribution(
    positions: Sequence[Position] | None,
    labels: Mapping[str, str],
    *,
    ignore_case: bool = False,
) -> AnswerDistribution:
    """The distribution over ``labels``' values at the first answer position (module
    docstring). ``labels`` maps stripped tokens (casefolded with ``ignore_case``) to
    labels. Raises :class:`NoAnswerToken` when the reply holds no log probabilities or no
    generated token is mapped."""
    if not positions:
        raise NoAnswerToken(
            "the reply carries no token log probabilities (does this server support "
            "logprobs and top_logprobs?)"
        )
    for index, (token, logprob, alternatives) in enumerate(positions):
        if _key(str(token), ignore_case) not in labels:
            continue
        # The chosen token is among its own alternatives on OpenAI, but not always on
        # compatible servers: count it once either way.
        candidates = {str(t): float(lp) for t, lp in alternatives or ()}
        candidates.setdefault(str(token), float(logprob))
        by_label: dict[str, list[float]] = {}
        for alt, lp in candidates.items():
            label = labels.get(_key(alt, ignore_case))
            if label is not None and math.isfinite(lp):
                by_label.setdefault(label, []).append(lp)
        if not by_label:  # the chosen token's own log probability was not finite
            continue
        top = max(lp for lps in by_label.values() for lp in lps)
        weights = {k: sum(math.exp(lp - top) for lp in lps) for k, lps in by_label.items()}
        total = sum(weights.values())
        return AnswerDistribution(
            position=index,
            probabilities={k: w / total for k, w in weights.items()},
            mass=min(1.0, total * math.exp(top)),
        )
    shown = "".join(str(p[0]) for p in positions[:_SHOWN_TOKENS])
    raise NoAnswerToken(
        f"no generated token matches the token map ({', '.join(sorted(labels))}); "
        f"the reply began {shown!r} ({len(positions)} tokens)"
    )


def pairwise_probability(distribution: AnswerDistribution) -> tuple[str, float]:
    """(hard verdict, P(A is better)) of a distribution over A, B and TIE: the verdict
    is the most probable label (a tie on equal A and B), and a tie's probability counts
    half for each side."""
    p = distribution.probabilities
    a, b, tie = p.get("A", 0.0), p.get("B", 0.0), p.get("TIE", 0.0)
    winner = "TIE" if tie >= max(a, b) or a == b else ("A" if a > b else "B")
    return winner, min(1.0, max(0.0, a + tie / 2))
