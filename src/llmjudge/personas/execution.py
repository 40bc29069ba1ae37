"""How a persona's training sends its judge's labels: ``live`` (each call as it comes) or
``batch`` (the provider's batch API at its batch price: ``batch_labels``), chosen when
training starts or resumes. Evaluation (``POST /api/personas/{id}/evaluate``) answers in
its request and stays live: a batch job may take up to 24 hours."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import Invalid
from llmjudge.personas.lookup import persona_row
from llmjudge.personas.models import Persona
from llmjudge.providers import LLMModel, Provider, batch_unsupported
from llmjudge.sessions import BatchOut, ProviderBatch

__all__ = ["TrainingIn", "choose_execution", "persona_batches_out"]


class TrainingIn(BaseModel):
    """How a start or a resume sends the judge's labels (unset body: as stored, live at
    first)."""

    model_config = ConfigDict(extra="forbid")
    execution: Literal["live", "batch"] = Field(
        default="live",
        description="live: each judge label as it comes; batch: the labels of an iteration "
        "go to the judge provider's batch API (OpenAI Batch, Anthropic Message Batches) at "
        "its batch price, answered within 24 hours. The task model's answers and the prompt "
        "engineer stay live",
    )
    batch_fallback: Literal["none", "live"] = Field(
        default="none",
        description="execution batch with a judge whose provider has no batch API (the "
        "simulator, Gemini) or an embedding judge: none refuses (422), live trains live; "
        "live also labels live the answers a batch job could not (expired, cancelled)",
    )


async def _refusal(db: AsyncSession, p: Persona) -> str | None:
    """Why this persona's judge labels cannot go through a batch API, or None."""
    if p.judge_kind != "llm":
        return "an embedding judge calls no judge model"
    if p.judge_model_id is None:
        return None  # start refuses a persona without a judge model
    row = (
        await db.execute(
            select(LLMModel.name, Provider.name, Provider.kind)
            .join(Provider, Provider.id == LLMModel.provider_id)
            .where(LLMModel.id == p.judge_model_id)
        )
    ).one_or_none()
    if row is None:
        return None
    why = batch_unsupported(row[2])
    return None if why is None else f"judge model {row[0]} (provider {row[1]}): {why}"


async def choose_execution(db: AsyncSession, p: Persona, choice: TrainingIn | None) -> None:
    """Set the persona's execution from ``choice`` (kept as stored when None): ``batch``
    when asked and possible, ``live`` when batch is impossible and the user chose
    ``batch_fallback`` live, else ``Invalid`` (422) saying why. Not committed."""
    if choice is None:
        if p.execution == "batch" and await _refusal(db, p) is not None:
            p.execution = "live"  # the judge changed to one without a batch API
        return
    p.batch_fallback = choice.batch_fallback
    p.execution = "live"
    if choice.execution == "live":
        return
    why = await _refusal(db, p)
    if why is None:
        p.execution = "batch"
    elif choice.batch_fallback != "live":
        raise Invalid(
            f"execution batch is not possible: {why}. Choose execution live, or "
            "batch_fallback live to train live"
        )


async def persona_batches_out(*, db: AsyncSession, persona_id: int) -> list[BatchOut]:
    """A persona's provider batch jobs (its training's judge labels), oldest first."""
    await persona_row(db, persona_id)  # 404 for an unknown persona
    rows = await db.scalars(
        select(ProviderBatch)
        .where(ProviderBatch.persona_id == persona_id)
        .order_by(ProviderBatch.id)
    )
    return [BatchOut.model_validate(r) for r in rows]
