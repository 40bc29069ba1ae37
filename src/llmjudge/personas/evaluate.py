"""Trained personas at work: a pass/fail gate over a batch of outputs, and tournament judging.

``evaluate`` judges each output with the persona's current judge prompt and judge model
(or, for an embedding judge, its similarity threshold), then corrects the observed pass
rate for the judge's own errors (``gate.py``): Rogan-Gladen with the true-positive and
true-negative rates the persona showed on its calibration split in its latest fully
reviewed iteration (failing closed below the minimum counts, or when that iteration
judged with another prompt version), and PPI++ when items carry human labels. Both
estimates are reported, with the one the gate used. ``create_persona_session`` starts a tournament judged
by the persona: its judge prompt, written for one answer at a time, becomes the guidance of
a pairwise prompt template. The list and comparison of personas read ``summaries.py``.

About 600 lines as one piece: the gate's steps (judge the batch, pick the calibration,
estimate, store, report) share one transaction's state; its helpers are private to it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.personas.gate import corrected_pass_rate
from llmjudge.core.personas.metrics import wilson_interval
from llmjudge.core.personas.replies import JUDGE_SCHEMA, parse_judge_reply
from llmjudge.core.personas.similarity import CORRECT, ESCALATE, escalate
from llmjudge.core.personas.templates import render_judge_prompt
from llmjudge.infra.errors import Conflict, Invalid
from llmjudge.infra.events.hub import EventHub
from llmjudge.personas import service
from llmjudge.personas.loop import DEFAULT_SIMILARITY_THRESHOLD, LLM, embed_texts
from llmjudge.personas.models import Persona, PersonaDecision, PersonaIteration
from llmjudge.personas.schemas import PersonaOut
from llmjudge.sessions import SessionIn, SessionOut, create_session

MAX_ITEMS = 1000
MAX_ITEM_CHARS = 200_000
# Judge calls in flight per request; the provider's own concurrency limit applies as well.
CONCURRENCY = 16
CONFIDENCE = 0.95
BOOTSTRAP_ROUNDS = 2000
NO_REFERENCE = "(no reference answer was provided)"
UNREADABLE = "The judge's reply could not be read as a label; counted as a fail."
# The simulator's context key and the accounting key. Not ``persona_id``: evaluations
# must not count against the persona's training budget.
EVALUATE_PURPOSE = "persona_evaluate"
MAX_TEMPLATE_CHARS = 20_000  # SessionIn.prompt_template's limit


# -- request and response models -------------------------------------------------------------


class EvaluateItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: str = Field(min_length=1, max_length=MAX_ITEM_CHARS, description="what was asked")
    output: str = Field(max_length=MAX_ITEM_CHARS, description="the answer to judge")
    correct_output: str | None = Field(
        default=None,
        max_length=MAX_ITEM_CHARS,
        description="reference answer; the persona was calibrated with one, so give it "
        "where you have it",
    )
    human_label: Literal["correct", "incorrect"] | None = Field(
        default=None,
        description="a person's label of this output, when known: with enough of them "
        "(a random sample of the batch) the gate uses PPI++",
    )

    @field_validator("input")
    @classmethod
    def not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("input must not be blank")
        return v


class EscalationIn(BaseModel):
    """Embedding similarity first: it decides the clear cases, the LLM judge the middle."""

    model_config = ConfigDict(extra="forbid")
    accept_at: float = Field(ge=-1.0, le=1.0, description="correct at or above this cosine")
    reject_below: float = Field(ge=-1.0, le=1.0, description="incorrect below this cosine")

    @model_validator(mode="after")
    def ordered(self) -> EscalationIn:
        if self.reject_below > self.accept_at:
            raise ValueError("reject_below must not be above accept_at")
        return self


class EvaluateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[EvaluateItem] = Field(min_length=1, max_length=MAX_ITEMS)
    min_pass_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="gate threshold: passes when the lower bound of the corrected pass "
        "rate's 95% interval reaches it",
    )
    escalation: EscalationIn | None = Field(
        default=None,
        description="an LLM persona only: decide by embedding similarity to the reference "
        "where it is clear (``similarity.fit_escalation`` fits the two thresholds), and ask "
        "the judge model about the rest",
    )


class ItemVerdict(BaseModel):
    index: int = Field(description="position of the item in the request")
    label: str = Field(description="correct | incorrect")
    passed: bool
    reasoning: str
    confidence: float | None
    parse_error: bool = Field(description="the judge's reply was unreadable (counted as fail)")
    decided_by: Literal["judge", "similarity"] = "judge"
    similarity: float | None = None


class CalibrationOut(BaseModel):
    """The judge's error rates on the persona's calibration pairs, as reviewed by a human."""

    iteration: int | None = Field(description="the latest fully reviewed iteration, if any")
    prompt_version: int | None
    tpr: float = Field(description="judge said correct among human-correct calibration answers")
    tnr: float = Field(description="judge said incorrect among human-incorrect ones")
    calib_pos: int = Field(description="calibration answers the human labelled correct")
    calib_neg: int = Field(description="calibration answers the human labelled incorrect")
    tpr_ci: tuple[float, float] = Field(
        default=(0.0, 1.0), description="95% Wilson interval of the TPR over calib_pos"
    )
    tnr_ci: tuple[float, float] = Field(
        default=(0.0, 1.0), description="95% Wilson interval of the TNR over calib_neg"
    )


class PassRateOut(BaseModel):
    estimator: str = Field(description="rogan_gladen or ppi")
    defined: bool
    value: float | None
    low: float | None
    high: float | None
    n: int
    n_human: int
    reason: str | None
    lam: float | None = Field(default=None, description="PPI++'s power-tuning weight")


class EvaluateOut(BaseModel):
    persona_id: int
    persona_name: str
    persona_status: str
    prompt_version: int = Field(description="judge prompt version used")
    n: int
    verdicts: list[ItemVerdict]
    observed_pass_rate: float
    corrected_pass_rate: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    defined: bool = Field(description="false when the correction is impossible (see reason)")
    reason: str | None
    min_pass_rate: float | None
    passed: bool | None = Field(
        description="ci_low >= min_pass_rate; false when the correction is undefined; "
        "null without a threshold"
    )
    summary: str
    calibration: CalibrationOut
    warnings: list[str]
    estimator: str = Field(description="the estimator the gate used: rogan_gladen or ppi")
    estimates: list[PassRateOut] = Field(description="every estimator's result")
    n_human: int = Field(description="items that carried a human label")


_JUDGE_FIELDS = ("judge_model_id", "prompt_template")


def _hide_judge_fields(schema: dict[str, Any]) -> None:
    for key in _JUDGE_FIELDS:
        schema.get("properties", {}).pop(key, None)


class PersonaSessionIn(SessionIn):
    """A tournament session judged by the persona: `POST /api/sessions`'s body without
    `judge_model_id` and `prompt_template`, which the persona supplies."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_hide_judge_fields)
    criteria: list[str] = Field(
        default_factory=lambda: ["quality"],
        max_length=20,
        description="scored per thread; the persona's guidance decides the winner",
    )

    @model_validator(mode="before")
    @classmethod
    def no_judge_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = sorted(set(_JUDGE_FIELDS) & set(data))
            if given:
                raise ValueError(
                    f"{', '.join(given)}: the persona supplies the judge model and prompt"
                )
        return data


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
_FENCED_BLOCK = re.compile(
    r"^<<<(?P<name>[A-Z][A-Z _]*)>>>[ \t]*\n.*?^<<<END (?P=name)>>>[ \t]*(?:\n|\Z)",
    re.DOTALL | re.MULTILINE,
)
_SINGLE_TOKEN = re.compile(r"\{\{|\}\}|\{(input|correct_output|answer)\}")
_WORDS = {"input": "the input", "correct_output": "the reference answer", "answer": "the answer"}
_BLANK_LINES = re.compile(r"\n{3,}")


