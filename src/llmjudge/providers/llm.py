"""``LLMService``, the one entry point for model calls.

Every domain calls models through ``LLMService.chat(model_id=...)``: it resolves the model and
its provider from the database (cached in memory for ``CONFIG_TTL_S``, and dropped at once by
``refresh`` after a change in this process), decrypts the key once, and sends the call through
the ``Gateway`` (cache in ``llm_cache``, limits, retries, accounting in ``llm_calls``).
Provider and model CRUD is in ``providers.service``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.infra.config import Settings
from llmjudge.infra.db.rows import columns, for_dataclass
from llmjudge.infra.errors import Invalid, NotFound
from llmjudge.providers.base import (
    ChatRequest,
    ChatResult,
    DeltaCallback,
    ProviderConfig,
    ProviderError,
    estimate_tokens,
    messages_text,
)
from llmjudge.providers.batches import BatchClient, batch_client, batch_unsupported
from llmjudge.providers.budget import Budgets
from llmjudge.providers.clients import HttpChatClient
from llmjudge.providers.crypto import KeyCipher, SecretKeyError
from llmjudge.providers.gateway import (
    DEFAULT_OUTPUT_ESTIMATE,
    CallRecord,
    Gateway,
    ModelPricing,
    usage,
)
from llmjudge.providers.models import LLMModel, Provider
from llmjudge.providers.registry import make_client
from llmjudge.providers.schemas import (
    ConnectionTestOut,
)
from llmjudge.providers.simulator_params import SimulatorParams
from llmjudge.providers.store import PgAccounting, PgCache

log = logging.getLogger(__name__)

# Other processes' edits reach this one within this many seconds.
CONFIG_TTL_S = 30.0
# observed_latency_s: weight of a new sample, and the least time between two writes.
LATENCY_EMA_ALPHA = 0.1
LATENCY_WRITE_EVERY_S = 5.0

TEST_PROMPT = "Reply with the single word OK."


@dataclass(frozen=True)
class ModelInfo:
    id: int
    name: str
    provider_id: int
    provider_name: str
    provider_kind: str
    model: str
    input_price_per_million: float
    output_price_per_million: float
    context_window: int | None
    default_temperature: float | None
    observed_latency_s: float | None
    simulated: bool
    batch_discount: float = 0.5  # models.BATCH_DISCOUNT
    cached_input_price_per_million: float | None = None
    cache_write_price_per_million: float | None = None

    @property
    def pricing(self) -> ModelPricing:
        """Its prices, the provider kind's prompt-cache defaults where it sets none."""
        return ModelPricing.of(
            self.provider_kind,
            self.input_price_per_million,
            self.output_price_per_million,
            self.cached_input_price_per_million,
            self.cache_write_price_per_million,
        )


def models_query() -> Select[tuple[LLMModel, Provider]]:
    """Models with their providers."""
    return select(LLMModel, Provider).join(Provider, Provider.id == LLMModel.provider_id)


def info_of(m: LLMModel, p: Provider) -> ModelInfo:
    """A model row with its provider's name and kind."""
    values = columns(m) | {
        "provider_name": p.name,
        "provider_kind": p.kind,
        "simulated": p.kind == "simulator",
    }
    return ModelInfo(**for_dataclass(ModelInfo, values))


def configured_latency_s(kind: str, settings: Mapping[str, Any] | None) -> float | None:
    """Seconds per call a provider's own configuration promises: a simulator's mean latency;
    None for real providers, whose latency is only known once observed."""
    if kind != "simulator":
        return None
    return SimulatorParams.from_settings(settings or {}).latency_ms_mean / 1000


def ema(previous: float | None, sample: float, alpha: float = LATENCY_EMA_ALPHA) -> float:
    return sample if previous is None else previous + alpha * (sample - previous)


def _budget_key(related: Mapping[str, Any] | None) -> str | None:
    """The spending cap a call counts against: its persona's training budget, if any."""
    persona = (related or {}).get("persona_id")
    return None if persona is None else f"persona:{persona}"


