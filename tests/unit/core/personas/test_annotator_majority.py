"""The majority of several annotators' labels (pure), and the embed call path of the
gateway (cache, accounting, index order) over the fake OpenAI-compatible server. People's
agreement itself is ``analysis.agreement``'s (tested there against scikit-learn)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.personas.metrics import majority_label
from llmjudge.providers.base import ProviderConfig, ProviderError
from llmjudge.providers.gateway import CallRecord, Gateway, ModelPricing
from tests.fakes.cache import MemoryCache
from tests.fakes.servers import FakeGemini, FakeOpenAI


@given(st.lists(st.booleans(), max_size=9))
def test_majority_label(votes: list[bool]) -> None:
    yes, no = sum(votes), len(votes) - sum(votes)
    assert majority_label(votes) == (None if yes == no else yes > no)


async def test_gateway_embed_caches_accounts_and_orders_by_index() -> None:
    records: list[CallRecord] = []

    class Books:
        async def record(self, rec: CallRecord) -> None:
            records.append(rec)

    async with FakeOpenAI() as fake:
        gw = Gateway(cache=MemoryCache(), accounting=Books())
        cfg = ProviderConfig(
            1, "fake", "openai", base_url=fake.base_url, api_key=fake.state.api_key
        )
        gw.register(cfg)
        texts = ["abc", "hhh", "a"]
        pricing = ModelPricing(input_per_million=1_000_000)
        vectors, cached = await gw.embed(1, "emb", texts, pricing=pricing, purpose="p")
        assert not cached and fake.state.count == 1
        # the fake lists them in reverse: the client orders them by index
        assert vectors == [[t.count(c) + 0.5 for c in "abcdefgh"] for t in texts]
        again, cached = await gw.embed(1, "emb", texts, pricing=pricing, purpose="p")
        assert cached and again == vectors and fake.state.count == 1
        assert [r.cache_hit for r in records] == [False, True]
        assert records[0].input_tokens == 3 and records[0].cost_usd == pytest.approx(3.0)
        assert records[1].cost_usd == 0.0
        assert fake.state.requests[0].path == "/v1/embeddings"
        assert fake.state.requests[0].body == {"model": "emb", "input": texts}
        await gw.aclose()


async def test_ollama_native_embed_route() -> None:
    async with FakeOpenAI() as fake:
        gw = Gateway()
        cfg = ProviderConfig(
            1,
            "ollama",
            "openai",
            base_url=fake.base_url,
            api_key=fake.state.api_key,
            settings={"embed_api": "ollama"},
        )
        gw.register(cfg)
        vectors, _ = await gw.embed(1, "nomic", ["ab", "h"])
        assert vectors == [[1.5, 1.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5], [0.5] * 7 + [1.5]]
        assert fake.state.requests[0].path == "/api/embed"
        await gw.aclose()


async def test_gemini_batch_embed_contents() -> None:
    async with FakeGemini() as fake:
        gw = Gateway()
        gw.register(
            ProviderConfig(1, "g", "gemini", base_url=fake.base_url, api_key=fake.state.api_key)
        )
        vectors, _ = await gw.embed(1, "text-embedding-004", ["ab", "h"])
        assert vectors == [[1.5, 1.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5], [0.5] * 7 + [1.5]]
        request = fake.state.requests[0]
        assert request.path.endswith("/models/text-embedding-004:batchEmbedContents")
        assert request.body["requests"][0]["model"] == "models/text-embedding-004"
        await gw.aclose()


async def test_a_provider_without_embeddings_says_so() -> None:
    from tests.fakes.servers import FakeAnthropic

    async with FakeAnthropic() as fake:
        gw = Gateway()
        gw.register(
            ProviderConfig(1, "a", "anthropic", base_url=fake.base_url, api_key=fake.state.api_key)
        )
        with pytest.raises(ProviderError, match="no embeddings endpoint"):
            await gw.embed(1, "claude", ["x"])
        assert fake.state.count == 0
        await gw.aclose()
