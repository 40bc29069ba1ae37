"""Provider contracts: configuration, request/result types, errors, and the shared retry loop.

Every client (HTTP ones and the simulator) implements ``ProviderClient`` and runs its single
attempts through ``call_with_retries`` so backoff, ``Retry-After`` and attempt counting behave
the same everywhere. Which client serves which kind is ``providers.registry``'s business: this
module imports no client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Literal, Protocol

ProviderKind = Literal["openai", "anthropic", "gemini", "simulator"]

# Backoff defaults; each can be overridden per provider through ``ProviderConfig.settings``
# (``backoff_base_s``, ``backoff_max_s``, ``retry_after_cap_s``), which tests use to stay fast.
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 20.0
RETRY_AFTER_CAP_S = 60.0

# HTTP statuses worth another try: timeouts, conflicts, rate limits and server-side failures.
RETRYABLE_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True)
class ProviderConfig:
    id: int
    name: str
    kind: ProviderKind
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never shown in reprs or logs
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int = 64
    timeout_s: float = 60.0
    max_retries: int = 4
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: Sequence[Mapping[str, str]]
    temperature: float | None = None
    max_tokens: int | None = None
    json_schema: Mapping[str, Any] | None = None
    schema_name: str = "verdict"
    # Ask for each generated token's log probability and this many alternatives (OpenAI-
    # compatible servers only; providers.registry says which kinds can).
    top_logprobs: int | None = None
    # Hints for the simulator only: never sent to real providers, never part of the cache key.
    context: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ChatResult:
    text: str
    input_tokens: int
    output_tokens: int
    usage_estimated: bool
    latency_s: float
    attempts: int
    cached: bool = False
    model: str = ""
    finish_reason: str | None = None
    # Per generated token: (token, logprob, [(alternative, logprob), ...]); None when the
    # request did not ask for them (``ChatRequest.top_logprobs``) or the server sent none.
    logprobs: tuple[tuple[str, float, tuple[tuple[str, float], ...]], ...] | None = None


class ProviderError(Exception):
    """A failed provider call, with a short human cause that never contains the API key."""

    def __init__(
        self,
        provider: str,
        kind: str,
        cause: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(f"{provider}: {cause}")
        self.provider = provider
        self.kind = kind
        self.cause = cause
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.attempts = attempts

    def __repr__(self) -> str:
        return (
            f"ProviderError(provider={self.provider!r}, kind={self.kind!r}, status={self.status!r},"
            f" cause={self.cause!r}, retryable={self.retryable}, attempts={self.attempts})"
        )


DeltaCallback = Callable[[str], Awaitable[None]] | None


class ProviderClient(Protocol):
    async def chat(self, req: ChatRequest, on_delta: DeltaCallback = None) -> ChatResult:
        """One logical call (with retries); streams text deltas to ``on_delta`` when given."""
        ...

    async def aclose(self) -> None: ...


def estimate_tokens(text: str) -> int:
    """Rough token count (4 characters per token) used when a provider reports no usage."""
    return math.ceil(len(text) / 4)


def messages_text(messages: Sequence[Mapping[str, str]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), or None."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff_delay(
    attempt: int,
    *,
    base_s: float,
    max_s: float,
    retry_after: float | None = None,
    retry_after_cap_s: float = RETRY_AFTER_CAP_S,
    rng: random.Random | None = None,
) -> float:
    """Delay before retry number ``attempt`` (1-based).

    A server's ``Retry-After`` wins (capped); otherwise exponential backoff with full jitter,
    which spreads retries of many concurrent callers instead of synchronising them.
    """
    if retry_after is not None:
        return min(retry_after, retry_after_cap_s)
    ceiling = min(max_s, base_s * 2 ** (attempt - 1))
    return (rng or random).uniform(0.0, ceiling)


async def call_with_retries(
    cfg: ProviderConfig,
    attempt: Callable[[], Awaitable[ChatResult]],
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ChatResult:
    """Run ``attempt`` until it succeeds, fails for good, or ``cfg.max_retries`` is spent.

    ``attempts`` on the result (or on the final ``ProviderError``) counts the calls made. An
    attempt may report more than one call itself (``ChatResult.attempts``), e.g. OpenAI's
    schema fallback resend. A streamed attempt that fails part-way has already emitted deltas;
    the next attempt streams again from the start, so the final ``ChatResult.text`` is the
    authoritative answer.
    """
    base_s = float(cfg.settings.get("backoff_base_s", BACKOFF_BASE_S))
    max_s = float(cfg.settings.get("backoff_max_s", BACKOFF_MAX_S))
    cap_s = float(cfg.settings.get("retry_after_cap_s", RETRY_AFTER_CAP_S))
    start = time.perf_counter()
    calls = 0
    retries = max(0, cfg.max_retries)
    for n in range(1, retries + 2):
        calls += 1
        try:
            result = await attempt()
        except ProviderError as err:
            err.attempts = calls
            if not err.retryable or n > retries:
                raise
            await sleep(
                backoff_delay(
                    n,
                    base_s=base_s,
                    max_s=max_s,
                    retry_after=err.retry_after,
                    retry_after_cap_s=cap_s,
                )
            )
            continue
        calls += result.attempts - 1
        return dataclasses.replace(result, attempts=calls, latency_s=time.perf_counter() - start)
    raise AssertionError("unreachable: the loop either returns or raises")


@dataclass(frozen=True)
class ModelPricing:
    """A model's price per million tokens, in USD."""

    input_per_million: float = 0
    output_per_million: float = 0

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (
            input_tokens * self.input_per_million + output_tokens * self.output_per_million
        ) / 1_000_000


NO_PRICING = ModelPricing()
