"""Shared machinery of the HTTP provider clients: transport, error mapping, SSE parsing.

Each wire format (``openai``, ``anthropic``, ``gemini`` modules) subclasses ``HttpChatClient``
and supplies three pure-ish pieces: how to build the request, how to read a JSON response and
how to consume an SSE stream. Everything else (timeouts, status mapping, retries, usage
estimation) lives here once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, NoReturn

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from llmjudge.core.text import fastjson
from llmjudge.providers.base import (
    RETRYABLE_STATUSES,
    ChatRequest,
    ChatResult,
    DeltaCallback,
    ProviderConfig,
    ProviderError,
    call_with_retries,
    estimate_tokens,
    messages_text,
    parse_retry_after,
)

_MAX_MESSAGE_CHARS = 300
# How long a stream may stay open after its final event before it is closed unread.
DRAIN_AFTER_END_S = 0.25


@dataclass(frozen=True)
class HttpCall:
    url: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Parsed:
    """What a wire format extracted from one response; None usage means "not reported"."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    model: str | None = None
    logprobs: tuple[tuple[str, float, tuple[tuple[str, float], ...]], ...] | None = None
    # Of the input tokens, those read from / written to the provider's prompt cache.
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0


class SseEvent(NamedTuple):
    event: str
    data: str


async def iter_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """Server-sent events from text lines: ``event:``/``data:`` fields, blank line dispatches."""
    event, data = "", []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SseEvent(event or "message", "\n".join(data))
            event, data = "", []
        elif line.startswith(":"):
            continue  # comment / keep-alive
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
    if data:  # a final event without its blank line still counts; truncation is judged later
        yield SseEvent(event or "message", "\n".join(data))


async def drain(events: AsyncIterator[SseEvent], limit_s: float = DRAIN_AFTER_END_S) -> None:
    """Read what follows a stream's final event (``[DONE]``, ``message_stop``) to its end,
    ignoring it, for at most ``limit_s``.

    A server ends the response right after its final event, so this costs one read at most.
    Leaving the stream unread instead was measured at about 0.1 ms per call: each unfinished
    async generator of the read chain (``iter_sse``, httpx's line, text and byte iterators,
    the transport's) is closed later by the event loop's finalizer hook, one scheduled task
    and self-pipe write apiece, and an unfinished response closes its keep-alive connection.
    A server that keeps the stream open, or drops it, after its final event costs at most
    ``limit_s``: the answer is already complete, so errors here are ignored.
    """
    with contextlib.suppress(TimeoutError, httpx.HTTPError, aiohttp.ClientError, OSError):
        async with asyncio.timeout(limit_s):
            async for _ in events:
                pass


