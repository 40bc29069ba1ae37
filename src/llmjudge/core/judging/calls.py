"""One judge call as plain values: the request, the reader of its reply, the result.

Pure (no I/O): ``llmjudge.judging`` sends a ``JudgeRequest`` through a transport and reads
the reply here. The request is plain data (``to_json``/``from_json``), so a transport that
queues calls (a provider batch API) can store it and read the replies later with
``read_reply``; a new kind of verdict (probabilities, scores) is a new ``Reader``.

A reply is its text and, where the request asked for them (``top_logprobs``), its token
log probabilities (``core.judging.logprobs``): every reader is handed both and reads what
its kind needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from llmjudge.core.judging.formats import VerdictFormat, parse_with_format
from llmjudge.core.judging.logprobs import (
    NoAnswerToken,
    Position,
    answer_distribution,
    pairwise_probability,
)
from llmjudge.core.judging.scores import Score, ScoreParseError, read_score
from llmjudge.core.judging.verdicts import Verdict, VerdictParseError
from llmjudge.core.judging.weighted import read_weighted_score
from llmjudge.core.personas.replies import JudgeVerdict, parse_judge_reply

__all__ = [
    "JudgeRequest",
    "JudgeResult",
    "LabelReader",
    "Logprobs",
    "PairwiseReader",
    "Reader",
    "Reading",
    "ScoreReader",
    "Unreadable",
    "read_reply",
]

V = TypeVar("V")
V_co = TypeVar("V_co", covariant=True)


class Unreadable(ValueError):
    """The reply holds no verdict the reader accepts; the message says why."""


@dataclass(slots=True)  # not frozen: made per judge call, twice as fast
class Reading(Generic[V]):
    """What a reader found: the verdict, its reasoning, and ``note`` when the reader
    accepted the reply with a caveat (a format that counts an unreadable reply as a tie
    says why it could not read it)."""

    verdict: V
    reasoning: str | None = None
    note: str | None = None


Logprobs = Sequence[Position] | None  # a reply's token log probabilities, if asked for


class Reader(Protocol[V_co]):
    """Reads a judge's reply (its text, and its token log probabilities where the request
    asked for them); raises ``Unreadable`` when it holds no verdict."""

    def read(self, text: str, logprobs: Logprobs = None) -> Reading[V_co]: ...


@dataclass(frozen=True, slots=True)
class PairwiseReader:
    """A session's pairwise verdict under its verdict format (``formats.parse_with_format``;
    a ``logprobs`` format reads the token probabilities instead, ``logprobs``)."""

    fmt: VerdictFormat
    criteria: Sequence[str] = ()

    def read(self, text: str, logprobs: Logprobs = None) -> Reading[Verdict]:
        if self.fmt.tokens is not None:
            return self._read_logprobs(text, logprobs)
        try:
            parsed = parse_with_format(text, self.fmt, self.criteria)
        except VerdictParseError as exc:
            raise Unreadable(str(exc)) from None
        return Reading(parsed.verdict, parsed.verdict.reasoning, parsed.unparsed)

    def _read_logprobs(self, text: str, logprobs: Logprobs) -> Reading[Verdict]:
        tokens = self.fmt.tokens
        assert tokens is not None
        try:
            found = answer_distribution(logprobs, tokens.labels(), ignore_case=tokens.ignore_case)
        except NoAnswerToken as exc:
            raise Unreadable(str(exc)) from None
        winner, prob_a = pairwise_probability(found)
        verdict = Verdict(
            winner=winner,  # type: ignore[arg-type]
            confidence=None,
            reasoning=text.strip(),
            format="logprobs",
            prob_a=prob_a,
        )
        return Reading(verdict, verdict.reasoning)


@dataclass(frozen=True, slots=True)
class ScoreReader:
    """A grade of one thread under a score format (``scores.read_score``; a weighted
    format weights it by the token probabilities, ``weighted.read_weighted_score``)."""

    fmt: VerdictFormat
    criteria: Sequence[str] = ()

    def read(self, text: str, logprobs: Logprobs = None) -> Reading[Score]:
        try:
            if self.fmt.weighted:
                score = read_weighted_score(text, logprobs, self.fmt, self.criteria)
            else:
                score = read_score(text, self.fmt, self.criteria)
        except ScoreParseError as exc:
            raise Unreadable(str(exc)) from None
        return Reading(score, score.reasoning)


@dataclass(frozen=True, slots=True)
class LabelReader:
    """A persona judge's correct/incorrect label (``replies.parse_judge_reply``)."""

    def read(self, text: str, logprobs: Logprobs = None) -> Reading[JudgeVerdict]:
        verdict = parse_judge_reply(text)
        if verdict is None:
            raise Unreadable("the judge's reply could not be read as a label")
        return Reading(verdict, verdict.reasoning)


