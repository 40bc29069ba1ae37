"""The calibration loop of one persona: answer, judge, human review, metrics, rewrite the
judge prompt.

Iteration ``n`` moves through ``generating -> judging -> awaiting_review -> optimising -> done``
(or stops at ``done`` with the outcome ``converged`` or ``incomplete``). Each model result is
stored the moment it arrives, and each status change is one conditional UPDATE, so a process
that stops (pause, shutdown, crash) loses at most the calls in flight: the next run finds
the stored rows and calls only for what is missing.

One piece, over 500 lines: ``PersonaLoop`` is one state machine whose steps share the
persona, the iteration row and the stop event; the pure rules it applies live in
``keys``, ``replies`` and ``convergence``, and who runs it (one task per persona, under an
advisory lock) in ``training``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import numpy as np
from sqlalchemy import and_, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.core.personas.convergence import (
    ConvergenceRule,
    bulk_summary,
    decide,
    split_metrics,
    status_dict,
)
from llmjudge.core.personas.keys import prompt_hash, task_input
from llmjudge.core.personas.replies import (
    ENGINEER_SCHEMA,
    JUDGE_SCHEMA,
    MAX_ENGINEER_FAILURES,
    addressed_cases,
    engineer_messages,
    human_label,
    missing_placeholders,
    parse_engineer_rewrite,
    parse_judge_reply,
)
from llmjudge.core.personas.similarity import fit_threshold
from llmjudge.core.personas.templates import render_judge_prompt, render_task_prompt
from llmjudge.infra.errors import NotFound
from llmjudge.personas.embeddings import LocalEmbedder, normalise_rows
from llmjudge.personas.events import Progress, Publisher, publish
from llmjudge.personas.models import (
    JudgePromptVersion,
    Persona,
    PersonaDecision,
    PersonaIteration,
    PersonaPair,
    TaskOutput,
)
from llmjudge.personas.pairs import chosen_label, pair_labels
from llmjudge.providers import BudgetExceeded, ChatResult, LLMCall, ProviderError, totals

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

    sessionmaker: async_sessionmaker[AsyncSession]
    llm: LLM
    hub: Publisher | None
    concurrency: int


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


class PersonaLoop:
    """Advances one persona until it waits for humans, stops, or finishes."""

    def __init__(self, runner: LoopHost, persona_id: int, stop: asyncio.Event) -> None:
        self.r = runner
        self.pid = persona_id
        self.stop = stop
        self.db = runner.sessionmaker

    async def _emit(self, type: str, data: dict[str, Any]) -> None:
        await publish(self.r.hub, self.pid, type, data)

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
            deadline = asyncio.timeout(persona.iteration_timeout_s)
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
        if it.status == "judging":
            await self._judge(persona, it)
            return
        if it.status == "optimising":
            await self._optimise(persona, it)

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
        except BudgetExceeded as e:  # refused before sending: the cap holds exactly
            raise StepFailed(
                f"budget reached: {e.cause}; raise the cap and resume to continue"
            ) from e
        except ProviderError as e:
            raise StepFailed(f"the {what} model failed: {e.cause}; resume to retry") from e
        except NotFound as e:
            raise StepFailed(f"the {what} model: {e}; choose another and resume") from e

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

    # -- step 2: labels --

    async def _carried(
        self, before: int
    ) -> dict[tuple[int, str, str], tuple[bool, str | None, str | None, bool]]:
        """(pair, answer text, judge label) -> the latest human review in earlier iterations."""
        async with self.db() as db:
            rows = await db.execute(
                select(
                    PersonaDecision.pair_id,
                    TaskOutput.output,
                    PersonaDecision.judge_label,
                    PersonaDecision.human_agrees,
                    PersonaDecision.human_notes,
                    PersonaDecision.reviewed_by,
                    PersonaDecision.bulk,
                )
                .join(TaskOutput, TaskOutput.id == PersonaDecision.output_id)
                .where(
                    PersonaDecision.persona_id == self.pid,
                    PersonaDecision.iteration < before,
                    PersonaDecision.human_agrees.is_not(None),
                    # uploaded labels are applied afresh (the annotator choice may change)
                    PersonaDecision.prefilled.is_(False),
                )
                .order_by(PersonaDecision.iteration.desc())
            )
            out: dict[tuple[int, str, str], tuple[bool, str | None, str | None, bool]] = {}
            for pair_id, output, label, agrees, notes, who, bulk in rows.all():
                out.setdefault((pair_id, output, label), (agrees, notes, who, bulk))
            return out

    async def _prefill(self, persona: Persona) -> dict[int, tuple[bool, str]]:
        """pair id -> (human says correct, who) from the uploaded labels: the chosen
        annotator's, else the majority; a tie is left for a person to review."""
        async with self.db() as db:
            labels = await pair_labels(db, self.pid)
        out = {}
        for pair_id, given in labels.items():
            label = chosen_label(given, persona.metrics_annotator)
            if label is not None:
                who = persona.metrics_annotator or ", ".join(sorted(given))
                out[pair_id] = (label, who[:200])
        return out

    async def _judge(self, persona: Persona, it: PersonaIteration) -> None:
        if persona.judge_kind == "embedding":
            await self._judge_by_similarity(persona, it)
            return
        if persona.judge_model_id is None:
            raise StepFailed("the judge model was deleted; choose another and resume")
        phash = prompt_hash(persona.task_model_id, persona.task_prompt)
        pairs = await self._pairs()
        outputs = await self._outputs(phash)
        async with self.db() as db:
            judge_prompt = await db.scalar(
                select(JudgePromptVersion.text).where(
                    JudgePromptVersion.persona_id == self.pid,
                    JudgePromptVersion.version == it.prompt_version,
                )
            )
            judged = set(
                await db.scalars(
                    select(PersonaDecision.pair_id).where(PersonaDecision.iteration_id == it.id)
                )
            )
        assert judge_prompt is not None
        # Pairs added after the answers were generated wait for the next iteration.
        todo = [p for p in pairs if p.id in outputs and p.id not in judged]
        total = len(judged) + len(todo)
        carried = await self._carried(it.number)
        prefill = await self._prefill(persona)
        progress = Progress(self.r.hub, self.pid, "judged", len(judged), total)

        async def label(p: _Pair) -> None:
            output_id, answer = outputs[p.id]
            messages = [
                {
                    "role": "user",
                    "content": render_judge_prompt(
                        judge_prompt, input=p.text, correct_output=p.correct_output, answer=answer
                    ),
                }
            ]
            context = {
                "task": "judge_label",
                "input": p.text,
                "correct_output": p.correct_output,
                "answer": answer,
                "judge_prompt": judge_prompt,
            }
            verdict, raw = None, ""
            for attempt in range(2):  # one more try when the reply cannot be read
                result = await self._call(
                    "judge",
                    model_id=persona.judge_model_id,
                    messages=messages,
                    json_schema=JUDGE_SCHEMA,
                    schema_name="judge_label",
                    context={**context, "call_key": attempt} if attempt else context,
                    purpose="persona_judge",
                    related={"persona_id": self.pid, "iteration": it.number, "pair_id": p.id},
                    # a retry must reach the model: at temperature 0 the cache would
                    # hand back the same unreadable reply
                    use_cache=False if attempt else None,
                )
                raw = result.text
                verdict = parse_judge_reply(raw)
                if verdict is not None:
                    break
            values: dict[str, Any] = {
                "persona_id": self.pid,
                "iteration_id": it.id,
                "iteration": it.number,
                "pair_id": p.id,
                "output_id": output_id,
                "split": p.split,
                "prompt_version": it.prompt_version,
                "raw": raw,
            }
            if verdict is None:
                values.update(
                    judge_label="incorrect",
                    judge_reasoning="The judge's reply could not be read as a label.",
                    parse_error=True,
                )
            else:
                values.update(
                    judge_label=verdict.label,
                    judge_reasoning=verdict.reasoning,
                    judge_confidence=verdict.confidence,
                )
                values.update(self._known_review(p.id, answer, verdict.label, carried, prefill))
            async with self.db() as db:
                await db.execute(insert(PersonaDecision).values(**values).on_conflict_do_nothing())
                await db.commit()
            await progress.step(it.number)

        if todo:
            await run_bounded(todo, label, concurrency=self.r.concurrency, stop=self.stop)
        await self._advance(it, "awaiting_review")
        async with self.db() as db:
            pending, carried_n = (
                await db.execute(
                    select(
                        func.count().filter(PersonaDecision.human_agrees.is_(None)),
                        func.count().filter(PersonaDecision.carried_forward),
                    ).where(PersonaDecision.iteration_id == it.id)
                )
            ).one()
        await self._emit(
            "awaiting_review",
            {
                "iteration": it.number,
                "decisions": total,
                "pending": pending,
                "carried_forward": carried_n,
            },
        )

    @staticmethod
    def _known_review(
        pair_id: int,
        answer: str,
        label: str,
        carried: dict[tuple[int, str, str], tuple[bool, str | None, str | None, bool]],
        prefill: dict[int, tuple[bool, str]],
    ) -> dict[str, Any]:
        """The review already known for this decision: an uploaded label first, else an
        earlier review of the same answer and label (carried forward); else none."""
        if pair_id in prefill:
            human_correct, who = prefill[pair_id]
            return {
                "human_agrees": (label == "correct") == human_correct,
                "reviewed_by": who,
                "reviewed_at": now(),
                "prefilled": True,
            }
        earlier = carried.get((pair_id, answer, label))
        if earlier is None:
            return {}
        return {
            "human_agrees": earlier[0],
            "human_notes": earlier[1],
            "reviewed_by": earlier[2],
            "bulk": earlier[3],
            "reviewed_at": now(),
            "carried_forward": True,
        }

    async def _judge_by_similarity(self, persona: Persona, it: PersonaIteration) -> None:
        """The embedding judge: cosine similarity of each answer to its reference, the
        threshold fitted on the optimisation split's known labels to maximise F1."""
        phash = prompt_hash(persona.task_model_id, persona.task_prompt)
        pairs = await self._pairs()
        outputs = await self._outputs(phash)
        todo = [p for p in pairs if p.id in outputs]
        prefill = await self._prefill(persona)
        carried = await self._carried(it.number)
        answers = [outputs[p.id][1] for p in todo]
        vectors = await embed_texts(
            self.r.llm,
            persona.embedding_model_id,
            [*answers, *(p.correct_output for p in todo)],
            purpose="persona_embed",
            related={"persona_id": self.pid, "iteration": it.number},
        )
        n = len(todo)
        sims = np.clip(np.einsum("ij,ij->i", vectors[:n], vectors[n:]), -1.0, 1.0)
        fit_s, fit_y = [], []
        for p, s_, ans in zip(todo, sims, answers, strict=True):
            if p.split != "optimisation":
                continue
            known = prefill.get(p.id)
            if known is not None:
                fit_s.append(float(s_))
                fit_y.append(known[0])
                continue
            for label in ("correct", "incorrect"):  # a person's earlier review of it
                earlier = carried.get((p.id, ans, label))
                if earlier is not None:
                    fit_s.append(float(s_))
                    fit_y.append((label == "correct") == earlier[0])
                    break
        note = None
        if sum(fit_y) >= 1 and len(fit_y) - sum(fit_y) >= 1:
            threshold = (await asyncio.to_thread(fit_threshold, fit_s, fit_y)).threshold
        else:
            threshold = persona.similarity_threshold or DEFAULT_SIMILARITY_THRESHOLD
            note = (
                f"the optimisation split has no labelled answers of both classes yet; "
                f"similarity threshold {threshold:.3f} used unfitted"
            )
        async with self.db() as db:
            await db.execute(
                update(Persona)
                .where(Persona.id == self.pid)
                .values(similarity_threshold=float(threshold))
            )
            rows = []
            for p, s_, ans in zip(todo, sims, answers, strict=True):
                label = "correct" if s_ >= threshold else "incorrect"
                rows.append(
                    {
                        "persona_id": self.pid,
                        "iteration_id": it.id,
                        "iteration": it.number,
                        "pair_id": p.id,
                        "output_id": outputs[p.id][0],
                        "split": p.split,
                        "prompt_version": it.prompt_version,
                        "raw": "",
                        "judge_label": label,
                        "judge_reasoning": (
                            f"cosine similarity {float(s_):.3f} to the reference, "
                            f"threshold {threshold:.3f}"
                        ),
                        # distance from the threshold: the review queue's least sure first
                        "judge_confidence": float(min(1.0, 0.5 + abs(float(s_) - threshold))),
                        "similarity": float(s_),
                        **self._known_review(p.id, ans, label, carried, prefill),
                    }
                )
            if rows:
                await db.execute(insert(PersonaDecision).on_conflict_do_nothing(), rows)
            if note:
                await db.execute(
                    update(PersonaIteration).where(PersonaIteration.id == it.id).values(note=note)
                )
            await db.commit()
        await publish(self.r.hub, self.pid, "judged", {"iteration": it.number, "n": n, "total": n})
        await self._advance(it, "awaiting_review")
        await self._emit("awaiting_review", {"iteration": it.number, "decisions": n})

    # -- steps 4-5: metrics and convergence --

    async def _score(self, persona: Persona, it: PersonaIteration) -> bool:
        """Metrics once every decision is reviewed; False while some still wait.

        One transaction holding the iteration row: a review posted meanwhile (which locks
        the same row) is either counted or refused because the iteration moved on.
        """
        cost = await self._iteration_cost(it.number)
        async with self.db() as db:
            await db.execute(
                select(PersonaIteration.id).where(PersonaIteration.id == it.id).with_for_update()
            )
            rows = (
                await db.execute(
                    select(
                        PersonaDecision.split,
                        PersonaDecision.judge_label,
                        PersonaDecision.human_agrees,
                        PersonaDecision.bulk,
                    ).where(PersonaDecision.iteration_id == it.id)
                )
            ).all()
            if any(agrees is None for _, _, agrees, _ in rows):
                return False
            # the bootstrap intervals are CPU work: off the event loop
            metrics = await asyncio.to_thread(
                split_metrics, [(side, label, bool(a)) for side, label, a, _ in rows]
            )
            rule = ConvergenceRule(
                target_f1=persona.target_f1,
                basis=persona.convergence_basis,  # type: ignore[arg-type]
                min_per_class=persona.min_per_class,
            )
            selection = [
                ((label == "correct") == bool(a), label == "correct", bool(b))
                for side, label, a, b in rows
                if side == "selection"
            ]
            # An embedding judge has no prompt to rewrite: one iteration decides.
            last = it.number if persona.judge_kind == "embedding" else persona.max_iterations
            st, outcome, note = await asyncio.to_thread(
                decide, selection, rule=rule, number=it.number, max_iterations=last
            )
            convergence = status_dict(st)
            everything = bulk_summary([bool(b) for *_, b in rows], rule.max_bulk_share)
            if everything.mostly and everything.message:
                convergence["warnings"].append(
                    "Trained mostly on bulk labels: " + everything.message
                )
            convergence["bulk_all"] = everything.bulk
            convergence["labels_all"] = everything.n
            values: dict[str, Any] = {
                "metrics_optimisation": metrics["optimisation"],
                "metrics_selection": metrics["selection"],
                "metrics_calibration": metrics["calibration"],
                "convergence": convergence,
                "cost_usd": cost,
            }
            if outcome is not None:
                values.update(outcome=outcome, note=note, finished_at=func.now())
            await _advance_in(db, it, "optimising" if outcome is None else "done", **values)
            await db.commit()
        await self._emit(
            "metrics",
            {
                "iteration": it.number,
                "optimisation": metrics["optimisation"],
                "selection": metrics["selection"],
                "calibration": metrics["calibration"],
                "f1": st.f1.value,
                "compared": st.compared,
                "basis": "selection",
                "status": st.status,
                "message": st.message,
            },
        )
        if outcome is not None:
            final = "trained" if outcome == "converged" else "incomplete"
            await self._set_status(final, note)
            await self._emit(outcome, {"iteration": it.number, "f1": st.f1.value, "note": note})
        return True

    async def _iteration_cost(self, number: int) -> float:
        await self.r.llm.flush()
        async with self.db() as db:
            cost = await db.scalar(
                select(func.coalesce(func.sum(LLMCall.cost_usd), 0.0)).where(
                    LLMCall.persona_id == self.pid,
                    LLMCall.related["iteration"].astext == str(number),
                )
            )
        return float(cost or 0.0)

    # -- step 6: a new judge prompt --

    async def _failures(self, it: PersonaIteration) -> list[dict[str, Any]]:
        """Disagreements on the optimisation split only: selection and calibration cases
        never reach the engineer, or their F1 would stop measuring generalisation."""
        async with self.db() as db:
            rows = await db.execute(
                select(PersonaDecision, PersonaPair, TaskOutput.output)
                .join(PersonaPair, PersonaPair.id == PersonaDecision.pair_id)
                .join(TaskOutput, TaskOutput.id == PersonaDecision.output_id)
                .where(
                    PersonaDecision.iteration_id == it.id,
                    PersonaDecision.split == "optimisation",
                    PersonaDecision.human_agrees.is_(False),
                )
                # Cases with notes first: they carry the most information.
                .order_by(PersonaDecision.human_notes.is_(None), PersonaPair.position)
                .limit(MAX_ENGINEER_FAILURES)
            )
            return [
                {
                    "input": task_input(p.input, p.input_b),
                    "correct_output": p.correct_output,
                    "answer": output,
                    "judge_label": d.judge_label,
                    "reasoning": d.judge_reasoning,
                    "human_label": human_label(d.judge_label, False),
                    "notes": d.human_notes,
                    "pair_id": p.id,
                }
                for d, p, output in rows.all()
            ]

    async def _optimise(self, persona: Persona, it: PersonaIteration) -> None:
        if persona.engineer_model_id is None:
            raise StepFailed("the prompt-engineer model was deleted; choose another and resume")
        async with self.db() as db:
            current = await db.scalar(
                select(JudgePromptVersion.text).where(
                    JudgePromptVersion.persona_id == self.pid,
                    JudgePromptVersion.version == persona.current_version,
                )
            )
        assert current is not None
        failures = await self._failures(it)
        metrics = it.metrics_optimisation
        problem: str | None = None
        proposal = None
        for attempt in range(2):
            result = await self._call(
                "prompt-engineer",
                model_id=persona.engineer_model_id,
                messages=engineer_messages(current, metrics, failures, problem),
                json_schema=ENGINEER_SCHEMA,
                schema_name="judge_prompt",
                context={
                    "task": "prompt_engineer",
                    "judge_prompt": current,
                    "failures": failures,
                    "metrics": metrics or {},
                    "call_key": attempt,
                },
                purpose="persona_engineer",
                related={"persona_id": self.pid, "iteration": it.number},
            )
            parsed = parse_engineer_rewrite(result.text, len(failures))
            if parsed is None:
                problem = (
                    'Your reply was not a JSON object with "prompt" and "rationale". '
                    "Reply again with only that object."
                )
                continue
            missing = missing_placeholders(parsed.prompt)
            if missing:
                problem = (
                    "Your new prompt lacks the placeholder(s) "
                    + ", ".join("{" + m + "}" for m in missing)
                    + ". Reply again with the complete prompt, keeping all three."
                )
                continue
            proposal = parsed
            break
        note: str | None = None
        if proposal is None:
            note = (
                f"the prompt engineer's rewrite was rejected twice ({problem}); "
                f"kept judge prompt version {persona.current_version}"
            )
        elif proposal.prompt.strip() == current.strip():
            note = f"the prompt engineer proposed no change; kept version {persona.current_version}"
        else:
            addressed = addressed_cases(proposal.addressed, failures)
            version = await self._store_version(
                persona, proposal.prompt, proposal.rationale, addressed
            )
            await self._emit(
                "prompt_version",
                {
                    "iteration": it.number,
                    "version": version,
                    "created_by": "ai",
                    "rationale": proposal.rationale,
                    "addressed": addressed,
                },
            )
        if note is not None:
            await self._emit("prompt_version", {"iteration": it.number, "kept": True, "note": note})
        await self._advance(
            it,
            "done",
            outcome="continue",
            note=note,
            finished_at=func.now(),
            cost_usd=await self._iteration_cost(it.number),  # now with the engineer's calls
        )

    async def _store_version(
        self, persona: Persona, text_: str, rationale: str, addressed: list[dict[str, Any]]
    ) -> int:
        async with self.db() as db:
            row = await db.execute(select(Persona).where(Persona.id == self.pid).with_for_update())
            locked = row.scalar_one()
            latest = await db.scalar(
                select(func.max(JudgePromptVersion.version)).where(
                    JudgePromptVersion.persona_id == self.pid
                )
            )
            version = (latest or 0) + 1
            db.add(
                JudgePromptVersion(
                    persona_id=self.pid,
                    version=version,
                    text=text_,
                    created_by="ai",
                    rationale=rationale,
                    addressed=addressed,
                )
            )
            locked.current_version = version
            await db.commit()
        persona.current_version = version
        return version


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