class LLMService:
    """Model calls by model id, for every domain. One per process (``app.state.llm``)."""

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], settings: Settings) -> None:
        self.sessionmaker = sessionmaker
        self.settings = settings
        self.cipher = KeyCipher(settings)
        self.accounting = PgAccounting(sessionmaker)
        self.gateway = Gateway(cache=PgCache(sessionmaker), accounting=self.accounting)
        # Spending caps reserved before each call (persona training budgets).
        self.budgets = Budgets()
        self._models: dict[int, tuple[float, ModelInfo]] = {}
        self._providers: dict[int, float] = {}  # provider id -> when its config was loaded
        self._keys: dict[str, str] = {}  # ciphertext -> plain key: decrypt once
        self._lock = asyncio.Lock()
        self._latency: dict[int, float] = {}
        self._latency_dirty: set[int] = set()
        self._latency_written = time.monotonic()
        self._latency_task: asyncio.Task[None] | None = None
        self._batch_clients: dict[int, tuple[ProviderConfig, BatchClient]] = {}

    # -- configuration ---------------------------------------------------------------------

    async def model_info(self, model_id: int) -> ModelInfo:
        cached = self._models.get(model_id)
        if cached is not None and time.monotonic() - cached[0] < CONFIG_TTL_S:
            return cached[1]
        async with self.sessionmaker() as db:
            row = (await db.execute(models_query().where(LLMModel.id == model_id))).first()
        if row is None:
            self._models.pop(model_id, None)
            raise NotFound(f"model {model_id} not found")
        info = info_of(*row)
        if model_id in self._latency:
            info = dataclasses.replace(info, observed_latency_s=self._latency[model_id])
        self._models[model_id] = (time.monotonic(), info)
        return info

    async def provider_config(self, provider_id: int) -> ProviderConfig:
        """The provider's configuration, registered in the gateway (key decrypted once)."""
        cfg = self._fresh_config(provider_id)
        if cfg is not None:
            return cfg
        async with self._lock:
            cfg = self._fresh_config(provider_id)  # loaded by another caller meanwhile?
            if cfg is not None:
                return cfg
            async with self.sessionmaker() as db:
                p = await db.get(Provider, provider_id)
            if p is None:
                self.gateway.unregister(provider_id)
                self._providers.pop(provider_id, None)
                raise NotFound(f"provider {provider_id} not found")
            values = columns(p) | {"api_key": self._decrypt(p), "settings": dict(p.settings or {})}
            cfg = ProviderConfig(**for_dataclass(ProviderConfig, values))
            self.gateway.register(cfg)
            self._providers[provider_id] = time.monotonic()
            return cfg

    def _fresh_config(self, provider_id: int) -> ProviderConfig | None:
        loaded = self._providers.get(provider_id)
        if loaded is None or time.monotonic() - loaded >= CONFIG_TTL_S:
            return None
        return self.gateway.config(provider_id)

    def _decrypt(self, p: Provider) -> str | None:
        token = p.api_key_encrypted
        if not token:
            return None
        if token not in self._keys:
            try:
                self._keys[token] = self.cipher.decrypt(token, provider=p.name)
            except SecretKeyError as e:
                raise ProviderError(p.name, p.kind, str(e)) from None
        return self._keys[token]

    async def refresh(self, provider_id: int | None = None) -> None:
        """Forget cached configuration (all, or one provider's and its models') so the next
        call reloads it; call after changing providers or models."""
        if provider_id is None:
            self._models.clear()
            self._providers.clear()
            self._keys.clear()
            return
        self._providers.pop(provider_id, None)
        for mid, (_, info) in list(self._models.items()):
            if info.provider_id == provider_id:
                del self._models[mid]
        async with self.sessionmaker() as db:
            exists = await db.get(Provider, provider_id)
        if exists is None:
            self.gateway.unregister(provider_id)

    def forget_model(self, model_id: int) -> None:
        self._models.pop(model_id, None)

    # -- calls -----------------------------------------------------------------------------

    async def chat(
        self,
        *,
        model_id: int,
        messages: Sequence[Mapping[str, str]],
        json_schema: Mapping[str, Any] | None = None,
        schema_name: str = "verdict",
        context: Mapping[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_logprobs: int | None = None,
        purpose: str,
        related: Mapping[str, Any] | None = None,
        on_delta: DeltaCallback = None,
        use_cache: bool | None = None,
        cache_prefix: int = 0,
    ) -> ChatResult:
        """One model call. ``related`` ids (session_id, persona_id, comparison_id...) are
        stored with the accounting row; ``context`` feeds the simulator only. Raises
        ``errors.NotFound`` for an unknown model and ``ProviderError`` when the call fails."""
        info = await self.model_info(model_id)
        await self.provider_config(info.provider_id)
        req = ChatRequest(
            model=info.model,
            messages=messages,
            temperature=info.default_temperature if temperature is None else temperature,
            max_tokens=max_tokens,
            json_schema=json_schema,
            schema_name=schema_name,
            top_logprobs=top_logprobs,
            context=context,
            cache_prefix=cache_prefix,
        )
        reservation = None
        budget_key = _budget_key(related)
        if budget_key is not None:
            estimate = info.pricing.cost(
                estimate_tokens(messages_text(req.messages)),
                req.max_tokens or DEFAULT_OUTPUT_ESTIMATE,
            )
            reservation = self.budgets.reserve(budget_key, estimate)
        actual = 0.0
        try:
            result = await self.gateway.chat(
                info.provider_id,
                req,
                pricing=info.pricing,
                purpose=purpose,
                related={**(related or {}), "model_id": model_id},
                on_delta=on_delta,
                use_cache=use_cache,
            )
            if not result.cached:
                actual = info.pricing.cost(*usage(result))
        finally:
            self.budgets.settle(reservation, actual)
        if not result.cached:
            self._observe_latency(model_id, result.latency_s)
        return result

    async def embed(
        self,
        *,
        model_id: int,
        texts: Sequence[str],
        purpose: str,
        related: Mapping[str, Any] | None = None,
    ) -> list[list[float]]:
        """Embeddings of ``texts`` from the model's provider (``/v1/embeddings``, Gemini's
        ``batchEmbedContents``, the simulator's bag of words), cached and accounted."""
        info = await self.model_info(model_id)
        await self.provider_config(info.provider_id)
        vectors, _ = await self.gateway.embed(
            info.provider_id,
            info.model,
            list(texts),
            pricing=info.pricing,
            purpose=purpose,
            related={**(related or {}), "model_id": model_id},
        )
        return vectors

    def _observe_latency(self, model_id: int, latency_s: float) -> None:
        cached = self._models.get(model_id)
        previous = self._latency.get(model_id)
        if previous is None and cached is not None:
            previous = cached[1].observed_latency_s
        self._latency[model_id] = ema(previous, latency_s)
        self._latency_dirty.add(model_id)
        busy = self._latency_task is not None and not self._latency_task.done()
        if not busy and time.monotonic() - self._latency_written >= LATENCY_WRITE_EVERY_S:
            self._latency_task = asyncio.create_task(self._write_latency())

    async def _write_latency(self) -> None:
        self._latency_written = time.monotonic()
        dirty, self._latency_dirty = self._latency_dirty, set()
        if not dirty:
            return
        try:
            async with self.sessionmaker() as db:
                for mid in sorted(dirty):
                    await db.execute(
                        update(LLMModel)
                        .where(LLMModel.id == mid)
                        .values(observed_latency_s=self._latency[mid])
                    )
                await db.commit()
        except Exception:  # an estimate only: never fail or crash a caller for it
            log.exception("writing observed model latencies failed")

    async def test_connection(
        self, provider_id: int, *, model: str | None = None
    ) -> ConnectionTestOut:
        """A tiny real call (no cache, no retries, timeout at most 30 s) through a
        throwaway gateway that shares this service's accounting."""
        async with self.sessionmaker() as db:
            p = await db.get(Provider, provider_id)
            if p is None:
                raise NotFound(f"provider {provider_id} not found")
            if model is None:
                model = await db.scalar(
                    select(LLMModel.model)
                    .where(LLMModel.provider_id == provider_id)
                    .order_by(LLMModel.id)
                    .limit(1)
                )
        if model is None:
            raise Invalid(f"provider {p.name} has no model yet: add one, or name a model to test")
        await self.refresh(provider_id)
        try:
            cfg = await self.provider_config(provider_id)
        except ProviderError as e:
            return ConnectionTestOut(ok=False, provider=p.name, model=model, error=e.cause)
        gateway = Gateway(accounting=self.accounting)
        gateway.register(
            dataclasses.replace(cfg, max_retries=0, timeout_s=min(cfg.timeout_s, 30.0))
        )
        start = time.perf_counter()
        try:
            result = await gateway.chat(
                provider_id,
                ChatRequest(
                    model=model,
                    messages=[{"role": "user", "content": TEST_PROMPT}],
                    max_tokens=16,
                    temperature=0,
                ),
                purpose="test_connection",
                use_cache=False,
            )
        except ProviderError as e:
            return ConnectionTestOut(
                ok=False,
                provider=p.name,
                model=model,
                latency_s=time.perf_counter() - start,
                error=e.cause,
            )
        finally:
            await gateway.aclose()
        # Stored at once: a provider that just answered is not tested again at session start.
        await self.accounting.flush()
        return ConnectionTestOut(
            ok=True,
            provider=p.name,
            model=model,
            latency_s=result.latency_s,
            reply=result.text[:200],
        )

    async def flush(self) -> None:
        """Write buffered accounting rows and latencies now."""
        await self.accounting.flush()
        if self._latency_task is not None:
            await self._latency_task
        await self._write_latency()

    # -- batch jobs ------------------------------------------------------------------------

    async def batch_client(self, model_id: int) -> tuple[BatchClient, ModelInfo]:
        """The batch API client of the model's provider (one per provider configuration),
        and the model; ``Invalid`` when the provider's kind has no batch API."""
        info = await self.model_info(model_id)
        cfg = await self.provider_config(info.provider_id)
        why = batch_unsupported(cfg.kind)
        if why is not None:
            raise Invalid(f"model {info.name}: {why}")
        held = self._batch_clients.get(cfg.id)
        if held is not None and held[0] == cfg:
            return held[1], info
        chat = make_client(cfg)
        assert isinstance(chat, HttpChatClient)  # every batch kind speaks HTTP
        client = batch_client(cfg, chat)
        if held is not None:
            await held[1].aclose()
            await held[1].chat.aclose()
        self._batch_clients[cfg.id] = (cfg, client)
        return client, info

    async def record_batch_call(
        self,
        *,
        model_id: int,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float,
        error: str | None,
        related: Mapping[str, Any],
        purpose: str = "judge",
    ) -> None:
        """Account one answered request of a provider batch job (its cost at the batch
        price), as a live call is accounted by the gateway."""
        info = await self.model_info(model_id)
        await self.accounting.record(
            CallRecord(
                purpose=purpose,
                provider_id=info.provider_id,
                model=info.model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=cost_usd,
                latency_s=0.0,
                attempts=1,
                cache_hit=False,
                status="error" if error else "ok",
                error=error,
                related={**related, "model_id": model_id, "batch": True},
            )
        )

    async def aclose(self) -> None:
        for _, client in self._batch_clients.values():
            await client.aclose()
            await client.chat.aclose()
        self._batch_clients.clear()
        await self.gateway.aclose()
        await self.accounting.aclose()
        if self._latency_task is not None:
            await self._latency_task
        await self._write_latency()
