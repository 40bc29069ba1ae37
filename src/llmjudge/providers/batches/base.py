"""What every provider batch API offers the batch runner (``sessions.run.batches``).

A ``BatchClient`` speaks one provider's batch wire format over HTTP. Its request lines are
built by the provider's own chat client (``build``: the same body a live call sends) and its
result bodies read by the same client (``parse_response``), so a batch call and a live call
ask and read alike. The runner stores every step before the next one, so each method here
is one idempotent-or-findable provider operation:

- ``upload`` (a file of requests; None where the API takes them inline),
- ``create`` (the job), and ``find`` (the job a crash left unrecorded after ``create``),
- ``get`` (poll), ``cancel``, and ``results`` (one ``BatchLine`` per request answered).
"""

from __future__ import annotations

import asyncio
import json
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, TypeVar

import aiohttp
import httpx

from llmjudge.providers.base import (
    BACKOFF_BASE_S,
    BACKOFF_MAX_S,
    ChatRequest,
    ChatResult,
    ProviderConfig,
    ProviderError,
    backoff_delay,
)
from llmjudge.providers.clients import HttpChatClient, Parsed, is_timeout

__all__ = [
    "TERMINAL_STATES",
    "BatchClient",
    "BatchLimits",
    "BatchLine",
    "RemoteBatch",
    "epoch",
    "malformed",
]

T = TypeVar("T")

# Provider states after which a job changes no more (its results can be applied).
TERMINAL_STATES = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """How large one job may be, and how many a session keeps in flight."""

    max_requests: int
    max_bytes: int
    max_in_flight: int = 4


