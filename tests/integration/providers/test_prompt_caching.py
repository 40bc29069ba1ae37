"""Prompt caching against the fake OpenAI and Anthropic servers: the judge prompt's shared
part goes first (OpenAI caches a prompt's prefix by itself) and is marked for Anthropic
(``cache_control``); the cached tokens each reports are read, accounted and priced."""

from __future__ import annotations

from typing import Any

import pytest

from llmjudge.core.judging.prompts import build_judge_messages, static_prefix_chars
from llmjudge.providers.base import ChatRequest, ModelPricing, ProviderConfig
from llmjudge.providers.gateway import CallRecord, Gateway
from llmjudge.providers.store import call_row
from tests.fakes.servers import FAKES, FakeProvider, FakeState

# A long rubric: the shared part of the prompt is well over the fakes' cache minimum.
CRITERIA = tuple(f"criterion_{i}_with_a_long_name" for i in range(40))
MIN_TOKENS = 128  # more than the built-in system prompt alone
STEP = 16
PAIRS = (("The first answer, short.", "The second answer."), ("Another one.", "And its rival."))


class Records:
    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    async def record(self, rec: CallRecord) -> None:
        self.records.append(rec)


def messages(a: str, b: str, template: str | None = None) -> list[dict[str, str]]:
    return build_judge_messages(content_a=a, content_b=b, criteria=CRITERIA, template=template)


async def judge_twice(
    fake: FakeProvider, pricing: ModelPricing, stream: bool, template: str | None = None
) -> tuple[Gateway, Records]:
    records = Records()
    gateway = Gateway(accounting=records)
    gateway.register(
        ProviderConfig(1, "fake", fake.kind, base_url=fake.base_url, api_key="test-key")
    )
    prefix = static_prefix_chars(CRITERIA, template)
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    for a, b in PAIRS:
        req = ChatRequest("judge", messages(a, b, template), max_tokens=50, cache_prefix=prefix)
        await gateway.chat(1, req, pricing=pricing, on_delta=on_delta if stream else None)
    await gateway.aclose()
    return gateway, records


def words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_cached_tokens_are_read_accounted_and_priced(stream: bool) -> None:
    pricing = ModelPricing.of("openai", 2.0, 8.0)  # cached input at the default 0.5x: 1.0
    async with FAKES["openai"](
        FakeState(cache_min_tokens=MIN_TOKENS, cache_step_tokens=STEP)
    ) as fake:
        _, records = await judge_twice(fake, pricing, stream)
    first, second = records.records
    assert first.cached_input_tokens == 0 and first.cache_saving_usd == 0
    # the second prompt shares the system prompt, rubric and instructions: all of them,
    # to the fake's 16-token step, come from the cache
    full = "".join(m["content"] for m in messages(*PAIRS[1]))
    shared = words(full[: static_prefix_chars(CRITERIA)])
    assert shared >= MIN_TOKENS
    assert second.cached_input_tokens == shared // STEP * STEP
    assert second.input_tokens > second.cached_input_tokens and second.cache_write_tokens == 0
    fresh = second.input_tokens - second.cached_input_tokens
    assert second.cost_usd == pytest.approx(
        (fresh * 2.0 + second.cached_input_tokens * 1.0 + second.output_tokens * 8.0) / 1e6
    )
    assert second.cache_saving_usd == pytest.approx(second.cached_input_tokens * 1.0 / 1e6)
    row = call_row(second)
    assert (row["cached_input_tokens"], row["cache_write_tokens"]) == (
        second.cached_input_tokens,
        0,
    )


async def test_openai_caches_nothing_when_the_threads_come_first() -> None:
    """Why the shared part goes first: a template that opens with the threads shares no
    prefix long enough to cache."""
    template = "{thread_a}\n\n{thread_b}\n\nCompare them on:\n{criteria}"
    async with FAKES["openai"](
        FakeState(cache_min_tokens=MIN_TOKENS, cache_step_tokens=STEP)
    ) as fake:
        _, records = await judge_twice(fake, ModelPricing.of("openai", 2.0, 8.0), False, template)
    assert [r.cached_input_tokens for r in records.records] == [0, 0]


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_marks_the_shared_part_and_prices_cache_reads_and_writes(
    stream: bool,
) -> None:
    # defaults: a cache read at 0.1x the input price, a write at 1.25x
    pricing = ModelPricing.of("anthropic", 3.0, 15.0)
    async with FAKES["anthropic"](FakeState(cache_min_tokens=MIN_TOKENS)) as fake:
        _, records = await judge_twice(fake, pricing, stream)
        bodies = [r.body for r in fake.state.requests]
    prefix = static_prefix_chars(CRITERIA)
    for body, (a, b) in zip(bodies, PAIRS, strict=True):
        system, user = messages(a, b)
        assert body["system"] == system["content"]
        head, rest = body["messages"][0]["content"]
        assert head == {
            "type": "text",
            "text": user["content"][: prefix - len(system["content"])],
            "cache_control": {"type": "ephemeral"},
        }
        assert rest == {"type": "text", "text": user["content"][len(head["text"]) :]}
        assert "cache_control" not in rest and "<thread_a>\n" in rest["text"]
    first, second = records.records
    cached = words(system["content"] + head["text"])
    assert (first.cache_write_tokens, first.cached_input_tokens) == (cached, 0)
    assert (second.cache_write_tokens, second.cached_input_tokens) == (0, cached)
    for rec, (a, b) in zip(records.records, PAIRS, strict=True):
        # input_tokens is the whole prompt, as for OpenAI (Anthropic reports the rest)
        sent = messages(a, b)
        assert rec.input_tokens == sum(words(m["content"]) for m in sent)
    fresh = second.input_tokens - cached
    assert first.cost_usd == pytest.approx(
        ((first.input_tokens - cached) * 3.0 + cached * 3.75 + first.output_tokens * 15.0) / 1e6
    )
    assert second.cost_usd == pytest.approx(
        (fresh * 3.0 + cached * 0.3 + second.output_tokens * 15.0) / 1e6
    )
    assert first.cache_saving_usd == pytest.approx(-cached * 0.75 / 1e6)
    assert second.cache_saving_usd == pytest.approx(cached * 2.7 / 1e6)


async def test_anthropic_fake_refuses_a_malformed_cache_marker() -> None:
    """The fake checks the marker as the real API does, so the marking test can fail."""
    body: dict[str, Any] = {
        "model": "judge",
        "max_tokens": 10,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "forever"}}],
            }
        ],
    }
    import httpx

    async with FAKES["anthropic"]() as fake:
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{fake.base_url}/v1/messages", json=body, headers={"x-api-key": "test-key"}
            )
    assert response.status_code == 400 and "cache_control" in response.text


def test_a_prompt_without_a_shared_part_is_not_marked() -> None:
    from llmjudge.providers.anthropic import split_system

    system, turns = split_system([{"role": "user", "content": "hello"}])
    assert system == "" and turns == [{"role": "user", "content": "hello"}]
    system, turns = split_system(
        [{"role": "system", "content": "rules"}, {"role": "user", "content": "hello"}], 5
    )
    assert system == [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}]
    assert turns == [{"role": "user", "content": "hello"}]