def judging_guidance(judge_prompt: str) -> str:
    """The persona's judge prompt as plain guidance: fenced data blocks dropped, placeholders
    named in words, ``{{``/``}}`` unescaped."""
    text = _FENCED_BLOCK.sub("", judge_prompt)
    text = _SINGLE_TOKEN.sub(lambda m: _WORDS[m.group(1)] if m.group(1) else m.group()[0], text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def _braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def pairwise_template(judge_prompt: str, criteria: Sequence[str]) -> str:
    """A ``judging/prompts.py`` template (``{thread_a}``, ``{thread_b}``, ``{criteria}``) that
    asks for the pairwise JSON verdict, guided by the persona's judge prompt.

    The persona's prompt was written to label one answer against a reference; the template
    says so and asks the judge to apply its standards to both threads, ignoring its reply
    format. All its braces are escaped, so it can never add a placeholder.
    """
    scores = ", ".join(f'"{name}": 1-5' for name in criteria)
    answer = (
        '{"winner": "A" | "B" | "TIE", "confidence": 0-1, '
        f'"scores": {{"A": {{{scores}}}, "B": {{{scores}}}}}, "reasoning": "..."}}'
    )
    return (
        "You judge with the standards of a calibrated judge persona. Its guidance below was "
        "written for labelling one answer as correct or incorrect against a reference "
        "answer. Here there is no reference: apply the same standards to both threads, and "
        "prefer the thread that meets them more fully. Ignore the reply format the guidance "
        "asks for; use the one at the end.\n\n"
        "<<<PERSONA GUIDANCE>>>\n"
        + _braces(judging_guidance(judge_prompt))
        + "\n<<<END PERSONA GUIDANCE>>>\n\n"
        "Also score each thread from 1 (very poor) to 5 (excellent) on these criteria:\n"
        "{criteria}\n\n{thread_a}\n\n{thread_b}\n\n"
        'Decide which thread is better overall: "A", "B", or "TIE" if they are equally '
        "good. Give your confidence from 0 to 1 and a short reasoning (at most three "
        "sentences).\n\nAnswer with only this JSON object, no other text:\n" + _braces(answer)
    )


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
        iteration=it.number,
        prompt_version=it.prompt_version,
        tpr=c.tpr,
        tnr=c.tnr,
        calib_pos=c.calib_pos,
        calib_neg=c.calib_neg,
        tpr_ci=wilson_interval(round(c.tpr * c.calib_pos), c.calib_pos),
        tnr_ci=wilson_interval(round(c.tnr * c.calib_neg), c.calib_neg),
    )


