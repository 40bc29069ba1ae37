"""Anthropic Messages API.

Structured output goes through a forced tool call: one tool named ``schema_name`` whose
``input_schema`` is the wanted JSON schema; the tool input is the answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from llmjudge.providers.base import ChatRequest, DeltaCallback
from llmjudge.providers.clients import HttpCall, HttpChatClient, Parsed, SseEvent, drain

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024
# Stream error types that are the server's trouble, not the request's.
_RETRYABLE_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


def split_system(
    messages: Sequence[Mapping[str, str]],
) -> tuple[str, list[dict[str, str]]]:
    """Top-level system text, and user/assistant turns with consecutive same roles merged
    (the API wants alternating roles)."""
    system = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
    turns: list[dict[str, str]] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        role = "assistant" if role == "assistant" else "user"
        content = str(m.get("content", ""))
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})
    return "\n\n".join(system), turns


class AnthropicClient(HttpChatClient):
    default_base_url = "https://api.anthropic.com"

    def build(self, req: ChatRequest, *, stream: bool) -> HttpCall:
        system, turns = split_system(req.messages)
        body: dict[str, Any] = {
            "model": req.model,
            "max_tokens": req.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": turns,
        }
        if system:
            body["system"] = system
        if req.temperature is not None:
            body["temperature"] = req.temperature
        if req.json_schema is not None:
            body["tools"] = [
                {
                    "name": req.schema_name,
                    "description": "Record the answer in the required structure.",
                    "input_schema": dict(req.json_schema),
                }
            ]
            body["tool_choice"] = {"type": "tool", "name": req.schema_name}
        if stream:
            body["stream"] = True
        headers = {"anthropic-version": ANTHROPIC_VERSION, "Content-Type": "application/json"}
        if self.cfg.api_key:
            headers["x-api-key"] = self.cfg.api_key
        return HttpCall(f"{self.base_url}/v1/messages", headers, body)

    def parse_response(self, data: Any, req: ChatRequest) -> Parsed:
        blocks = data["content"]
        tool = next((b for b in blocks if b.get("type") == "tool_use"), None)
        if req.json_schema is not None and tool is not None:
            text = json.dumps(tool["input"])
        else:
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        usage = data.get("usage") or {}
        return Parsed(
            text=text,
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            finish_reason=data.get("stop_reason"),
            model=data.get("model"),
        )

    async def consume_stream(
        self, events: AsyncIterator[SseEvent], req: ChatRequest, on_delta: DeltaCallback
    ) -> Parsed:
        text_parts: list[str] = []
        json_parts: list[str] = []
        input_tokens: int | None = None
        output_tokens: int | None = None
        finish: str | None = None
        model: str | None = None
        stopped = False
        async for ev in events:
            data = self.load_event(ev.data)
            kind = data.get("type", ev.event)
            if kind == "message_start":
                message = data["message"]
                model = message.get("model")
                usage = message.get("usage") or {}
                input_tokens = usage.get("input_tokens", input_tokens)
                output_tokens = usage.get("output_tokens", output_tokens)
            elif kind == "content_block_delta":
                delta = data["delta"]
                if delta.get("type") == "input_json_delta":
                    piece = delta.get("partial_json") or ""
                    json_parts.append(piece)
                elif delta.get("type") == "text_delta":
                    piece = delta.get("text") or ""
                    text_parts.append(piece)
                else:
                    continue  # thinking and signature deltas are not part of the answer
                if piece and on_delta is not None:
                    await on_delta(piece)
            elif kind == "message_delta":
                finish = (data.get("delta") or {}).get("stop_reason") or finish
                usage = data.get("usage") or {}
                output_tokens = usage.get("output_tokens", output_tokens)
                input_tokens = usage.get("input_tokens", input_tokens)
            elif kind == "message_stop":
                stopped = True
                await drain(events)
                break
            elif kind == "error":
                err = data.get("error") or {}
                self.fail(
                    f"stream error: {err.get('type', 'error')}: {err.get('message', '')}",
                    retryable=err.get("type") in _RETRYABLE_STREAM_ERRORS,
                )
        if not stopped:
            self.fail("malformed stream: ended before message_stop", retryable=True)
        text = "".join(json_parts) if json_parts else "".join(text_parts)
        if json_parts:
            try:
                json.loads(text)
            except ValueError:
                self.fail("malformed stream: tool input is not complete JSON", retryable=True)
        return Parsed(text, input_tokens, output_tokens, finish, model)
