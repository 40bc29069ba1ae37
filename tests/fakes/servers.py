"""Fake LLM provider servers on 127.0.0.1 speaking the real wire formats (test doubles).

``FakeOpenAI`` (chat completions, JSON and SSE), ``FakeAnthropic`` (Messages, JSON and SSE with
the real event names) and ``FakeGemini`` (generateContent / streamGenerateContent?alt=sse) run
as aiohttp apps in the caller's event loop on a random free port::

    async with FakeOpenAI() as fake:
        cfg = ProviderConfig(1, "fake", "openai", base_url=fake.base_url, api_key=fake.state.api_key)
        fake.state.fail_429 = 2          # the next two calls answer 429 + Retry-After
        ...
        assert fake.state.count == 3

Switches live in a mutable ``FakeState``; counters (``fail_429``, ``malformed``...) apply to the
next N calls. ``state.responder`` (request JSON -> reply text) replaces the default answer, so
other tests and benchmarks can reuse a fake with their own replies. For a structured request the
reply text must be JSON (Anthropic sends it back as a tool input).

``state.tokens`` (OpenAI only; request JSON -> generated tokens, each ``(token, logprob,
[(alternative, logprob), ...])``) makes the reply those tokens; a request with
``logprobs: true`` gets them back as ``choices[0].logprobs.content`` (the alternatives cut
to its ``top_logprobs``), per chunk when streamed, as OpenAI, vLLM and llama.cpp send them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web

Responder = Callable[[dict[str, Any]], str]
GeneratedToken = tuple[str, float, list[tuple[str, float]]]
TokenResponder = Callable[[dict[str, Any]], list[GeneratedToken]]
CHUNK_CHARS = 8


@dataclass
class RecordedRequest:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeState:
    api_key: str | None = "test-key"  # None: any key (or none) is accepted
    models: set[str] | None = None  # None: every model exists; else others answer 404
    latency_s: float = 0.0  # added to every call
    slow: int = 0  # the next N calls wait slow_s before answering (to trigger timeouts)
    slow_s: float = 0.0
    fail_429: int = 0
    retry_after: str | None = "1"  # Retry-After sent with 429s (None: no header)
    fail_500: int = 0
    fail_400: int = 0  # next N calls: 400 with a server message
    malformed: int = 0  # next N: a broken JSON body, or a broken data line in a stream
    cut_stream: int = 0  # next N streams: connection dropped half-way, no terminator
    end_early: int = 0  # next N streams: clean end half-way, without the terminator event
    stream_error: int = 0  # next N streams: an error event half-way
    reject_response_format: bool = False  # OpenAI: 400 on response_format (old servers)
    send_usage: bool = True  # False: omit token usage, so clients must estimate
    responder: Responder | None = None
    tokens: TokenResponder | None = None  # OpenAI: the reply as tokens with log probabilities
    keep_requests: bool = True  # False: only count (long benchmark runs)
    # A prompt cache: None: none (no cached tokens reported). Else a prompt prefix of at
    # least this many tokens is cached, as the real services do: OpenAI by itself, in steps
    # of ``cache_step_tokens``, reported in ``prompt_tokens_details.cached_tokens``;
    # Anthropic up to the block marked ``cache_control``, written on first sight
    # (``cache_creation_input_tokens``) and read after (``cache_read_input_tokens``).
    cache_min_tokens: int | None = None
    cache_step_tokens: int = 128
    cached_prompts: list[list[str]] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)
    count: int = 0  # requests received

    def take(self, switch: str) -> bool:
        """Consume one use of a counter switch; True when it fired."""
        left = getattr(self, switch)
        if left > 0:
            setattr(self, switch, left - 1)
            return True
        return False


def fake_tokens(text: str) -> int:
    """Deterministic token count the fakes report (one per whitespace-separated word)."""
    return max(1, len(text.split()))


def common_prefix(words: list[str], seen: list[list[str]]) -> int:
    """The most leading words ``words`` shares with one of the ``seen`` prompts."""
    best = 0
    for other in seen:
        n = 0
        for a, b in zip(words, other, strict=False):
            if a != b:
                break
            n += 1
        best = max(best, n)
    return best


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class FakeProvider:
    """Shared plumbing: start/stop, request log, gates (auth, 404, 429, 500, delays)."""

    kind: ClassVar[str]
    prefix: ClassVar[str] = ""

    def __init__(self, state: FakeState | None = None) -> None:
        self.state = state or FakeState()
        self.app = web.Application()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(
            self.app, shutdown_timeout=0.5, access_log=None, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self.base_url = f"http://{bound_host}:{bound_port}{self.prefix}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- per-format hooks ------------------------------------------------------------------

    def key_of(self, request: web.Request) -> str | None:
        raise NotImplementedError

    def error(self, status: int, message: str, kind: str) -> web.Response:
        raise NotImplementedError

    def auth_error(self) -> web.Response:
        return self.error(401, "invalid api key", "authentication_error")

    def prompt_text(self, body: dict[str, Any]) -> str:
        raise NotImplementedError

    def structured(self, body: dict[str, Any]) -> bool:
        raise NotImplementedError

    # -- shared logic ------------------------------------------------------------------------

    def reply_text(self, body: dict[str, Any]) -> str:
        if self.state.responder is not None:
            return self.state.responder(body)
        prompt = self.prompt_text(body)
        if self.structured(body):
            return json.dumps({"answer": "ok", "echo": prompt[-40:]})
        return f"echo: {prompt}"

    async def gate(
        self, request: web.Request, model: str | None = None
    ) -> tuple[dict[str, Any], web.Response | None]:
        """Record the call, apply delays and failure switches; a response here ends the call.

        ``model`` defaults to the body's ``model`` field.
        """
        kind = ",".join(request.headers.getall("Content-Type", []))
        if kind.split(";")[0].strip() != "application/json":  # one field, one value
            return {}, self.error(400, f"Content-Type {kind!r}", "invalid_request_error")
        try:
            body = await request.json()
        except ValueError:
            return {}, self.error(400, "request body is not JSON", "invalid_request_error")
        model = str(body.get("model", "")) if model is None else model
        st = self.state
        st.count += 1
        if st.keep_requests:
            st.requests.append(
                RecordedRequest(request.path, dict(request.query), dict(request.headers), body)
            )
        delay = st.latency_s + (st.slow_s if st.take("slow") else 0.0)
        if delay:
            await asyncio.sleep(delay)
        if st.api_key is not None and self.key_of(request) != st.api_key:
            return body, self.auth_error()
        if st.models is not None and model not in st.models:
            return body, self.error(404, f"model {model} not found", "not_found_error")
        if st.take("fail_429"):
            resp = self.error(429, "rate limit exceeded", "rate_limit_error")
            if st.retry_after is not None:
                resp.headers["Retry-After"] = st.retry_after
            return body, resp
        if st.take("fail_400"):
            return body, self.error(400, "temperature: must be at most 2", "invalid_request_error")
        if st.take("fail_500"):
            return body, self.error(500, "internal server error", "api_error")
        return body, None

    def malformed_body(self) -> web.Response:
        return web.Response(text='{"id": "broken", "choices": [', content_type="application/json")

    async def stream(
        self, request: web.Request, events: list[bytes], error_event: bytes, terminal: int
    ) -> web.StreamResponse:
        """Write SSE ``events``; ``terminal`` = how many trailing events make the clean end.

        Failure switches act half-way: a broken data line, an error event, a dropped
        connection, or a clean close before the terminal events.
        """
        st = self.state
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        half = max(1, (len(events) - terminal) // 2)
        malformed, errored = st.take("malformed"), st.take("stream_error")
        cut, early = st.take("cut_stream"), st.take("end_early")
        for i, event in enumerate(events):
            if i == half:
                if malformed:
                    await resp.write(b'data: {"broken": \n\n')
                if errored:
                    await resp.write(error_event)
                    return resp
                if cut:
                    assert request.transport is not None
                    request.transport.close()  # drop without the chunked terminator
                    return resp
            if early and i >= len(events) - terminal:
                break
            await resp.write(event)
        await resp.write_eof()
        return resp


def block_text(content: Any) -> str:
    """A Messages API content (a string, or a list of blocks) as its text."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


