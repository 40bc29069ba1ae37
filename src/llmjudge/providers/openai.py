"""OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, LM Studio, OpenRouter, Groq...).

Settings understood (``ProviderConfig.settings``): ``auth_header`` (send the key under this
header instead of ``Authorization: Bearer``, e.g. ``api-key`` for Azure-style gateways) and
``query`` (extra URL query parameters, e.g. ``{"api-version": "..."}``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from llmjudge.providers.base import ChatRequest, ChatResult, DeltaCallback, ProviderError
from llmjudge.providers.clients import HttpCall, HttpChatClient, Parsed, SseEvent, drain


def schema_instruction(schema: Mapping[str, Any]) -> str:
    return "Reply with only a JSON object that follows this JSON schema:\n" + json.dumps(
        schema, separators=(",", ":")
    )


def with_schema_instruction(
    messages: Sequence[Mapping[str, str]], schema: Mapping[str, Any]
) -> list[dict[str, str]]:
    """Messages that ask for the schema in words, for servers without ``response_format``."""
    out = [dict(m) for m in messages]
    hint = schema_instruction(schema)
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content', '')}\n\n{hint}"
    else:
        out.insert(0, {"role": "system", "content": hint})
    return out


def rejects_response_format(err: ProviderError) -> bool:
    cause = err.cause.lower()
    return err.status == 400 and ("response_format" in cause or "json_schema" in cause)


Logprobs = tuple[tuple[str, float, tuple[tuple[str, float], ...]], ...]


def token_logprobs(content: Any) -> Logprobs:
    """``choices[0].logprobs.content`` (a response's, or a stream chunk's) as plain tuples:
    (token, logprob, ((alternative, logprob), ...)) per generated token."""
    return tuple(
        (
            str(item["token"]),
            float(item["logprob"]),
            tuple((str(t["token"]), float(t["logprob"])) for t in item.get("top_logprobs") or ()),
        )
        for item in content or ()
    )


def _tokens(usage: Mapping[str, Any]) -> tuple[int | None, int | None, int]:
    """(input, output, cached input) tokens of a usage object: a response's, or a stream's
    last chunk's. Cached tokens are part of ``prompt_tokens`` (OpenAI caches a prompt's
    prefix of 1,024 tokens and more by itself; compatible servers may omit the details)."""
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return usage.get("prompt_tokens"), usage.get("completion_tokens"), int(cached or 0)


class OpenAIClient(HttpChatClient):
    default_base_url = "https://api.openai.com/v1"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Set once a server rejects ``response_format``; later calls go without it.
        self.schema_unsupported = False

    def build(self, req: ChatRequest, *, stream: bool) -> HttpCall:
        structured = req.json_schema is not None and not self.schema_unsupported
        messages: list[dict[str, str]] = [dict(m) for m in req.messages]
        body: dict[str, Any] = {"model": req.model}
        if req.json_schema is not None and not structured:
            messages = with_schema_instruction(messages, req.json_schema)
        body["messages"] = messages
        if req.temperature is not None:
            body["temperature"] = req.temperature
        if req.max_tokens is not None:
            body["max_tokens"] = req.max_tokens
        if req.top_logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = req.top_logprobs
        if structured:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": req.schema_name,
                    "schema": dict(req.json_schema or {}),
                    "strict": False,
                },
            }
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        headers = {"Content-Type": "application/json"}
        if self.cfg.api_key:
            header = self.cfg.settings.get("auth_header")
            if header:
                headers[str(header)] = self.cfg.api_key
            else:
                headers["Authorization"] = f"Bearer {self.cfg.api_key}"
        params = {str(k): str(v) for k, v in dict(self.cfg.settings.get("query", {})).items()}
        return HttpCall(f"{self.base_url}/chat/completions", headers, body, params)

    def build_embed(self, model: str, texts: list[str]) -> HttpCall:
        """``POST /embeddings`` (OpenAI, and the compatible servers: vLLM, Ollama's /v1...);
        with the setting ``embed_api: "ollama"``, Ollama's native ``POST /api/embed`` at the
        base URL's root."""
        call = self.build(ChatRequest(model=model, messages=[]), stream=False)
        url = f"{self.base_url}/embeddings"
        if self.cfg.settings.get("embed_api") == "ollama":
            url = f"{self.base_url.removesuffix('/v1')}/api/embed"
        return HttpCall(url, call.headers, {"model": model, "input": texts}, call.params)

    def parse_embed(self, data: Any) -> tuple[list[list[float]], int | None]:
        if "embeddings" in data:  # Ollama's /api/embed
            vectors = [list(map(float, v)) for v in data["embeddings"]]
            return vectors, data.get("prompt_eval_count")
        rows = sorted(data["data"], key=lambda r: r.get("index", 0))
        usage = data.get("usage") or {}
        return [list(map(float, r["embedding"])) for r in rows], usage.get("prompt_tokens")

    async def attempt(self, req: ChatRequest, on_delta: DeltaCallback) -> ChatResult:
        try:
            return await super().attempt(req, on_delta)
        except ProviderError as err:
            if (
                req.json_schema is None
                or self.schema_unsupported
                or not rejects_response_format(err)
            ):
                raise
        self.schema_unsupported = True
        result = await super().attempt(req, on_delta)
        return dataclasses.replace(result, attempts=2)

    def parse_response(self, data: Any, req: ChatRequest) -> Parsed:
        choice = data["choices"][0]
        message = choice["message"]
        usage = data.get("usage") or {}
        content = message.get("content")
        if isinstance(content, list):  # some compatible servers answer with content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = content or message.get("refusal") or ""
        logprobs = None
        if req.top_logprobs is not None:
            logprobs = token_logprobs((choice.get("logprobs") or {}).get("content"))
        inp, out, cached = _tokens(usage)
        return Parsed(
            text,
            inp,
            out,
            choice.get("finish_reason"),
            data.get("model"),
            logprobs=logprobs,
            cached_input_tokens=cached,
        )

    async def consume_stream(
        self, events: AsyncIterator[SseEvent], req: ChatRequest, on_delta: DeltaCallback
    ) -> Parsed:
        parts: list[str] = []
        logprobs: list[tuple[str, float, tuple[tuple[str, float], ...]]] = []
        usage: Mapping[str, Any] = {}
        finish: str | None = None
        model: str | None = None
        done = False
        async for ev in events:
            # A chunk is a JSON object: only other data can be the end mark (no strip per
            # chunk: hundreds of chunks a second).
            if not ev.data.startswith("{") and ev.data.strip() == "[DONE]":
                done = True
                await drain(events)
                break
            chunk = self.load_event_object(ev.data)
            model = chunk.get("model") or model
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                if choice.get("index", 0) != 0:
                    continue
                if req.top_logprobs is not None:
                    logprobs += token_logprobs((choice.get("logprobs") or {}).get("content"))
                delta = (choice.get("delta") or {}).get("content")
                if delta:
                    parts.append(delta)
                    if on_delta is not None:
                        await on_delta(delta)
                finish = choice.get("finish_reason") or finish
        if not done and finish is None:
            self.fail("malformed stream: ended before [DONE] or a finish_reason", retryable=True)
        kept = tuple(logprobs) if req.top_logprobs is not None else None
        inp, out, cached = _tokens(usage)
        return Parsed(
            "".join(parts), inp, out, finish, model, logprobs=kept, cached_input_tokens=cached
        )
