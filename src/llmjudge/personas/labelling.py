"""Step 2 of the calibration loop: the judge labels each answer (the judge-call pipeline,
live or through the provider's batch API: ``batch_labels``; or embedding similarity for an
embedding judge), with the reviews already known (uploaded labels, earlier reviews of the
same answer) applied at once."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert

from llmjudge.core.personas.keys import prompt_hash
from llmjudge.core.personas.similarity import fit_threshold
from llmjudge.infra.errors import NotFound
from llmjudge.judging import Gateway, JudgeRequest, JudgeResult, LabelReader, judge_call
from llmjudge.personas.batch_labels import BatchLabels
from llmjudge.personas.events import Progress, publish
from llmjudge.personas.loop_base import (
    DEFAULT_SIMILARITY_THRESHOLD,
    LoopState,
    StepFailed,
    _Pair,
    embed_texts,
    label_request,
    now,
    run_bounded,
    step_failed,
)
from llmjudge.personas.models import (
    JudgePromptVersion,
    Persona,
    PersonaDecision,
    PersonaIteration,
    TaskOutput,
)
from llmjudge.personas.pairs import chosen_label, pair_labels
from llmjudge.providers import ProviderError

LABEL_READER = LabelReader()
# (pair, answer text, judge label) -> (human agrees, notes, reviewer, bulk) of a past review
Carried = dict[tuple[int, str, str], tuple[bool, str | None, str | None, bool]]


class Labelling(LoopState):
    async def _carried(self, before: int) -> Carried:
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
            out: Carried = {}
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
            request = self._label_request(persona, it, judge_prompt, p, answer)
            result = await judge_call(Gateway(self.r.llm), request, LABEL_READER)
            if isinstance(result.failure, ProviderError | NotFound):
                raise step_failed("judge", result.failure) from result.failure
            if result.failure is not None:
                raise result.failure
            values = self._decision(it, p, output_id, answer, result, carried, prefill)
            async with self.db() as db:
                await db.execute(insert(PersonaDecision).values(**values).on_conflict_do_nothing())
                await db.commit()
            await progress.step(it.number)

        labels = BatchLabels(
            self, persona, it, judge_prompt, outputs, carried, prefill, LABEL_READER
        )
        answered = [p for p in pairs if p.id in outputs]
        if persona.execution == "batch":  # also applies a job a dead worker left open
            await labels.run(answered, label, progress)
        else:
            if await labels.settle(answered, label, progress):  # jobs of an earlier batch run
                decided = await labels.decided()
                todo = [p for p in todo if p.id not in decided]
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

    def _label_request(
        self, persona: Persona, it: PersonaIteration, judge_prompt: str, p: _Pair, answer: str
    ) -> JudgeRequest:
        return label_request(
            judge_prompt=judge_prompt,
            model_id=persona.judge_model_id,  # type: ignore[arg-type]
            input=p.text,
            answer=answer,
            correct_output=p.correct_output,
            purpose="persona_judge",
            related={"persona_id": self.pid, "iteration": it.number, "pair_id": p.id},
        )

    def _decision(
        self,
        it: PersonaIteration,
        p: _Pair,
        output_id: int,
        answer: str,
        result: JudgeResult[Any],
        carried: Carried,
        prefill: dict[int, tuple[bool, str]],
    ) -> dict[str, Any]:
        """The decision row of the judge's reply on pair ``p``'s answer (live or batch)."""
        verdict = result.verdict
        values: dict[str, Any] = {
            "persona_id": self.pid,
            "iteration_id": it.id,
            "iteration": it.number,
            "pair_id": p.id,
            "output_id": output_id,
            "split": p.split,
            "prompt_version": it.prompt_version,
            "raw": result.raw or "",
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
        return values

    @staticmethod
    def _known_review(
        pair_id: int,
        answer: str,
        label: str,
        carried: Carried,
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
