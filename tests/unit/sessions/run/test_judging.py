"""Judging one comparison against a fake model: verdicts, parse errors, provider errors,
attempt limits, streaming and the simulator context. No database."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from llmjudge.core.judging.prompts import static_prefix_chars
from llmjudge.providers.base import ChatResult, DeltaCallback, ModelPricing, ProviderError
from llmjudge.sessions.run.claims import Claimed
from llmjudge.sessions.run.judging import MAX_ATTEMPTS, SessionConfig, ThreadCache, ThreadData
from llmjudge.sessions.run.panel_judging import judge_comparison

CRITERIA = ("quality", "empathy")
GOOD = json.dumps(
    {
        "winner": "B",
        "confidence": 0.8,
        "scores": {"A": {"quality": 2, "empathy": 3}, "B": {"quality": 5, "empathy": 4}},
        "reasoning": "B is clearer.",
    }
)


class FakeLLM:
    def __init__(
        self,
        answer: str | Exception,
        *,
        cached: bool = False,
        prompt_cache: tuple[int, int] = (0, 0),
    ) -> None:
        self.answer = answer
        self.cached = cached
        self.prompt_cache = prompt_cache  # (read, written) input tokens
        self.calls: list[dict[str, Any]] = []

    async def chat(self, *, on_delta: DeltaCallback = None, **kw: Any) -> ChatResult:
        self.calls.append(kw)
        if isinstance(self.answer, Exception):
            raise self.answer
        if on_delta is not None:
            for i in range(0, len(self.answer), 5):
                await on_delta(self.answer[i : i + 5])
        return ChatResult(
            text=self.answer,
            input_tokens=1000,
            output_tokens=200,
            usage_estimated=False,
            latency_s=0.5,
            attempts=1,
            cached=self.cached,
            cached_input_tokens=self.prompt_cache[0],
            cache_write_tokens=self.prompt_cache[1],
        )


def item(attempts: int = 1, repetition: int = 0) -> Claimed:
    return Claimed(
        id=42,
        session_id=7,
        queue_position=3,
        thread_a_id=1,
        thread_b_id=2,
        pillar_a_id=10,
        pillar_b_id=20,
        repetition=repetition,
        swap_group=0,
        is_swap=False,
        attempts=attempts,
        worker_id="host:1:0",
    )


CONFIG = SessionConfig(
    id=7,
    criteria=CRITERIA,
    prompt_template=None,
    judge_model_id=5,
    pricing=ModelPricing.of("anthropic", 3.0, 15.0),
)


@pytest.fixture
def threads() -> ThreadCache:
    cache = ThreadCache()
    cache.put(ThreadData(1, 10, "first", "Hello there", 1.5))
    cache.put(ThreadData(2, 20, "", [{"role": "user", "content": "Hi"}], None))
    return cache


async def test_a_verdict_completes_with_usage_and_cost(threads: ThreadCache) -> None:
    llm = FakeLLM(GOOD)
    events: list[tuple[str, str, dict]] = []
    f = await judge_comparison(
        llm=llm,
        item=item(),
        config=CONFIG,
        threads=threads,
        publish=lambda *e: events.append(e),
        stream_interval_s=0,
    )
    assert f.status == "completed" and f.answer.winner == "B" and f.answer.confidence == 0.8
    assert f.answer.scores_a == {"quality": 2, "empathy": 3}
    assert (f.answer.input_tokens, f.answer.output_tokens) == (1000, 200)
    assert f.answer.cost_usd == pytest.approx((1000 * 3 + 200 * 15) / 1e6)
    assert (f.id, f.worker_id, f.attempts) == (42, "host:1:0", 1)
    assert f.answer.raw_response == GOOD and f.parse_error is None
    # the single judge is member 0 of a panel of one: its vote is the comparison's answer
    # (stored as its vote row from the comparison row, votes.store_solo_votes)
    assert f.answer.member == 0 and f.answer.status == "voted" and f.answer.model_id == 5
    assert f.votes == () and f.votes_asked is None and f.votes_cast is None
    types = [e[1] for e in events]
    assert types[0] == "comparison_start" and "llm_stream" in types
    assert all(e[0] == "session:7" for e in events)
    # the lanes name the threads from the start event: the title, or none when untitled
    start = events[0][2]
    titles = {
        start["thread_a_id"]: start["thread_a_title"],
        start["thread_b_id"]: start["thread_b_title"],
    }
    assert titles == {1: "first", 2: None}
    streamed = "".join(e[2]["text"] for e in events if e[1] == "llm_stream")
    assert streamed == GOOD


async def test_the_call_carries_the_simulator_context(threads: ThreadCache) -> None:
    llm = FakeLLM(GOOD)
    await judge_comparison(llm=llm, item=item(), config=CONFIG, threads=threads)
    call = llm.calls[0]
    ctx = call["context"]
    assert ctx["task"] == "pairwise"
    assert ctx["thread_a"] == {"id": 1, "quality": 1.5, "pillar_id": 10}
    assert ctx["thread_b"] == {"id": 2, "quality": None, "pillar_id": 20}
    assert ctx["criteria"] == list(CRITERIA)
    assert call["purpose"] == "judge" and call["model_id"] == 5
    assert call["related"] == {"session_id": 7, "comparison_id": 42}
    assert set(call["json_schema"]["properties"]["scores"]["properties"]["A"]["required"]) == set(
        CRITERIA
    )
    assert "<thread_a>" in call["messages"][1]["content"]
    assert call["use_cache"] is None


@pytest.mark.parametrize(("attempts", "repetition"), [(2, 0), (1, 1)])
async def test_retries_and_repetitions_bypass_the_cache(
    threads: ThreadCache, attempts: int, repetition: int
) -> None:
    llm = FakeLLM(GOOD)
    await judge_comparison(llm=llm, item=item(attempts, repetition), config=CONFIG, threads=threads)
    assert llm.calls[0]["use_cache"] is False


async def test_the_static_prompt_prefix_is_offered_to_the_cache_and_cached_tokens_priced(
    threads: ThreadCache,
) -> None:
    # Anthropic's default cache prices: reads 0.1x the input price, writes 1.25x.
    llm = FakeLLM(GOOD, prompt_cache=(600, 100))
    f = await judge_comparison(llm=llm, item=item(), config=CONFIG, threads=threads)
    assert f.status == "completed"
    prefix = llm.calls[0]["cache_prefix"]
    assert prefix == static_prefix_chars(CONFIG.criteria) > 0
    text = "".join(m["content"] for m in llm.calls[0]["messages"])
    # the shared part ends where the first thread's fence opens
    assert text.index("<thread_a>\n") >= prefix and text[prefix:].lstrip().startswith("<thread_a>")
    assert f.answer.cost_usd == pytest.approx((300 * 3 + 600 * 0.3 + 100 * 3.75 + 200 * 15) / 1e6)


async def test_cached_answers_cost_nothing(threads: ThreadCache) -> None:
    f = await judge_comparison(
        llm=FakeLLM(GOOD, cached=True), item=item(), config=CONFIG, threads=threads
    )
    assert f.answer.cache_hit and f.answer.cost_usd == 0.0


@pytest.mark.parametrize(("attempts", "status"), [(1, "pending"), (MAX_ATTEMPTS, "failed")])
async def test_unparseable_answer_is_recorded_never_guessed(
    threads: ThreadCache, attempts: int, status: str
) -> None:
    f = await judge_comparison(
        llm=FakeLLM('{"winner": "A", "confid'), item=item(attempts), config=CONFIG, threads=threads
    )
    assert f.status == status
    assert f.answer.winner is None and f.parse_error
    assert f.answer.raw_response == '{"winner": "A", "confid'
    assert f.answer.input_tokens == 1000  # the spent attempt is still accounted


@pytest.mark.parametrize(("attempts", "status"), [(1, "pending"), (MAX_ATTEMPTS, "failed")])
async def test_provider_errors_retry_then_fail(
    threads: ThreadCache, attempts: int, status: str
) -> None:
    err = ProviderError("p", "openai", "bad request (400)", status=400)
    f = await judge_comparison(
        llm=FakeLLM(err), item=item(attempts), config=CONFIG, threads=threads
    )
    assert f.status == status and f.error == "bad request (400)" and f.answer.winner is None


async def test_unexpected_errors_do_not_escape(threads: ThreadCache) -> None:
    f = await judge_comparison(
        llm=FakeLLM(LookupError("model 5 not found")), item=item(), config=CONFIG, threads=threads
    )
    assert f.status == "pending" and "model 5 not found" in (f.error or "")


async def test_an_item_abandoned_too_often_fails_without_a_call(threads: ThreadCache) -> None:
    llm = FakeLLM(GOOD)
    f = await judge_comparison(llm=llm, item=item(MAX_ATTEMPTS + 1), config=CONFIG, threads=threads)
    assert f.status == "failed" and "abandoned" in (f.error or "")
    assert llm.calls == []


@pytest.mark.parametrize(
    ("config", "cache", "message"),
    [
        (SessionConfig(7, CRITERIA, None, None), None, "judge model"),
        (CONFIG, ThreadCache(), "deleted"),
    ],
)
async def test_missing_model_or_thread_fails_at_once(
    threads: ThreadCache, config: SessionConfig, cache: ThreadCache | None, message: str
) -> None:
    llm = FakeLLM(GOOD)
    f = await judge_comparison(
        llm=llm, item=item(), config=config, threads=threads if cache is None else cache
    )
    assert f.status == "failed" and message in (f.error or "")
    assert llm.calls == []


async def test_a_template_is_used(threads: ThreadCache) -> None:
    llm = FakeLLM(GOOD)
    config = SessionConfig(7, CRITERIA, "Which is better?\n{thread_a}\n{thread_b}", 5)
    await judge_comparison(llm=llm, item=item(), config=config, threads=threads)
    assert llm.calls[0]["messages"][1]["content"].startswith("Which is better?")


def test_thread_cache_evicts_the_least_recently_used() -> None:
    cache = ThreadCache(max_bytes=2 * (50 + 1))  # two one-character contents
    for i in (1, 2):
        cache.put(ThreadData(i, 1, "", "x", None))
    assert cache.get(1) is not None  # 1 is now more recent than 2
    cache.put(ThreadData(3, 1, "", "x", None))
    assert cache.get(2) is None and cache.get(1) is not None and len(cache) == 2


async def judge_published(
    llm: FakeLLM,
    threads: ThreadCache,
    events: list[tuple[str, str, dict]],
    wants: Callable[[str, str], bool],
) -> Any:
    """``item()`` judged with its events collected and every text batch flushed at once."""
    return await judge_comparison(
        llm=llm,
        item=item(),
        config=CONFIG,
        threads=threads,
        publish=lambda *e: events.append(e),
        stream_interval_s=0,
        wants_stream=wants,
    )


async def test_a_lane_nobody_follows_asks_for_the_whole_answer(threads: ThreadCache) -> None:
    """Nobody follows the lane as the call starts: the answer is asked for whole (no
    ``on_delta``, so the provider is not asked to stream), read, and nothing is streamed."""
    events: list[tuple[str, str, dict]] = []
    asked: list[tuple[str, str]] = []
    streamed_calls: list[bool] = []

    class Recording(FakeLLM):
        async def chat(self, *, on_delta: DeltaCallback = None, **kw: Any) -> ChatResult:
            streamed_calls.append(on_delta is not None)
            return await super().chat(on_delta=on_delta, **kw)

    def wants(topic: str, lane: str) -> bool:
        asked.append((topic, lane))
        return False

    f = await judge_published(Recording(GOOD), threads, events, wants)
    assert f.status == "completed" and f.answer.winner == "B" and f.answer.raw_response == GOOD
    assert streamed_calls == [False] and asked == [("session:7", "host:1:0")]
    assert [e[1] for e in events] == ["comparison_start"]


async def test_a_followed_stream_asks_at_each_batch(threads: ThreadCache) -> None:
    """A lane followed as the call starts is streamed; each batch asks again, so the
    batches after the viewer left are not published, and the answer is read whole."""
    events: list[tuple[str, str, dict]] = []
    asked: list[tuple[str, str]] = []
    watched = iter([True, True, False])

    def wants(topic: str, lane: str) -> bool:
        asked.append((topic, lane))
        return next(watched, False)

    f = await judge_published(FakeLLM(GOOD), threads, events, wants)
    assert f.status == "completed" and f.answer.winner == "B" and f.answer.raw_response == GOOD
    batches = [e[2]["text"] for e in events if e[1] == "llm_stream"]
    assert batches == [GOOD[:5]]  # the start, the first batch; then the viewer left
    assert len(asked) > 3 and set(asked) == {("session:7", "host:1:0")}
    assert [e[1] for e in events if e[1] != "llm_stream"] == ["comparison_start"]
