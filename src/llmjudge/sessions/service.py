"""Creating a judge session: validate, resolve its judge(s), build the plan and store the
session with its comparisons in one transaction.

A session's comparisons are inserted when it is created (so its size and estimate are
exact) with PostgreSQL COPY (`plans.insert_plan`), a million-row plan in seconds. Starting a
session makes its comparisons claimable; workers (see ``sessions.run``) do the rest. An
adaptive session starts with no comparison: its rounds runner plans them.

Reads are in `sessions.reads`, control (start, pause, ...) in `sessions.control`,
estimates in `sessions.estimates` and `sessions.adaptive.state`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import Invalid
from llmjudge.infra.events.hub import EventHub
from llmjudge.providers import LLMModel, Provider, gives_logprobs
from llmjudge.sessions.adaptive import field as fields
from llmjudge.sessions.adaptive.state import adaptive_field
from llmjudge.sessions.control import (
    ConnectionTester,
    check_connection,
    publish_status,
    set_running,
)
from llmjudge.sessions.costs import cost_per_call, model_cost, panel_models
from llmjudge.sessions.estimates import ADAPTIVE_PANEL, check_plan_size, with_default_criteria
from llmjudge.sessions.execution import execution_of
from llmjudge.sessions.models import JudgeSession
from llmjudge.sessions.panels.report import learn_weights
from llmjudge.sessions.plans import (
    analyze_comparisons,
    build_plan,
    insert_plan,
    plan_options,
    plan_threads,
    stored_options,
)
from llmjudge.sessions.reads import get_session, judge_model
from llmjudge.sessions.schemas import PanelIn, SessionIn, SessionOut

__all__ = ["create_session"]

ANALYZE_AFTER_ROWS = 50_000


async def create_session(
    *,
    db: AsyncSession,
    data: SessionIn,
    hub: EventHub | None = None,
    llm: ConnectionTester | None = None,
) -> SessionOut:
    """Validate, build the plan, store the session and its comparisons in one transaction;
    start it at once with ``auto_start`` (after `check_connection`, given ``llm``; for a
    panel, every member's)."""
    data = await with_default_criteria(db, data)
    panel = None
    if data.panel is not None:
        members = await panel_models(db, data.panel)
        m, p = members[0]
        panel = await _stored_panel(db, data.panel, members)
    else:
        members = [await judge_model(db, data.judge_model_id)]
        m, p = members[0]
    execution = execution_of(data, members)
    check_logprobs(data, members)
    if data.auto_start:
        for member, provider in members:
            await check_connection(db, llm, member, provider)
    seed = data.seed if data.seed is not None else secrets.randbelow(2**31)
    if data.comparison_mode == "adaptive":
        if panel is not None:
            raise Invalid(ADAPTIVE_PANEL)
        return await _create_adaptive(db, data, m, p, seed, hub, execution)
    threads = await plan_threads(db, data.pillar_ids)
    options = plan_options(data, seed)
    check_plan_size(threads, data.pillar_ids, options)
    # Building a large plan is CPU work: off the event loop.
    plan = await asyncio.to_thread(build_plan, threads, options)
    s = _draft(
        data,
        m,
        _options(stored_options(data, seed), data, execution),
        total=len(plan),
        execution=execution,
        panel=panel,
        system_prompt=data.system_prompt,
        verdict_format=(
            data.verdict_format.model_dump(mode="json") if data.verdict_format else None
        ),
    )
    db.add(s)
    await db.flush()
    await insert_plan(db, s.id, plan)
    if data.auto_start:
        await set_running(db, s)
    await db.commit()
    if len(plan) >= ANALYZE_AFTER_ROWS:
        await analyze_comparisons(db)
    publish_status(hub, s.id, s.status)
    return await get_session(db=db, session_id=s.id)


def _options(options: dict[str, Any], data: SessionIn, execution: str) -> dict[str, Any]:
    """A batch session keeps its fallback (the runner judges live what a job could not)."""
    if execution == "batch":
        return options | {"batch_fallback": data.batch_fallback}
    return options


def check_logprobs(data: SessionIn, members: Sequence[tuple[LLMModel, Provider]]) -> None:
    """A ``logprobs`` verdict format, or a probability-weighted grade, needs judges whose
    providers return log probabilities: refused at creation, not at the first call."""
    fmt = data.verdict_format
    if fmt is None or not fmt.reads_logprobs:
        return
    unable = [f"{m.name} ({p.kind})" for m, p in members if not gives_logprobs(p.kind)]
    if unable:
        what, instead = (
            ("a probability-weighted grade", "a grade read from the text (weighted false)")
            if fmt.weighted
            else ("the logprobs format", "a text verdict format")
        )
        raise Invalid(
            f"verdict_format: {what} reads token log probabilities, which "
            f"{', '.join(unable)} cannot return; use an OpenAI-compatible provider (OpenAI, "
            f"vLLM, llama.cpp server) or {instead}"
        )


def _draft(data: SessionIn, judge: LLMModel, options: dict[str, Any], **more: Any) -> JudgeSession:
    """The new session's row, a draft (``more``: what only some kinds of session store)."""
    return JudgeSession(
        name=data.session_name,
        status="draft",
        pillar_ids=list(data.pillar_ids),
        options=options,
        judge_model_id=judge.id,
        criteria=list(data.criteria),
        **data.model_dump(include={"comparison_mode", "worker_count", "prompt_template"}),
        **more,
    )


async def _stored_panel(
    db: AsyncSession, panel: PanelIn, members: Sequence[tuple[LLMModel, Provider]]
) -> dict[str, Any]:
    weights: list[float | None] = [m.weight for m in panel.members]
    learned_from = None
    if panel.rule == "calibrated":
        assert panel.calibration_session_id is not None
        learned, learned_from = await learn_weights(
            db, panel.calibration_session_id, [m.model_id for m in panel.members]
        )
        weights = list(learned)
    return {
        "rule": panel.rule,
        "members": [
            {"model_id": mm.id, "label": mm.name, "weight": w}
            for (mm, _), w in zip(members, weights, strict=True)
        ],
        "cascade": panel.cascade.model_dump() if panel.cascade is not None else None,
        "calibration_session_id": panel.calibration_session_id,
        "weights_from_labels": learned_from,
    }


async def _create_adaptive(
    db: AsyncSession,
    data: SessionIn,
    m: LLMModel,
    p: Provider,
    seed: int,
    hub: EventHub | None,
    execution: str,
) -> SessionOut:
    """An adaptive session starts with its first round (every player below the evidence
    floor, paired at random); ``sessions.adaptive.rounds`` appends the others."""
    assert data.adaptive is not None
    field = await adaptive_field(db, data)
    cfg = fields.with_default_cap(data.adaptive, field)
    cost = cost_per_call(await model_cost(db, data, m, p))
    rule = fields.stop_rule(cfg, cost)
    fields.check_field(field, cfg, rule)
    options = _options(stored_options(data, seed), data, execution)
    s = _draft(
        data,
        m,
        fields.new_session_options(cfg, options, cost),
        total=0,
        execution=execution,
        verdict_format=(
            data.verdict_format.model_dump(mode="json") if data.verdict_format else None
        ),
    )
    db.add(s)
    await db.flush()
    # No comparison yet: the rounds runner plans the first round like every other one,
    # from the stored results (none), once the session runs.
    if data.auto_start:
        await set_running(db, s)
    await db.commit()
    publish_status(hub, s.id, s.status)
    return await get_session(db=db, session_id=s.id)
