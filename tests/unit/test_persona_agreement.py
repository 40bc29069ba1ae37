"""The majority of several annotators' labels (pure), and the embed call path of the
gateway (cache, accounting, index order) over the fake OpenAI-compatible server. People's
agreement itself is ``analysis.agreement``'s (tested there against scikit-learn)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.personas.metrics import majority_label
from llmjudge.providers.base import ProviderConfig
from llmjudge.providers.gateway import CallRecord, Gateway, MemoryCache, ModelPricing
from tests.fakes.servers import FakeOpenAI


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
