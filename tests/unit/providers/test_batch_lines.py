"""Result lines of the provider batch APIs read into ``BatchLine``s: answers read as the live
client reads a response, failures with their reason and whether asking again may help."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from llmjudge.providers.anthropic import AnthropicClient
from llmjudge.providers.base import ChatRequest, ProviderConfig
from llmjudge.providers.batches import AnthropicBatches, OpenAIBatches
from llmjudge.providers.openai import OpenAIClient

REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "judge"}])


@pytest.fixture
async def openai() -> AsyncIterator[OpenAIBatches]:
    cfg = ProviderConfig(1, "oa", "openai", base_url="http://127.0.0.1:9/v1", api_key="k")
    client = OpenAIBatches(cfg, OpenAIClient(cfg))
    yield client
    await client.aclose()
    await client.chat.aclose()


@pytest.fixture
async def anthropic() -> AsyncIterator[AnthropicBatches]:
    cfg = ProviderConfig(2, "an", "anthropic", base_url="http://127.0.0.1:9", api_key="k")
    client = AnthropicBatches(cfg, AnthropicClient(cfg))
    yield client
    await client.aclose()
    await client.chat.aclose()


def _openai_ok(cid: str, text: str) -> str:
    body = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
    }
    return json.dumps({"custom_id": cid, "response": {"status_code": 200, "body": body}})


def test_openai_lines(openai: OpenAIBatches) -> None:
    ok = openai._line(_openai_ok("c1-a1", "A wins"), lambda cid: REQ)
    assert ok.custom_id == "c1-a1" and ok.result is not None
    assert (ok.result.text, ok.result.input_tokens, ok.result.output_tokens) == ("A wins", 10, 3)
    expired = openai._line(
        json.dumps(
            {
                "custom_id": "c2-a1",
                "response": None,
                "error": {"code": "batch_expired", "message": "x"},
            }
        ),
        lambda cid: REQ,
    )
    assert expired.retry and "batch_expired" in (expired.error or "")
    refused = openai._line(
        json.dumps(
            {
                "custom_id": "c3-a1",
                "response": {"status_code": 400, "body": {"error": {"message": "bad"}}},
            }
        ),
        lambda cid: REQ,
    )
    assert not refused.retry and "(400)" in (refused.error or "")
    broken = openai._line('{"custom_id": "c4-a1", "response": {"stat', lambda cid: REQ)
    assert broken.custom_id == "c4-a1" and (broken.error or "").startswith("malformed")
    nameless = openai._line("not json at all", lambda cid: REQ)
    assert nameless.custom_id is None


def test_openai_entry_is_a_chat_completions_line(openai: OpenAIBatches) -> None:
    entry = openai.entry("c1-a1", REQ)
    assert entry["method"] == "POST" and entry["url"] == "/v1/chat/completions"
    assert entry["body"]["model"] == "m" and "stream" not in entry["body"]


def test_anthropic_lines(anthropic: AnthropicBatches) -> None:
    message = {
        "content": [{"type": "text", "text": "B wins"}],
        "usage": {"input_tokens": 7, "output_tokens": 2},
    }
    ok = anthropic._line(
        json.dumps({"custom_id": "c1-a1", "result": {"type": "succeeded", "message": message}}),
        lambda cid: REQ,
    )
    assert ok.result is not None and ok.result.text == "B wins" and ok.result.input_tokens == 7
    for kind in ("expired", "canceled"):
        line = anthropic._line(
            json.dumps({"custom_id": "c2-a1", "result": {"type": kind}}), lambda cid: REQ
        )
        assert line.retry and kind in (line.error or "")
    errored = anthropic._line(
        json.dumps(
            {
                "custom_id": "c3-a1",
                "result": {
                    "type": "errored",
                    "error": {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": "no"},
                    },
                },
            }
        ),
        lambda cid: REQ,
    )
    assert not errored.retry and "invalid_request_error" in (errored.error or "")
    assert anthropic.entry("c1-a1", REQ)["params"]["max_tokens"] > 0
