"""Providers, their models, per-call accounting and the response cache."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column, relationship

from llmjudge.infra.db.base import Base, child_rows, created_at_column, owned_by, updated_at_column

PROVIDER_KINDS = ("openai", "anthropic", "gemini", "simulator")
# The share of the live price a provider batch call saves: OpenAI's Batch API and Anthropic's
# Message Batches both charge half (published prices, 2024-2026); per model, overridable.
BATCH_DISCOUNT = 0.5
MAX_CONCURRENCY = 1024


class Provider(Base):
    __tablename__ = "providers"
    __table_args__ = (
        CheckConstraint(f"kind IN {PROVIDER_KINDS!r}", name="kind"),
        CheckConstraint(f"max_concurrency BETWEEN 1 AND {MAX_CONCURRENCY}", name="concurrency"),
        CheckConstraint("(rpm IS NULL OR rpm > 0) AND (tpm IS NULL OR tpm > 0)", name="limits"),
        CheckConstraint("timeout_s > 0 AND max_retries >= 0", name="timeouts"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(20))
    base_url: Mapped[str | None] = mapped_column(Text)
    # Fernet token (see crypto.py); the plain key is never stored.
    api_key_encrypted: Mapped[str | None] = mapped_column(Text)
    api_key_last4: Mapped[str | None] = mapped_column(String(4))
    rpm: Mapped[int | None] = mapped_column(Integer)
    tpm: Mapped[int | None] = mapped_column(Integer)
    max_concurrency: Mapped[int] = mapped_column(Integer, default=64, server_default="64")
    timeout_s: Mapped[float] = mapped_column(Float, default=60.0, server_default="60")
    max_retries: Mapped[int] = mapped_column(Integer, default=4, server_default="4")
    settings: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict, server_default="{}")
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = updated_at_column()

    models: Mapped[list[LLMModel]] = child_rows("provider")


class LLMModel(Base):
    __tablename__ = "llm_models"
    __table_args__ = (
        CheckConstraint(
            "input_price_per_million >= 0 AND output_price_per_million >= 0", name="prices"
        ),
        CheckConstraint("batch_discount BETWEEN 0 AND 1", name="batch_discount"),
        CheckConstraint(
            "(cached_input_price_per_million IS NULL OR cached_input_price_per_million >= 0)"
            " AND (cache_write_price_per_million IS NULL OR cache_write_price_per_million >= 0)",
            name="cache_prices",
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    provider_id: Mapped[int] = owned_by("providers", index=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    model: Mapped[str] = mapped_column(String(300))
    input_price_per_million: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    output_price_per_million: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    batch_discount: Mapped[float] = mapped_column(
        Float, default=BATCH_DISCOUNT, server_default=str(BATCH_DISCOUNT)
    )
    # Prompt-cache prices; None: the provider kind's published default
    # (``base.CACHE_PRICE_SHARES`` of the input price).
    cached_input_price_per_million: Mapped[float | None] = mapped_column(Float)
    cache_write_price_per_million: Mapped[float | None] = mapped_column(Float)
    context_window: Mapped[int | None] = mapped_column(Integer)
    default_temperature: Mapped[float | None] = mapped_column(Float)
    # Exponential moving average of successful, uncached call latencies (for estimates).
    observed_latency_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = created_at_column()

    provider: Mapped[Provider] = relationship(back_populates="models")


class LLMCall(Base):
    """One model call for accounting. No foreign keys: rows outlive providers, models,
    sessions and personas (cost history), and batched inserts never fail on a deleted parent."""

    __tablename__ = "llm_calls"
    __table_args__ = (
        Index("ix_llm_calls_created_at", "created_at"),  # retention
        # a session's prompt-cache sums, read by an index-only scan (sessions.reads)
        Index(
            "ix_llm_calls_prompt_cache",
            "session_id",
            postgresql_include=["cached_input_tokens", "cache_write_tokens", "cache_saving_usd"],
            postgresql_where=text("cached_input_tokens > 0 OR cache_write_tokens > 0"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    created_at: Mapped[datetime] = created_at_column()
    purpose: Mapped[str] = mapped_column(String(100), default="", server_default="")
    provider_id: Mapped[int] = mapped_column(Integer)
    model_id: Mapped[int | None] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(300))
    session_id: Mapped[int | None] = mapped_column(Integer, index=True)
    persona_id: Mapped[int | None] = mapped_column(Integer, index=True)
    comparison_id: Mapped[int | None] = mapped_column(BigInteger)
    related: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict, server_default="{}")
    input_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    latency_s: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    attempts: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    cache_hit: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    status: Mapped[str] = mapped_column(String(10))
    error: Mapped[str | None] = mapped_column(Text)
    # The provider's prompt cache: input tokens read from it and written to it (both part
    # of input_tokens), and what it saved against the full input price (USD).
    cached_input_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cache_saving_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class LLMCacheEntry(Base):
    __tablename__ = "llm_cache"
    __table_args__ = (Index("ix_llm_cache_created_at", "created_at"),)  # retention

    key: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 hex
    result: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = created_at_column()
    hits: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class LLMProcess(Base):
    """A live process making model calls (heartbeat): rate limits are split among them."""

    __tablename__ = "llm_processes"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    heartbeat_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
