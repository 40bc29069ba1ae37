"""What a session would make and cost before it is created (or, for a stored session, with
its real plan size): comparisons, tokens, spend and minutes at each worker count, for one
judge or a panel; and the counts each comparison mode would make, beside each mode in the
form. Nothing here stores anything."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import Pillar, Thread, prompt_key_coverage
from llmjudge.core.judging.panels import expected_cascade_cost
from llmjudge.core.judging.prompts import CRITERIA_SETS
from llmjudge.core.tournaments.estimate import (
    Estimate,
    ModelCost,
    estimate_plan,
    over_limit_message,
)
from llmjudge.core.tournaments.pairing import PlanOptions, plan_size_bound
from llmjudge.infra.config import get_settings
from llmjudge.infra.errors import Conflict, Invalid
from llmjudge.sessions.adaptive.state import plan_estimate
from llmjudge.sessions.costs import model_cost, panel_models
from llmjudge.sessions.execution import batch_refusal
from llmjudge.sessions.models import JudgeSession
from llmjudge.sessions.plans import (
    PLAN_FIELDS,
    build_plan,
    mode_counts,
    plan_options,
    plan_threads,
)
from llmjudge.sessions.reads import judge_model, model_out, session_row
from llmjudge.sessions.schemas import (
    CascadeIn,
    EstimateOut,
    JudgeModelOut,
    Mode,
    ModeCount,
    PanelIn,
    PanelMemberIn,
    SessionIn,
)

__all__ = [
    "ADAPTIVE_PANEL",
    "check_plan_size",
    "with_default_criteria",
    "estimate_modes",
    "estimate_new",
    "estimate_session",
    "pillar_sizes",
]

ADAPTIVE_PANEL = "an adaptive session has one judge: a panel needs a planned mode"


# Columns a session stores as its request named them.
AS_ASKED = (
    "comparison_mode",
    "execution",
    "worker_count",
    "judge_model_id",
    "prompt_template",
    "system_prompt",
    "verdict_format",
)


def _session_in(s: JudgeSession) -> SessionIn:
    """The request a stored session was made from (its plan options from ``options``)."""
    o = s.options
    return SessionIn.model_validate(
        {k: o[k] for k in PLAN_FIELDS | {"calculate_elo"} if k in o}
        | {k: getattr(s, k) for k in AS_ASKED}
        | {
            "session_name": s.name,
            "pillar_ids": list(s.pillar_ids),
            "criteria": list(s.criteria),
            "seed": o.get("seed", 0),
            "panel": _panel_in(s.panel),
            "adaptive": o.get("adaptive") if s.comparison_mode == "adaptive" else None,
        }
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


def pillar_sizes(pillar_ids: Sequence[int], threads: Sequence[Any]) -> dict[int, int]:
    """Threads per pillar of a plan's threads (0 for a pillar without any)."""
    sizes = {pid: 0 for pid in pillar_ids}
    for t in threads:
        sizes[t.pillar_id] += 1
    return sizes


async def _estimate(
    db: AsyncSession, data: SessionIn, seed: int, planned: int | None = None
) -> EstimateOut:
    if data.panel is not None:
        members = await panel_models(db, data.panel)
    else:
        members = [await judge_model(db, data.judge_model_id)]
    out = await _estimate_live(db, data, seed, planned)
    why = batch_refusal(data, members)
    if why is not None:
        return out.model_copy(update={"batch_unavailable": why})
    # A batch call costs the model's price less its batch discount; a panel pays each
    # member its own (weighed by the member's share of the live cost: every member reads
    # the same prompts, so its share is its prices on the same tokens).
    weights = [
        m.input_price_per_million * out.input_tokens
        + m.output_price_per_million * out.output_tokens
        for m, _ in members
    ]
    total = sum(weights)
    keep = [1.0 - m.batch_discount for m, _ in members]
    share = (
        sum(w * k for w, k in zip(weights, keep, strict=True)) / total
        if total > 0
        else sum(keep) / len(keep)
    )
    return out.model_copy(update={"batch_cost_usd": out.cost_usd * share})


