"""Google Gemini ``generateContent`` / ``streamGenerateContent?alt=sse``.

Gemini's ``responseSchema`` is an OpenAPI subset, so JSON schemas are converted first
(``to_gemini_schema``): unsupported keys dropped, local ``$ref`` inlined, ``["x", "null"]``
types and ``anyOf [..., null]`` turned into ``nullable``, type names upper-cased.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from llmjudge.providers.base import ChatRequest, DeltaCallback
from llmjudge.providers.clients import HttpCall, HttpChatClient, Parsed, SseEvent

_SCHEMA_KEYS = frozenset(
    {
        "type",
        "format",
        "description",
        "nullable",
        "enum",
        "properties",
        "required",
        "items",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minProperties",
        "maxProperties",
        "pattern",
        "anyOf",
        "propertyOrdering",
        "example",
        "default",
    }
)
_MAX_REF_DEPTH = 16


def to_gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A Gemini ``responseSchema`` from a JSON schema (pure; recursive refs are cut off)."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    return _convert(schema, defs, 0)


def _convert(node: Mapping[str, Any], defs: Mapping[str, Any], depth: int) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1])
        if target is None or depth >= _MAX_REF_DEPTH:
            return {"type": "OBJECT"}
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, defs, depth + 1)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            types = [value] if isinstance(value, str) else list(value)
            concrete = [t for t in types if t != "null"]
            out["type"] = (concrete[0] if concrete else "string").upper()
            if "null" in types:
                out["nullable"] = True
        elif key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {name: _convert(sub, defs, depth) for name, sub in value.items()}
        elif key == "items" and isinstance(value, Mapping):
            out[key] = _convert(value, defs, depth)
        elif key == "anyOf":
            options = [o for o in value if o.get("type") != "null"]
            if len(options) < len(value):
                out["nullable"] = True
            if len(options) == 1:
                out.update(_convert(options[0], defs, depth))
            else:
                out[key] = [_convert(o, defs, depth) for o in options]
        elif key in _SCHEMA_KEYS:
            out[key] = value
    return out


def to_contents(
    messages: Sequence[Mapping[str, str]],
) -> tuple[str, list[dict[str, Any]]]:
    """System text and ``contents`` with roles user/model, consecutive same roles merged."""
    system = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
    contents: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "system":
            continue
        role = "model" if m.get("role") == "assistant" else "user"
        text = str(m.get("content", ""))
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].append({"text": text})
        else:
            contents.append({"role": role, "parts": [{"text": text}]})
    return "\n\n".join(system), contents


def _candidate_text(data: Mapping[str, Any]) -> tuple[str, str | None]:
    candidates = data.get("candidates") or []
    if not candidates:
        return "", None
    first = candidates[0]
    parts = (first.get("content") or {}).get("parts") or []
    text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
    return text, first.get("finishReason")


def _usage(data: Mapping[str, Any]) -> tuple[int | None, int | None]:
    meta = data.get("usageMetadata")
    if not meta:
        return None, None
    # Thinking tokens are billed as output.
    output = meta.get("candidatesTokenCount", 0) + meta.get("thoughtsTokenCount", 0)
    return meta.get("promptTokenCount"), output


def _cached(data: Mapping[str, Any]) -> int:
    """Prompt tokens read from the implicit cache (part of ``promptTokenCount``)."""
    return int((data.get("usageMetadata") or {}).get("cachedContentTokenCount") or 0)


class GeminiClient(HttpChatClient):
    default_base_url = "https://generativelanguage.googleapis.com"

    def is_auth_error(self, status: int, message: str) -> bool:
        # Gemini answers a bad key with 400 "API key not valid".
        return super().is_auth_error(status, message) or (
            status == 400 and "api key" in message.lower()
        )

    def build_embed(self, model: str, texts: list[str]) -> HttpCall:
        """``batchEmbedContents``: one request per text, one call for the batch."""
        headers = {"Content-Type": "application/json"}
        if self.cfg.api_key:
            headers["x-goog-api-key"] = self.cfg.api_key
        body = {
            "requests": [
                {"model": f"models/{model}", "content": {"parts": [{"text": t}]}} for t in texts
            ]
        }
        url = f"{self.base_url}/v1beta/models/{model}:batchEmbedContents"
        return HttpCall(url, headers, body, {})

    def parse_embed(self, data: Any) -> tuple[list[list[float]], int | None]:
        return [list(map(float, e["values"])) for e in data["embeddings"]], None

    def build(self, req: ChatRequest, *, stream: bool) -> HttpCall:
        system, contents = to_contents(req.messages)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config: dict[str, Any] = {}
        if req.temperature is not None:
            config["temperature"] = req.temperature
        if req.max_tokens is not None:
            config["maxOutputTokens"] = req.max_tokens
        if req.json_schema is not None:
            config["responseMimeType"] = "application/json"
            config["responseSchema"] = to_gemini_schema(req.json_schema)
        if config:
            body["generationConfig"] = config
        model = req.model.removeprefix("models/")
        method = "streamGenerateContent" if stream else "generateContent"
        params = {"alt": "sse"} if stream else {}
        headers = {"Content-Type": "application/json"}
        if self.cfg.api_key:
            headers["x-goog-api-key"] = self.cfg.api_key
        return HttpCall(f"{self.base_url}/v1beta/models/{model}:{method}", headers, body, params)

    def _check_blocked(self, data: Mapping[str, Any]) -> None:
        if not data.get("candidates"):
            reason = (data.get("promptFeedback") or {}).get("blockReason")
            if reason:
                self.fail(f"response blocked: {reason}", retryable=False)

    def parse_response(self, data: Any, req: ChatRequest) -> Parsed:
        self._check_blocked(data)
        if not data.get("candidates"):
            self.fail("malformed response: no candidates", retryable=True)
        text, finish = _candidate_text(data)
        input_tokens, output_tokens = _usage(data)
        model = data.get("modelVersion")
        return Parsed(
            text, input_tokens, output_tokens, finish, model, cached_input_tokens=_cached(data)
        )

    async def consume_stream(
        self, events: AsyncIterator[SseEvent], req: ChatRequest, on_delta: DeltaCallback
    ) -> Parsed:
        parts: list[str] = []
        finish: str | None = None
        input_tokens: int | None = None
        output_tokens: int | None = None
        model: str | None = None
        cached = 0
        async for ev in events:
            data = self.load_event_object(ev.data)
            self._check_blocked(data)
            piece, chunk_finish = _candidate_text(data)
            if piece:
                parts.append(piece)
                if on_delta is not None:
                    await on_delta(piece)
            finish = chunk_finish or finish
            chunk_in, chunk_out = _usage(data)  # cumulative: the last chunk's counts win
            input_tokens = chunk_in if chunk_in is not None else input_tokens
            output_tokens = chunk_out if chunk_out is not None else output_tokens
            cached = _cached(data) or cached
            model = data.get("modelVersion") or model
        # Gemini's SSE has no terminator event: the last chunk carries finishReason.
        if finish is None:
            self.fail("malformed stream: ended without a finishReason", retryable=True)
        return Parsed(
            "".join(parts),
            input_tokens,
            output_tokens,
            finish,
            model,
            cached_input_tokens=cached,
        )
