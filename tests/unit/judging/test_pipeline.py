"""The judge-call pipeline against a fake gateway: retries of unreadable replies, usage
over retries, failures kept, the request as plain data, the reading apart from the
sending, and the two readers. No database."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.judging import (
    Gateway,
    JudgeRequest,
    JudgeResult,
    LabelReader,
    Logprobs,
    PairwiseReader,
    Reading,
    Unreadable,
    judge_call,
    read_reply,
)
from llmjudge.providers.base import ChatResult, ProviderError

LABEL = json.dumps({"label": "correct", "reasoning": "matches", "confidence": 0.9})
VERDICT = json.dumps({"winner": "A", "confidence": 0.7, "reasoning": "A is clearer"})


class FakeGateway:
    def __init__(
        self,
        *answers: str | BaseException,
        cached: bool = False,
        prompt_cache: tuple[int, int] = (0, 0),
    ) -> None:
        self.answers = list(answers)
        self.cached = cached
        self.prompt_cache = prompt_cache  # input tokens (read from, written to) the cache
        self.calls: list[dict[str, Any]] = []

    async def chat(self, **kw: Any) -> ChatResult:
        self.calls.append(kw)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        read, written = self.prompt_cache
        return ChatResult(
            answer,
            100,
            10,
            False,
            0.5,
            1,
            cached=self.cached,
            cached_input_tokens=read,
            cache_write_tokens=written,
        )


def request(**kw: Any) -> JudgeRequest:
    base: dict[str, Any] = {
        "model_id": 3,
        "messages": [{"role": "user", "content": "judge this"}],
        "purpose": "persona_judge",
        "context": {"task": "judge_label"},
    }
    return JudgeRequest(**(base | kw))


def price(input_tokens: int, output_tokens: int, cached: int = 0, written: int = 0) -> float:
    return input_tokens * 1e-3 + output_tokens * 1e-2 - cached * 5e-4 + written * 2e-4


async def test_an_unreadable_reply_is_asked_again_fresh_and_the_usage_adds_up() -> None:
    llm = FakeGateway("no idea", LABEL)
    result = await judge_call(Gateway(llm), request(retries=1), LabelReader(), cost=price)
    assert result.verdict is not None and result.verdict.label == "correct"
    assert result.reasoning == "matches" and result.parse_error is None and result.raw == LABEL
    assert (result.calls, result.input_tokens, result.output_tokens) == (2, 200, 20)
    assert result.cost_usd == pytest.approx(2 * price(100, 10))
    assert result.latency_s == pytest.approx(1.0)
    first, retry = llm.calls
    # the retry bypasses the cache (it would hand back the same reply) and has its own key
    assert first["use_cache"] is None and "call_key" not in first["context"]
    assert retry["use_cache"] is False and retry["context"]["call_key"] == 1
    assert retry["messages"] == first["messages"] and "retries" not in retry


async def test_prompt_cache_tokens_reach_the_cost_and_add_up_over_retries() -> None:
    llm = FakeGateway("no idea", LABEL, prompt_cache=(64, 8))
    request_ = request(retries=1, cache_prefix=120)
    result = await judge_call(Gateway(llm), request_, LabelReader(), cost=price)
    assert (result.cached_input_tokens, result.cache_write_tokens) == (128, 16)
    assert result.cost_usd == pytest.approx(2 * price(100, 10, 64, 8))
    assert [c["cache_prefix"] for c in llm.calls] == [120, 120]


async def test_a_response_cache_hit_reports_no_prompt_cache_tokens() -> None:
    llm = FakeGateway(LABEL, cached=True, prompt_cache=(64, 8))
    result = await judge_call(Gateway(llm), request(), LabelReader(), cost=price)
    assert result.cost_usd == 0.0 and result.cache_hit
    assert (result.cached_input_tokens, result.cache_write_tokens) == (0, 0)


async def test_without_retries_an_unreadable_reply_is_a_parse_error() -> None:
    llm = FakeGateway("no idea")
    result = await judge_call(Gateway(llm), request(), LabelReader())
    assert result.verdict is None and result.raw == "no idea" and result.calls == 1
    assert result.parse_error == "the judge's reply could not be read as a label"


async def test_a_retry_keeps_the_call_key_it_was_given() -> None:
    llm = FakeGateway("?", "?", "?")
    await judge_call(Gateway(llm), request(retries=2, context={"call_key": "7:3:1"}), LabelReader())
    assert [c["context"]["call_key"] for c in llm.calls] == ["7:3:1", "7:3:1:1", "7:3:1:2"]


async def test_a_failed_call_is_kept_with_the_spend_before_it() -> None:
    down = ProviderError("p", "http", "bad request (400)")
    llm = FakeGateway("?", down)
    result = await judge_call(Gateway(llm), request(retries=1), LabelReader(), cost=price)
    assert result.error == "bad request (400)" and result.failure is down
    assert result.verdict is None and result.calls == 1 and result.input_tokens == 100
    bug = await judge_call(Gateway(FakeGateway(KeyError("x"))), request(), LabelReader())
    assert bug.error == "KeyError: 'x'" and isinstance(bug.failure, KeyError)


async def test_cancellation_is_not_a_failure() -> None:
    with pytest.raises(asyncio.CancelledError):
        await judge_call(Gateway(FakeGateway(asyncio.CancelledError())), request(), LabelReader())


async def test_a_cached_reply_costs_nothing() -> None:
    llm = FakeGateway(LABEL, cached=True)
    result = await judge_call(Gateway(llm), request(), LabelReader(), cost=price)
    assert result.cache_hit and result.cost_usd == 0.0 and result.input_tokens == 100


def test_the_request_is_plain_data() -> None:
    req = request(json_schema={"type": "object"}, temperature=0.0, retries=1)
    data = req.to_json()
    assert json.loads(json.dumps(data)) == data  # a batch transport can store it
    assert JudgeRequest.from_json(data).to_json() == data
    assert set(req.chat_arguments()) == set(data) - {"retries"}


def test_reading_is_a_step_of_its_own() -> None:
    reader = PairwiseReader(VerdictFormat())
    result: JudgeResult[Any] = read_reply(reader, VERDICT, input_tokens=5, cost_usd=0.1)
    assert result.verdict.winner == "A" and result.reasoning == "A is clearer"
    assert (result.calls, result.input_tokens, result.cost_usd) == (1, 5, 0.1)
    unread = read_reply(reader, "I cannot decide")
    assert unread.verdict is None and unread.parse_error and unread.raw == "I cannot decide"


def test_a_format_that_counts_an_unreadable_reply_as_a_tie_says_why() -> None:
    fmt = VerdictFormat.model_validate({"kind": "tags", "on_unparsed": "tie"})
    reading = PairwiseReader(fmt).read("no tags at all")
    assert reading.verdict.winner == "TIE" and reading.note
    with pytest.raises(Unreadable):
        PairwiseReader(VerdictFormat()).read("no JSON here")


def test_a_new_verdict_kind_is_one_reader() -> None:
    class Probability:
        def read(self, text: str, logprobs: Logprobs = None) -> Reading[float]:
            try:
                return Reading(float(text))
            except ValueError:
                raise Unreadable("not a probability") from None

    assert read_reply(Probability(), "0.25").verdict == 0.25
    assert read_reply(Probability(), "maybe").parse_error == "not a probability"


def test_a_batch_call_costs_the_live_price_less_the_batch_discount() -> None:
    from llmjudge.judging import at_batch_price
    from llmjudge.providers import BATCH_DISCOUNT, ModelPricing

    live = ModelPricing(3.0, 15.0).cost
    batch = at_batch_price(live, BATCH_DISCOUNT)
    assert BATCH_DISCOUNT == 0.5  # the published OpenAI and Anthropic discount
    for tokens in ((1000, 200), (0, 0), (123_456, 7_890)):
        assert batch(*tokens) == pytest.approx(0.5 * live(*tokens))
    assert at_batch_price(live, 0.0)(1000, 200) == live(1000, 200)
