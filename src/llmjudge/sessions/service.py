"""Judge sessions: estimate, create (plan + queue) and control; reads are in
`sessions.reads`, plans and their COPY storage in `sessions.plans`.

A session's comparisons are inserted when it is created (so its size and estimate are
exact) with PostgreSQL COPY (`plans.insert_plan`), a million-row plan in seconds. Starting a
session makes its comparisons claimable; workers (see ``sessions.jobs``) do the rest.

Control (start, pause, resume, cancel, retry, delete) is in `sessions.control`. About 700
lines: estimate and create share the helpers that resolve a session's judge(s), plan size
and cost; adaptive and panel sessions add their own create/estimate branches here.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import ValidationError
from sqlalchemy import Text, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import Pillar, Thread
from llmjudge.core.judging.panels import expected_cascade_cost
from llmjudge.core.judging.prompts import build_judge_messages, estimate_tokens
from llmjudge.core.tournaments.adaptive import (
    AdaptiveState,
    check_stop,
    fit_state,
    stability_widths,
)
from llmjudge.core.tournaments.estimate import ModelCost, estimate_plan, over_limit_message
from llmjudge.core.tournaments.pairing import PlanOptions, plan_size_bound
from llmjudge.core.tournaments.simulation import estimate_comparisons
from llmjudge.infra.config import get_settings
from llmjudge.infra.errors import Conflict, Invalid
from llmjudge.infra.events.hub import EventHub
from llmjudge.providers import LLMModel, Provider, configured_latency_s
from llmjudge.sessions.adaptive import rounds

# Reads live in `sessions.reads` and control in `sessions.control`; they stay importable
# from here, the domain's front door.
from llmjudge.sessions.control import (
    ConnectionTester,
    cancel_session,
    check_connection,
    delete_session,
    pause_session,
    publish_status,
    resume_session,
    retry_failed,
    set_running,
    start_session,
)
from llmjudge.sessions.models import AdaptiveRound, JudgeSession
from llmjudge.sessions.panels.report import learn_weights
from llmjudge.sessions.plans import (
    analyze_comparisons,
    build_plan,
    insert_plan,
    mode_counts,
    plan_options,
    plan_threads,
    stored_options,
)
from llmjudge.sessions.reads import (
    BUILTIN_JUDGE,
    get_comparison,
    get_session,
    judge_model,
    list_comparisons,
    list_sessions,
    model_out,
    session_row,
)
from llmjudge.sessions.schemas import (
    AdaptiveEstimateOut,
    AdaptiveOut,
    AdaptiveRoundOut,
    CascadeIn,
    EstimateOut,
    Mode,
    ModeCount,
    PanelIn,
    PanelMemberIn,
    RankedPlayer,
    SessionIn,
    SessionOut,
)

__all__ = [
    "BUILTIN_JUDGE",
    "DEFAULT_LATENCY_S",
    "ConnectionTester",
    "check_connection",
    "adaptive_estimates",
    "adaptive_state",
    "estimate_adaptive",
    "cancel_session",
    "create_session",
    "delete_session",
    "estimate_modes",
    "estimate_new",
    "estimate_session",
    "get_comparison",
    "get_session",
    "insert_plan",
    "list_comparisons",
    "list_sessions",
    "pause_session",
    "plan_options",
    "resume_session",
    "retry_failed",
    "start_session",
]

ANALYZE_AFTER_ROWS = 50_000
# Seconds per call assumed for a model that has never been called.
DEFAULT_LATENCY_S = 2.0


# -- helpers ------------------------------------------------------------------------------


def _session_in(s: JudgeSession) -> SessionIn:
    o = s.options
    return SessionIn(
        session_name=s.name,
        pillar_ids=list(s.pillar_ids),
        comparison_mode=s.comparison_mode,  # type: ignore[arg-type]
        samples_per_pillar=o.get("samples_per_pillar", 5),
        repetitions_per_pair=o.get("repetitions_per_pair", 1),
        max_threads_per_pillar=o.get("max_threads_per_pillar"),
        position_swap=o.get("position_swap", True),
        sampling=o.get("sampling", "fixed"),
        worker_count=s.worker_count,
        calculate_elo=o.get("calculate_elo", True),
        judge_model_id=s.judge_model_id,
        baseline_pillar_id=o.get("baseline_pillar_id"),
        match_by_prompt_key=o.get("match_by_prompt_key", False),
        criteria=list(s.criteria),
        prompt_template=s.prompt_template,
        system_prompt=s.system_prompt,
        verdict_format=s.verdict_format,
        seed=o.get("seed", 0),
        panel=_panel_in(s.panel),
        adaptive=o.get("adaptive") if s.comparison_mode == "adaptive" else None,
    )


def _panel_in(panel: dict[str, Any] | None) -> PanelIn | None:
    """The stored panel as it was asked for (an imported panel has no models: None)."""
    if not panel or any(m.get("model_id") is None for m in panel.get("members", [])):
        return None
    return PanelIn(
        members=[
            PanelMemberIn(model_id=m["model_id"], weight=m.get("weight")) for m in panel["members"]
        ],
        rule="weighted" if panel["rule"] == "calibrated" else panel["rule"],
        cascade=CascadeIn(**panel["cascade"]) if panel.get("cascade") else None,
    )


async def _panel_models(db: AsyncSession, panel: PanelIn) -> list[tuple[LLMModel, Provider]]:
    return [await judge_model(db, m.model_id) for m in panel.members]


def _latency(m: LLMModel, p: Provider) -> float:
    if m.observed_latency_s is not None:
        return m.observed_latency_s
    configured = configured_latency_s(p.kind, p.settings)
    return DEFAULT_LATENCY_S if configured is None else configured


# -- estimate -----------------------------------------------------------------------------


async def _model_cost(db: AsyncSession, data: SessionIn, m: LLMModel, p: Provider) -> ModelCost:
    avg_chars = await db.scalar(
        select(func.avg(func.length(cast(Thread.content, Text)))).where(
            Thread.pillar_id.in_(data.pillar_ids)
        )
    )
    return ModelCost(
        input_per_million=m.input_price_per_million,
        output_per_million=m.output_price_per_million,
        latency_s=_latency(m, p),
        tokens_in_per_call=_prompt_tokens(data) + 2 * math.ceil(float(avg_chars or 0) / 4),
        tokens_out_per_call=_answer_tokens(data.criteria),
    )


def _cost_per_call(cost: ModelCost) -> float:
    return (
        cost.tokens_in_per_call * cost.input_per_million
        + cost.tokens_out_per_call * cost.output_per_million
    ) / 1_000_000


ADAPTIVE_PANEL = "an adaptive session has one judge: a panel needs a planned mode"


async def _estimate(
    db: AsyncSession, data: SessionIn, seed: int, planned: int | None = None
) -> EstimateOut:
    if data.panel is not None:
        members = await _panel_models(db, data.panel)
    else:
        members = [await judge_model(db, data.judge_model_id)]
    m, p = members[0]
    if data.comparison_mode == "adaptive":
        if data.panel is not None:
            raise Invalid(ADAPTIVE_PANEL)
        return await _adaptive_plan_estimate(db, data, m, p)
    options = plan_options(data, seed)
    threads = await plan_threads(db, data.pillar_ids)
    sizes = {pid: 0 for pid in data.pillar_ids}
    for t in threads:
        sizes[t.pillar_id] += 1
    limit = get_settings().max_comparisons_per_session
    bound = _size_bound(sizes, options)
    if data.match_by_prompt_key and planned is None and bound <= limit:
        # Only a built plan counts key-matched pairs; never build one over the limit.
        planned = len(await asyncio.to_thread(build_plan, threads, options))
    elif data.match_by_prompt_key and planned is None:
        planned = bound
    costs = [await _model_cost(db, data, mm, pp) for mm, pp in members]
    names = dict((await db.execute(select(Pillar.id, Pillar.name))).all())
    try:
        per_member = [
            estimate_plan(
                sizes,
                options,
                cost,
                pillar_names=names,
                chosen_workers=data.worker_count,
                planned_comparisons=planned,
                max_comparisons=limit,
            )
            for cost in costs
        ]
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    if data.panel is None:
        return _estimate_out(data, per_member[0], costs[0].latency_s, model_out(m, p), limit)
    return _panel_estimate(data, per_member, costs, model_out(m, p), limit)


def _panel_estimate(
    data: SessionIn,
    per_member: Sequence[Any],
    costs: Sequence[ModelCost],
    judge: Any,
    limit: int,
) -> EstimateOut:
    """Every member's calls: a panel pays each member on each comparison, its latency the
    slowest member's (they are asked at once); a cascade pays member k only when it is
    reached, so its expected spend weighs each member by its reach probability."""
    assert data.panel is not None
    est = per_member[0]
    k = len(per_member)
    worst = sum(e.cost_usd for e in per_member)
    cascade = data.panel.cascade if data.panel.rule == "cascade" else None
    warnings = list(est.warnings)
    if cascade is not None:
        share = cascade.expected_stop_share
        if share is None:
            share = [0.0] * (k - 1) + [1.0]
            warnings.append(
                "no expected stop shares for this cascade (calibrate it on labelled "
                "comparisons): the estimate assumes every member is asked"
            )
        reach = [1.0 - sum(share[:i]) for i in range(k)]
        cost = expected_cascade_cost([e.cost_usd for e in per_member], share)
        tokens_in = sum(r * e.input_tokens for r, e in zip(reach, per_member, strict=True))
        tokens_out = sum(r * e.output_tokens for r, e in zip(reach, per_member, strict=True))
        latency = sum(r * c.latency_s for r, c in zip(reach, costs, strict=True))
    else:
        cost = worst
        tokens_in = sum(e.input_tokens for e in per_member)
        tokens_out = sum(e.output_tokens for e in per_member)
        latency = max(c.latency_s for c in costs)
    out = _estimate_out(data, est, latency, judge, limit)
    return out.model_copy(
        update={
            "input_tokens": int(round(tokens_in)),
            "output_tokens": int(round(tokens_out)),
            "cost_usd": cost,
            "warnings": warnings,
            "panel_members": k,
            "worst_case_cost_usd": worst if cascade is not None else None,
            "minutes_by_workers": {
                w: minutes * latency / costs[0].latency_s if costs[0].latency_s else minutes
                for w, minutes in out.minutes_by_workers.items()
            },
        }
    )


def _estimate_out(
    data: SessionIn, est: Any, latency_s: float, judge: Any, limit: int
) -> EstimateOut:
    return EstimateOut(
        total_threads=est.total_threads,
        base_comparisons=est.base_comparisons,
        total_comparisons=est.total_comparisons,
        worker_count=data.worker_count,
        minutes=math.ceil(est.total_comparisons / data.worker_count) * latency_s / 60,
        minutes_by_workers=est.minutes_by_workers,
        latency_s=latency_s,
        input_tokens=est.input_tokens,
        output_tokens=est.output_tokens,
        cost_usd=est.cost_usd,
        judge_model=judge,
        warnings=est.warnings,
        recommended_repetitions=est.recommended_repetitions,
        over_limit=est.over_limit,
        max_comparisons=limit,
    )


def _size_bound(sizes: dict[int, int], options: PlanOptions) -> int:
    try:
        return plan_size_bound(sizes, options)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def check_plan_size(sizes: dict[int, int], options: PlanOptions) -> None:
    """Refuse (422) a plan over ``max_comparisons_per_session`` before it is built."""
    limit = get_settings().max_comparisons_per_session
    bound = _size_bound(sizes, options)
    if bound > limit:
        raise Invalid(over_limit_message(bound, limit))


def _prompt_tokens(data: SessionIn) -> int:
    """Tokens of the judge prompt around two empty threads."""
    messages = build_judge_messages(
        content_a="",
        content_b="",
        criteria=data.criteria,
        template=data.prompt_template,
        system_prompt=data.system_prompt,
    )
    return sum(estimate_tokens(m["content"]) for m in messages)


def _answer_tokens(criteria: Sequence[str]) -> int:
    """Tokens of a typical verdict: the JSON object with a three-sentence reasoning."""
    scores = {c: 4 for c in criteria}
    answer = {
        "winner": "A",
        "confidence": 0.85,
        "scores": {"A": scores, "B": scores},
        "reasoning": "x" * 300,
    }
    return estimate_tokens(json.dumps(answer))


async def estimate_new(*, db: AsyncSession, data: SessionIn) -> EstimateOut:
    """What a session would make and cost; nothing is stored."""
    return await _estimate(db, data, data.seed if data.seed is not None else 0)


async def estimate_session(*, db: AsyncSession, session_id: int) -> EstimateOut:
    """The estimate of an existing session (its real plan size)."""
    s = await session_row(db, session_id)
    if s.comparison_mode == "imported":
        raise Conflict("an imported session was judged elsewhere: it has no plan to estimate")
    return await _estimate(db, _session_in(s), s.options.get("seed", 0), planned=s.total)


async def estimate_modes(
    *, db: AsyncSession, data: SessionIn, chosen_total: int | None = None
) -> dict[Mode, ModeCount]:
    """Comparisons each comparison mode would make with the other options of ``data`` as
    they are (the form shows them beside each mode); nothing is stored. Counted from the
    pillar sizes, except key-matched plans, which only a built plan can count.
    ``chosen_total``: the chosen mode's count when the caller already has it."""
    sizes = dict(
        (
            await db.execute(
                select(Pillar.id, func.count(Thread.id))
                .outerjoin(Thread, Thread.pillar_id == Pillar.id)
                .where(Pillar.id.in_(data.pillar_ids))
                .group_by(Pillar.id)
            )
        ).all()
    )
    counts = mode_counts(data, sizes)
    if chosen_total is not None:
        counts[data.comparison_mode] = (chosen_total, None)
    out: dict[Mode, ModeCount] = {}
    for mode, (count, why) in counts.items():
        if count is None and why is None:
            count, why = await _mode_estimate(db, data, mode)
        out[mode] = ModeCount(comparisons=count, reason=why)
    return out


