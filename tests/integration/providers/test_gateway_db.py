"""The gateway's database side: encrypted keys, Postgres cache and accounting, the built-in
simulator, provider/model CRUD and the settings page."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import stat
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select, text

from llmjudge.infra.config import Settings
from llmjudge.infra.errors import Invalid
from llmjudge.providers.base import ChatResult, ProviderError
from llmjudge.providers.crypto import KEY_FILE, KeyCipher, SecretKeyError, derive_key
from llmjudge.providers.gateway import CallRecord
from llmjudge.providers.llm import LLMService, ema
from llmjudge.providers.models import LLMCacheEntry, LLMCall, LLMModel, Provider
from llmjudge.providers.pages import PROVIDER_FIELDS, form_values
from llmjudge.providers.service import (
    BUILTIN_SIMULATED_MODELS,
    BUILTIN_SIMULATOR,
    ensure_builtin_simulator,
    totals,
)
from llmjudge.providers.store import PgAccounting, call_row, result_from_json, result_to_json
from tests.fakes.servers import FakeOpenAI, FakeState, fake_tokens

FAKE_KEY = "test-key"  # what the fake server accepts
SECRET_KEY = "sk-live-ZX9q7Rk2mP4vT8wLbN3cYd6H"
NEW_SECRET_KEY = "sk-live-Qa1Ws2Ed3Rf4Tg5Yh6Uj7Ik8"
FAST = {"backoff_base_s": 0.01, "backoff_max_s": 0.02}


@pytest.fixture(scope="module")
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(FakeState(api_key=FAKE_KEY)) as server:
        yield server  # type: ignore[misc]


def llm(app: FastAPI) -> LLMService:
    return app.state.llm


async def make_provider(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"kind": "openai", "max_retries": 1, "timeout_s": 5, "settings": FAST, **fields}
    resp = await client.post("/api/providers", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()


async def make_model(client: httpx.AsyncClient, provider_id: int, **fields: Any) -> dict[str, Any]:
    body = {"provider_id": provider_id, "model": "fake-model", **fields}
    resp = await client.post("/api/models", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()


# -- keys ----------------------------------------------------------------------------------------


async def dump_database(db) -> str:
    """Every row of every table in the public schema, as text (bytea shows as hex)."""
    tables = (
        await db.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
    ).scalars()
    parts = []
    for table in tables:
        rows = await db.execute(text(f'SELECT t::text FROM "{table}" t'))  # noqa: S608
        parts.extend(r for (r,) in rows)
    return "\n".join(parts)


async def test_api_key_never_stored_or_returned_in_plain_text(client, db, fake, app) -> None:
    created = await client.post(
        "/api/providers",
        json={
            "name": "Secretive",
            "kind": "openai",
            "base_url": fake.base_url,
            "api_key": SECRET_KEY,
        },
    )
    assert created.status_code == 201
    pid = created.json()["id"]
    assert created.json()["api_key_set"] is True
    assert created.json()["api_key_last4"] == SECRET_KEY[-4:]
    await make_model(client, pid, name="secretive-model")
    responses = [
        created,
        await client.get("/api/providers"),
        await client.get(f"/api/providers/{pid}"),
        await client.post(f"/api/providers/{pid}/test", json={}),
        await client.get("/settings/providers"),
    ]
    patched = await client.patch(f"/api/providers/{pid}", json={"api_key": NEW_SECRET_KEY})
    assert patched.json()["api_key_last4"] == NEW_SECRET_KEY[-4:]
    responses += [patched, await client.get("/settings/providers")]
    # A rejected request carrying a key must not echo it either.
    rejected = await client.post(
        "/api/providers", json={"name": "Bad", "kind": "bogus", "api_key": SECRET_KEY}
    )
    assert rejected.status_code == 422
    responses.append(rejected)
    for resp in responses:
        for key in (SECRET_KEY, NEW_SECRET_KEY):
            assert key not in resp.text
            assert key[:-4] not in resp.text
    assert f"••••{NEW_SECRET_KEY[-4:]}" in responses[-2].text

    await llm(app).flush()
    dump = await dump_database(db)
    assert "Secretive" in dump  # the dump does see the providers table
    for key in (SECRET_KEY, NEW_SECRET_KEY):
        assert key not in dump
        assert key.encode().hex() not in dump
    token = await db.scalar(select(Provider.api_key_encrypted).where(Provider.id == pid))
    assert KeyCipher(app.state.settings).decrypt(token, provider="Secretive") == NEW_SECRET_KEY
    key_file = app.state.settings.data_dir / KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


async def test_wrong_secret_gives_a_clear_error(client, app, fake) -> None:
    p = await make_provider(client, name="Locked", base_url=fake.base_url, api_key=FAKE_KEY)
    m = await make_model(client, p["id"], name="locked-model")
    other = Settings(
        database_url=app.state.settings.database_url,
        data_dir=app.state.settings.data_dir,
        secret_key="a different secret",
    )
    service = LLMService(app.state.sessionmaker, other)
    try:
        with pytest.raises(ProviderError) as err:
            await service.chat(
                model_id=m["id"], messages=[{"role": "user", "content": "hi"}], purpose="t"
            )
    finally:
        await service.aclose()
    assert "cannot decrypt API key for provider Locked: LLMJUDGE_SECRET_KEY changed?" in str(
        err.value
    )


def test_secret_key_setting_derives_a_stable_key(tmp_path) -> None:
    settings = Settings(database_url="x", data_dir=tmp_path, secret_key="s3cret")
    token = KeyCipher(settings).encrypt("abc")
    assert KeyCipher(settings).decrypt(token, provider="p") == "abc"
    assert derive_key("s3cret") == derive_key("s3cret") != derive_key("s3cret!")
    assert not (tmp_path / KEY_FILE).exists()  # the secret, not a file, was used
    with pytest.raises(SecretKeyError, match="provider p"):
        KeyCipher(Settings(database_url="x", data_dir=tmp_path)).decrypt(token, provider="p")


def test_key_file_is_created_private_in_a_new_data_dir(tmp_path) -> None:
    data_dir = tmp_path / "new" / "data"
    cipher = KeyCipher(Settings(database_url="x", data_dir=data_dir))
    token = cipher.encrypt("k")
    path = data_dir / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # Another process with the same data directory reads the same key.
    assert KeyCipher(Settings(database_url="x", data_dir=data_dir)).decrypt(token, provider="p")


# -- cache and accounting ----------------------------------------------------------------------


async def test_identical_temperature_zero_calls_hit_the_postgres_cache(client, app, db, fake):
    p = await make_provider(client, name="Cached", base_url=fake.base_url, api_key=FAKE_KEY)
    m = await make_model(client, p["id"], name="cached-model", input_price_per_million=1.0)
    messages = [{"role": "user", "content": "cache me please"}]
    before = fake.state.count
    first = await llm(app).chat(
        model_id=m["id"], messages=messages, temperature=0, purpose="cache-test"
    )
    second = await llm(app).chat(
        model_id=m["id"], messages=messages, temperature=0, purpose="cache-test"
    )
    assert fake.state.count == before + 1
    assert not first.cached and second.cached
    assert second.text == first.text == "echo: cache me please"
    await llm(app).flush()
    rows = (
        await db.execute(
            select(LLMCall.cache_hit, LLMCall.cost_usd).where(LLMCall.purpose == "cache-test")
        )
    ).all()
    assert sorted(rows) == [(False, pytest.approx(first.input_tokens / 1e6)), (True, 0.0)]
    assert await db.scalar(select(func.sum(LLMCacheEntry.hits))) == 1
    # Not temperature 0: not cached by default.
    await llm(app).chat(model_id=m["id"], messages=messages, temperature=0.7, purpose="x")
    assert fake.state.count == before + 2


async def test_accounting_rows_carry_tokens_cost_and_related_ids(client, app, db, fake) -> None:
    p = await make_provider(client, name="Billed", base_url=fake.base_url, api_key=FAKE_KEY)
    m = await make_model(
        client,
        p["id"],
        name="billed-model",
        input_price_per_million=3.0,
        output_price_per_million=15.0,
    )
    related = {"session_id": 41, "persona_id": 9, "comparison_id": 12345678901, "thread": "t1"}
    results = [
        await llm(app).chat(
            model_id=m["id"],
            messages=[{"role": "user", "content": f"question number {i}"}],
            purpose="judge",
            related=related,
        )
        for i in range(3)
    ]
    await llm(app).chat(
        model_id=m["id"], messages=[{"role": "user", "content": "other"}], purpose="judge"
    )
    await llm(app).flush()
    rows = (await db.scalars(select(LLMCall).where(LLMCall.session_id == 41))).all()
    assert len(rows) == 3
    for row, res in zip(sorted(rows, key=lambda r: r.id), results, strict=True):
        assert row.input_tokens == fake_tokens("question number 0") == res.input_tokens
        assert row.output_tokens == fake_tokens("echo: question number 0")
        assert row.cost_usd == pytest.approx((row.input_tokens * 3 + row.output_tokens * 15) / 1e6)
        assert (row.persona_id, row.comparison_id, row.model_id) == (9, 12345678901, m["id"])
        assert row.related["thread"] == "t1" and row.status == "ok" and row.attempts == 1
    t = await totals(db=db, session_id=41)
    assert t["calls"] == 3
    assert t["input_tokens"] == sum(r.input_tokens for r in rows)
    assert t["output_tokens"] == sum(r.output_tokens for r in rows)
    assert t["cost_usd"] == pytest.approx(sum(r.cost_usd for r in rows))
    assert t["cache_hits"] == 0
    assert (await totals(db=db, persona_id=9))["calls"] == 3
    assert (await totals(db=db))["calls"] > 3
    latency = await db.scalar(select(LLMModel.observed_latency_s).where(LLMModel.id == m["id"]))
    assert latency is not None and 0 < latency < 5


async def test_failed_calls_are_accounted_as_errors(client, app, db, fake) -> None:
    p = await make_provider(client, name="Flaky", base_url=fake.base_url, api_key=FAKE_KEY)
    m = await make_model(client, p["id"], name="flaky-model")
    fake.state.fail_500 = 5
    try:
        with pytest.raises(ProviderError):
            await llm(app).chat(
                model_id=m["id"],
                messages=[{"role": "user", "content": "x"}],
                purpose="flaky",
                related={"session_id": 77},
            )
    finally:
        fake.state.fail_500 = 0
    await llm(app).flush()
    row = await db.scalar(select(LLMCall).where(LLMCall.purpose == "flaky"))
    assert row is not None
    assert (row.status, row.attempts, row.session_id) == ("error", 2, 77)
    assert "server error (500)" in (row.error or "")


async def test_accounting_batches_by_size_and_flushes_on_close(app, db) -> None:
    acc = PgAccounting(app.state.sessionmaker, flush_interval_s=30, batch_size=5)

    def rec(i: int) -> CallRecord:
        return CallRecord(
            purpose="batch",
            provider_id=1,
            model="m",
            input_tokens=i,
            output_tokens=0,
            cost_usd=0.0,
            latency_s=0.0,
            attempts=1,
            cache_hit=False,
            status="ok",
            error=None,
            related={"session_id": 555},
        )

    async def stored() -> int:
        return await db.scalar(select(func.count()).where(LLMCall.session_id == 555)) or 0

    for i in range(3):
        await acc.record(rec(i))
    await asyncio.sleep(0.2)
    assert await stored() == 0  # below the batch size, before the interval: still buffered
    for i in range(3, 6):
        await acc.record(rec(i))
    for _ in range(50):  # the full batch wakes the writer at once
        if await stored() == 6:
            break
        await asyncio.sleep(0.02)
    assert await stored() == 6
    await acc.record(rec(6))
    await acc.aclose()
    assert await stored() == 7


# -- simulator -----------------------------------------------------------------------------------


async def test_builtin_simulator_judges_a_pair_and_is_labelled_simulated(app, db) -> None:
    await ensure_builtin_simulator(db=db)  # already run at start: idempotent
    n = await db.scalar(select(func.count()).where(Provider.name == BUILTIN_SIMULATOR))
    assert n == 1
    names = set(
        await db.scalars(
            select(LLMModel.name)
            .join(Provider, Provider.id == LLMModel.provider_id)
            .where(Provider.name == BUILTIN_SIMULATOR)
        )
    )
    assert names == {name for name, _ in BUILTIN_SIMULATED_MODELS}
    judge_id = await db.scalar(select(LLMModel.id).where(LLMModel.name == "simulated-judge"))
    info = await llm(app).model_info(judge_id)
    assert info.simulated and info.provider_kind == "simulator"
    context = {
        "task": "pairwise",
        "thread_a": {"id": 1, "quality": 3.0},
        "thread_b": {"id": 2, "quality": -3.0},
        "criteria": ["accuracy"],
        "call_key": "c1",
    }
    deltas: list[str] = []

    async def on_delta(chunk: str) -> None:
        deltas.append(chunk)

    result = await llm(app).chat(
        model_id=judge_id,
        messages=[{"role": "user", "content": "Compare A and B"}],
        context=context,
        purpose="simulated-judge-test",
        related={"session_id": 900},
        on_delta=on_delta,
    )
    verdict = json.loads(result.text)
    assert verdict["winner"] == "A"  # a quality gap of 6 beats any noise
    assert set(verdict["scores"]["A"]) == {"accuracy"}
    assert result.model.startswith("simulated:")
    assert "".join(deltas) == result.text
    await llm(app).flush()
    assert (await totals(db=db, session_id=900))["calls"] == 1


# -- CRUD and pages ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "mistral"}, "kind"),
        ({"base_url": "ftp://example.com"}, "base_url"),
        ({"base_url": "javascript:alert(1)"}, "base_url"),
        ({"base_url": "http://user:pw@example.com"}, "base_url"),
        ({"rpm": 0}, "rpm"),
        ({"tpm": -5}, "tpm"),
        ({"max_concurrency": 1025}, "max_concurrency"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"name": "   "}, "name"),
    ],
)
async def test_provider_validation(client, body: dict[str, Any], field: str) -> None:
    resp = await client.post("/api/providers", json={"name": "V", "kind": "openai", **body})
    assert resp.status_code == 422
    assert field in json.dumps(resp.json()["detail"])


async def test_provider_and_model_crud(client, db) -> None:
    p = await make_provider(
        client, name="Crud", max_concurrency=1024, api_key="short", base_url="https://x.test/v1/"
    )
    assert p["max_concurrency"] == 1024 and p["base_url"] == "https://x.test/v1"
    assert p["api_key_set"] and p["api_key_last4"] is None  # too short to show any of it
    dup = await client.post("/api/providers", json={"name": "Crud", "kind": "gemini"})
    assert dup.status_code == 409
    m = await make_model(client, p["id"], name="crud-model", output_price_per_million=2.5)
    assert m["provider_name"] == "Crud" and not m["simulated"]
    for bad in ({"input_price_per_million": -1}, {"provider_id": 999999}, {"context_window": 0}):
        resp = await client.post(
            "/api/models", json={"provider_id": p["id"], "name": "b", "model": "x", **bad}
        )
        assert resp.status_code == 422, bad
    dup_model = await client.post(
        "/api/models", json={"provider_id": p["id"], "name": "crud-model", "model": "y"}
    )
    assert dup_model.status_code == 409
    patched = await client.patch(f"/api/models/{m['id']}", json={"default_temperature": 0.2})
    assert patched.json()["default_temperature"] == 0.2
    assert (await client.patch(f"/api/models/{m['id']}", json={"name": None})).status_code == 422
    cleared = await client.patch(f"/api/providers/{p['id']}", json={"api_key": None, "rpm": 60})
    assert cleared.json()["api_key_set"] is False and cleared.json()["rpm"] == 60
    assert (await client.get(f"/api/providers/{p['id']}")).json()["model_count"] == 1

    assert (await client.delete(f"/api/providers/{p['id']}")).status_code == 204
    assert (await client.get(f"/api/models/{m['id']}")).status_code == 404
    assert (await client.get(f"/api/providers/{p['id']}")).status_code == 404
    assert await db.scalar(select(func.count()).where(LLMModel.provider_id == p["id"])) == 0


async def test_connection_test_names_the_cause(client, fake) -> None:
    bad = await make_provider(
        client, name="Wrong key", base_url=fake.base_url, api_key="not-the-right-key"
    )
    no_model = await client.post(f"/api/providers/{bad['id']}/test", json={})
    assert no_model.status_code == 422
    resp = await client.post(f"/api/providers/{bad['id']}/test", json={"model": "fake-model"})
    assert resp.status_code == 200
    assert resp.json()["ok"] is False
    assert "invalid API key for provider Wrong key" in resp.json()["error"]
    good = await make_provider(client, name="Right key", base_url=fake.base_url, api_key=FAKE_KEY)
    await make_model(client, good["id"], name="right-model")
    ok = (await client.post(f"/api/providers/{good['id']}/test")).json()
    assert ok["ok"] is True and ok["reply"].startswith("echo:") and ok["latency_s"] > 0
    page = await client.post(f"/settings/providers/{bad['id']}/test", data={"model": "m"})
    assert "invalid API key for provider Wrong key" in page.text


async def test_settings_page_lists_and_edits_through_htmx(client) -> None:
    page = await client.get("/settings/providers")
    assert page.status_code == 200
    assert "Simulator" in page.text and "simulated" in page.text and "simulated-judge" in page.text
    htmx = {"HX-Request": "true"}
    form = {
        "name": "Page provider",
        "kind": "anthropic",
        "base_url": "",
        "api_key": "sk-ant-page-key-9876",
        "rpm": "",
        "tpm": "1000",
        "max_concurrency": "8",
        "timeout_s": "30",
        "max_retries": "2",
        "settings": "{}",
    }
    created = await client.post("/settings/providers", data=form, headers=htmx)
    assert created.status_code == 200
    assert 'id="llm-settings"' in created.text and "<html" not in created.text
    assert "Page provider" in created.text and "••••9876" in created.text
    assert "sk-ant-page-key" not in created.text
    (pp,) = [p for p in (await client.get("/api/providers")).json() if p["name"] == "Page provider"]
    assert (pp["tpm"], pp["rpm"], pp["max_concurrency"]) == (1000, None, 8)
    # Editing with an empty key box keeps the key.
    edited = await client.post(
        f"/settings/providers/{pp['id']}", data={**form, "api_key": "", "rpm": "30"}, headers=htmx
    )
    assert "Provider saved." in edited.text
    after = (await client.get(f"/api/providers/{pp['id']}")).json()
    assert after["rpm"] == 30 and after["api_key_set"] and after["api_key_last4"] == "9876"
    # Errors come back inline, without the submitted key.
    bad = await client.post(
        "/settings/providers",
        data={**form, "name": "Bad page", "max_concurrency": "5000", "settings": "{oops"},
        headers=htmx,
    )
    assert "settings: not valid JSON" in bad.text and "sk-ant-page-key" not in bad.text
    assert bad.status_code == 422  # as the API answers an Invalid (the panel swaps anyway)
    bad = await client.post(
        "/settings/providers", data={**form, "name": "Bad page", "max_concurrency": "5000"}
    )
    assert bad.status_code == 422 and "max_concurrency" in bad.text
    model = await client.post(
        "/settings/models",
        data={"provider_id": str(pp["id"]), "name": "page-model", "model": "claude-x"},
        headers=htmx,
    )
    assert "page-model" in model.text and "Model added." in model.text
    gone = await client.post(f"/settings/providers/{pp['id']}/delete")
    assert gone.status_code == 303
    assert "page-model" not in (await client.get("/settings/providers")).text


# -- pure helpers --------------------------------------------------------------------------------


@given(
    st.builds(
        ChatResult,
        text=st.text(),
        input_tokens=st.integers(0, 10**7),
        output_tokens=st.integers(0, 10**7),
        usage_estimated=st.booleans(),
        latency_s=st.floats(0, 1e4),
        attempts=st.integers(0, 20),
        cached=st.booleans(),
        model=st.text(),
        finish_reason=st.none() | st.text(),
    )
)
def test_cached_results_round_trip_through_json(result: ChatResult) -> None:
    data = json.loads(json.dumps(result_to_json(result)))
    assert result_from_json({**data, "future_field": 1}) == dataclasses.replace(
        result, cached=False
    )


@given(st.lists(st.floats(0.001, 1000), min_size=1, max_size=50))
def test_latency_average_stays_within_the_samples(samples: list[float]) -> None:
    value = None
    for s in samples:
        value = ema(value, s)
    assert value is not None
    assert min(samples) - 1e-9 <= value <= max(samples) + 1e-9
    assert ema(value, value) == pytest.approx(value)


def test_call_row_maps_related_ids_to_columns() -> None:
    rec = CallRecord(
        purpose="p" * 150,
        provider_id=3,
        model="m",
        input_tokens=1,
        output_tokens=2,
        cost_usd=0.5,
        latency_s=0.1,
        attempts=1,
        cache_hit=False,
        status="ok",
        error=None,
        related={"session_id": "12", "persona_id": None, "comparison_id": "x", "pair": 4},
    )
    row = call_row(rec)
    assert (row["session_id"], row["persona_id"], row["comparison_id"]) == (12, None, None)
    assert row["model_id"] is None and row["related"]["pair"] == 4
    assert len(row["purpose"]) == 100


def test_form_values_treat_empty_optional_boxes_as_none() -> None:
    values = form_values(
        {"name": " n ", "rpm": "", "base_url": "", "settings": "", "max_retries": "2"},
        PROVIDER_FIELDS,
    )
    assert values == {
        "name": "n",
        "rpm": None,
        "base_url": None,
        "settings": {},
        "max_retries": "2",
    }
    with pytest.raises(Invalid, match="settings: not valid JSON"):
        form_values({"settings": "[1,"}, PROVIDER_FIELDS)


# -- the edge: bodies JSON forbids, keys HTTP cannot carry, keys that follow a new server ---------


@pytest.mark.parametrize(
    ("method", "path", "body", "loc"),
    [
        ("POST", "/api/providers", b'{"name": "n1", "kind": "openai", "timeout_s": NaN}', "body"),
        ("POST", "/api/providers", b'{"name": "n2", "kind": "openai", "rpm": Infinity}', "body"),
        ("POST", "/api/providers", b'{"name": "n3", "settings": {"t": -Infinity}}', "body"),
        ("POST", "/api/providers", b'{"name": "\\ud800", "kind": "openai"}', "name"),
        ("POST", "/api/providers", b'{"name": "n4", "settings": {"\\udc00": 1}}', "settings"),
        ("POST", "/api/pillars", b'{"name": "p", "description": "x\\udfff"}', "description"),
        ("POST", "/api/pillars", b"[NaN]", "body"),
        ("PATCH", "/api/providers/1", b'{"timeout_s": NaN}', "body"),
        ("POST", "/api/sessions/estimate", b'{"pillar_ids": [1], "x": [1, {"y": "\\uDBFF"}]}', "x"),
    ],
)
async def test_json_that_json_forbids_is_a_clear_422(
    client, method: str, path: str, body: bytes, loc: str
) -> None:
    resp = await client.request(
        method, path, content=body, headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 422, resp.text
    [error] = resp.json()["detail"]
    assert error["type"] == "json_invalid" and loc in error["loc"]
    assert "NaN" in error["msg"] or "Infinity" in error["msg"] or "surrogate" in error["msg"]


async def test_valid_json_near_the_forbidden_forms_still_passes(client) -> None:
    # A surrogate pair is one character (an emoji); "NaN" inside a string is just text.
    body = '{"name": "\\ud83d\\ude00 NaN Infinity", "kind": "openai", "settings": {"x": "NaN"}}'
    resp = await client.post(
        "/api/providers", content=body.encode(), headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 201, resp.text
    assert resp.json()["name"] == "\U0001f600 NaN Infinity"
    # No content type is JSON to FastAPI, so it is checked the same way.
    bare = await client.post("/api/pillars", content=b'{"name": "q", "description": NaN}')
    assert bare.status_code == 422 and bare.json()["detail"][0]["type"] == "json_invalid"


async def test_validation_errors_never_echo_a_key(client) -> None:
    secret = "sk-l\u00efve-ZX9q7Rk2mP4vT8wLbN3cYd6H"
    for body in (
        {"name": "K", "kind": "openai", "api_key": secret},
        {"name": "K", "kind": "bogus", "api_key": secret},
        {"name": "K", "kind": "openai", "api_key": 12345678901234},
    ):
        resp = await client.post("/api/providers", json=body)
        assert resp.status_code == 422
        assert secret not in resp.text and "ZX9q7Rk2" not in resp.text
        assert "12345678901234" not in resp.text


@pytest.mark.parametrize(
    "key",
    ["sk-caf\u00e9", "sk\u00a0live", "\u201csk-quoted\u201d", "sk live", "sk-\x00", "x" * 1001],
)
async def test_api_keys_must_be_printable_ascii(client, key: str) -> None:
    created = await client.post(
        "/api/providers", json={"name": "A", "kind": "openai", "api_key": key}
    )
    assert created.status_code == 422, created.text
    assert "api_key" in json.dumps(created.json()["detail"])
    p = await make_provider(client, name=f"ascii-{len(key)}-{ord(key[2])}")
    patched = await client.patch(f"/api/providers/{p['id']}", json={"api_key": key})
    assert patched.status_code == 422
    assert (await client.get(f"/api/providers/{p['id']}")).json()["api_key_set"] is False
    # Surrounding whitespace (a pasted line break) is trimmed, not refused.
    ok = await client.patch(f"/api/providers/{p['id']}", json={"api_key": "  sk-fine-1234\n"})
    assert ok.status_code == 200 and ok.json()["api_key_last4"] == "1234"


async def test_connection_test_with_a_stored_non_ascii_key_names_the_cause(
    client, app, db, fake
) -> None:
    # A key stored before keys were checked at the edge: the test answers, never a 500.
    p = await make_provider(client, name="Legacy key", base_url=fake.base_url)
    await make_model(client, p["id"], name="legacy-model")
    cipher = KeyCipher(app.state.settings)
    await db.execute(
        Provider.__table__.update()
        .where(Provider.id == p["id"])
        .values(api_key_encrypted=cipher.encrypt("sk-caf\u00e9-key"))
    )
    await db.commit()
    await llm(app).refresh(p["id"])
    resp = await client.post(f"/api/providers/{p['id']}/test", json={})
    assert resp.status_code == 200, resp.text
    assert resp.json()["ok"] is False and "printable ASCII" in resp.json()["error"]


async def test_a_key_does_not_follow_a_new_base_url_or_kind(client, db, fake) -> None:
    p = await make_provider(client, name="Mover", base_url=fake.base_url, api_key=SECRET_KEY)
    pid = p["id"]
    kept = await client.patch(f"/api/providers/{pid}", json={"rpm": 30, "base_url": fake.base_url})
    assert kept.json()["api_key_set"] is True  # same URL sent again: nothing moved
    moved = await client.patch(f"/api/providers/{pid}", json={"base_url": "https://other.test/v1"})
    assert moved.status_code == 200
    assert moved.json()["api_key_set"] is False and moved.json()["api_key_last4"] is None
    assert await db.scalar(select(Provider.api_key_encrypted).where(Provider.id == pid)) is None
    # A new key sent with the move is the new server's key.
    both = await client.patch(
        f"/api/providers/{pid}", json={"base_url": fake.base_url, "api_key": NEW_SECRET_KEY}
    )
    assert both.json()["api_key_set"] is True
    assert both.json()["api_key_last4"] == NEW_SECRET_KEY[-4:]
    kind = await client.patch(f"/api/providers/{pid}", json={"kind": "anthropic"})
    assert kind.json()["api_key_set"] is False
    again = await client.patch(
        f"/api/providers/{pid}", json={"kind": "openai", "api_key": SECRET_KEY}
    )
    assert again.json()["api_key_set"] is True
    same_kind = await client.patch(f"/api/providers/{pid}", json={"kind": "openai"})
    assert same_kind.json()["api_key_set"] is True
    cleared_url = await client.patch(f"/api/providers/{pid}", json={"base_url": None})
    assert cleared_url.json()["api_key_set"] is False  # the public endpoint is a new server too


async def test_reviewers_see_provider_names_and_kinds_only(
    client, reviewer_client, researcher_client, fake
) -> None:
    p = await make_provider(
        client,
        name="Internal vLLM",
        base_url="http://10.1.2.3:8000/v1",
        api_key=SECRET_KEY,
        settings={"auth_header": "X-Internal", **FAST},
    )
    summary_fields = {"id", "name", "kind", "simulated", "model_count"}
    listed = await reviewer_client.get("/api/providers")
    one = await reviewer_client.get(f"/api/providers/{p['id']}")
    assert listed.status_code == 200 and one.status_code == 200
    assert all(set(item) == summary_fields for item in listed.json())
    assert set(one.json()) == summary_fields
    assert one.json()["name"] == "Internal vLLM" and one.json()["kind"] == "openai"
    for resp in (listed, one):
        for leak in ("10.1.2.3", SECRET_KEY[-4:], "X-Internal", "api_key"):
            assert leak not in resp.text
    # Those who configure sessions and providers still see everything.
    for c in (client, researcher_client):
        full = (await c.get(f"/api/providers/{p['id']}")).json()
        assert full["base_url"] == "http://10.1.2.3:8000/v1"
        assert full["api_key_last4"] == SECRET_KEY[-4:]
        listed_full = (await c.get("/api/providers")).json()
        assert any(item.get("base_url") == "http://10.1.2.3:8000/v1" for item in listed_full)