def sse(data: Any, event: str | None = None, sep: str = "\n\n") -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}{sep}".encode()


class FakeOpenAI(FakeProvider):
    kind = "openai"
    prefix = "/v1"

    def __init__(self, state: FakeState | None = None) -> None:
        super().__init__(state)
        self.app.router.add_post("/v1/chat/completions", self.completions)
        self.app.router.add_get("/v1/models", self.list_models)
        self.app.router.add_post("/v1/embeddings", self.embeddings)
        self.app.router.add_post("/api/embed", self.ollama_embed)  # Ollama's native route

    def key_of(self, request: web.Request) -> str | None:
        return request.headers.get("Authorization", "").removeprefix("Bearer ") or None

    def error(self, status: int, message: str, kind: str) -> web.Response:
        if status == 401:
            message = "Incorrect API key provided: sk-...ey. You can find your API key at ..."
        body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
        return web.json_response(body, status=status)

    def prompt_text(self, body: dict[str, Any]) -> str:
        return str(body["messages"][-1]["content"])

    def structured(self, body: dict[str, Any]) -> bool:
        return "response_format" in body

    def cached_tokens(self, body: dict[str, Any]) -> int:
        """OpenAI's automatic prefix cache: the prompt's longest prefix (in whole steps)
        shared with an earlier prompt, once it reaches the minimum."""
        words = " ".join(str(m.get("content", "")) for m in body["messages"]).split()
        shared = common_prefix(words, self.state.cached_prompts)
        self.state.cached_prompts.append(words)
        minimum = self.state.cache_min_tokens or 0
        if shared < minimum:
            return 0
        step = self.state.cache_step_tokens
        return min(len(words), shared // step * step)

    async def embeddings(self, request: web.Request) -> web.Response:
        """``/v1/embeddings``: a deterministic 8-dimensional vector per text (letter counts of
        a-h), listed in reverse so clients must order them by ``index``."""
        body, failed = await self.gate(request)
        if failed is not None:
            return failed
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [
            {"object": "embedding", "index": i, "embedding": [t.count(c) + 0.5 for c in "abcdefgh"]}
            for i, t in enumerate(texts)
        ]
        usage = {"prompt_tokens": sum(fake_tokens(t) for t in texts)}
        return web.json_response({"object": "list", "data": data[::-1], "usage": usage})

    async def ollama_embed(self, request: web.Request) -> web.Response:
        body, failed = await self.gate(request)
        if failed is not None:
            return failed
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = [[t.count(c) + 0.5 for c in "abcdefgh"] for t in texts]
        return web.json_response({"model": body["model"], "embeddings": vectors})

    async def list_models(self, request: web.Request) -> web.Response:
        names = sorted(self.state.models or {"fake-model"})
        return web.json_response({"object": "list", "data": [{"id": n} for n in names]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body, failed = await self.gate(request)
        if failed is not None:
            return failed
        if self.state.reject_response_format and "response_format" in body:
            return web.json_response(
                {
                    "error": {
                        "message": "Invalid parameter: 'response_format' of type 'json_schema'"
                        " is not supported with this model.",
                        "type": "invalid_request_error",
                        "param": "response_format",
                        "code": None,
                    }
                },
                status=400,
            )
        generated = self.state.tokens(body) if self.state.tokens is not None else None
        text = (
            "".join(t for t, _, _ in generated) if generated is not None else self.reply_text(body)
        )
        model = body["model"]
        prompt_tokens = sum(fake_tokens(str(m.get("content", ""))) for m in body["messages"])
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": fake_tokens(text),
            "total_tokens": prompt_tokens + fake_tokens(text),
        }
        if self.state.cache_min_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens(body)}
        if not body.get("stream"):
            if self.state.take("malformed"):
                return self.malformed_body()
            reply: dict[str, Any] = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                        "logprobs": self.logprobs(body, generated),
                    }
                ],
            }
            if self.state.send_usage:
                reply["usage"] = usage
            return web.json_response(reply)
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model}

        def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
            return sse({**base, "choices": [choice]})

        events = [chunk({"role": "assistant", "content": ""})]
        if generated is None:
            events += [chunk({"content": piece}) for piece in chunks(text)]
        else:  # one chunk per token, each with its own log probabilities
            events += [
                chunk({"content": tok[0]}, logprobs=self.logprobs(body, [tok])) for tok in generated
            ]
        # The clean end: finish chunk, usage chunk (when asked for), [DONE].
        tail = [chunk({}, "stop")]
        if self.state.send_usage and (body.get("stream_options") or {}).get("include_usage"):
            tail.append(sse({**base, "choices": [], "usage": usage}))
        tail.append(sse("[DONE]"))
        error_event = sse({"error": {"message": "server overloaded", "type": "server_error"}})
        return await self.stream(request, events + tail, error_event, len(tail))

    @staticmethod
    def logprobs(
        body: dict[str, Any], generated: list[GeneratedToken] | None
    ) -> dict[str, Any] | None:
        """``choices[].logprobs`` as OpenAI sends it: only when the request asked."""
        if generated is None or not body.get("logprobs"):
            return None
        top = int(body.get("top_logprobs") or 0)
        return {
            "content": [
                {
                    "token": token,
                    "logprob": logprob,
                    "bytes": list(token.encode()),
                    "top_logprobs": [
                        {"token": t, "logprob": lp, "bytes": list(t.encode())}
                        for t, lp in alternatives[:top]
                    ],
                }
                for token, logprob, alternatives in generated
            ],
            "refusal": None,
        }


