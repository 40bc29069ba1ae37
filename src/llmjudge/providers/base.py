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
    # Characters at the start of the messages' contents, taken in order, that many calls
    # share (a judge's system prompt, rubric and instructions): where a provider needs a
    # marker for its prompt cache (Anthropic's cache_control), it marks their end. Not part
    # of the response cache key: it changes the price, never the answer.
    cache_prefix: int = 0


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
    # Of ``input_tokens`` (always the whole prompt): those read from the provider's prompt
    # cache, and those written to it (Anthropic bills a write above the input price).
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0


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


# Prompt-cache prices as shares of a model's input price, by provider kind: the published
# defaults, used where a model sets no price of its own (``llm_models``
# ``cached_input_price_per_million`` / ``cache_write_price_per_million``, on the provider
# page). (read, write):
# - OpenAI: cached input at half price for most models (the newest, e.g. gpt-4.1 and gpt-5,
#   at 0.1x or 0.25x: set the model's own price), writing costs nothing extra;
# - Anthropic: a cache read at 0.1x, a cache write (5-minute TTL) at 1.25x;
# - Gemini: implicit caching reads at 0.25x (Gemini 2.5), no write price;
# - the simulator is priced like OpenAI, so a simulated session shows what caching saves.
CACHE_PRICE_SHARES: Mapping[str, tuple[float, float]] = {
    "openai": (0.5, 1.0),
    "anthropic": (0.1, 1.25),
    "gemini": (0.25, 1.0),
    "simulator": (0.5, 1.0),
}


@dataclass(frozen=True, slots=True)
class ModelPricing:
    """A model's prices per million tokens, in USD: input, output, and input read from or
    written to the provider's prompt cache (None: the input price)."""

    input_per_million: float = 0
    output_per_million: float = 0
    cached_input_per_million: float | None = None
    cache_write_per_million: float | None = None

    @classmethod
    def of(
        cls,
        kind: str,
        input_per_million: float,
        output_per_million: float,
        cached_input_per_million: float | None = None,
        cache_write_per_million: float | None = None,
    ) -> ModelPricing:
        """A model's prices with its provider kind's cache defaults where it sets none."""
        read, write = CACHE_PRICE_SHARES.get(kind, (1.0, 1.0))
        return cls(
            input_per_million,
            output_per_million,
            read * input_per_million
            if cached_input_per_million is None
            else cached_input_per_million,
            write * input_per_million
            if cache_write_per_million is None
            else cache_write_per_million,
        )

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        cached_input_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """The price of one call; ``input_tokens`` counts the whole prompt, cached and
        written tokens included (the one cost function: a batch price is a discount on it)."""
        fresh = max(0, input_tokens - cached_input_tokens - cache_write_tokens)
        return (
            fresh * self.input_per_million
            + cached_input_tokens * self._read
            + cache_write_tokens * self._write
            + output_tokens * self.output_per_million
        ) / 1_000_000

    def cache_saving(self, cached_input_tokens: int, cache_write_tokens: int = 0) -> float:
        """What the prompt cache saved on one call against paying the input price for every
        token (negative when writes cost more than the reads saved)."""
        return (
            cached_input_tokens * (self.input_per_million - self._read)
            - cache_write_tokens * (self._write - self.input_per_million)
        ) / 1_000_000

    @property
    def _read(self) -> float:
        read = self.cached_input_per_million
        return self.input_per_million if read is None else read

    @property
    def _write(self) -> float:
        write = self.cache_write_per_million
        return self.input_per_million if write is None else write


NO_PRICING = ModelPricing()