@dataclass(frozen=True, slots=True)
class RemoteBatch:
    """A job as the provider reports it, its state in OpenAI's words."""

    id: str
    state: str
    total: int = 0
    succeeded: int = 0
    errored: int = 0
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: float | None = None  # epoch seconds
    error: str | None = None

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One result: a reply (``result``), or why there is none (``error``); ``retry`` says
    whether asking again may help (expired, cancelled, a server error) or not (a malformed
    line, a request the provider refused)."""

    custom_id: str | None
    result: ChatResult | None = None
    error: str | None = None
    retry: bool = False


class BatchClient(ABC):
    """One provider's batch API; ``chat`` is that provider's live client (wire format)."""

    kind: ClassVar[str]
    default_limits: ClassVar[BatchLimits]

    def __init__(self, cfg: ProviderConfig, chat: HttpChatClient) -> None:
        self.cfg = cfg
        self.chat = chat
        self.base_url = chat.base_url
        self.limits = _limits(cfg.settings, self.default_limits)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(max(cfg.timeout_s, 60.0)))

    # -- the wire format ---------------------------------------------------------------------

    @abstractmethod
    def entry(self, custom_id: str, req: ChatRequest) -> dict[str, Any]:
        """The request as one element of a job (a JSONL line, or an inline request)."""

    def entry_bytes(self, entry: Mapping[str, Any]) -> int:
        return len(json.dumps(entry, separators=(",", ":")).encode()) + 1

    @abstractmethod
    async def upload(self, entries: Sequence[Mapping[str, Any]]) -> str | None: ...

    @abstractmethod
    async def create(
        self, input_file_id: str | None, entries: Sequence[Mapping[str, Any]], tag: str
    ) -> RemoteBatch: ...

    @abstractmethod
    async def find(
        self,
        *,
        input_file_id: str | None,
        tag: str,
        since: float,
        count: int,
        known: Collection[str],
    ) -> RemoteBatch | None:
        """The job ``create`` made for this stored one, if a crash left it unrecorded."""

    @abstractmethod
    async def get(self, batch_id: str) -> RemoteBatch: ...

    @abstractmethod
    async def cancel(self, batch_id: str) -> RemoteBatch: ...

    @abstractmethod
    def results(
        self, batch: RemoteBatch, request_of: Callable[[str], ChatRequest | None]
    ) -> AsyncIterator[BatchLine]: ...

    # -- shared plumbing -----------------------------------------------------------------------

    def headers(self) -> dict[str, str]:
        call = self.chat.build(ChatRequest(model="batch", messages=[]), stream=False)
        return {k: v for k, v in call.headers.items() if k.lower() != "content-type"}

    def reply(self, body: Any, req: ChatRequest | None, custom_id: str) -> BatchLine:
        """A result body read as the live client reads a response (usage, text)."""
        req = req or ChatRequest(model="", messages=[])
        try:
            parsed: Parsed = self.chat.parse_response(body, req)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            return BatchLine(custom_id, error=f"malformed batch result: unexpected shape ({exc!r})")
        return BatchLine(custom_id, result=self.chat.to_result(parsed, req, 0.0))

    async def call(self, send: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        """One provider operation with the client's error mapping and retries (429, 5xx,
        connection errors; ``max_retries`` with backoff, honouring ``Retry-After``)."""
        base_s = float(self.cfg.settings.get("backoff_base_s", BACKOFF_BASE_S))
        max_s = float(self.cfg.settings.get("backoff_max_s", BACKOFF_MAX_S))
        for n in range(1, max(0, self.cfg.max_retries) + 2):
            try:
                return await self._once(send)
            except ProviderError as err:
                if not err.retryable or n > self.cfg.max_retries:
                    raise
                await asyncio.sleep(
                    backoff_delay(n, base_s=base_s, max_s=max_s, retry_after=err.retry_after)
                )
        raise AssertionError("unreachable")

    async def _once(self, send: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        try:
            resp = await send()
        except (httpx.RequestError, aiohttp.ClientError) as exc:
            if is_timeout(exc):
                self.chat.fail(f"timeout after {self.cfg.timeout_s:g}s", retryable=True)
            self.chat.fail(f"connection error: {type(exc).__name__}: {exc}"[:300], retryable=True)
        if resp.status_code >= 400:
            self.chat.raise_for_status(
                resp.status_code, resp.text, resp.headers, ChatRequest(model="batch", messages=[])
            )
        return resp

    def json_of(self, resp: httpx.Response) -> dict[str, Any]:
        try:
            data = resp.json()
        except ValueError:
            self.chat.fail("malformed batch response: body is not JSON", retryable=True)
        if not isinstance(data, dict):
            self.chat.fail("malformed batch response: not a JSON object", retryable=True)
        return data

    async def lines(self, url: str) -> AsyncIterator[str]:
        """A JSONL download, line by line (retried as a whole only before its first line)."""
        resp = await self.call(lambda: self._http.get(url, headers=self.headers()))
        for line in resp.text.splitlines():
            if line.strip():
                yield line

    async def aclose(self) -> None:
        await self._http.aclose()


def _limits(settings: Mapping[str, Any], default: BatchLimits) -> BatchLimits:
    """The provider's settings ``batch_max_requests``, ``batch_max_bytes``,
    ``batch_max_in_flight`` over the published defaults."""
    return BatchLimits(
        int(settings.get("batch_max_requests", default.max_requests)),
        int(settings.get("batch_max_bytes", default.max_bytes)),
        int(settings.get("batch_max_in_flight", default.max_in_flight)),
    )


_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"([A-Za-z0-9_-]{1,64})"')


def malformed(line: str) -> BatchLine:
    """A result line that is not the JSON it should be: it fails the one request whose
    ``custom_id`` can still be read from it (else no request: the job's missing results are
    asked again)."""
    found = _CUSTOM_ID.search(line)
    return BatchLine(
        found.group(1) if found else None, error=f"malformed batch result line: {line[:200]!r}"
    )


def epoch(value: Any) -> float | None:
    """A timestamp as epoch seconds: OpenAI sends integers, Anthropic RFC 3339 text."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None