class FakeAnthropic(FakeProvider):
    kind = "anthropic"

    def __init__(self, state: FakeState | None = None) -> None:
        super().__init__(state)
        self.app.router.add_post("/v1/messages", self.messages)

    def key_of(self, request: web.Request) -> str | None:
        return request.headers.get("x-api-key")

    def error(self, status: int, message: str, kind: str) -> web.Response:
        if status == 401:
            message = "invalid x-api-key"
        if status == 529:
            kind = "overloaded_error"
        return web.json_response(
            {"type": "error", "error": {"type": kind, "message": message}}, status=status
        )

    def prompt_text(self, body: dict[str, Any]) -> str:
        return block_text(body["messages"][-1]["content"])

    def structured(self, body: dict[str, Any]) -> bool:
        return bool(body.get("tools"))

    def prompt_cache(self, body: dict[str, Any]) -> tuple[int, int] | str:
        """(read, written) tokens of the prefix up to the ``cache_control`` block, or the
        400 message the real API gives for a malformed marker."""
        parts: list[tuple[str, Any]] = []  # (text, its block's cache_control)
        for content in [body.get("system", "")] + [m["content"] for m in body["messages"]]:
            if isinstance(content, str):
                parts.append((content, None))
                continue
            parts += [(b.get("text", ""), b.get("cache_control")) for b in content]
        marks = [i for i, (_, mark) in enumerate(parts) if mark is not None]
        if len(marks) > 4:
            return "A maximum of 4 blocks with cache_control may be provided."
        for i in marks:
            mark = parts[i][1]
            if mark.get("type") != "ephemeral" or set(mark) - {"type", "ttl"}:
                return f"cache_control: unexpected value {json.dumps(mark)}"
        if not marks or self.state.cache_min_tokens is None:
            return 0, 0
        words = "".join(text for text, _ in parts[: marks[-1] + 1]).split()
        if len(words) < self.state.cache_min_tokens:
            return 0, 0  # too short to cache: sent uncached, without an error
        if words in self.state.cached_prompts:
            return len(words), 0
        self.state.cached_prompts.append(words)
        return 0, len(words)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body, failed = await self.gate(request)
        if failed is not None:
            return failed
        if "max_tokens" not in body:
            return self.error(400, "max_tokens: Field required", "invalid_request_error")
        text = self.reply_text(body)
        model = body["model"]
        tool = body["tools"][0]["name"] if self.structured(body) else None
        cache = self.prompt_cache(body)
        if isinstance(cache, str):
            return self.error(400, cache, "invalid_request_error")
        read, written = cache
        # Anthropic's input_tokens leaves out what was read from or written to the cache.
        input_tokens = (
            fake_tokens(block_text(body.get("system", "")))
            + sum(fake_tokens(block_text(m["content"])) for m in body["messages"])
            - read
            - written
        )
        cache_usage = {"cache_read_input_tokens": read, "cache_creation_input_tokens": written}
        output_tokens = fake_tokens(text)
        stop_reason = "tool_use" if tool else "end_turn"
        if not body.get("stream"):
            if self.state.take("malformed"):
                return self.malformed_body()
            block: dict[str, Any] = (
                {"type": "tool_use", "id": "toolu_fake", "name": tool, "input": json.loads(text)}
                if tool
                else {"type": "text", "text": text}
            )
            reply: dict[str, Any] = {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [block],
                "stop_reason": stop_reason,
                "stop_sequence": None,
            }
            if self.state.send_usage:
                reply["usage"] = {
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    **cache_usage,
                }
            return web.json_response(reply)
        usage_start = {"input_tokens": input_tokens, "output_tokens": 1, **cache_usage}
        events = [
            sse(
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_fake",
                        "type": "message",
                        "role": "assistant",
                        "content": [],
                        "model": model,
                        "stop_reason": None,
                        "stop_sequence": None,
                        **({"usage": usage_start} if self.state.send_usage else {}),
                    },
                },
                "message_start",
            ),
            sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": (
                        {"type": "tool_use", "id": "toolu_fake", "name": tool, "input": {}}
                        if tool
                        else {"type": "text", "text": ""}
                    ),
                },
                "content_block_start",
            ),
            sse({"type": "ping"}, "ping"),
        ]
        for piece in chunks(text):
            delta = (
                {"type": "input_json_delta", "partial_json": piece}
                if tool
                else {"type": "text_delta", "text": piece}
            )
            events.append(
                sse(
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                    "content_block_delta",
                )
            )
        events.append(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        message_delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        }
        if self.state.send_usage:
            message_delta["usage"] = {"output_tokens": output_tokens}
        events.append(sse(message_delta, "message_delta"))
        events.append(sse({"type": "message_stop"}, "message_stop"))
        error_event = sse(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "error",
        )
        return await self.stream(request, events, error_event, 1)