async def _estimate_live(
    db: AsyncSession, data: SessionIn, seed: int, planned: int | None = None
) -> EstimateOut:
    if data.panel is not None:
        members = await panel_models(db, data.panel)
    else:
        members = [await judge_model(db, data.judge_model_id)]
    m, p = members[0]
    if data.comparison_mode == "adaptive":
        if data.panel is not None:
            raise Invalid(ADAPTIVE_PANEL)
        return await plan_estimate(db, data, m, p)
    options = plan_options(data, seed)
    threads = await plan_threads(db, data.pillar_ids)
    sizes = pillar_sizes(data.pillar_ids, threads)
    limit = get_settings().max_comparisons_per_session
    bound = _size_bound(threads, data.pillar_ids, options)
    if data.match_by_prompt_key and planned is None and bound <= limit:
        # Only a built plan counts key-matched pairs; never build one over the limit.
        planned = len(await asyncio.to_thread(build_plan, threads, options))
    elif data.match_by_prompt_key and planned is None:
        planned = bound
    costs = [await model_cost(db, data, mm, pp) for mm, pp in members]
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
    per_member: Sequence[Estimate],
    costs: Sequence[ModelCost],
    judge: JudgeModelOut,
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
    data: SessionIn, est: Estimate, latency_s: float, judge: JudgeModelOut, limit: int
) -> EstimateOut:
    return EstimateOut.model_validate(
        dataclasses.asdict(est)
        | {
            "worker_count": data.worker_count,
            "minutes": math.ceil(est.total_comparisons / data.worker_count) * latency_s / 60,
            "latency_s": latency_s,
            "judge_model": judge,
            "max_comparisons": limit,
        }
    )


def _size_bound(threads: Sequence[Any], pillar_ids: Sequence[int], options: PlanOptions) -> int:
    keys = Counter(
        (t.pillar_id, t.prompt_key) for t in threads if t.prompt_key is not None
    )  # only read by a key-matched plan's bound
    try:
        return plan_size_bound(pillar_sizes(pillar_ids, threads), options, keys)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def check_plan_size(
    threads: Sequence[Any], pillar_ids: Sequence[int], options: PlanOptions
) -> None:
    """Refuse (422) a plan over ``max_comparisons_per_session`` before it is built."""
    limit = get_settings().max_comparisons_per_session
    bound = _size_bound(threads, pillar_ids, options)
    if bound > limit:
        raise Invalid(over_limit_message(bound, limit))


async def with_default_criteria(db: AsyncSession, data: SessionIn) -> SessionIn:
    """Unset criteria follow the threads, as the new-tournament form's default does:
    answers to prompts (every thread has a prompt key: a benchmark, the demo) are judged on
    answer quality; other threads on the default (counselling) set."""
    if "criteria" in data.model_fields_set:
        return data
    keyed, total = await prompt_key_coverage(db=db, pillar_ids=data.pillar_ids)
    if not total or keyed < total:
        return data
    return data.model_copy(update={"criteria": list(CRITERIA_SETS["answer_quality"].criteria)})


async def estimate_new(*, db: AsyncSession, data: SessionIn) -> EstimateOut:
    """What a session would make and cost; nothing is stored."""
    data = await with_default_criteria(db, data)
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
    # adaptive pairs by its own rule (its unit), never by the form's prompt matching
    matched = data.match_by_prompt_key and mode != "adaptive"
    try:
        other = SessionIn.model_validate(
            data.model_dump()
            | {
                "comparison_mode": mode,
                "baseline_pillar_id": baseline,
                "adaptive": None,
                "match_by_prompt_key": matched,
            }
        )
        est = await estimate_new(db=db, data=other)
    except (ValidationError, Invalid) as exc:
        return None, str(exc).splitlines()[0]
    return est.total_comparisons, None
