"""Steps 4 to 6 of the calibration loop: metrics and convergence once every decision is
reviewed, then the prompt engineer's rewrite of the judge prompt."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import func, select

from llmjudge.core.personas.convergence import (
    ConvergenceRule,
    bulk_summary,
    decide,
    split_metrics,
    status_dict,
)
from llmjudge.core.personas.keys import task_input
from llmjudge.core.personas.replies import (
    ENGINEER_SCHEMA,
    MAX_ENGINEER_FAILURES,
    addressed_cases,
    engineer_messages,
    human_label,
    missing_placeholders,
    parse_engineer_rewrite,
)
from llmjudge.personas.loop_base import LoopState, StepFailed, _advance_in
from llmjudge.personas.models import (
    JudgePromptVersion,
    Persona,
    PersonaDecision,
    PersonaIteration,
    PersonaPair,
    TaskOutput,
)
from llmjudge.providers import LLMCall


class Rewriting(LoopState):
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
