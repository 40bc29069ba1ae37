"""What training a persona will cost before it starts: calls, tokens and dollars for one
iteration and for all ``max_iterations``, from the rendered prompts and model prices."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.personas.keys import prompt_hash, task_input
from llmjudge.core.personas.replies import ENGINEER_SYSTEM, MAX_ENGINEER_FAILURES
from llmjudge.core.personas.templates import render_judge_prompt, render_task_prompt
from llmjudge.infra.errors import Invalid
from llmjudge.personas.iterations import spent_usd
from llmjudge.personas.lookup import persona_row
from llmjudge.personas.models import PersonaPair, TaskOutput
from llmjudge.personas.schemas import CallEstimate, EstimateOut
from llmjudge.personas.service import get_persona
from llmjudge.providers import LLMService, batch_unsupported, estimate_tokens

# Estimates: tokens of a judge reply, of the engineer's rationale, and the share of
# optimisation pairs assumed to be disagreements shown to the engineer.
JUDGE_OUTPUT_TOKENS = 80
RATIONALE_TOKENS = 100
FAILURE_SHARE = 0.3


def _estimate(calls: int, inp: int, out: int, price_in: float, price_out: float) -> CallEstimate:
    return CallEstimate(
        calls=calls,
        input_tokens=inp,
        output_tokens=out,
        cost_usd=(inp * price_in + out * price_out) / 1_000_000,
    )


def _sum(items: Sequence[CallEstimate]) -> CallEstimate:
    return CallEstimate(
        calls=sum(e.calls for e in items),
        input_tokens=sum(e.input_tokens for e in items),
        output_tokens=sum(e.output_tokens for e in items),
        cost_usd=sum(e.cost_usd for e in items),
    )


def _scale(e: CallEstimate, k: int) -> CallEstimate:
    return CallEstimate(
        calls=e.calls * k,
        input_tokens=e.input_tokens * k,
        output_tokens=e.output_tokens * k,
        cost_usd=e.cost_usd * k,
    )


async def estimate(*, db: AsyncSession, llm: LLMService, persona_id: int) -> EstimateOut:
    """Calls, tokens (4 characters per token) and cost of one iteration and of all
    ``max_iterations``, from the rendered prompts and the models' prices."""
    p = await persona_row(db, persona_id)
    out = await get_persona(db=db, persona_id=persona_id)
    pairs = (
        await db.scalars(select(PersonaPair).where(PersonaPair.persona_id == persona_id))
    ).all()
    # Only the models the loop will call: the task model for pairs without their own
    # answer, the judge and engineer for an LLM judge (an embedding judge calls none).
    needs_task = any(pair.answer is None for pair in pairs)
    roles = (["task"] if needs_task else []) + (
        ["judge", "engineer"] if p.judge_kind == "llm" else []
    )
    models = {}
    for role in roles:
        model_id = getattr(p, f"{role}_model_id")
        if model_id is None:
            raise Invalid(f"choose a {role} model first")
        models[role] = await llm.model_info(model_id)
    phash = prompt_hash(p.task_model_id, p.task_prompt)
    stored = set(
        await db.scalars(
            select(TaskOutput.pair_id).where(
                TaskOutput.persona_id == persona_id, TaskOutput.prompt_hash == phash
            )
        )
    )
    task_in = task_out = judge_in = 0
    todo = 0
    for pair in pairs:
        text = task_input(pair.input, pair.input_b)
        # Answers are assumed about as long as the reference answer.
        answer_tokens = estimate_tokens(pair.correct_output)
        if pair.id not in stored and pair.answer is None:
            todo += 1
            task_in += estimate_tokens(render_task_prompt(p.task_prompt, input=text))
            task_out += answer_tokens
        judge_in += estimate_tokens(
            render_judge_prompt(
                out.judge_prompt,
                input=text,
                correct_output=pair.correct_output,
                answer=pair.correct_output,
            )
        )
    n = len(pairs)
    opt = sum(1 for pair in pairs if pair.split == "optimisation")
    failures = min(MAX_ENGINEER_FAILURES, round(FAILURE_SHARE * opt))
    case_tokens = (
        sum(
            estimate_tokens(pair.input) + 2 * estimate_tokens(pair.correct_output) for pair in pairs
        )
        // max(n, 1)
        + JUDGE_OUTPUT_TOKENS
    )
    prompt_tokens = estimate_tokens(out.judge_prompt)
    eng_in = estimate_tokens(ENGINEER_SYSTEM) + prompt_tokens + failures * case_tokens
    eng_out = prompt_tokens + RATIONALE_TOKENS

    def priced(role: str, calls: int, inp: int, outp: int) -> CallEstimate:
        m = models.get(role)
        if m is None:  # a model the loop will not call
            return _estimate(0, 0, 0, 0.0, 0.0)
        return _estimate(calls, inp, outp, m.input_price_per_million, m.output_price_per_million)

    task = priced("task", todo, task_in, task_out)
    judge = priced("judge", n, judge_in, n * JUDGE_OUTPUT_TOKENS)
    engineer = priced("engineer", 1, eng_in, eng_out)
    k = p.max_iterations
    notes = [
        "tokens are estimated at 4 characters per token; answers as long as the references",
        "task answers are generated once and reused while the task prompt, the task model "
        "and the inputs are unchanged",
        "the judge prompt grows as it is rewritten, so later iterations cost somewhat more",
    ]
    if any(m.simulated for m in models.values()):
        notes.append("simulated models cost nothing")
    total = _sum([task, _scale(judge, k), _scale(engineer, max(k - 1, 0))])
    batch_cost: float | None = None
    judge_model = models.get("judge")
    unavailable = (
        "an embedding judge calls no judge model"
        if judge_model is None
        else batch_unsupported(judge_model.provider_kind)
    )
    if judge_model is not None and unavailable is None:
        batch_cost = total.cost_usd - k * judge.cost_usd * judge_model.batch_discount
    return EstimateOut(
        pairs=n,
        one_iteration=_sum([task, judge, engineer]),
        max_iterations=total,
        per_model={"task": task, "judge": judge, "engineer": engineer},
        batch_cost_usd=batch_cost,
        batch_unavailable=unavailable,
        spent_usd=await spent_usd(db=db, persona_id=persona_id),
        budget_usd=p.budget_usd,
        notes=notes,
    )
