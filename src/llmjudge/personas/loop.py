"""The calibration loop of one persona: answer, judge, human review, metrics, rewrite the
judge prompt.

Iteration ``n`` moves through ``generating -> judging -> awaiting_review -> optimising -> done``
(or stops at ``done`` with the outcome ``converged`` or ``incomplete``). Each model result is
stored the moment it arrives, and each status change is one conditional UPDATE, so a process
that stops (pause, shutdown, crash) loses at most the calls in flight: the next run finds
the stored rows and calls only for what is missing.

``PersonaLoop`` is one state machine; its steps sit by subject: the shared state in
``loop_base``, the labels in ``labelling``, metrics and the rewrite in ``rewriting``. The
pure rules it applies live in ``core.personas``, and who runs it (one task per persona,
under an advisory lock) in ``training``.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert

from llmjudge.core.personas.keys import prompt_hash
from llmjudge.core.personas.templates import render_task_prompt
from llmjudge.personas.events import Progress, publish
from llmjudge.personas.labelling import Labelling
from llmjudge.personas.loop_base import (
    DEFAULT_SIMILARITY_THRESHOLD,
    LLM,
    StepFailed,
    Stopped,
    _Pair,
    embed_texts,
    run_bounded,
)
from llmjudge.personas.models import (
    Persona,
    PersonaIteration,
    TaskOutput,
)
from llmjudge.personas.rewriting import Rewriting

__all__ = [
    "DEFAULT_SIMILARITY_THRESHOLD",
    "LLM",
    "PersonaLoop",
    "StepFailed",
    "Stopped",
    "embed_texts",
    "run_bounded",
]


class PersonaLoop(Labelling, Rewriting):
    """Advances one persona until it waits for humans, stops, or finishes."""

    async def run(self) -> None:
        while not self.stop.is_set():
            async with self.db() as db:
                persona = await db.get(Persona, self.pid)
                it = await db.scalar(
                    select(PersonaIteration)
                    .where(PersonaIteration.persona_id == self.pid)
                    .order_by(PersonaIteration.number.desc())
                    .limit(1)
                )
            if persona is None or persona.status != "training":
                return
            if await self._budget_reached(persona):
                return
            if it is None or (it.status == "done" and it.outcome == "continue"):
                await self._new_iteration(persona, 1 if it is None else it.number + 1)
                continue
            if it.status == "done":  # finished earlier; the persona status lagged behind
                final = "trained" if it.outcome == "converged" else "incomplete"
                await self._set_status(final, it.note)
                return
            # A batch job may take hours at the provider: its judging step has no deadline.
            waits = persona.execution == "batch" and it.status == "judging"
            deadline = asyncio.timeout(None if waits else persona.iteration_timeout_s)
            try:
                if it.status in ("generating", "judging", "optimising"):
                    async with deadline:
                        await self._automatic(persona, it)
                    continue
                # awaiting_review
                if not await self._score(persona, it):
                    return  # humans still have decisions to review
            except TimeoutError:
                if not deadline.expired():
                    raise  # some other timeout: an internal error
                await self.pause(
                    f"iteration {it.number} timed out after {persona.iteration_timeout_s:g} s "
                    f"while {await self._where(it.id)}; resume to continue from there",
                    iteration_id=it.id,
                )
                return
            except StepFailed as e:
                await self.pause(str(e), iteration_id=it.id)
                return
            except Stopped:
                return

    async def _where(self, iteration_id: int) -> str:
        async with self.db() as db:
            status = await db.scalar(
                select(PersonaIteration.status).where(PersonaIteration.id == iteration_id)
            )
        return {"generating": "generating answers", "judging": "judging answers"}.get(
            status or "", "rewriting the judge prompt"
        )

    async def _automatic(self, persona: Persona, it: PersonaIteration) -> None:
        if it.status == "generating":
            await self._generate(persona, it)
            if persona.execution == "batch":
                return  # judged next turn, without the iteration's deadline
        if it.status == "judging":
            await self._judge(persona, it)
            return
        if it.status == "optimising":
            await self._optimise(persona, it)

    # -- step 1: answers --

    async def _generate(self, persona: Persona, it: PersonaIteration) -> None:
        phash = prompt_hash(persona.task_model_id, persona.task_prompt)
        pairs = await self._pairs()
        done = await self._outputs(phash)
        todo = [p for p in pairs if p.id not in done]
        if any(p.answer is None for p in todo) and persona.task_model_id is None:
            raise StepFailed(
                "some pairs have no answer and there is no task model; choose one and resume"
            )
        progress = Progress(self.r.hub, self.pid, "outputs_generated", len(done), len(pairs))

        async def answer(p: _Pair) -> None:
            if p.answer is not None:  # brought by the user: no task model is called
                await self._store_output(p, phash, p.answer)
                await progress.step(it.number)
                return
            prompt = render_task_prompt(persona.task_prompt, input=p.text)
            result = await self._call(
                "task",
                model_id=persona.task_model_id,
                messages=[{"role": "user", "content": prompt}],
                context={
                    "task": "task_answer",
                    "input": p.text,
                    "correct_output": p.correct_output,
                },
                purpose="persona_task",
                related={"persona_id": self.pid, "iteration": it.number, "pair_id": p.id},
            )
            await self._store_output(p, phash, result.text)
            await progress.step(it.number)

        if todo:
            await run_bounded(todo, answer, concurrency=self.r.concurrency, stop=self.stop)
        else:
            await publish(
                self.r.hub,
                self.pid,
                "outputs_generated",
                {"iteration": it.number, "n": len(pairs), "total": len(pairs)},
            )
        await self._advance(it, "judging")

    async def _store_output(self, p: _Pair, phash: str, text_: str) -> None:
        async with self.db() as db:
            await db.execute(
                insert(TaskOutput)
                .values(
                    persona_id=self.pid,
                    pair_id=p.id,
                    prompt_hash=phash,
                    input_hash=p.input_hash,
                    output=text_,
                )
                .on_conflict_do_nothing()
            )
            await db.commit()
