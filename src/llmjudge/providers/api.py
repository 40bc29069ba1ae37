"""Providers and models JSON API. API keys are write-only: responses carry ``api_key_set``
and ``api_key_last4``, never the key.

Security note: a provider's ``base_url`` may be any http(s) URL the server can reach,
including hosts on its internal network (that is how local vLLM / Ollama / LM Studio servers
are used). Whoever may create or edit providers can therefore make the server send requests,
with the stored key, to internal hosts (SSRF): restrict these routes to administrators.
"""

from __future__ import annotations

from fastapi import APIRouter, status

from llmjudge.auth import CurrentPrincipal
from llmjudge.core.access import Role
from llmjudge.infra.web import DbSession, QueryId
from llmjudge.providers import service
from llmjudge.providers.deps import LLM
from llmjudge.providers.schemas import (
    ConnectionTestIn,
    ConnectionTestOut,
    ModelIn,
    ModelOut,
    ModelPatch,
    ProviderIn,
    ProviderOut,
    ProviderPatch,
    ProviderSummary,
)

router = APIRouter(prefix="/api", tags=["providers"])


def _administers(principal: CurrentPrincipal) -> bool:
    # Reviewers see which services exist, not where they are or which key they use: the
    # provider settings page is for administrators, and so is what it shows.
    return principal.role.covers(Role.researcher)


@router.get("/providers", response_model=list[ProviderOut] | list[ProviderSummary])
async def list_providers(
    db: DbSession, principal: CurrentPrincipal
) -> list[ProviderOut] | list[ProviderSummary]:
    """All providers (keys shown only as ``api_key_set`` / ``api_key_last4``). Reviewers get
    names and kinds only (``ProviderSummary``)."""
    providers = await service.list_providers(db=db)
    return providers if _administers(principal) else [service.summary(p) for p in providers]


@router.post("/providers", response_model=ProviderOut, status_code=status.HTTP_201_CREATED)
async def create_provider(data: ProviderIn, db: DbSession, llm: LLM) -> ProviderOut:
    """Add a provider. The API key is stored encrypted and never returned."""
    return await service.create_provider(db=db, data=data, cipher=llm.cipher, llm=llm)


@router.get("/providers/{provider_id}", response_model=ProviderOut | ProviderSummary)
async def get_provider(
    provider_id: int, db: DbSession, principal: CurrentPrincipal
) -> ProviderOut | ProviderSummary:
    """One provider; reviewers get its name and kind only."""
    provider = await service.get_provider(db=db, provider_id=provider_id)
    return provider if _administers(principal) else service.summary(provider)


@router.patch("/providers/{provider_id}", response_model=ProviderOut)
async def update_provider(
    provider_id: int, patch: ProviderPatch, db: DbSession, llm: LLM
) -> ProviderOut:
    """Change the fields sent; ``"api_key": null`` (or "") removes the key, and so does a
    new ``base_url`` or ``kind`` sent without a key."""
    return await service.update_provider(
        db=db, provider_id=provider_id, patch=patch, cipher=llm.cipher, llm=llm
    )


@router.delete("/providers/{provider_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_provider(provider_id: int, db: DbSession, llm: LLM) -> None:
    """Delete a provider and its models; past accounting rows stay."""
    await service.delete_provider(db=db, provider_id=provider_id, llm=llm)


@router.post("/providers/{provider_id}/test", response_model=ConnectionTestOut)
async def test_provider(
    provider_id: int, llm: LLM, data: ConnectionTestIn | None = None
) -> ConnectionTestOut:
    """Test the connection with a tiny real call (uncached, no retries). A failed call is
    a 200 with ``ok: false`` and the cause in ``error`` (e.g. "invalid API key for provider
    X"); 422 when the provider has no model and none is named."""
    return await llm.test_connection(provider_id, model=data.model if data else None)


@router.get("/models", response_model=list[ModelOut])
async def list_models(db: DbSession, provider_id: QueryId = None) -> list[ModelOut]:
    """All models (or one provider's), with prices and observed latency."""
    return await service.list_models(db=db, provider_id=provider_id)


@router.post("/models", response_model=ModelOut, status_code=status.HTTP_201_CREATED)
async def create_model(data: ModelIn, db: DbSession) -> ModelOut:
    """Add a model: a display name for one of a provider's model ids, with its prices."""
    return await service.create_model(db=db, data=data)


@router.get("/models/{model_id}", response_model=ModelOut)
async def get_model(model_id: int, db: DbSession) -> ModelOut:
    return await service.get_model(db=db, model_id=model_id)


@router.patch("/models/{model_id}", response_model=ModelOut)
async def update_model(model_id: int, patch: ModelPatch, db: DbSession, llm: LLM) -> ModelOut:
    return await service.update_model(db=db, model_id=model_id, patch=patch, llm=llm)


@router.delete("/models/{model_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_model(model_id: int, db: DbSession, llm: LLM) -> None:
    await service.delete_model(db=db, model_id=model_id, llm=llm)
