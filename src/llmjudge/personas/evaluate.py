"""Trained personas at work: a pass/fail gate over a batch of outputs.

``evaluate`` judges each output with the persona's current judge prompt and judge model
(or, for an embedding judge, its similarity threshold), then corrects the observed pass
rate for the judge's own errors (``gate.py``): Rogan-Gladen with the true-positive and
true-negative rates the persona showed on its calibration split in its latest fully
reviewed iteration (failing closed below the minimum counts, or when that iteration
judged with another prompt version), and PPI++ when items carry human labels. Both
estimates are reported, with the one the gate used. The request and response models are
``evaluate_schemas``; sessions judged by a persona, ``persona_sessions``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.personas.gate import corrected_pass_rate
from llmjudge.core.personas.metrics import wilson_interval
from llmjudge.core.personas.similarity import CORRECT, ESCALATE, escalate
from llmjudge.judging import Gateway, judge_call
from llmjudge.personas.evaluate_schemas import (
    MAX_ITEM_CHARS,
    MAX_ITEMS,
    CalibrationOut,
    EscalationIn,
    EvaluateIn,
    EvaluateItem,
    EvaluateOut,
    ItemVerdict,
    PassRateOut,
    PersonaSessionIn,
)
from llmjudge.personas.labelling import LABEL_READER
from llmjudge.personas.loop import DEFAULT_SIMILARITY_THRESHOLD, LLM, embed_texts
from llmjudge.personas.loop_base import label_request
from llmjudge.personas.models import Persona, PersonaDecision, PersonaIteration
from llmjudge.personas.persona_sessions import (
    MAX_TEMPLATE_CHARS,
    create_persona_session,
    judging_guidance,
    pairwise_template,
    usable_persona,
)

__all__ = [
    "MAX_ITEMS",
    "MAX_ITEM_CHARS",
    "MAX_TEMPLATE_CHARS",
    "CalibrationOut",
    "EscalationIn",
    "EvaluateIn",
    "EvaluateItem",
    "EvaluateOut",
    "ItemVerdict",
    "PassRateOut",
    "PersonaSessionIn",
    "calibration_rates",
    "create_persona_session",
    "evaluate",
    "judging_guidance",
    "load_calibration",
    "pairwise_template",
]

# Judge calls in flight per request; the provider's own concurrency limit applies as well.
CONCURRENCY = 16
CONFIDENCE = 0.95
BOOTSTRAP_ROUNDS = 2000
NO_REFERENCE = "(no reference answer was provided)"
UNREADABLE = "The judge's reply could not be read as a label; counted as a fail."
# The simulator's context key and the accounting key. Not ``persona_id``: evaluations
# must not count against the persona's training budget.
EVALUATE_PURPOSE = "persona_evaluate"

# -- pure helpers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    tpr: float
    tnr: float
    calib_pos: int
    calib_neg: int


def calibration_rates(decisions: Sequence[tuple[str, bool]]) -> Calibration:
    """TPR and TNR of the judge from reviewed ``(judge_label, human_agrees)`` decisions.

    The human's label is the truth: "correct" when they agreed with a "correct" judge or
    disagreed with an "incorrect" one. A rate with no examples is 0.0 (its count is 0, which
    the gate reports as uncorrectable).
    """
    tp = fn = tn = fp = 0
    for label, agrees in decisions:
        judge_correct = label == "correct"
        if judge_correct == agrees:  # the human says "correct"
            tp, fn = (tp + 1, fn) if judge_correct else (tp, fn + 1)
        else:
            tn, fp = (tn + 1, fp) if not judge_correct else (tn, fp + 1)
    pos, neg = tp + fn, tn + fp
    return Calibration(
        tpr=tp / pos if pos else 0.0, tnr=tn / neg if neg else 0.0, calib_pos=pos, calib_neg=neg
    )


# A data block on lines of its own (the templates' layout); a fence named in prose stays.
def _warnings(
    persona: Persona, calibration: CalibrationOut, items: Sequence[EvaluateItem]
) -> list[str]:
    out = []
    if persona.status != "trained":
        out.append(
            f"the persona is {persona.status}, not trained: its judge has not reached the "
            f"target F1 of {persona.target_f1:.2f}"
        )
    if calibration.iteration is None:
        out.append("no iteration of the persona has been fully reviewed yet")
    elif calibration.calib_pos + calibration.calib_neg == 0:
        out.append(
            "the persona has no reviewed calibration pairs (held-out fraction 0?); "
            "its judge's error rates are unknown"
        )
    if calibration.prompt_version not in (None, persona.current_version):
        out.append(
            f"judge prompt version {persona.current_version} is in use but the error rates "
            f"were measured with version {calibration.prompt_version}; train again to "
            "recalibrate"
        )
    missing = sum(1 for item in items if item.correct_output is None)
    if missing:
        out.append(
            f"{missing} item(s) have no correct_output: the persona was calibrated with "
            "reference answers"
        )
    return out


# -- database --------------------------------------------------------------------------------


async def load_calibration(*, db: AsyncSession, persona_id: int) -> CalibrationOut:
    """TPR/TNR from the calibration decisions of the latest fully reviewed iteration."""
    it = await db.scalar(
        select(PersonaIteration)
        .where(
            PersonaIteration.persona_id == persona_id,
            PersonaIteration.status.in_(("optimising", "done")),
            PersonaIteration.metrics_optimisation.is_not(None)
            | PersonaIteration.metrics_selection.is_not(None),
        )
        .order_by(PersonaIteration.number.desc())
        .limit(1)
    )
    if it is None:
        return CalibrationOut(
            iteration=None, prompt_version=None, tpr=0.0, tnr=0.0, calib_pos=0, calib_neg=0
        )
    rows = await db.execute(
        select(PersonaDecision.judge_label, PersonaDecision.human_agrees).where(
            PersonaDecision.iteration_id == it.id,
            PersonaDecision.split == "calibration",
            PersonaDecision.human_agrees.is_not(None),
        )
    )
    c = calibration_rates([(label, bool(agrees)) for label, agrees in rows.all()])
    return CalibrationOut(
        **dataclasses.asdict(c),
        iteration=it.number,
        prompt_version=it.prompt_version,
        tpr_ci=wilson_interval(round(c.tpr * c.calib_pos), c.calib_pos),
        tnr_ci=wilson_interval(round(c.tnr * c.calib_neg), c.calib_neg),
    )


async def _judge_one(
    llm: LLM, persona: Persona, judge_prompt: str, index: int, item: EvaluateItem
) -> ItemVerdict:
    request = label_request(
        judge_prompt=judge_prompt,
        model_id=persona.judge_model_id,  # type: ignore[arg-type]
        input=item.input,
        answer=item.output,
        correct_output=item.correct_output or "",
        shown_reference=NO_REFERENCE if item.correct_output is None else None,
        purpose=EVALUATE_PURPOSE,
        related={"evaluated_persona_id": persona.id},
    )
    result = await judge_call(Gateway(llm), request, LABEL_READER)
    if result.failure is not None:  # a gate must not pass on a partial batch
        raise result.failure
    verdict = result.verdict
    if verdict is None:
        return ItemVerdict(
            index=index,
            label="incorrect",
            passed=False,
            reasoning=UNREADABLE,
            confidence=None,
            parse_error=True,
        )
    return ItemVerdict(
        **dataclasses.asdict(verdict),
        index=index,
        passed=verdict.label == "correct",
        parse_error=False,
    )


async def evaluate(
    *,
    db: AsyncSession,
    llm: LLM,
    persona_id: int,
    data: EvaluateIn,
    allow_untrained: bool = False,
    concurrency: int = CONCURRENCY,
) -> EvaluateOut:
    """Judge every item (at most ``concurrency`` at once) and gate the corrected pass rate.

    Raises ``Conflict`` for an untrained persona (unless ``allow_untrained``) and lets the
    model's ``ProviderError`` through: a gate must not pass on a partial batch.
    """
    persona, out = await usable_persona(db, persona_id, allow_untrained)
    calibration = await load_calibration(db=db, persona_id=persona_id)
    await db.close()  # hold no connection while the model answers
    limit = asyncio.Semaphore(max(1, concurrency))

    async def judge(index: int, item: EvaluateItem) -> ItemVerdict:
        async with limit:
            return await _judge_one(llm, persona, out.judge_prompt, index, item)

    extra_warnings: list[str] = []
    if persona.judge_kind == "embedding":
        verdicts = await _judge_by_similarity(llm, persona, data.items)
    elif data.escalation is not None:
        verdicts = await _escalated(llm, persona, data.items, data.escalation, judge)
        extra_warnings.append(
            f"{sum(v.decided_by == 'similarity' for v in verdicts)} of {len(verdicts)} "
            "verdicts came from embedding similarity: the calibration measured the judge "
            "model alone"
        )
    else:
        verdicts = list(
            await asyncio.gather(*(judge(i, item) for i, item in enumerate(data.items)))
        )
    human = [
        None if item.human_label is None else item.human_label == "correct" for item in data.items
    ]
    gate = await asyncio.to_thread(
        corrected_pass_rate,
        [v.passed for v in verdicts],
        **calibration.model_dump(include={"tpr", "tnr", "calib_pos", "calib_neg"}),
        min_pass_rate=data.min_pass_rate,
        rounds=BOOTSTRAP_ROUNDS,
        confidence=CONFIDENCE,
        # no calibration at all is "too few pairs", not "another version"
        calibration_prompt_version=calibration.prompt_version,
        judging_prompt_version=out.current_version
        if calibration.prompt_version is not None
        else None,
        human_pass=human if any(h is not None for h in human) else None,
    )
    # The gate's figures under their own names; what the persona and the batch add.
    figures = {k: v for k, v in dataclasses.asdict(gate).items() if k in EvaluateOut.model_fields}
    return EvaluateOut(
        **figures,
        persona_id=persona.id,
        persona_name=persona.name,
        persona_status=persona.status,
        prompt_version=out.current_version,
        verdicts=list(verdicts),
        confidence=CONFIDENCE,
        calibration=calibration,
        warnings=_warnings(persona, calibration, data.items) + extra_warnings,
    )


async def _similarities(llm: LLM, persona: Persona, items: Sequence[EvaluateItem]) -> Any:
    outputs = [item.output for item in items]
    refs = [item.correct_output or "" for item in items]
    vectors = await embed_texts(
        llm,
        persona.embedding_model_id,
        [*outputs, *refs],
        purpose=EVALUATE_PURPOSE,
        related={"evaluated_persona_id": persona.id},
    )
    n = len(items)
    return np.clip(np.einsum("ij,ij->i", vectors[:n], vectors[n:]), -1.0, 1.0)


async def _escalated(
    llm: LLM,
    persona: Persona,
    items: Sequence[EvaluateItem],
    bands: EscalationIn,
    judge: Any,
) -> list[ItemVerdict]:
    """``similarity.escalate``: clear similarities decide, the middle goes to ``judge``."""
    sims = await _similarities(llm, persona, items)
    decided = escalate(sims, accept_at=bands.accept_at, reject_below=bands.reject_below)
    middle = [i for i, d in enumerate(decided) if d == ESCALATE]
    asked = await asyncio.gather(*(judge(i, items[i]) for i in middle))
    by_index = {v.index: v for v in asked}
    out = []
    for i, (s_, d) in enumerate(zip(sims, decided, strict=True)):
        if d == ESCALATE:
            out.append(by_index[i].model_copy(update={"similarity": float(s_)}))
            continue
        ok = d == CORRECT
        out.append(
            ItemVerdict(
                index=i,
                label="correct" if ok else "incorrect",
                passed=ok,
                reasoning=f"cosine similarity {float(s_):.3f} to the reference is "
                + (f"at least {bands.accept_at:.3f}" if ok else f"below {bands.reject_below:.3f}"),
                confidence=None,
                parse_error=False,
                decided_by="similarity",
                similarity=float(s_),
            )
        )
    return out


async def _judge_by_similarity(
    llm: LLM, persona: Persona, items: Sequence[EvaluateItem]
) -> list[ItemVerdict]:
    """The embedding judge over a batch: one embedding call for all outputs and references."""
    threshold = persona.similarity_threshold or DEFAULT_SIMILARITY_THRESHOLD
    sims = await _similarities(llm, persona, items)
    return [
        ItemVerdict(
            index=i,
            label="correct" if s >= threshold else "incorrect",
            passed=bool(s >= threshold),
            reasoning=f"cosine similarity {float(s):.3f} to the reference, "
            f"threshold {threshold:.3f}",
            confidence=float(min(1.0, 0.5 + abs(float(s) - threshold))),
            parse_error=False,
            decided_by="similarity",
            similarity=float(s),
        )
        for i, s in enumerate(sims)
    ]
