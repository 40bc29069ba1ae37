"""Inter-annotator agreement (pure): Cohen's kappa equals scikit-learn's, Fleiss' kappa
equals its textbook formula and Cohen's pooled-share variant for two raters, majority
labels; and the embed call path of the gateway (cache, accounting, index order) over the
fake OpenAI-compatible server."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score

from llmjudge.personas.metrics import (
    annotator_agreement,
    cohen_kappa,
    fleiss_kappa,
    majority_label,
)
from llmjudge.providers.base import ProviderConfig
from llmjudge.providers.gateway import CallRecord, Gateway, MemoryCache, ModelPricing
from tests.fakes.servers import FakeOpenAI

labels = st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60)


@given(labels)
def test_cohen_kappa_equals_sklearn(pairs: list[tuple[bool, bool]]) -> None:
    a, b = zip(*pairs, strict=True)
    ours = cohen_kappa(a, b)
    if len(set(a) | set(b)) == 1:
        assert ours == 0.0  # undefined: one class only
    else:
        theirs = cohen_kappa_score(a, b)
        assert ours == pytest.approx(0.0 if np.isnan(theirs) else theirs, abs=1e-12)


@given(labels)
def test_fleiss_of_two_raters_uses_pooled_shares(pairs: list[tuple[bool, bool]]) -> None:
    counts = [(int(x) + int(y), 2 - int(x) - int(y)) for x, y in pairs]
    share = sum(c for c, _ in counts) / (2 * len(counts))
    p_e = share**2 + (1 - share) ** 2
    p_o = sum(x == y for x, y in pairs) / len(pairs)
    expected = 0.0 if p_e >= 1 - 1e-12 else (p_o - p_e) / (1 - p_e)
    assert fleiss_kappa(counts) == pytest.approx(expected, abs=1e-12)


def test_fleiss_textbook_example() -> None:
    # Three raters, four items: perfect agreement on two, split 2-1 on two.
    counts = [(3, 0), (0, 3), (2, 1), (1, 2)]
    p_i = [1, 1, 1 / 3, 1 / 3]
    p_bar = sum(p_i) / 4
    p_e = 0.5**2 + 0.5**2
    assert fleiss_kappa(counts) == pytest.approx((p_bar - p_e) / (1 - p_e))
    assert fleiss_kappa([(1, 0), (0, 1)]) == 0.0  # single ratings carry no agreement
    assert fleiss_kappa([]) == 0.0


def test_majority_and_annotator_agreement() -> None:
    assert majority_label([True, True, False]) is True
    assert majority_label([True, False]) is None and majority_label([]) is None
    given_labels = {
        1: {"ann": True, "bob": True, "cy": False},
        2: {"ann": False, "bob": False},
        3: {"ann": True, "cy": True},
        4: {"bob": True},
    }
    a = annotator_agreement(given_labels)
    assert a.annotators == ("ann", "bob", "cy") and a.items == 3
    pairs = {(x, y): (k, n) for x, y, k, n in a.pairwise}
    assert pairs[("ann", "bob")] == (1.0, 2)
    assert pairs[("ann", "cy")][1] == 2 and ("bob", "cy") in pairs


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
