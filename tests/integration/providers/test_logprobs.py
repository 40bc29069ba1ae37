"""Token log probabilities over the OpenAI wire format: asked with ``logprobs`` and
``top_logprobs``, returned plain and streamed, kept through the response cache (under
a key of their own)."""

from __future__ import annotations

import json
import math
from typing import Any

from llmjudge.providers.base import ChatRequest, ChatResult, ProviderConfig
from llmjudge.providers.gateway import Gateway, cache_key
from llmjudge.providers.registry import make_client
from llmjudge.providers.store import result_from_json, result_to_json
from tests.fakes.servers import FakeOpenAI

USER = {"role": "user", "content": "Which output is better? Answer m or M."}
GENERATED = [
    ("M", math.log(0.7), [("M", math.log(0.7)), ("m", math.log(0.25)), ("The", math.log(0.02))])
]


class JsonCache:
    """Stores what ``PgCache`` stores: the reply as JSON (logprobs come back as lists)."""

    def __init__(self) -> None:
        self.entries: dict[str, str] = {}

    async def get(self, key: str) -> ChatResult | None:
        data = self.entries.get(key)
        return None if data is None else result_from_json(json.loads(data))

    async def put(self, key: str, result: ChatResult) -> None:
        self.entries[key] = json.dumps(result_to_json(result))


def config(fake: FakeOpenAI) -> ProviderConfig:
    return ProviderConfig(1, "fake", "openai", base_url=fake.base_url, api_key="test-key")


def tokens(body: dict[str, Any]) -> list[Any]:
    return GENERATED


async def test_logprobs_are_asked_for_and_returned_plain_and_streamed() -> None:
    async with FakeOpenAI() as fake:
        fake.state.tokens = tokens
        client = make_client(config(fake))
        try:
            req = ChatRequest(model="judge", messages=[USER], temperature=0, top_logprobs=2)
            plain = await client.chat(req)
            streamed_text: list[str] = []

            async def on_delta(text: str) -> None:
                streamed_text.append(text)

            streamed = await client.chat(req, on_delta)
            without = await client.chat(ChatRequest(model="judge", messages=[USER]))
        finally:
            await client.aclose()
    sent = fake.state.requests[0].body
    assert sent["logprobs"] is True and sent["top_logprobs"] == 2
    assert "logprobs" not in fake.state.requests[2].body
    expected = (("M", math.log(0.7), (("M", math.log(0.7)), ("m", math.log(0.25)))),)
    assert plain.text == "M" and plain.logprobs == expected
    assert streamed.logprobs == expected and "".join(streamed_text) == "M"
    assert without.logprobs is None


async def test_cached_replies_keep_their_logprobs_under_their_own_key() -> None:
    async with FakeOpenAI() as fake:
        fake.state.tokens = tokens
        cfg = config(fake)
        gateway = Gateway(cache=JsonCache())
        gateway.register(cfg)
        try:
            req = ChatRequest(model="judge", messages=[USER], temperature=0, top_logprobs=3)
            first = await gateway.chat(1, req)
            again = await gateway.chat(1, req)
        finally:
            await gateway.aclose()
    assert fake.state.count == 1 and again.cached
    assert first.logprobs is not None and again.logprobs is not None
    assert json.dumps(again.logprobs) == json.dumps(first.logprobs)
    assert len(again.logprobs[0][2]) == 3
    plain = ChatRequest(model="judge", messages=[USER], temperature=0)
    assert cache_key(cfg, req) != cache_key(cfg, plain)
