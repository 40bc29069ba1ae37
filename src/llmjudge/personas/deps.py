"""Request-bound helpers shared by the persona API and its pages: query parsing, the
process's training runner, persona events, and the training actions that touch them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import HTTPException, Request
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import Invalid, bounded_id
from llmjudge.personas import service, training_control
from llmjudge.personas.batch_labels import PersonaJobs
from llmjudge.personas.events import publish
from llmjudge.personas.execution import TrainingIn
from llmjudge.personas.lookup import persona_row
from llmjudge.personas.schemas import PersonaOut, PromptVersionOut
from llmjudge.personas.summaries import MAX_COMPARE

if TYPE_CHECKING:
    from llmjudge.personas.training import TrainingRunner


def parse_ids(raw: list[str]) -> list[int]:
    """Persona ids from `?ids=1,2,3` and/or `?ids=1&ids=2`, in order, without repeats."""
    ids: list[int] = []
    for part in (p.strip() for chunk in raw for p in chunk.split(",")):
        if not part:
            continue
        try:
            found = bounded_id(part, name="ids must be persona ids: each")
        except Invalid as e:  # the compare page answers HTTPException in place
            raise HTTPException(422, str(e)) from e
        if found not in ids:
            ids.append(found)
    if not ids:
        raise HTTPException(422, "give the personas to compare: ?ids=1,2,3")
    if len(ids) > MAX_COMPARE:
        raise HTTPException(422, f"compare at most {MAX_COMPARE} personas at once")
    return ids


def runner(request: Request) -> TrainingRunner | None:
    """This process's training runner; None where no worker runs in the web process."""
    return getattr(request.app.state, "persona_runner", None)


def wake_runner(request: Request) -> None:
    """Tell this process's training runner (if any) that a persona may have work."""
    found = runner(request)
    if found is not None:
        found.wake()


def running_here(request: Request, persona_id: int) -> bool:
    """Whether this process's runner is running the persona's loop right now."""
    found = runner(request)
    return found is not None and found.is_running(persona_id)


async def publish_event(request: Request, persona_id: int, type: str, data: dict[str, Any]) -> None:
    await publish(getattr(request.app.state, "events", None), persona_id, type, data)


async def begin_training(
    request: Request,
    db: AsyncSession,
    persona_id: int,
    *,
    resume: bool,
    choice: TrainingIn | None = None,
) -> PersonaOut:
    """Start a draft (or resume a paused) persona and wake the runner to take it."""
    begin = training_control.resume_training if resume else training_control.start_training
    out = await begin(db=db, persona_id=persona_id, choice=choice)
    wake_runner(request)
    return out


async def delete_persona(request: Request, db: AsyncSession, persona_id: int) -> None:
    """Delete a persona that is not training; its judge's batch jobs still at the provider
    are cancelled there first (their rows go with it)."""
    p = await persona_row(db, persona_id)
    if p.status != "training":  # else the delete is refused (409) and nothing changes
        jobs = PersonaJobs(request.app.state.engine, request.app.state.llm)
        await jobs.cancel_open(persona_id)
    await service.delete_persona(db=db, persona_id=persona_id)


async def pause_training(request: Request, db: AsyncSession, persona_id: int) -> PersonaOut:
    """Pause a persona, stop its loop here, and tell its watchers why."""
    out = await training_control.pause_training(db=db, persona_id=persona_id)
    found = runner(request)
    if found is not None:
        found.stop_persona(persona_id)
    await publish_event(request, persona_id, "paused", {"reason": out.status_reason})
    return out


async def announce_prompt_version(
    request: Request, persona_id: int, version: PromptVersionOut
) -> None:
    """Tell the persona's watchers about a judge prompt version a person made."""
    data = {"version": version.version, "created_by": "human", "rationale": version.rationale}
    await publish_event(request, persona_id, "prompt_version", data)
