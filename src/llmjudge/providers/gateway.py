"""The one path every model call takes (database-agnostic core).

cache -> rate limits (estimated tokens) -> concurrency -> client (retries) -> accounting.

Caching policy: by default a call is cached only when ``temperature == 0``; ``None`` means
"the provider's default", which is usually not 0, so it is not cached. Simulator calls are
cached only when the caller passes ``use_cache=True``, because simulated randomness is keyed
by ``context``, which is not part of the cache key. A cache hit costs nothing: it is recorded
with its tokens, ``cost_usd=0`` and ``cache_hit=True``.

Storage for cache and accounting comes through the ``ResponseCache`` and ``Accounting``
protocols; their failures are logged and never fail the call (both are secondary to the answer).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from llmjudge.providers.base import (
    NO_PRICING,
    ChatRequest,
    ChatResult,
    DeltaCallback,
    ModelPricing,
    ProviderClient,
    ProviderConfig,
    ProviderError,
    estimate_tokens,
    messages_text,
)
from llmjudge.providers.ratelimit import ProviderLimiter
from llmjudge.providers.registry import ClientFactory, make_client

log = logging.getLogger(__name__)

# Output tokens assumed for the rate-limit estimate when the request sets no max_tokens.
DEFAULT_OUTPUT_ESTIMATE = 256


class ResponseCache(Protocol):
    async def get(self, key: str) -> ChatResult | None: ...

    async def put(self, key: str, result: ChatResult) -> None: ...


@dataclass(frozen=True)
class CallRecord:
    purpose: str
    provider_id: int
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float
    attempts: int
    cache_hit: bool
    status: Literal["ok", "error"]
    error: str | None
    related: Mapping[str, Any]
    # The provider's prompt cache (not the response cache): input tokens read from it and
    # written to it, and what it saved against the full input price.
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    cache_saving_usd: float = 0.0


class Accounting(Protocol):
    async def record(self, rec: CallRecord) -> None: ...


def cache_key(cfg: ProviderConfig, req: ChatRequest) -> str:
    """Hash of what determines the answer; never the context or the API key.

    For the simulator its settings (seed, noise...) are its "model", so they are included.
    """
    material: dict[str, Any] = {
        "kind": cfg.kind,
        "base_url": cfg.base_url,
        "model": req.model,
        "messages": [dict(m) for m in req.messages],
        "temperature": req.temperature,
        "max_tokens": req.max_tokens,
        "json_schema": req.json_schema,
    }
    if req.top_logprobs is not None:  # only then: earlier keys stay valid
        material["top_logprobs"] = req.top_logprobs
    if cfg.kind == "simulator":
        material["settings"] = dict(cfg.settings)
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def usage(result: ChatResult) -> tuple[int, int, int, int]:
    """A call's billed tokens in ``ModelPricing.cost``'s order: input (all of it), output,
    input read from the prompt cache, input written to it."""
    return (
        result.input_tokens,
        result.output_tokens,
        result.cached_input_tokens,
        result.cache_write_tokens,
    )


def estimate_request_tokens(req: ChatRequest) -> int:
    return estimate_tokens(messages_text(req.messages)) + (
        req.max_tokens or DEFAULT_OUTPUT_ESTIMATE
    )


@dataclass
class _Provider:
    cfg: ProviderConfig
    client: ProviderClient
    limiter: ProviderLimiter


class Gateway:
    def __init__(
        self,
        *,
        cache: ResponseCache | None = None,
        accounting: Accounting | None = None,
        client_factory: ClientFactory = make_client,
    ) -> None:
        self.cache = cache
        self.accounting = accounting
        self._make_client = client_factory
        self._providers: dict[int, _Provider] = {}
        self.rate_share = 1.0  # of every provider's rpm/tpm: see providers.shares
        # Replaced clients may still serve in-flight calls, so they are closed at aclose().
        self._retired: list[ProviderClient] = []

    def register(self, cfg: ProviderConfig) -> None:
        """Add a provider, or rebuild its client and limiter when its configuration changed."""
        current = self._providers.get(cfg.id)
        if current is not None and current.cfg == cfg:
            return
        if current is not None:
            self._retired.append(current.client)
        limiter = ProviderLimiter(cfg.rpm, cfg.tpm, cfg.max_concurrency)
        limiter.set_share(self.rate_share)
        self._providers[cfg.id] = _Provider(cfg, self._make_client(cfg), limiter)

    def set_rate_share(self, share: float) -> None:
        """This process's share of every provider's per-minute limits (1 / live processes)."""
        self.rate_share = share
        for entry in self._providers.values():
            entry.limiter.set_share(share)

    def unregister(self, provider_id: int) -> None:
        current = self._providers.pop(provider_id, None)
        if current is not None:
            self._retired.append(current.client)

    def config(self, provider_id: int) -> ProviderConfig | None:
        entry = self._providers.get(provider_id)
        return entry.cfg if entry else None

    async def chat(
        self,
        provider_id: int,
        req: ChatRequest,
        *,
        pricing: ModelPricing = NO_PRICING,
        purpose: str = "",
        related: Mapping[str, Any] | None = None,
        on_delta: DeltaCallback = None,
        use_cache: bool | None = None,
    ) -> ChatResult:
        entry = self._providers.get(provider_id)
        if entry is None:
            raise ProviderError(f"provider #{provider_id}", "unknown", "provider is not registered")
        cfg = entry.cfg
        record = functools.partial(
            CallRecord, purpose=purpose, provider_id=provider_id, related=dict(related or {})
        )
        if use_cache is None:
            use_cache = cfg.kind != "simulator" and req.temperature == 0
        cache = self.cache if use_cache else None
        key = cache_key(cfg, req) if cache is not None else None
        start = time.perf_counter()

        if cache is not None and key is not None:
            hit = await self._cache_get(cache, key)
            if hit is not None:
                result = dataclasses.replace(
                    hit, cached=True, attempts=0, latency_s=time.perf_counter() - start
                )
                if on_delta is not None:
                    await on_delta(result.text)
                await self._record_ok(record, result, req.model, cost_usd=0.0, cache_hit=True)
                return result

        result = await self._limited(
            entry,
            estimate_request_tokens(req),
            lambda: entry.client.chat(req, on_delta),
            functools.partial(record, model=req.model),
            start,
        )
        if cache is not None and key is not None:
            await self._cache_put(cache, key, result)
        cost = pricing.cost(*usage(result))
        saving = pricing.cache_saving(result.cached_input_tokens, result.cache_write_tokens)
        await self._record_ok(record, result, req.model, cost_usd=cost, cache_saving_usd=saving)
        return result

    async def embed(
        self,
        provider_id: int,
        model: str,
        texts: list[str],
        *,
        pricing: ModelPricing = NO_PRICING,
        purpose: str = "",
        related: Mapping[str, Any] | None = None,
        use_cache: bool = True,
    ) -> tuple[list[list[float]], bool]:
        """Embeddings of ``texts`` and whether they came from the cache.

        Embeddings are deterministic, so they are cached by default (by provider, model and
        texts); limits apply and every call is accounted like a chat call.
        """
        entry = self._providers.get(provider_id)
        if entry is None:
            raise ProviderError(f"provider #{provider_id}", "unknown", "provider is not registered")
        cfg = entry.cfg
        embed_fn = getattr(entry.client, "embed", None)
        if embed_fn is None:
            raise ProviderError(cfg.name, cfg.kind, "this provider has no embeddings endpoint")
        material = {"kind": cfg.kind, "base_url": cfg.base_url, "embed": model, "texts": texts}
        key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
        record = functools.partial(
            CallRecord, purpose=purpose, provider_id=provider_id, related=dict(related or {})
        )
        start = time.perf_counter()
        cache = self.cache if use_cache else None
        if cache is not None:
            hit = await self._cache_get(cache, key)
            if hit is not None:
                hit = dataclasses.replace(
                    hit, model=model, output_tokens=0, latency_s=time.perf_counter() - start
                )
                await self._record_ok(record, hit, model, cost_usd=0.0, cache_hit=True)
                return json.loads(hit.text), True
        tokens = sum(estimate_tokens(t) for t in texts)
        result = await self._limited(
            entry,
            tokens,
            lambda: embed_fn(model, texts),
            functools.partial(record, model=model),
            start,
        )
        if cache is not None:
            await self._cache_put(cache, key, result)
        result = dataclasses.replace(result, output_tokens=0)  # an embedding writes no tokens
        cost = pricing.cost(result.input_tokens, 0)
        await self._record_ok(record, result, model, cost_usd=cost)
        return json.loads(result.text), False

    async def _limited(
        self,
        entry: _Provider,
        tokens: int,
        call: Callable[[], Awaitable[ChatResult]],
        failed: functools.partial[CallRecord],
        start: float,
    ) -> ChatResult:
        """``call`` under the provider's limits; a failed call is accounted, then raised."""
        try:
            async with entry.limiter.slot(tokens) as slot:
                result = await call()
                slot.report(result.input_tokens + result.output_tokens)
        except ProviderError as err:
            await self._record(
                failed(
                    input_tokens=0,
                    output_tokens=0,
                    cost_usd=0.0,
                    latency_s=time.perf_counter() - start,
                    attempts=err.attempts,
                    cache_hit=False,
                    status="error",
                    error=str(err),
                )
            )
            raise
        return result

    async def _record_ok(
        self,
        record: functools.partial[CallRecord],
        result: ChatResult,
        model: str,
        *,
        cost_usd: float,
        cache_hit: bool = False,
        cache_saving_usd: float = 0.0,
    ) -> None:
        """Account a call that answered (from the provider, or the response cache: no
        attempts, and no prompt-cache tokens, since no prompt was sent)."""
        await self._record(
            record(
                model=result.model or model,
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                cost_usd=cost_usd,
                latency_s=result.latency_s,
                attempts=0 if cache_hit else result.attempts,
                cache_hit=cache_hit,
                status="ok",
                error=None,
                cached_input_tokens=0 if cache_hit else result.cached_input_tokens,
                cache_write_tokens=0 if cache_hit else result.cache_write_tokens,
                cache_saving_usd=cache_saving_usd,
            )
        )

    @staticmethod
    async def _cache_get(cache: ResponseCache, key: str) -> ChatResult | None:
        try:
            return await cache.get(key)
        except Exception:
            log.exception("response cache read failed; calling the provider")
            return None

    @staticmethod
    async def _cache_put(cache: ResponseCache, key: str, result: ChatResult) -> None:
        try:
            await cache.put(key, result)
        except Exception:
            log.exception("response cache write failed")

    async def _record(self, rec: CallRecord) -> None:
        if self.accounting is None:
            return
        try:
            await self.accounting.record(rec)
        except Exception:
            log.exception("call accounting failed for provider %s", rec.provider_id)

    async def aclose(self) -> None:
        clients = [p.client for p in self._providers.values()] + self._retired
        self._providers.clear()
        self._retired.clear()
        for client in clients:
            await client.aclose()
