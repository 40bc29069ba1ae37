"""How a session's judge calls go: ``live`` or ``batch`` (``sessions.run.batches``), decided
at create time so that a session never waits for a batch API its judge does not have."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import Invalid
from llmjudge.providers import LLMModel, Provider, batch_unsupported
from llmjudge.sessions.models import ProviderBatch
from llmjudge.sessions.reads import session_row
from llmjudge.sessions.schemas import BatchOut, SessionIn

__all__ = ["CASCADE_LIVE_ONLY", "batch_refusal", "execution_of", "list_batches"]

CASCADE_LIVE_ONLY = (
    "a cascade panel asks its members one after another, each after the last answered, "
    "and runs live only"
)


def batch_refusal(data: SessionIn, members: Sequence[tuple[LLMModel, Provider]]) -> str | None:
    """Why this session's judge(s) cannot run in batch mode, or None. A panel's members are
    each sent to their own provider's batch API, so each must have one."""
    if data.panel is not None and data.panel.rule == "cascade":
        return CASCADE_LIVE_ONLY
    for k, (m, p) in enumerate(members):
        why = batch_unsupported(p.kind)
        if why is None:
            continue
        who = "judge model" if data.panel is None else f"panel member {k + 1}, model"
        return f"{who} {m.name} (provider {p.name}): {why}"
    return None


def execution_of(data: SessionIn, members: Sequence[tuple[LLMModel, Provider]]) -> str:
    """The execution the session runs with: ``batch`` when asked and possible, ``live``
    when asked, or when batch is impossible and the user chose ``batch_fallback`` = live;
    otherwise ``Invalid`` (422) saying why."""
    if data.execution == "live":
        return "live"
    why = batch_refusal(data, members)
    if why is None:
        return "batch"
    if data.batch_fallback == "live":
        return "live"
    raise Invalid(
        f"execution batch is not possible: {why}. Choose execution live, or batch_fallback "
        "live to run this session live"
    )


async def list_batches(*, db: AsyncSession, session_id: int) -> list[BatchOut]:
    """A session's provider batch jobs, oldest first (none for a live session)."""
    await session_row(db, session_id)  # 404 for an unknown session
    rows = await db.scalars(
        select(ProviderBatch)
        .where(ProviderBatch.session_id == session_id)
        .order_by(ProviderBatch.id)
    )
    return [BatchOut.model_validate(r) for r in rows]
