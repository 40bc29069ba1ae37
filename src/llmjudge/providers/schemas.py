"""Provider and model request/response models. API keys go in, never out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, field_validator

from llmjudge.core.fields import not_a_boolean
from llmjudge.providers.models import BATCH_DISCOUNT, MAX_CONCURRENCY

MAX_API_KEY_CHARS = 1000

Kind = Literal["openai", "anthropic", "gemini", "simulator"]


def _strip_name(v: str | None) -> str | None:
    if v is None:
        return None
    v = v.strip()
    if not v:
        raise ValueError("name must not be blank")
    return v


def _check_url(v: str | None) -> str | None:
    if v is None:
        return None
    v = v.strip()
    if not v:
        return None
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("base_url must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise ValueError("base_url must not contain credentials: use api_key")
    return v.rstrip("/")


def _check_key(v: SecretStr | None) -> SecretStr | None:
    """Keys travel in HTTP headers, which carry ASCII only: anything else is a pasting slip
    (a curly quote, a non-breaking space, an accent) that would fail every call."""
    if v is None:
        return None
    key = v.get_secret_value().strip()
    if len(key) > MAX_API_KEY_CHARS:
        raise ValueError(f"api_key is longer than {MAX_API_KEY_CHARS:,} characters")
    if not all("!" <= c <= "~" for c in key):
        raise ValueError(
            "api_key must be printable ASCII without spaces (letters, digits, punctuation): "
            "check for a pasted curly quote, accent, non-breaking space or line break"
        )
    return SecretStr(key)


# Validated the same way wherever a name, base URL or key comes in (create and patch).
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_strip_name)]
BaseUrl = Annotated[str, Field(max_length=2000), AfterValidator(_check_url)]
ApiKey = Annotated[SecretStr, AfterValidator(_check_key)]


class ProviderIn(BaseModel):
    """A provider. ``base_url`` may point anywhere the server can reach, including internal
    hosts (that is how vLLM, Ollama or LM Studio are used): only trusted administrators should
    be allowed to create or change providers, since the server will send requests (and the
    key) there."""

    model_config = ConfigDict(extra="forbid")
    name: Name
    kind: Kind
    base_url: BaseUrl | None = Field(
        default=None, description="unset = the provider's public endpoint"
    )
    api_key: ApiKey | None = Field(default=None, description="write-only; stored encrypted")
    rpm: int | None = Field(default=None, gt=0, description="requests per minute")
    tpm: int | None = Field(default=None, gt=0, description="tokens per minute")
    max_concurrency: int = Field(default=64, ge=1, le=MAX_CONCURRENCY)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    max_retries: int = Field(default=4, ge=0, le=20)
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="kind-specific options stored in plain text (simulator parameters, "
        "OpenAI auth_header/query...); never put secrets here",
    )

    @field_validator("rpm", "tpm", "max_concurrency", "timeout_s", "max_retries", mode="before")
    @classmethod
    def _numbers_not_booleans(cls, value: Any) -> Any:
        return not_a_boolean(value)


class ProviderPatch(BaseModel):
    """Only the fields sent change. ``api_key``: a new key, or null / "" to remove it.
    ``base_url``, ``rpm``, ``tpm``: null clears them. Changing ``base_url`` or ``kind``
    removes the stored key unless the same request sends one: a key is never sent to a
    server it was not given for."""

    model_config = ConfigDict(extra="forbid")
    name: Name | None = None
    kind: Kind | None = None
    base_url: BaseUrl | None = None
    api_key: ApiKey | None = None
    rpm: int | None = Field(default=None, gt=0)
    tpm: int | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    timeout_s: float | None = Field(default=None, gt=0, le=3600)
    max_retries: int | None = Field(default=None, ge=0, le=20)
    settings: dict[str, Any] | None = None

    @field_validator("rpm", "tpm", "max_concurrency", "timeout_s", "max_retries", mode="before")
    @classmethod
    def _numbers_not_booleans(cls, value: Any) -> Any:
        return not_a_boolean(value)


class ProviderOut(BaseModel):
    id: int
    name: str
    kind: Kind
    simulated: bool
    base_url: str | None
    api_key_set: bool
    api_key_last4: str | None = Field(description="last four characters, when the key is long")
    rpm: int | None
    tpm: int | None
    max_concurrency: int
    timeout_s: float
    max_retries: int
    settings: dict[str, Any]
    model_count: int
    created_at: datetime
    updated_at: datetime


class ProviderSummary(BaseModel):
    """What a reviewer sees of a provider: which service, never where or with what key."""

    id: int
    name: str
    kind: Kind
    simulated: bool
    model_count: int


# A model's numeric fields: JSON's true/false must not pass as 1/0 (schemathesis found it).
MODEL_NUMBERS = (
    "provider_id",
    "input_price_per_million",
    "output_price_per_million",
    "batch_discount",
    "cached_input_price_per_million",
    "cache_write_price_per_million",
    "context_window",
    "default_temperature",
)

_CACHED_PRICE = (
    "USD per million input tokens read from the provider's prompt cache; null: the provider "
    "kind's published default (OpenAI and the simulator 0.5x the input price, Anthropic "
    "0.1x, Gemini 0.25x)"
)
_WRITE_PRICE = (
    "USD per million input tokens written to the provider's prompt cache; null: the provider "
    "kind's published default (Anthropic 1.25x the input price, a 5-minute cache; the "
    "others 1x)"
)


class ModelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider_id: int
    name: Name = Field(description="display name, unique")
    model: str = Field(min_length=1, max_length=300, description="the provider's model id")
    input_price_per_million: float = Field(default=0.0, ge=0, description="USD")
    output_price_per_million: float = Field(default=0.0, ge=0, description="USD")
    batch_discount: float = Field(
        default=BATCH_DISCOUNT,
        ge=0,
        le=1,
        description="share of the live price a provider batch call saves (OpenAI Batch and "
        "Anthropic Message Batches: 0.5, half price)",
    )
    cached_input_price_per_million: float | None = Field(
        default=None, ge=0, description=_CACHED_PRICE
    )
    cache_write_price_per_million: float | None = Field(
        default=None, ge=0, description=_WRITE_PRICE
    )
    context_window: int | None = Field(default=None, gt=0)
    default_temperature: float | None = Field(default=None, ge=0, le=2)

    @field_validator(*MODEL_NUMBERS, mode="before")
    @classmethod
    def _numbers_not_booleans(cls, value: Any) -> Any:
        return not_a_boolean(value)


class ModelPatch(BaseModel):
    """Only the fields sent change; null clears ``context_window`` / ``default_temperature``,
    and puts a prompt-cache price back to the provider's default."""

    model_config = ConfigDict(extra="forbid")
    provider_id: int | None = None
    name: Name | None = None
    model: str | None = Field(default=None, min_length=1, max_length=300)
    input_price_per_million: float | None = Field(default=None, ge=0)
    output_price_per_million: float | None = Field(default=None, ge=0)
    batch_discount: float | None = Field(default=None, ge=0, le=1)
    cached_input_price_per_million: float | None = Field(
        default=None, ge=0, description=_CACHED_PRICE
    )
    cache_write_price_per_million: float | None = Field(
        default=None, ge=0, description=_WRITE_PRICE
    )
    context_window: int | None = Field(default=None, gt=0)
    default_temperature: float | None = Field(default=None, ge=0, le=2)

    @field_validator(*MODEL_NUMBERS, mode="before")
    @classmethod
    def _numbers_not_booleans(cls, value: Any) -> Any:
        return not_a_boolean(value)


class ModelOut(BaseModel):
    id: int
    name: str
    model: str
    provider_id: int
    provider_name: str
    provider_kind: Kind
    simulated: bool
    input_price_per_million: float
    output_price_per_million: float
    batch_discount: float = BATCH_DISCOUNT
    cached_input_price_per_million: float | None = Field(description=_CACHED_PRICE)
    cache_write_price_per_million: float | None = Field(description=_WRITE_PRICE)
    cached_input_price_in_use: float = Field(
        description="USD per million cached input tokens charged: this model's, else the default"
    )
    cache_write_price_in_use: float = Field(
        description="USD per million input tokens written to the cache charged"
    )
    context_window: int | None
    default_temperature: float | None
    observed_latency_s: float | None
    created_at: datetime


class ConnectionTestIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(
        default=None,
        max_length=300,
        description="provider model id to call; default: the provider's first model",
    )


class ConnectionTestOut(BaseModel):
    ok: bool
    provider: str
    model: str
    latency_s: float | None = None
    reply: str | None = Field(default=None, description="the start of the model's answer")
    error: str | None = None
