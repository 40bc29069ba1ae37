"""What every step of the calibration loop shares (``loop.PersonaLoop``): the host it runs
in, the persona's stored state changes, bounded concurrency, embeddings, and the judge's
label request (the judge-call pipeline, ``llmjudge.judging``), which the gate
(``evaluate``) sends too."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from sqlalchemy import and_, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from llmjudge.core.personas.keys import task_input
from llmjudge.core.personas.replies import (
    JUDGE_SCHEMA,
)
from llmjudge.core.personas.templates import render_judge_prompt
from llmjudge.infra.errors import NotFound
from llmjudge.judging import JudgeRequest
from llmjudge.personas.embeddings import LocalEmbedder, normalise_rows
from llmjudge.personas.events import Publisher, publish
from llmjudge.personas.models import (
    Persona,
    PersonaIteration,
    PersonaPair,
    TaskOutput,
)
from llmjudge.providers import BudgetExceeded, ChatResult, ProviderError, totals

log = logging.getLogger(__name__)

# The embedding judge's threshold when the optimisation split has too few labels to fit one.
DEFAULT_SIMILARITY_THRESHOLD = 0.8
_LOCAL_EMBEDDER: LocalEmbedder | None = None


def local_embedder() -> LocalEmbedder:
    """One bundled WordLlama per process (its weights load once, on first use)."""
    global _LOCAL_EMBEDDER
    if _LOCAL_EMBEDDER is None:
        _LOCAL_EMBEDDER = LocalEmbedder()
    return _LOCAL_EMBEDDER


async def embed_texts(llm: Any, model_id: int | None, texts: Sequence[str], **kw: Any) -> Any:
    """Unit embeddings of ``texts``: the local model when ``model_id`` is None, else the
    provider's embeddings endpoint through the gateway (cached, accounted)."""
    if model_id is None:
        return await asyncio.to_thread(local_embedder().embed, list(texts))
    try:
        vectors = await llm.embed(model_id=model_id, texts=list(texts), **kw)
    except ProviderError as e:
        raise StepFailed(f"the embeddings model failed: {e.cause}; resume to retry") from e
    return normalise_rows(vectors)


def now() -> datetime:
    return datetime.now(UTC)


class LLM(Protocol):
    async def chat(self, **kwargs: Any) -> ChatResult: ...

    async def flush(self) -> None: ...


class LoopHost(Protocol):
    """What a loop needs from whoever runs it (the training runner)."""

    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    llm: LLM
    hub: Publisher | None
    concurrency: int
    # A persona in batch mode polls its judge's jobs (``batch_labels``); the hook is
    # awaited at each of a job's stages (tests kill the worker there).
    batch_poll_s: float
    batch_poll_max_s: float
    batch_hook: Callable[[str, int], Awaitable[None]] | None


class Stopped(Exception):
    """The loop was asked to stop (pause, shutdown): leave the state as stored."""


class StepFailed(Exception):
    """A step cannot go on (a model keeps failing): pause the persona with this reason."""


T = TypeVar("T")


async def run_bounded(
    items: Sequence[T],
    fn: Callable[[T], Awaitable[None]],
    *,
    concurrency: int,
    stop: asyncio.Event,
) -> None:
    """Run ``fn`` over ``items`` with at most ``concurrency`` in flight.

    Cooperative: after ``stop`` is set or a call fails, no new item starts and the calls in
    flight finish (their results get stored), then the first error is raised.
    """
    it = iter(items)
    errors: list[BaseException] = []

    async def worker() -> None:
        for item in it:
            if stop.is_set() or errors:
                return
            try:
                await fn(item)
            except Exception as e:
                errors.append(e)
                return

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(items))))))
    if errors:
        raise errors[0]
    if stop.is_set():
        raise Stopped


@dataclass
class _Pair:
    id: int
    input: str
    input_b: str | None
    correct_output: str
    input_hash: str
    split: str
    answer: str | None = None

    @property
    def text(self) -> str:
        return task_input(self.input, self.input_b)


def step_failed(what: str, exc: ProviderError | NotFound) -> StepFailed:
    """Why a step cannot go on when the ``what`` model's call failed."""
    if isinstance(exc, BudgetExceeded):  # refused before sending: the cap holds exactly
        return StepFailed(f"budget reached: {exc.cause}; raise the cap and resume to continue")
    if isinstance(exc, ProviderError):
        return StepFailed(f"the {what} model failed: {exc.cause}; resume to retry")
    return StepFailed(f"the {what} model: {exc}; choose another and resume")


def label_request(
    *,
    judge_prompt: str,
    model_id: int,
    input: str,
    answer: str,
    correct_output: str,
    shown_reference: str | None = None,
    purpose: str,
    related: dict[str, Any],
) -> JudgeRequest:
    """The persona judge's call on one answer: its prompt filled in, the label's JSON schema,
    and one more try when the reply cannot be read (a retry bypasses the cache: at
    temperature 0 it would hand back the same unreadable reply)."""
    reference = correct_output if shown_reference is None else shown_reference
    return JudgeRequest(
        model_id=model_id,
        messages=[
            {
                "role": "user",
                "content": render_judge_prompt(
                    judge_prompt, input=input, correct_output=reference, answer=answer
                ),
            }
        ],
        purpose=purpose,
        json_schema=JUDGE_SCHEMA,
        schema_name="judge_label",
        context={
            "task": "judge_label",
            "input": input,
            "correct_output": correct_output,
            "answer": answer,
            "judge_prompt": judge_prompt,
        },
        related=related,
        retries=1,
    )


