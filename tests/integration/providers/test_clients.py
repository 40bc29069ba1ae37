"""Provider clients and the gateway against fake servers speaking the real wire formats."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.providers.base import (
    ChatRequest,
    ChatResult,
    ProviderConfig,
    ProviderError,
    backoff_delay,
    call_with_retries,
    parse_retry_after,
)
from llmjudge.providers.clients import SseEvent, iter_sse
from llmjudge.providers.gateway import CallRecord, Gateway, ModelPricing, cache_key
from llmjudge.providers.gemini import to_gemini_schema
from llmjudge.providers.registry import make_client
from tests.fakes.cache import MemoryCache
from tests.fakes.servers import FAKES, FakeProvider

ROOT = Path(__file__).resolve().parents[3]
KINDS = list(FAKES)
KEY = "test-key"
FAST = {"backoff_base_s": 0.01, "backoff_max_s": 0.05}
SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "say hello"}
VERDICT = {"winner": "A", "confidence": 0.8, "reasoning": "A is clearer."}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Verdict",
    "type": "object",
    "properties": {
        "winner": {"type": "string", "enum": ["A", "B", "TIE"]},
        "confidence": {"type": "number"},
        "reasoning": {"type": ["string", "null"]},
    },
    "required": ["winner", "confidence"],
    "additionalProperties": False,
}


@pytest.fixture(params=KINDS)
async def fake(request: pytest.FixtureRequest) -> AsyncIterator[FakeProvider]:
    async with FAKES[request.param]() as server:
        yield server


def config(fake: FakeProvider, **overrides: Any) -> ProviderConfig:
    values: dict[str, Any] = {
        "id": 1,
        "name": f"fake-{fake.kind}",
        "kind": fake.kind,
        "base_url": fake.base_url,
        "api_key": KEY,
        "timeout_s": 5.0,
        "max_retries": 3,
        "settings": FAST,
    }
    return ProviderConfig(**{**values, **overrides})


async def call(
    fake: FakeProvider, req: ChatRequest | None = None, *, stream: bool = False, **cfg: Any
) -> tuple[ChatResult, list[str]]:
    client = make_client(config(fake, **cfg))
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    try:
        result = await client.chat(
            req or ChatRequest("m1", [SYSTEM, USER]), on_delta if stream else None
        )
    finally:
        await client.aclose()
    return result, deltas


async def call_error(fake: FakeProvider, *, stream: bool = False, **cfg: Any) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await call(fake, stream=stream, **cfg)
    return info.value


# -- plain, structured, streamed ---------------------------------------------------------


async def test_plain_call(fake: FakeProvider) -> None:
    result, _ = await call(fake)
    assert result.text == "echo: say hello"
    assert (result.input_tokens, result.output_tokens) != (0, 0)
    assert result.output_tokens == 3 and not result.usage_estimated
    assert result.attempts == 1 and result.model == "m1" and not result.cached
    sent = fake.state.requests[0]
    if fake.kind == "openai":
        assert sent.headers["Authorization"] == f"Bearer {KEY}"
        assert sent.body["messages"] == [SYSTEM, USER]
    elif fake.kind == "anthropic":
        assert sent.headers["x-api-key"] == KEY
        assert sent.headers["anthropic-version"] == "2023-06-01"
        assert sent.body["system"] == SYSTEM["content"]
        assert sent.body["messages"] == [USER] and sent.body["max_tokens"] == 1024
    else:
        assert sent.headers["x-goog-api-key"] == KEY and "key" not in sent.query
        assert sent.body["systemInstruction"] == {"parts": [{"text": SYSTEM["content"]}]}
        assert sent.body["contents"] == [{"role": "user", "parts": [{"text": USER["content"]}]}]


async def test_usage_estimated_when_absent(fake: FakeProvider) -> None:
    fake.state.send_usage = False
    result, _ = await call(fake)
    assert result.usage_estimated
    assert result.output_tokens == len("echo: say hello") // 4 + 1


def verdict_responder(body: dict[str, Any]) -> str:
    return json.dumps(VERDICT)


async def test_structured_call(fake: FakeProvider) -> None:
    fake.state.responder = verdict_responder
    req = ChatRequest("m1", [SYSTEM, USER], temperature=0, json_schema=SCHEMA)
    result, _ = await call(fake, req)
    assert json.loads(result.text) == VERDICT
    body = fake.state.requests[0].body
    assert body.get("temperature", body.get("generationConfig", {}).get("temperature")) == 0
    if fake.kind == "openai":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": SCHEMA, "strict": False},
        }
    elif fake.kind == "anthropic":
        assert body["tools"][0]["name"] == "verdict"
        assert body["tools"][0]["input_schema"] == SCHEMA
        assert body["tool_choice"] == {"type": "tool", "name": "verdict"}
    else:
        config_ = body["generationConfig"]
        assert config_["responseMimeType"] == "application/json"
        schema = config_["responseSchema"]
        assert {"$schema", "title", "additionalProperties"}.isdisjoint(schema)
        assert schema["type"] == "OBJECT"
        assert schema["properties"]["reasoning"] == {"type": "STRING", "nullable": True}


@pytest.mark.parametrize("structured", [False, True])
async def test_streamed_call(fake: FakeProvider, structured: bool) -> None:
    fake.state.responder = verdict_responder if structured else None
    req = ChatRequest("m1", [SYSTEM, USER], json_schema=SCHEMA if structured else None)
    result, deltas = await call(fake, req, stream=True)
    assert len(deltas) > 1
    assert "".join(deltas) == result.text
    if structured:
        assert json.loads(result.text) == VERDICT
    else:
        assert result.text == "echo: say hello"
    assert not result.usage_estimated and result.output_tokens > 0
    body = fake.state.requests[0]
    if fake.kind == "gemini":
        assert body.path.endswith(":streamGenerateContent") and body.query["alt"] == "sse"
    else:
        assert body.body["stream"] is True


# -- failures ------------------------------------------------------------------------------


async def test_429_retried_after_retry_after(fake: FakeProvider) -> None:
    fake.state.fail_429, fake.state.retry_after = 1, "1"
    start = time.perf_counter()
    result, _ = await call(fake)
    elapsed = time.perf_counter() - start
    assert result.text == "echo: say hello" and result.attempts == 2
    assert fake.state.count == 2
    assert 0.95 <= elapsed < 2.5  # waited for Retry-After, not the 10 ms backoff


async def test_429_without_retry_after_backs_off_briefly(fake: FakeProvider) -> None:
    fake.state.fail_429, fake.state.retry_after = 2, None
    start = time.perf_counter()
    result, deltas = await call(fake, stream=True)
    assert result.attempts == 3 and "".join(deltas) == result.text
    assert time.perf_counter() - start < 0.5  # full jitter under backoff_base_s=0.01


async def test_429_exhausted_reports_rate_limit(fake: FakeProvider) -> None:
    fake.state.fail_429, fake.state.retry_after = 5, "0"
    err = await call_error(fake, max_retries=2)
    assert err.cause == "rate limited (429)" and err.status == 429 and err.attempts == 3


async def test_500_retried_then_succeeds(fake: FakeProvider) -> None:
    fake.state.fail_500 = 2
    result, _ = await call(fake)
    assert result.attempts == 3 and fake.state.count == 3
    assert result.text == "echo: say hello"


async def test_500_gives_up_after_max_retries(fake: FakeProvider) -> None:
    fake.state.fail_500 = 10
    err = await call_error(fake, max_retries=2)
    assert err.attempts == 3 and fake.state.count == 3
    assert err.status == 500 and err.retryable and "server error (500)" in err.cause


@pytest.mark.parametrize("stream", [False, True])
async def test_timeout_retried(fake: FakeProvider, stream: bool) -> None:
    fake.state.slow, fake.state.slow_s = 1, 0.6
    result, _ = await call(fake, stream=stream, timeout_s=0.2)
    assert result.attempts == 2 and result.text == "echo: say hello"


async def test_timeout_error_names_the_limit(fake: FakeProvider) -> None:
    fake.state.slow, fake.state.slow_s = 2, 0.5
    err = await call_error(fake, timeout_s=0.15, max_retries=1)
    assert err.cause == "timeout after 0.15s" and err.attempts == 2 and err.retryable


async def test_malformed_body_retried_then_succeeds(fake: FakeProvider) -> None:
    fake.state.malformed = 1
    result, _ = await call(fake)
    assert result.attempts == 2 and result.text == "echo: say hello"


async def test_malformed_body_fails_after_retries(fake: FakeProvider) -> None:
    fake.state.malformed = 10
    err = await call_error(fake, max_retries=1)
    assert err.attempts == 2 and err.cause.startswith("malformed response")


STREAM_FAULTS = {
    "cut_stream": "malformed stream: connection lost mid-stream",
    "end_early": "malformed stream: ended",
    "malformed": "malformed stream: invalid JSON",
    "stream_error": "stream error",
}


@pytest.mark.parametrize("fault", list(STREAM_FAULTS))
async def test_broken_stream_retried_then_succeeds(fake: FakeProvider, fault: str) -> None:
    setattr(fake.state, fault, 1)
    result, _ = await call(fake, stream=True)
    assert result.attempts == 2 and result.text == "echo: say hello"


@pytest.mark.parametrize("fault", list(STREAM_FAULTS))
async def test_broken_stream_is_an_error_never_a_partial_answer(
    fake: FakeProvider, fault: str
) -> None:
    setattr(fake.state, fault, 10)
    err = await call_error(fake, stream=True, max_retries=1)
    assert err.cause.startswith(STREAM_FAULTS[fault]), err.cause
    assert err.attempts == 2 and err.retryable


@pytest.mark.parametrize("stream", [False, True])
async def test_invalid_key_fails_at_once(fake: FakeProvider, stream: bool) -> None:
    secret = "sk-wrong-secret-123"
    err = await call_error(fake, stream=stream, api_key=secret)
    assert err.cause == f"invalid API key for provider fake-{fake.kind}"
    assert err.attempts == 1 and fake.state.count == 1 and not err.retryable
    assert secret not in str(err) and secret not in repr(err)
    assert secret not in repr(config(fake, api_key=secret))


async def test_unknown_model_fails_at_once(fake: FakeProvider) -> None:
    fake.state.models = {"known-model"}
    err = await call_error(fake)
    assert err.status == 404 and err.attempts == 1 and fake.state.count == 1
    assert err.cause.startswith("model not found") and "'m1'" in err.cause


async def test_bad_request_fails_at_once_with_server_message(fake: FakeProvider) -> None:
    fake.state.fail_400 = 1
    err = await call_error(fake)
    assert err.status == 400 and err.attempts == 1 and not err.retryable
    assert "temperature: must be at most 2" in err.cause


async def test_connection_refused_is_retried_then_reported() -> None:
    server = FAKES["openai"]()
    await server.start()
    base_url = server.base_url
    await server.stop()  # nothing listens there any more
    client = make_client(
        ProviderConfig(1, "gone", "openai", base_url=base_url, max_retries=1, settings=FAST)
    )
    with pytest.raises(ProviderError) as info:
        await client.chat(ChatRequest("m1", [USER]))
    await client.aclose()
    assert info.value.attempts == 2 and info.value.cause.startswith("connection error")


async def test_unsupported_base_url_fails_at_once() -> None:
    client = make_client(ProviderConfig(1, "odd", "openai", base_url="ftp://example/v1"))
    with pytest.raises(ProviderError) as info:
        await client.chat(ChatRequest("m1", [USER]))
    await client.aclose()
    assert info.value.attempts == 1 and info.value.cause.startswith("invalid base URL")


async def test_openai_falls_back_to_plain_text_when_response_format_rejected() -> None:
    async with FAKES["openai"]() as server:
        server.state.reject_response_format = True
        server.state.responder = verdict_responder
        client = make_client(config(server))
        req = ChatRequest("m1", [SYSTEM, USER], json_schema=SCHEMA)
        first = await client.chat(req)
        second = await client.chat(req)
        await client.aclose()
    assert json.loads(first.text) == VERDICT and first.attempts == 2
    assert second.attempts == 1  # remembered: no second rejection
    bodies = [r.body for r in server.state.requests]
    assert len(bodies) == 3
    assert "response_format" in bodies[0]
    assert all("response_format" not in b for b in bodies[1:])
    assert '"winner"' in bodies[1]["messages"][0]["content"]  # schema asked for in words


async def test_anthropic_merges_turns_and_sets_max_tokens() -> None:
    async with FAKES["anthropic"]() as server:
        req = ChatRequest(
            "claude",
            [SYSTEM, USER, {"role": "user", "content": "and goodbye"}],
            max_tokens=77,
            temperature=0.2,
        )
        result, _ = await call(server, req)
    body = server.state.requests[0].body
    assert body["messages"] == [{"role": "user", "content": "say hello\n\nand goodbye"}]
    assert body["max_tokens"] == 77 and body["temperature"] == 0.2
    assert result.text == "echo: say hello\n\nand goodbye"


async def test_fake_openai_server_runs_as_a_process() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fakes.openai_server",
        "--port",
        str(port),
        "--latency-ms",
        "150",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 15)
        assert f":{port}" in line.decode()
        client = make_client(
            ProviderConfig(1, "proc", "openai", base_url=f"http://127.0.0.1:{port}/v1")
        )
        result = await client.chat(ChatRequest("m1", [USER]))
        await client.aclose()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
    assert result.text == "echo: say hello" and result.latency_s >= 0.15


# -- gateway -----------------------------------------------------------------------------


class ListAccounting:
    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    async def record(self, rec: CallRecord) -> None:
        self.records.append(rec)


async def test_gateway_cache_hit_makes_no_request() -> None:
    accounting = ListAccounting()
    gateway = Gateway(cache=MemoryCache(), accounting=accounting)
    async with FAKES["openai"]() as server:
        gateway.register(config(server))
        req = ChatRequest("m1", [USER], temperature=0)
        pricing = ModelPricing(input_per_million=1_000_000, output_per_million=2_000_000)
        first = await gateway.chat(1, req, pricing=pricing, purpose="judge", related={"c": 7})
        assert server.state.count == 1
        deltas: list[str] = []

        async def on_delta(text: str) -> None:
            deltas.append(text)

        context_only = ChatRequest("m1", [USER], temperature=0, context={"task": "x"})
        second = await gateway.chat(1, context_only, pricing=pricing, on_delta=on_delta)
        assert server.state.count == 1  # served from the cache
        assert second.cached and second.attempts == 0 and second.text == first.text
        assert deltas == [first.text]
        await gateway.chat(1, ChatRequest("m1", [USER], temperature=None))
        assert server.state.count == 2  # None = provider default: not cached
        await gateway.chat(1, req, use_cache=False)
        assert server.state.count == 3
    await gateway.aclose()
    ok, hit = accounting.records[0], accounting.records[1]
    assert ok.status == "ok" and not ok.cache_hit and ok.purpose == "judge"
    assert ok.related == {"c": 7} and ok.attempts == 1
    assert ok.cost_usd == pytest.approx(ok.input_tokens * 1 + ok.output_tokens * 2)
    assert hit.cache_hit and hit.cost_usd == 0 and hit.attempts == 0


async def test_gateway_records_errors() -> None:
    accounting = ListAccounting()
    gateway = Gateway(accounting=accounting)
    async with FAKES["anthropic"]() as server:
        gateway.register(config(server, api_key="nope"))
        with pytest.raises(ProviderError):
            await gateway.chat(1, ChatRequest("m1", [USER]), purpose="test connection")
    await gateway.aclose()
    (rec,) = accounting.records
    assert rec.status == "error" and rec.attempts == 1 and "invalid API key" in (rec.error or "")
    assert rec.purpose == "test connection"


async def test_gateway_register_rebuilds_only_on_change() -> None:
    gateway = Gateway()
    cfg = ProviderConfig(3, "sim", "simulator", settings={"latency_ms_mean": 0})
    gateway.register(cfg)
    client = gateway._providers[3].client
    gateway.register(ProviderConfig(3, "sim", "simulator", settings={"latency_ms_mean": 0}))
    assert gateway._providers[3].client is client
    gateway.register(ProviderConfig(3, "sim", "simulator", rpm=60, settings={"seed": 2}))
    assert gateway._providers[3].client is not client
    assert gateway.config(3) is not None and gateway.config(3).rpm == 60  # type: ignore[union-attr]
    gateway.unregister(3)
    with pytest.raises(ProviderError, match="not registered"):
        await gateway.chat(3, ChatRequest("m", [USER]))
    await gateway.aclose()


async def test_gateway_simulator_is_labelled_and_cached_only_on_request() -> None:
    gateway = Gateway(cache=MemoryCache())
    settings = {"latency_ms_mean": 0, "latency_ms_jitter": 0}
    gateway.register(ProviderConfig(9, "sim", "simulator", settings=settings))
    req = ChatRequest("judge-1", [USER], temperature=0)
    first = await gateway.chat(9, req)
    assert first.model == "simulated:judge-1" and "simulator" in first.text
    assert not (await gateway.chat(9, req)).cached
    await gateway.chat(9, req, use_cache=True)
    assert (await gateway.chat(9, req, use_cache=True)).cached
    await gateway.aclose()


async def test_gateway_holds_rpm_within_ten_percent() -> None:
    """rpm=600 (10/s, burst 10): 50 callers for 3 s get 10 + 30 calls, at 10/s after the burst."""
    gateway = Gateway()
    async with FAKES["openai"]() as server:
        gateway.register(config(server, rpm=600))
        arrivals: list[float] = []
        start = time.perf_counter()

        async def caller() -> None:
            while True:
                await gateway.chat(1, ChatRequest("m1", [USER]))
                arrivals.append(time.perf_counter() - start)

        tasks = [asyncio.create_task(caller()) for _ in range(50)]
        await asyncio.sleep(3.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await gateway.aclose()
    expected = 10 + 10 * 3.0
    assert abs(len(arrivals) - expected) <= 0.1 * expected, len(arrivals)
    steady = sorted(arrivals)[10:]
    rate = (len(steady) - 1) / (steady[-1] - steady[0])
    assert rate == pytest.approx(10.0, rel=0.1)


# -- pure helpers ------------------------------------------------------------------------


def test_parse_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(30.0)


@given(
    attempt=st.integers(1, 30),
    base=st.floats(0.001, 5),
    retry_after=st.none() | st.floats(0, 1e6),
)
def test_backoff_is_bounded_and_honours_retry_after(
    attempt: int, base: float, retry_after: float | None
) -> None:
    delay = backoff_delay(attempt, base_s=base, max_s=20, retry_after=retry_after)
    if retry_after is None:
        assert 0 <= delay <= min(20, base * 2 ** (attempt - 1))
    else:
        assert delay == min(retry_after, 60.0)


async def test_call_with_retries_counts_attempts_and_stops_on_permanent_errors() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    outcomes: list[ProviderError | None] = [
        ProviderError(
            "p", "openai", "rate limited (429)", status=429, retryable=True, retry_after=3
        ),
        ProviderError("p", "openai", "server error (502)", status=502, retryable=True),
        None,
    ]

    async def attempt() -> ChatResult:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return ChatResult("ok", 1, 1, False, 0.0, 1)

    cfg = ProviderConfig(1, "p", "openai", settings={"backoff_base_s": 0.5})
    result = await call_with_retries(cfg, attempt, sleep=sleep)
    assert result.attempts == 3 and slept[0] == 3 and 0 <= slept[1] <= 1.0

    async def denied() -> ChatResult:
        raise ProviderError("p", "openai", "invalid API key for provider p", status=401)

    with pytest.raises(ProviderError) as info:
        await call_with_retries(cfg, denied, sleep=sleep)
    assert info.value.attempts == 1 and len(slept) == 2


@given(
    context=st.dictionaries(st.text(max_size=5), st.integers()),
    key=st.text(min_size=1, max_size=10),
)
def test_cache_key_ignores_context_and_api_key(context: dict[str, int], key: str) -> None:
    cfg = ProviderConfig(1, "p", "openai", base_url="http://x")
    req = ChatRequest("m", [USER], temperature=0)
    base = cache_key(cfg, req)
    assert cache_key(dataclasses.replace(cfg, api_key=key), req) == base
    assert cache_key(cfg, dataclasses.replace(req, context=context)) == base
    assert cache_key(cfg, dataclasses.replace(req, model="m2")) != base
    assert cache_key(cfg, dataclasses.replace(req, temperature=0.5)) != base
    assert cache_key(dataclasses.replace(cfg, kind="anthropic"), req) != base


def test_gemini_schema_inlines_refs_and_drops_unsupported_keys() -> None:
    schema = {
        "$defs": {
            "Scores": {"type": "object", "title": "S", "additionalProperties": {"type": "integer"}}
        },
        "type": "object",
        "properties": {
            "scores": {"$ref": "#/$defs/Scores", "description": "per side"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "kind": {"const": "verdict"},
            "tags": {"type": "array", "items": {"type": "string", "title": "t"}},
        },
    }
    assert to_gemini_schema(schema) == {
        "type": "OBJECT",
        "properties": {
            "scores": {"type": "OBJECT", "description": "per side"},
            "note": {"type": "STRING", "nullable": True, "default": None},
            "kind": {"enum": ["verdict"]},
            "tags": {"type": "ARRAY", "items": {"type": "STRING"}},
        },
    }


async def test_sse_parser_handles_comments_crlf_and_multiline_data() -> None:
    async def lines() -> AsyncIterator[str]:
        for line in [": keep-alive", "event: a", "data: 1", "data: 2", "", "", "data: x\r", "\r"]:
            yield line

    events = [ev async for ev in iter_sse(lines())]
    assert events == [SseEvent("a", "1\n2"), SseEvent("message", "x")]