async def _usable_persona(
    db: AsyncSession, persona_id: int, allow_untrained: bool
) -> tuple[Persona, PersonaOut]:
    out = await service.get_persona(db=db, persona_id=persona_id)  # 404 first
    persona = await db.get(Persona, persona_id)
    assert persona is not None
    if persona.status != "trained" and not allow_untrained:
        raise Conflict(
            f"persona {persona.name!r} is {persona.status}, not trained; train it until it "
            "converges, or pass allow_untrained=true to use it anyway"
        )
    if persona.judge_kind == "llm" and persona.judge_model_id is None:
        raise Invalid(f"persona {persona.name!r} has no judge model; choose one in its settings")
    return persona, out


async def _judge_one(
    llm: LLM, persona: Persona, judge_prompt: str, index: int, item: EvaluateItem
) -> ItemVerdict:
    reference = NO_REFERENCE if item.correct_output is None else item.correct_output
    messages = [
        {
            "role": "user",
            "content": render_judge_prompt(
                judge_prompt, input=item.input, correct_output=reference, answer=item.output
            ),
        }
    ]
    context = {
        "task": "judge_label",
        "input": item.input,
        "correct_output": item.correct_output or "",
        "answer": item.output,
        "judge_prompt": judge_prompt,
    }
    for attempt in range(2):  # one more try when the reply cannot be read, as in training
        result = await llm.chat(
            model_id=persona.judge_model_id,
            messages=messages,
            json_schema=JUDGE_SCHEMA,
            schema_name="judge_label",
            context={**context, "call_key": attempt} if attempt else context,
            purpose=EVALUATE_PURPOSE,
            related={"evaluated_persona_id": persona.id},
            use_cache=False if attempt else None,  # a retry must not get the cached reply
        )
        verdict = parse_judge_reply(result.text)
        if verdict is not None:
            return ItemVerdict(
                index=index,
                label=verdict.label,
                passed=verdict.label == "correct",
                reasoning=verdict.reasoning,
                confidence=verdict.confidence,
                parse_error=False,
            )
    return ItemVerdict(
        index=index,
        label="incorrect",
        passed=False,
        reasoning=UNREADABLE,
        confidence=None,
        parse_error=True,
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
    persona, out = await _usable_persona(db, persona_id, allow_untrained)
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
        tpr=calibration.tpr,
        tnr=calibration.tnr,
        calib_pos=calibration.calib_pos,
        calib_neg=calibration.calib_neg,
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
    return EvaluateOut(
        persona_id=persona.id,
        persona_name=persona.name,
        persona_status=persona.status,
        prompt_version=out.current_version,
        n=gate.n,
        verdicts=list(verdicts),
        observed_pass_rate=gate.observed_pass_rate,
        corrected_pass_rate=gate.corrected_pass_rate,
        ci_low=gate.ci_low,
        ci_high=gate.ci_high,
        confidence=CONFIDENCE,
        defined=gate.defined,
        reason=gate.reason,
        min_pass_rate=gate.min_pass_rate,
        passed=gate.passed,
        summary=gate.summary,
        calibration=calibration,
        warnings=_warnings(persona, calibration, data.items) + extra_warnings,
        estimator=gate.estimator,
        estimates=[PassRateOut(**e.__dict__) for e in gate.estimates],
        n_human=gate.n_human,
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


async def create_persona_session(
    *,
    db: AsyncSession,
    persona_id: int,
    data: PersonaSessionIn,
    hub: EventHub | None = None,
    allow_untrained: bool = False,
) -> SessionOut:
    """A tournament session with the persona's judge model and a pairwise template built
    from its current judge prompt (``pairwise_template``)."""
    persona, out = await _usable_persona(db, persona_id, allow_untrained)
    template = pairwise_template(out.judge_prompt, data.criteria)
    if len(template) > MAX_TEMPLATE_CHARS:
        raise Invalid(
            f"persona {persona.name!r}'s judge prompt makes a {len(template):,}-character "
            f"pairwise prompt; sessions take at most {MAX_TEMPLATE_CHARS:,}: shorten the "
            "judge prompt (a new version) first"
        )
    fields = data.model_dump(exclude=set(_JUDGE_FIELDS))
    session_in = SessionIn(
        **fields, judge_model_id=persona.judge_model_id, prompt_template=template
    )
    return await create_session(db=db, data=session_in, hub=hub)