async def _mode_estimate(
    db: AsyncSession, data: SessionIn, mode: str
) -> tuple[int | None, str | None]:
    baseline = None if mode == "free_for_all" else data.baseline_pillar_id
    try:
        other = SessionIn.model_validate(
            data.model_dump()
            | {"comparison_mode": mode, "baseline_pillar_id": baseline, "adaptive": None}
        )
        est = await estimate_new(db=db, data=other)
    except (ValidationError, Invalid) as exc:
        return None, str(exc).splitlines()[0]
    return est.total_comparisons, None


# -- create -------------------------------------------------------------------------------


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
    panel = None
    if data.panel is not None:
        members = await _panel_models(db, data.panel)
        m, p = members[0]
        panel = await _stored_panel(db, data.panel, members)
    else:
        members = [await judge_model(db, data.judge_model_id)]
        m, p = members[0]
    if data.auto_start:
        for member, provider in members:
            await check_connection(db, llm, member, provider)
    seed = data.seed if data.seed is not None else secrets.randbelow(2**31)
    if data.comparison_mode == "adaptive":
        if panel is not None:
            raise Invalid(ADAPTIVE_PANEL)
        return await _create_adaptive(db, data, m, p, seed, hub)
    threads = await plan_threads(db, data.pillar_ids)
    options = plan_options(data, seed)
    sizes = {pid: 0 for pid in data.pillar_ids}
    for t in threads:
        sizes[t.pillar_id] += 1
    check_plan_size(sizes, options)
    # Building a large plan is CPU work: off the event loop.
    plan = await asyncio.to_thread(build_plan, threads, options)
    s = JudgeSession(
        name=data.session_name,
        status="draft",
        comparison_mode=data.comparison_mode,
        pillar_ids=list(data.pillar_ids),
        options=stored_options(data, seed),
        worker_count=data.worker_count,
        judge_model_id=m.id,
        criteria=list(data.criteria),
        prompt_template=data.prompt_template,
        panel=panel,
        system_prompt=data.system_prompt,
        verdict_format=(
            data.verdict_format.model_dump(mode="json") if data.verdict_format else None
        ),
        total=len(plan),
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


# -- adaptive -----------------------------------------------------------------------------


async def _adaptive_field(db: AsyncSession, data: SessionIn) -> rounds.Field:
    await plan_threads(db, data.pillar_ids)  # 422 for unknown pillars
    assert data.adaptive is not None
    return await rounds.load_field(db, data.adaptive.unit, data.pillar_ids)


async def _create_adaptive(
    db: AsyncSession,
    data: SessionIn,
    m: LLMModel,
    p: Provider,
    seed: int,
    hub: EventHub | None,
) -> SessionOut:
    """An adaptive session starts with its first round (every player below the evidence
    floor, paired at random); ``sessions.rounds`` appends the others."""
    assert data.adaptive is not None
    field = await _adaptive_field(db, data)
    cfg = rounds.with_default_cap(data.adaptive, field)
    cost = _cost_per_call(await _model_cost(db, data, m, p))
    rule = rounds.stop_rule(cfg, cost)
    rounds.check_field(field, cfg, rule)
    s = JudgeSession(
        name=data.session_name,
        status="draft",
        comparison_mode="adaptive",
        pillar_ids=list(data.pillar_ids),
        options=rounds.new_session_options(cfg, stored_options(data, seed), cost),
        worker_count=data.worker_count,
        judge_model_id=m.id,
        criteria=list(data.criteria),
        prompt_template=data.prompt_template,
        total=0,
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


async def estimate_adaptive(*, db: AsyncSession, data: SessionIn) -> AdaptiveEstimateOut:
    """Judge calls an adaptive session is expected to make before its rule (or budget)
    stops it, from seeded simulations under the simulator's judge model; nothing stored."""
    if data.comparison_mode != "adaptive" or data.adaptive is None:
        raise Invalid("the adaptive estimate needs comparison_mode adaptive")
    m, p = await judge_model(db, data.judge_model_id)
    field = await _adaptive_field(db, data)
    cfg = rounds.with_default_cap(data.adaptive, field)
    cost = _cost_per_call(await _model_cost(db, data, m, p))
    rule = rounds.stop_rule(cfg, cost)
    rounds.check_field(field, cfg, rule)
    limit = rule.budget.limit()
    cap = rounds.ffa_calls(field, cfg) if limit is None else limit
    # each run simulates a whole session: fewer runs for big fields keep the form snappy
    runs = 5 if field.n <= 100 else 3 if field.n <= 300 else 1
    est = await asyncio.to_thread(
        estimate_comparisons,
        field.n,
        rule,
        runs=runs,
        seed=data.seed or 0,
        batch_size=cfg.batch_size,
        strategy=cfg.strategy,
        epsilon=cfg.epsilon,
        position=cfg.position,
        swap_share=cfg.swap_share,
        max_comparisons=max(cap, 1),
    )
    saving = max(0, est.both_orders_equivalent - est.median) if cfg.position == "once" else 0
    return AdaptiveEstimateOut(
        label=est.label,
        players=field.n,
        runs=est.runs,
        median=est.median,
        low=est.low,
        high=est.high,
        stopped_by_rule=est.stopped_by_rule,
        budget_limit=limit,
        free_for_all=est.free_for_all,
        free_for_all_both_orders=est.free_for_all_both_orders,
        both_orders_equivalent=est.both_orders_equivalent,
        half_price_saving=saving,
        cost_per_comparison_usd=cost,
        cost_usd=est.median * cost,
        notes=list(est.notes),
    )


async def adaptive_estimates(
    *, db: AsyncSession, data: SessionIn
) -> tuple[EstimateOut, AdaptiveEstimateOut]:
    """Both estimates of an adaptive session from one simulation (the new-session page)."""
    m, p = await judge_model(db, data.judge_model_id)
    est = await estimate_adaptive(db=db, data=data)
    return await _adaptive_plan_estimate(db, data, m, p, est), est


async def _adaptive_plan_estimate(
    db: AsyncSession,
    data: SessionIn,
    m: LLMModel,
    p: Provider,
    est: AdaptiveEstimateOut | None = None,
) -> EstimateOut:
    """The plain estimate of an adaptive session: its expected calls (see
    ``estimate_adaptive``) at the model's latency and price."""
    if est is None:
        est = await estimate_adaptive(db=db, data=data)
    cost = await _model_cost(db, data, m, p)
    n = est.median

    def minutes(workers: int) -> float:
        return math.ceil(n / workers) * cost.latency_s / 60

    return EstimateOut(
        total_threads=est.players,
        base_comparisons=n,
        total_comparisons=n,
        worker_count=data.worker_count,
        minutes=minutes(data.worker_count),
        minutes_by_workers={w: minutes(w) for w in (1, 4, 8, 16, 32, 64)},
        latency_s=cost.latency_s,
        input_tokens=n * cost.tokens_in_per_call,
        output_tokens=n * cost.tokens_out_per_call,
        cost_usd=est.cost_usd,
        judge_model=model_out(m, p),
        warnings=[f"adaptive: the count is an {est.label}", *est.notes],
        recommended_repetitions=None,
    )


async def adaptive_state(*, db: AsyncSession, session_id: int) -> AdaptiveOut:
    """The current ranking of an adaptive session with its intervals, refitted from the
    stored verdicts (off the event loop), the rule's progress and the spend."""
    s = await session_row(db, session_id)
    if s.comparison_mode != "adaptive":
        raise Conflict(f"session {session_id} is not an adaptive session")
    cfg, rule = rounds.session_config(s)
    field = await rounds.load_field(db, cfg.unit, s.pillar_ids)
    outcomes = await rounds.load_outcomes(db, session_id, field)
    a, b, score = outcomes.a, outcomes.b, outcomes.score_a
    rows = list(
        await db.scalars(
            select(AdaptiveRound)
            .where(AdaptiveRound.session_id == session_id)
            .order_by(AdaptiveRound.round)
        )
    )
    names = await rounds.player_names(db, field)
    status, total, stop_reason = s.status, s.total, s.stop_reason
    init = np.asarray(rows[-1].theta) if rows and rows[-1].theta else None

    def fit() -> tuple[AdaptiveState, Any, Any, Any]:
        state = fit_state(field.n, a, b, score, init=init)
        return (
            state,
            check_stop(
                state,
                rule,
                spent=total,
                width_history=stability_widths(field.n, a, b, score, rule, init=state.theta),
            ),
            state.intervals(0.95),
            state.rank_intervals(0.95),
        )

    state, decision, (low, high), (best, worst) = await asyncio.to_thread(fit)
    ranking = [
        RankedPlayer(
            id=int(field.ids[i]),
            name=names.get(int(field.ids[i]), (f"#{field.ids[i]}", None))[0],
            pillar=names.get(int(field.ids[i]), ("", None))[1],
            rank=rank + 1,
            rank_best=int(best[i]),
            rank_worst=int(worst[i]),
            theta=float(state.theta[i]),
            theta_low=float(low[i]),
            theta_high=float(high[i]),
            games=int(state.games[i]),
        )
        for rank, i in enumerate(state.order())
    ]
    return AdaptiveOut(
        session_id=session_id,
        status=status,  # type: ignore[arg-type]
        unit=cfg.unit,
        rule=cfg.rule,
        stop_reason=stop_reason,
        progress=decision.progress,
        done=decision.done,
        needed=decision.total,
        spent=total,
        spent_text=decision.spent,
        budget_limit=rule.budget.limit(),
        results=int(a.size),
        free_for_all=rounds.ffa_calls(field, cfg),
        ranking=ranking,
        rounds=[AdaptiveRoundOut.model_validate(r) for r in rows],
        field_rates=rounds.field_rates(score, rounds.selection_weights(rows, outcomes.position)),
    )


# -- control ------------------------------------------------------------------------------