def error_message(body: str) -> str:
    """The human message inside a provider's JSON error body, else the (trimmed) body."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:_MAX_MESSAGE_CHARS]
    if isinstance(data, list) and data:  # Gemini sometimes wraps errors in a list
        data = data[0]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("status") or ""
            return str(msg)[:_MAX_MESSAGE_CHARS]
        if isinstance(err, str):
            return err[:_MAX_MESSAGE_CHARS]
    return body.strip()[:_MAX_MESSAGE_CHARS]


@functools.lru_cache(maxsize=256)
def _url(url: str) -> httpx.URL:
    # A client calls one or two endpoints: parsing each once saves httpx's URL parsing (its
    # regexes and IDNA checks) on every call, measurable at hundreds of calls a second.
    return httpx.URL(url)


def _origin(exc: BaseException) -> BaseException:
    return exc.__cause__ or exc  # httpx-aiohttp chains the original aiohttp error


def is_timeout(exc: Exception) -> bool:
    """httpx-aiohttp maps every aiohttp connection error (refused, reset...) to
    ``ConnectTimeout``, so the original error decides whether time really ran out."""
    if exc.__cause__ is not None:
        return isinstance(exc.__cause__, TimeoutError)
    return isinstance(exc, httpx.TimeoutException | TimeoutError)


class HttpChatClient(ABC):
    """A provider spoken over HTTP with one shared ``httpx`` client on the aiohttp transport."""

    default_base_url: ClassVar[str]

    def __init__(self, cfg: ProviderConfig) -> None:
        self.cfg = cfg
        self.base_url = (cfg.base_url or self.default_base_url).rstrip("/")
        limits = httpx.Limits(
            max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency
        )
        # The aiohttp transport scales far better than httpx's own pool under high concurrency
        # (see DESIGN.md); the timeout applies to connect and to each read (inactivity).
        self._transport = AiohttpTransport(limits=limits)
        self._timeout = httpx.Timeout(cfg.timeout_s).as_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.cfg.name!r}, base_url={self.base_url!r})"

    # -- wire-format hooks -------------------------------------------------------------------

    @abstractmethod
    def build(self, req: ChatRequest, *, stream: bool) -> HttpCall: ...

    @abstractmethod
    def parse_response(self, data: Any, req: ChatRequest) -> Parsed: ...

    @abstractmethod
    async def consume_stream(
        self, events: AsyncIterator[SseEvent], req: ChatRequest, on_delta: DeltaCallback
    ) -> Parsed: ...

    def is_auth_error(self, status: int, message: str) -> bool:
        return status in (401, 403)

    # -- the call path -----------------------------------------------------------------------

    async def chat(self, req: ChatRequest, on_delta: DeltaCallback = None) -> ChatResult:
        return await call_with_retries(self.cfg, lambda: self.attempt(req, on_delta))

    async def attempt(self, req: ChatRequest, on_delta: DeltaCallback) -> ChatResult:
        """One try; subclasses may resend within it (counted through ``ChatResult.attempts``)."""
        return await self.send(self.build(req, stream=on_delta is not None), req, on_delta)

    @contextlib.asynccontextmanager
    async def _post(self, call: HttpCall) -> AsyncIterator[httpx.Response]:
        """``call`` sent straight to the transport, its response open (streamed) until the
        block ends. httpx's client would add cookie jars, auth and redirect flows and URL
        merging that no provider call uses, and the standard JSON encoder: together about a
        tenth of a busy engine's time (a judge prompt is several kilobytes)."""
        headers = httpx.Headers(call.headers)
        headers.setdefault("Content-Type", "application/json")  # the wire formats set it
        request = httpx.Request(
            "POST",
            _url(call.url),
            params=dict(call.params) if call.params else None,
            headers=headers,
            content=fastjson.dumps(call.body),
            extensions={"timeout": self._timeout},
        )
        response = await self._transport.handle_async_request(request)
        try:
            yield response
        finally:
            await response.aclose()

    async def send(self, call: HttpCall, req: ChatRequest, on_delta: DeltaCallback) -> ChatResult:
        start = time.perf_counter()
        try:
            if on_delta is None:
                parsed = await self._send_plain(call, req)
            else:
                parsed = await self._send_stream(call, req, on_delta)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            self.fail(f"invalid base URL {self.base_url!r}: {exc}", retryable=False)
        except UnicodeEncodeError:
            # A key stored before keys were checked at the edge, or an auth header setting.
            self.fail(
                "the API key or an auth header setting holds characters HTTP headers cannot "
                "carry (printable ASCII only): set the key again",
                retryable=False,
            )
        except (httpx.RequestError, aiohttp.ClientError) as exc:
            if is_timeout(exc):
                self.fail(f"timeout after {self.cfg.timeout_s:g}s", retryable=True)
            origin = _origin(exc)
            cause = f"connection error: {type(origin).__name__}: {origin}"
            self.fail(cause[:_MAX_MESSAGE_CHARS], retryable=True)
        return self.to_result(parsed, req, time.perf_counter() - start)

    async def _send_plain(self, call: HttpCall, req: ChatRequest) -> Parsed:
        async with self._post(call) as resp:
            await resp.aread()
        if resp.status_code >= 400:
            self.raise_for_status(resp.status_code, resp.text, resp.headers, req)
        try:
            data = resp.json()
        except ValueError:
            self.fail("malformed response: body is not valid JSON", retryable=True)
        try:
            return self.parse_response(data, req)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            self.fail(f"malformed response: unexpected shape ({exc!r})", retryable=True)

    async def _send_stream(
        self, call: HttpCall, req: ChatRequest, on_delta: DeltaCallback
    ) -> Parsed:
        async with self._post(call) as resp:
            if resp.status_code >= 400:
                body = (await resp.aread()).decode("utf-8", errors="replace")
                self.raise_for_status(resp.status_code, body, resp.headers, req)
            try:
                return await self.consume_stream(iter_sse(resp.aiter_lines()), req, on_delta)
            except (httpx.RequestError, aiohttp.ClientError) as exc:
                if is_timeout(exc):
                    raise
                self.fail(
                    f"malformed stream: connection lost mid-stream ({type(_origin(exc)).__name__})",
                    retryable=True,
                )
            except (KeyError, IndexError, TypeError, AttributeError) as exc:
                self.fail(f"malformed stream: unexpected event shape ({exc!r})", retryable=True)

    def to_result(self, parsed: Parsed, req: ChatRequest, latency_s: float) -> ChatResult:
        estimated = parsed.input_tokens is None or parsed.output_tokens is None
        return ChatResult(
            text=parsed.text,
            input_tokens=(
                parsed.input_tokens
                if parsed.input_tokens is not None
                else estimate_tokens(messages_text(req.messages))
            ),
            output_tokens=(
                parsed.output_tokens
                if parsed.output_tokens is not None
                else estimate_tokens(parsed.text)
            ),
            usage_estimated=estimated,
            latency_s=latency_s,
            attempts=1,
            model=parsed.model or req.model,
            finish_reason=parsed.finish_reason,
            logprobs=parsed.logprobs,
            cached_input_tokens=parsed.cached_input_tokens,
            cache_write_tokens=parsed.cache_write_tokens,
        )

    # -- errors --------------------------------------------------------------------------------

    def fail(
        self,
        cause: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> NoReturn:
        raise ProviderError(
            self.cfg.name,
            self.cfg.kind,
            self.scrub(cause),
            status=status,
            retryable=retryable,
            retry_after=retry_after,
        ) from None

    def scrub(self, text: str) -> str:
        """Servers sometimes echo the key back (OpenAI masks it, others may not)."""
        key = self.cfg.api_key
        return text.replace(key, "***") if key else text

    def raise_for_status(
        self, status: int, body: str, headers: Mapping[str, str], req: ChatRequest
    ) -> NoReturn:
        message = error_message(body)
        if self.is_auth_error(status, message):
            # The server's message is left out: some echo (part of) the key.
            self.fail(
                f"invalid API key for provider {self.cfg.name}", retryable=False, status=status
            )
        if status == 404:
            self.fail(
                f"model not found (or wrong base URL): {req.model!r}: {message}",
                retryable=False,
                status=status,
            )
        retry_after = parse_retry_after(headers.get("retry-after"))
        if status == 429:
            self.fail("rate limited (429)", retryable=True, status=status, retry_after=retry_after)
        if status >= 500 or status in RETRYABLE_STATUSES:
            self.fail(
                f"server error ({status}): {message}",
                retryable=True,
                status=status,
                retry_after=retry_after,
            )
        self.fail(f"bad request ({status}): {message}", retryable=False, status=status)

    def load_event(self, data: str) -> Any:
        try:
            return json.loads(data)
        except ValueError:
            self.fail(f"malformed stream: invalid JSON in data line {data[:80]!r}", retryable=True)

    def load_event_object(self, data: str) -> dict[str, Any]:
        """A stream event that must be a JSON object; one carrying ``error`` fails the call
        (retryable: the stream broke, the request may not have)."""
        event = self.load_event(data)
        if not isinstance(event, dict):
            self.fail("malformed stream: data line is not a JSON object", retryable=True)
        if event.get("error"):
            err = event["error"]
            message = err.get("message", "") if isinstance(err, dict) else str(err)
            self.fail(f"stream error: {message}", retryable=True)
        return event

    # -- embeddings (providers that have an endpoint override the two hooks) ----------------

    def build_embed(self, model: str, texts: list[str]) -> HttpCall:
        self.fail(f"provider kind {self.cfg.kind!r} has no embeddings endpoint", retryable=False)

    def parse_embed(self, data: Any) -> tuple[list[list[float]], int | None]:
        raise NotImplementedError

    async def embed(self, model: str, texts: list[str]) -> ChatResult:
        """Vectors of ``texts`` as a ChatResult whose text is their JSON (so the gateway's
        cache, limits and accounting serve embeddings as they serve chat)."""
        req = ChatRequest(model=model, messages=[{"role": "user", "content": "\n".join(texts)}])

        async def attempt() -> ChatResult:
            call = self.build_embed(model, texts)
            start = time.perf_counter()
            try:
                async with self._post(call) as resp:
                    await resp.aread()
            except (httpx.RequestError, aiohttp.ClientError) as exc:
                if is_timeout(exc):
                    self.fail(f"timeout after {self.cfg.timeout_s:g}s", retryable=True)
                self.fail(f"connection error: {type(_origin(exc)).__name__}", retryable=True)
            if resp.status_code >= 400:
                self.raise_for_status(resp.status_code, resp.text, resp.headers, req)
            try:
                vectors, tokens = self.parse_embed(resp.json())
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                self.fail(f"malformed embeddings response ({exc!r})", retryable=True)
            if len(vectors) != len(texts):
                self.fail(f"{len(vectors)} embeddings for {len(texts)} texts", retryable=True)
            return ChatResult(
                text=json.dumps(vectors),
                input_tokens=tokens
                if tokens is not None
                else estimate_tokens(messages_text(req.messages)),
                output_tokens=0,
                usage_estimated=tokens is None,
                latency_s=time.perf_counter() - start,
                attempts=1,
                model=model,
            )

        return await call_with_retries(self.cfg, attempt)

    async def aclose(self) -> None:
        await self._transport.aclose()