@dataclass(slots=True)  # not frozen: made per judge call, twice as fast
class JudgeRequest:
    """One judge call: what the gateway is asked, and how often an unreadable reply is
    asked again (``retries``; each retry bypasses the cache, or at temperature 0 it would
    hand back the same reply, and carries its own ``call_key`` for the simulator)."""

    model_id: int
    messages: Sequence[Mapping[str, str]]
    purpose: str
    json_schema: Mapping[str, Any] | None = None
    schema_name: str = "verdict"
    temperature: float | None = None
    max_tokens: int | None = None
    top_logprobs: int | None = None  # ask for token log probabilities (a logprobs reader)
    context: Mapping[str, Any] | None = None  # the simulator's view of the task
    related: Mapping[str, Any] | None = None  # ids stored with the accounting row
    use_cache: bool | None = None
    retries: int = 0
    # Characters at the start of the messages that every call of the session shares
    # (``prompts.static_prefix_chars``): the provider's prompt cache may keep them.
    cache_prefix: int = 0

    def retry(self, attempt: int) -> JudgeRequest:
        """The request that asks again after ``attempt`` unreadable replies."""
        context = dict(self.context or {})
        key = context.get("call_key")
        context["call_key"] = attempt if key is None else f"{key}:{attempt}"
        return dataclasses.replace(self, context=context, use_cache=False)

    def chat_arguments(self) -> dict[str, Any]:
        """The gateway's keyword arguments (``LLMService.chat``), not copied: a worker
        sends one per comparison."""
        return {name: getattr(self, name) for name in _CHAT_ARGUMENTS}

    def to_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(JudgeRequest)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JudgeRequest:
        return cls(**data)


_CHAT_ARGUMENTS = tuple(f.name for f in dataclasses.fields(JudgeRequest) if f.name != "retries")


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(slots=True)  # not frozen: made per judge call, twice as fast
class JudgeResult(Generic[V]):
    """How one judge call ended, with what every caller stores.

    ``verdict`` is set when the reply was read, ``parse_error`` when it was not (after the
    request's retries), ``error`` when the call itself failed (``failure`` keeps the
    exception, for callers that raise it). ``raw`` is the last reply's text (None: no
    reply). Usage adds up every call made (``calls``)."""

    verdict: V | None = None
    reasoning: str | None = None
    note: str | None = None
    parse_error: str | None = None
    raw: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float | None = None
    cache_hit: bool = False
    calls: int = 0
    # Of input_tokens: read from the provider's prompt cache, and written to it.
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    error: str | None = None
    failure: BaseException | None = field(default=None, compare=False, repr=False)

    def then(self, later: JudgeResult[V]) -> JudgeResult[V]:
        """``later`` (a retry) with this call's usage added to its own."""
        return dataclasses.replace(
            later,
            input_tokens=self.input_tokens + later.input_tokens,
            output_tokens=self.output_tokens + later.output_tokens,
            cached_input_tokens=self.cached_input_tokens + later.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + later.cache_write_tokens,
            cost_usd=self.cost_usd + later.cost_usd,
            latency_s=_add(self.latency_s, later.latency_s),
            calls=self.calls + later.calls,
        )


def _add(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


_READING = ("verdict", "reasoning", "note")  # Reading's fields, as a result carries them


def read_reply(
    reader: Reader[V],
    text: str,
    *,
    logprobs: Logprobs = None,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cost_usd: float = 0.0,
    latency_s: float | None = None,
    cache_hit: bool = False,
    cached_input_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> JudgeResult[V]:
    """One reply read by ``reader``: the reading step of a judge call, apart from the
    sending (a batch transport reads its replies when they arrive)."""
    usage = {
        "raw": text,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": cost_usd,
        "latency_s": latency_s,
        "cache_hit": cache_hit,
        "calls": 1,
        "cached_input_tokens": cached_input_tokens,
        "cache_write_tokens": cache_write_tokens,
    }
    try:
        reading = reader.read(text, logprobs)
    except Unreadable as exc:
        return JudgeResult(parse_error=str(exc), **usage)
    return JudgeResult(**{name: getattr(reading, name) for name in _READING}, **usage)