class FakeGemini(FakeProvider):
    kind = "gemini"

    def __init__(self, state: FakeState | None = None) -> None:
        super().__init__(state)
        self.app.router.add_post("/v1beta/models/{target}", self.generate)

    def key_of(self, request: web.Request) -> str | None:
        return request.headers.get("x-goog-api-key") or request.query.get("key")

    def error(self, status: int, message: str, kind: str) -> web.Response:
        names = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}
        body = {
            "error": {"code": status, "message": message, "status": names.get(status, "INTERNAL")}
        }
        return web.json_response(body, status=status)

    def auth_error(self) -> web.Response:
        # What Gemini really does with a bad key: 400, not 401.
        return self.error(400, "API key not valid. Please pass a valid API key.", "")

    def prompt_text(self, body: dict[str, Any]) -> str:
        return str(body["contents"][-1]["parts"][-1]["text"])

    def structured(self, body: dict[str, Any]) -> bool:
        return "responseSchema" in (body.get("generationConfig") or {})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["target"].partition(":")
        body, failed = await self.gate(request, model)
        if failed is not None:
            return failed
        if method == "batchEmbedContents":  # letter counts of a-h, as FakeOpenAI's
            vectors = [
                {"values": [r["content"]["parts"][0]["text"].count(c) + 0.5 for c in "abcdefgh"]}
                for r in body["requests"]
            ]
            return web.json_response({"embeddings": vectors})
        if method not in ("generateContent", "streamGenerateContent"):
            return self.error(404, f"method {method} not found", "")
        text = self.reply_text(body)
        prompt = sum(fake_tokens(p.get("text", "")) for c in body["contents"] for p in c["parts"])
        usage = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": fake_tokens(text),
            "totalTokenCount": prompt + fake_tokens(text),
        }

        def reply(piece: str, finish: str | None) -> dict[str, Any]:
            candidate: dict[str, Any] = {
                "content": {"parts": [{"text": piece}], "role": "model"},
                "index": 0,
            }
            if finish:
                candidate["finishReason"] = finish
            out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
            if self.state.send_usage:
                out["usageMetadata"] = usage
            return out

        if method == "generateContent":
            if self.state.take("malformed"):
                return self.malformed_body()
            return web.json_response(reply(text, "STOP"))
        if request.query.get("alt") != "sse":
            return self.error(400, "this fake only streams with alt=sse", "")
        pieces = chunks(text)
        events = [
            sse(reply(p, "STOP" if i == len(pieces) - 1 else None), sep="\r\n\r\n")
            for i, p in enumerate(pieces)
        ]
        if len(events) == 1:  # so that "half-way" failures have a place to happen
            events.insert(0, sse(reply("", None), sep="\r\n\r\n"))
        error_event = sse(
            {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}
        )
        return await self.stream(request, events, error_event, 1)


FAKES: dict[str, type[FakeProvider]] = {
    "openai": FakeOpenAI,
    "anthropic": FakeAnthropic,
    "gemini": FakeGemini,
}
