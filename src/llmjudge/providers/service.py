"""Providers and models: create, read, update, delete; the built-in simulator; call totals.

Model calls go through ``providers.llm.LLMService``; a change here refreshes its cache.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.db.rows import columns, get_or_not_found
from llmjudge.infra.errors import Conflict, Invalid, NotFound
from llmjudge.providers.crypto import KeyCipher, last4
from llmjudge.providers.llm import LLMService, info_of, models_query
from llmjudge.providers.models import LLMCall, LLMModel, Provider
from llmjudge.providers.schemas import (
    MAX_API_KEY_CHARS,
    ModelIn,
    ModelOut,
    ModelPatch,
    ProviderIn,
    ProviderOut,
    ProviderPatch,
    ProviderSummary,
)

BUILTIN_SIMULATOR = "Simulator"
# Distinct models because a persona needs a judge model different from its task model.
BUILTIN_SIMULATED_MODELS = (
    ("simulated-judge", "judge"),
    ("simulated-task", "task"),
    ("simulated-engineer", "engineer"),
)
_BUILTIN_MODEL_NAMES = frozenset(name for name, _ in BUILTIN_SIMULATED_MODELS)
# What a session with no judge model, and a persona made from a template, find by name; a
# change here would break them until the next start re-created the built-ins.
_BUILTIN_PROVIDER_FIELDS = ("name", "kind")
_BUILTIN_MODEL_FIELDS = ("name", "provider_id", "model")


def _is_builtin_provider(p: Provider) -> bool:
    return p.name == BUILTIN_SIMULATOR and p.kind == "simulator"


async def _is_builtin_model(db: AsyncSession, m: LLMModel) -> bool:
    if m.name not in _BUILTIN_MODEL_NAMES:
        return False
    p = await db.get(Provider, m.provider_id)
    return p is not None and _is_builtin_provider(p)


def _refuse_builtin(what: str, action: str) -> Conflict:
    return Conflict(
        f"{what} is built in (sessions without a judge model and persona templates use it): "
        f"it cannot be {action}; add your own provider or model instead"
    )


# -- provider CRUD -----------------------------------------------------------------------------


def _provider_out(p: Provider, model_count: int) -> ProviderOut:
    return ProviderOut.model_validate(
        columns(p)
        | {
            "simulated": p.kind == "simulator",
            "api_key_set": p.api_key_encrypted is not None,
            "api_key_last4": p.api_key_last4 or None,
            "settings": dict(p.settings or {}),
            "model_count": model_count,
        }
    )


async def list_providers(*, db: AsyncSession) -> list[ProviderOut]:
    counts = (
        select(LLMModel.provider_id, func.count().label("n"))
        .group_by(LLMModel.provider_id)
        .subquery()
    )
    rows = await db.execute(
        select(Provider, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.provider_id == Provider.id)
        .order_by(Provider.name)
    )
    return [_provider_out(p, n) for p, n in rows.all()]


def summary(p: ProviderOut) -> ProviderSummary:
    """A provider as shown to someone who may use it but not administer it."""
    return ProviderSummary.model_validate(p.model_dump())


async def _get_provider(db: AsyncSession, provider_id: int) -> Provider:
    p = await get_or_not_found(db, Provider, provider_id, "provider")
    return p


async def get_provider(*, db: AsyncSession, provider_id: int) -> ProviderOut:
    p = await _get_provider(db, provider_id)
    n = await db.scalar(select(func.count()).where(LLMModel.provider_id == provider_id))
    return _provider_out(p, n or 0)


async def _check_name(
    db: AsyncSession,
    table: type[Provider] | type[LLMModel],
    name: str,
    exclude_id: int | None = None,
) -> None:
    """409 when another provider (or model) already has this name."""
    stmt = select(table.id).where(table.name == name)
    if exclude_id is not None:
        stmt = stmt.where(table.id != exclude_id)
    if await db.scalar(stmt):
        what = "provider" if table is Provider else "model"
        raise Conflict(f"a {what} named {name!r} already exists")


def _set_key(p: Provider, key: str | None, cipher: KeyCipher) -> None:
    key = (key or "").strip()
    if len(key) > MAX_API_KEY_CHARS:
        raise Invalid(f"api_key is longer than {MAX_API_KEY_CHARS} characters")
    p.api_key_encrypted = cipher.encrypt(key) if key else None
    p.api_key_last4 = last4(key) if key else None


async def create_provider(
    *, db: AsyncSession, data: ProviderIn, cipher: KeyCipher, llm: LLMService | None = None
) -> ProviderOut:
    await _check_name(db, Provider, data.name)
    p = Provider(**data.model_dump(exclude={"api_key"}))
    _set_key(p, data.api_key.get_secret_value() if data.api_key else None, cipher)
    db.add(p)
    await db.commit()
    await db.refresh(p)
    if llm is not None:
        await llm.refresh(p.id)
    return _provider_out(p, 0)


async def update_provider(
    *,
    db: AsyncSession,
    provider_id: int,
    patch: ProviderPatch,
    cipher: KeyCipher,
    llm: LLMService | None = None,
) -> ProviderOut:
    p = await _get_provider(db, provider_id)
    changes = patch.model_dump(exclude_unset=True)
    if _is_builtin_provider(p):
        changed = [
            f for f in _BUILTIN_PROVIDER_FIELDS if f in changes and changes[f] != getattr(p, f)
        ]
        if changed:
            raise _refuse_builtin(
                f"the {BUILTIN_SIMULATOR} provider", f"given another {changed[0]}"
            )
    for required in ("name", "kind", "max_concurrency", "timeout_s", "max_retries", "settings"):
        if required in changes and changes[required] is None:
            raise Invalid(f"{required} cannot be null")
    if "name" in changes and changes["name"] != p.name:
        await _check_name(db, Provider, changes["name"], exclude_id=p.id)
    moved = ("base_url" in changes and changes["base_url"] != p.base_url) or (
        "kind" in changes and changes["kind"] != p.kind
    )
    if "api_key" in changes:
        _set_key(p, patch.api_key.get_secret_value() if patch.api_key else None, cipher)
        del changes["api_key"]
    elif moved:
        # The key was given for the old server: never send it to a new one unasked.
        _set_key(p, None, cipher)
    for field, value in changes.items():
        setattr(p, field, value)
    await db.commit()
    await db.refresh(p)  # updated_at is set by the server
    if llm is not None:
        await llm.refresh(provider_id)
    return await get_provider(db=db, provider_id=provider_id)


async def delete_provider(
    *, db: AsyncSession, provider_id: int, llm: LLMService | None = None
) -> None:
    """Delete a provider and its models (accounting rows stay); never the built-in one."""
    p = await _get_provider(db, provider_id)
    if _is_builtin_provider(p):
        raise _refuse_builtin(f"the {BUILTIN_SIMULATOR} provider", "deleted")
    await db.delete(p)
    await db.commit()
    if llm is not None:
        await llm.refresh(provider_id)


# -- model CRUD --------------------------------------------------------------------------------


def _model_out(m: LLMModel, p: Provider) -> ModelOut:
    info = info_of(m, p)
    pricing = info.pricing
    return ModelOut.model_validate(
        dataclasses.asdict(info)
        | {
            "created_at": m.created_at,
            "cached_input_price_in_use": pricing.cached_input_per_million,
            "cache_write_price_in_use": pricing.cache_write_per_million,
        }
    )


async def list_models(*, db: AsyncSession, provider_id: int | None = None) -> list[ModelOut]:
    stmt = models_query()
    if provider_id is not None:
        stmt = stmt.where(LLMModel.provider_id == provider_id)
    rows = await db.execute(stmt.order_by(Provider.name, LLMModel.name))
    return [_model_out(m, p) for m, p in rows.all()]


async def get_model(*, db: AsyncSession, model_id: int) -> ModelOut:
    row = (await db.execute(models_query().where(LLMModel.id == model_id))).first()
    if row is None:
        raise NotFound(f"model {model_id} not found")
    return _model_out(*row)


async def _check_provider_exists(db: AsyncSession, provider_id: int) -> None:
    if await db.get(Provider, provider_id) is None:
        raise Invalid(f"provider {provider_id} does not exist")


async def create_model(*, db: AsyncSession, data: ModelIn) -> ModelOut:
    await _check_provider_exists(db, data.provider_id)
    await _check_name(db, LLMModel, data.name)
    m = LLMModel(**data.model_dump())
    db.add(m)
    await db.commit()
    return await get_model(db=db, model_id=m.id)


async def update_model(
    *, db: AsyncSession, model_id: int, patch: ModelPatch, llm: LLMService | None = None
) -> ModelOut:
    m = await get_or_not_found(db, LLMModel, model_id, "model")
    changes = patch.model_dump(exclude_unset=True)
    required = (
        "provider_id",
        "name",
        "model",
        "input_price_per_million",
        "output_price_per_million",
        "batch_discount",
    )
    for field in required:
        if field in changes and changes[field] is None:
            raise Invalid(f"{field} cannot be null")
    if await _is_builtin_model(db, m):
        changed = [f for f in _BUILTIN_MODEL_FIELDS if f in changes and changes[f] != getattr(m, f)]
        if changed:
            what = (
                "moved to another provider"
                if changed[0] == "provider_id"
                else (f"given another {changed[0]}")
            )
            raise _refuse_builtin(f"the model {m.name!r}", what)
    if "provider_id" in changes:
        await _check_provider_exists(db, changes["provider_id"])
    if "name" in changes and changes["name"] != m.name:
        await _check_name(db, LLMModel, changes["name"], exclude_id=m.id)
    for field, value in changes.items():
        setattr(m, field, value)
    await db.commit()
    if llm is not None:
        llm.forget_model(model_id)
    return await get_model(db=db, model_id=model_id)


async def delete_model(*, db: AsyncSession, model_id: int, llm: LLMService | None = None) -> None:
    m = await get_or_not_found(db, LLMModel, model_id, "model")
    if await _is_builtin_model(db, m):
        raise _refuse_builtin(f"the model {m.name!r}", "deleted")
    await db.delete(m)
    await db.commit()
    if llm is not None:
        llm.forget_model(model_id)


# -- built-ins and totals ----------------------------------------------------------------------


async def ensure_builtin_simulator(*, db: AsyncSession) -> None:
    """Create the "Simulator" provider and its three models when missing (safe to run from
    several processes at once; a deleted built-in comes back at the next start)."""
    await db.execute(
        insert(Provider)
        .values(name=BUILTIN_SIMULATOR, kind="simulator", max_concurrency=256, settings={})
        .on_conflict_do_nothing(index_elements=["name"])
    )
    provider_id = await db.scalar(select(Provider.id).where(Provider.name == BUILTIN_SIMULATOR))
    await db.execute(
        insert(LLMModel)
        .values(
            [
                {"provider_id": provider_id, "name": name, "model": model}
                for name, model in BUILTIN_SIMULATED_MODELS
            ]
        )
        .on_conflict_do_nothing(index_elements=["name"])
    )
    await db.commit()


async def totals(
    *, db: AsyncSession, session_id: int | None = None, persona_id: int | None = None
) -> dict[str, float | int]:
    """Sums over ``llm_calls`` (all, or one session's / persona's). Rows still buffered in
    ``PgAccounting`` (at most ~0.2 s old) are not counted: ``LLMService.flush()`` first for
    exact numbers."""
    stmt = select(
        func.count(),
        func.coalesce(func.sum(LLMCall.input_tokens), 0),
        func.coalesce(func.sum(LLMCall.output_tokens), 0),
        func.coalesce(func.sum(LLMCall.cost_usd), 0.0),
        func.count().filter(LLMCall.cache_hit),
    )
    if session_id is not None:
        stmt = stmt.where(LLMCall.session_id == session_id)
    if persona_id is not None:
        stmt = stmt.where(LLMCall.persona_id == persona_id)
    calls, inp, out, cost, hits = (await db.execute(stmt)).one()
    return {
        "calls": int(calls),
        "input_tokens": int(inp),
        "output_tokens": int(out),
        "cost_usd": float(cost),
        "cache_hits": int(hits),
    }
