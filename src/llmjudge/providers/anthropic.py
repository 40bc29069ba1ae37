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


# Anthropic caches a prompt's prefix only where it is asked to: up to the block that carries
# this marker (5-minute TTL; prefixes under the model's minimum, 1,024 or 2,048 tokens, are
# sent uncached, without an error).
CACHE_CONTROL = {"type": "ephemeral"}


def split_system(
    messages: Sequence[Mapping[str, str]], cache_prefix: int = 0
) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    """Top-level system text, and user/assistant turns with consecutive same roles merged
    (the API wants alternating roles).

    ``cache_prefix`` (``ChatRequest.cache_prefix``): the characters of the messages' contents
    that many calls share. Their end gets the cache marker: the system prompt becomes one
    marked text block when they end inside it, else the turn they end in is split into a
    marked text block (the shared head) and a plain one (the rest)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    mark: tuple[str, int] | None = None  # ("system", 0) or ("turn", characters of its head)
    marked = -1  # the marked turn
    consumed = 0
    for m in messages:
        content = str(m.get("content", ""))
        ends_here = consumed < cache_prefix <= consumed + len(content)
        cut = cache_prefix - consumed
        consumed += len(content)
        if m.get("role") == "system":
            system.append(content)
            if ends_here:
                mark = ("system", 0)
            continue
        role = "assistant" if m.get("role") == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            head = len(turns[-1]["content"]) + 2
            turns[-1]["content"] += "\n\n" + content
        else:
            head = 0
            turns.append({"role": role, "content": content})
        if ends_here:
            mark = ("turn", head + cut)
            marked = len(turns) - 1
    text = "\n\n".join(system)
    if mark is None:
        return text, turns
    if mark[0] == "system":
        return [{"type": "text", "text": text, "cache_control": dict(CACHE_CONTROL)}], turns
    turn = turns[marked]
    whole, cut = turn["content"], mark[1]
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": whole[:cut], "cache_control": dict(CACHE_CONTROL)}
    ]
    if whole[cut:]:
        blocks.append({"type": "text", "text": whole[cut:]})
    turns[marked] = {"role": turn["role"], "content": blocks}
    return text, turns


def _cache_tokens(usage: Mapping[str, Any], before: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """(read from, written to) the prompt cache; a usage that omits one keeps ``before``."""
    read = usage.get("cache_read_input_tokens")
    written = usage.get("cache_creation_input_tokens")
    return (
        before[0] if read is None else int(read),
        before[1] if written is None else int(written),
    )


def _prompt_tokens(input_tokens: int | None, read: int, written: int) -> int | None:
    """The whole prompt: Anthropic's ``input_tokens`` leaves out the tokens read from and
    written to the cache, where ``ChatResult.input_tokens`` counts them (as OpenAI does)."""
    return None if input_tokens is None else input_tokens + read + written


class AnthropicClient(HttpChatClient):
    default_base_url = "https://api.anthropic.com"

    def build(self, req: ChatRequest, *, stream: bool) -> HttpCall:
        system, turns = split_system(req.messages, req.cache_prefix)
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
        read, written = _cache_tokens(usage)
        return Parsed(
            text=text,
            input_tokens=_prompt_tokens(usage.get("input_tokens"), read, written),
            output_tokens=usage.get("output_tokens"),
            finish_reason=data.get("stop_reason"),
            model=data.get("model"),
            cached_input_tokens=read,
            cache_write_tokens=written,
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
        read = written = 0
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
                read, written = _cache_tokens(usage, (read, written))
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
                read, written = _cache_tokens(usage, (read, written))
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
        total = _prompt_tokens(input_tokens, read, written)
        return Parsed(
            text,
            total,
            output_tokens,
            finish,
            model,
            cached_input_tokens=read,
            cache_write_tokens=written,
        )