class LoopState:
    """One persona's loop: its host, id, stop event and stored state changes."""

    def __init__(self, runner: LoopHost, persona_id: int, stop: asyncio.Event) -> None:
        self.r = runner
        self.pid = persona_id
        self.stop = stop
        self.db = runner.sessionmaker

    async def _emit(self, type: str, data: dict[str, Any]) -> None:
        await publish(self.r.hub, self.pid, type, data)

    # -- state changes --

    async def _set_status(self, status: str, reason: str | None) -> bool:
        """Persona status change only from ``training`` (a user's pause wins any race)."""
        async with self.db() as db:
            res = await db.execute(
                update(Persona)
                .where(Persona.id == self.pid, Persona.status == "training")
                .values(status=status, status_reason=reason)
            )
            await db.commit()
        return bool(res.rowcount)  # type: ignore[attr-defined]

    async def pause(self, reason: str, *, iteration_id: int | None = None) -> None:
        if iteration_id is not None:
            async with self.db() as db:
                await db.execute(
                    update(PersonaIteration)
                    .where(PersonaIteration.id == iteration_id)
                    .values(note=reason)
                )
                await db.commit()
        if await self._set_status("paused", reason):
            log.warning("persona %s paused: %s", self.pid, reason)
            await self._emit("paused", {"reason": reason})

    async def _budget_reached(self, persona: Persona) -> bool:
        if persona.budget_usd is None:
            self.r.llm.budgets.set_cap(f"persona:{self.pid}", None, 0.0)
            return False
        async with self.db() as db:
            spent = float((await totals(db=db, persona_id=self.pid))["cost_usd"])
        # Calls reserve their estimated cost against the cap before they are sent
        # (providers.budget): the lagging accounting alone let calls in flight overshoot.
        budgets = self.r.llm.budgets
        budgets.set_cap(f"persona:{self.pid}", persona.budget_usd, spent)
        spent = max(spent, budgets.committed(f"persona:{self.pid}"))
        if spent < persona.budget_usd and not budgets.exhausted(f"persona:{self.pid}"):
            return False
        await self.pause(
            f"budget reached: spent ${spent:.4f} of the ${persona.budget_usd:.4f} cap; "
            "raise the cap and resume to continue"
        )
        return True

    async def _advance(self, it: PersonaIteration, to: str, **values: Any) -> None:
        async with self.db() as db:
            await _advance_in(db, it, to, **values)
            await db.commit()

    async def _new_iteration(self, persona: Persona, number: int) -> None:
        async with self.db() as db:
            await db.execute(
                insert(PersonaIteration)
                .values(
                    persona_id=self.pid,
                    number=number,
                    status="generating",
                    prompt_version=persona.current_version,
                    timings={},
                )
                .on_conflict_do_nothing()
            )
            await db.commit()
        await self._emit(
            "iteration_started", {"iteration": number, "prompt_version": persona.current_version}
        )

    async def _pairs(self) -> list[_Pair]:
        async with self.db() as db:
            rows = await db.scalars(
                select(PersonaPair)
                .where(PersonaPair.persona_id == self.pid)
                .order_by(PersonaPair.position)
            )
            return [
                _Pair(p.id, p.input, p.input_b, p.correct_output, p.input_hash, p.split, p.answer)
                for p in rows
            ]

    async def _outputs(self, phash: str) -> dict[int, tuple[int, str]]:
        """pair id -> (output id, text) of the answers to the current prompt and inputs."""
        async with self.db() as db:
            rows = await db.execute(
                select(TaskOutput.pair_id, TaskOutput.id, TaskOutput.output)
                .join(
                    PersonaPair,
                    and_(
                        PersonaPair.id == TaskOutput.pair_id,
                        PersonaPair.input_hash == TaskOutput.input_hash,
                    ),
                )
                .where(TaskOutput.persona_id == self.pid, TaskOutput.prompt_hash == phash)
            )
            return {pid: (oid, out) for pid, oid, out in rows.all()}

    async def _call(self, what: str, **kwargs: Any) -> ChatResult:
        try:
            return await self.r.llm.chat(**kwargs)
        except (ProviderError, NotFound) as e:
            raise step_failed(what, e) from e


_STEP_TIMINGS = {
    "generating": "generate_s",
    "judging": "judge_s",
    "awaiting_review": "review_s",
    "optimising": "optimise_s",
}


async def _advance_in(db: AsyncSession, it: PersonaIteration, to: str, **values: Any) -> None:
    """Move the iteration to ``to`` (in the caller's transaction), adding the seconds the
    finished step took to its timings."""
    row = await db.get(PersonaIteration, it.id)
    assert row is not None
    elapsed = (now() - row.step_started_at).total_seconds()
    key = _STEP_TIMINGS[row.status]
    timings = dict(row.timings or {})
    timings[key] = round(timings.get(key, 0.0) + elapsed, 3)
    await db.execute(
        update(PersonaIteration)
        .where(PersonaIteration.id == it.id, PersonaIteration.status == row.status)
        .values(status=to, timings=timings, step_started_at=func.now(), **values)
    )
    it.status = to
