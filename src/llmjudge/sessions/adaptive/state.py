"""What an adaptive session is expected to cost before it runs (seeded simulations of its
stopping rule) and where it stands while it runs (the ranking refitted from its stored
verdicts, the rule's progress, the spend)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.tournaments.adaptive import (
    SHOWN_PRIOR,
    AdaptiveState,
    check_stop,
    fit_state,
    stability_widths,
)
from llmjudge.core.tournaments.simulation import estimate_comparisons
from llmjudge.infra.errors import Conflict, Invalid
from llmjudge.providers import LLMModel, Provider
from llmjudge.sessions.adaptive import field as fields
from llmjudge.sessions.adaptive.schemas import (
    AdaptiveEstimateOut,
    AdaptiveOut,
    AdaptiveRoundOut,
    RankedPlayer,
)
from llmjudge.sessions.costs import cost_per_call, model_cost
from llmjudge.sessions.models import AdaptiveRound
from llmjudge.sessions.plans import plan_threads
from llmjudge.sessions.reads import judge_model, model_out, session_row
from llmjudge.sessions.schemas import EstimateOut, SessionIn

__all__ = [
    "adaptive_estimates",
    "adaptive_field",
    "adaptive_state",
    "estimate_adaptive",
    "plan_estimate",
]


async def adaptive_field(db: AsyncSession, data: SessionIn) -> fields.Field:
    await plan_threads(db, data.pillar_ids)  # 422 for unknown pillars
    assert data.adaptive is not None
    return await fields.load_field(db, data.adaptive.unit, data.pillar_ids)


async def estimate_adaptive(*, db: AsyncSession, data: SessionIn) -> AdaptiveEstimateOut:
    """Judge calls an adaptive session is expected to make before its rule (or budget)
    stops it, from seeded simulations under the simulator's judge model; nothing stored."""
    if data.comparison_mode != "adaptive" or data.adaptive is None:
        raise Invalid("the adaptive estimate needs comparison_mode adaptive")
    m, p = await judge_model(db, data.judge_model_id)
    field = await adaptive_field(db, data)
    cfg = fields.with_default_cap(data.adaptive, field)
    cost = cost_per_call(await model_cost(db, data, m, p))
    rule = fields.stop_rule(cfg, cost)
    fields.check_field(field, cfg, rule)
    limit = rule.budget.limit()
    cap = fields.ffa_calls(field, cfg) if limit is None else limit
    # each run simulates a whole session: fewer runs for big fields keep the form snappy
    runs = 5 if field.n <= 100 else 3 if field.n <= 300 else 1
    est = await asyncio.to_thread(
        estimate_comparisons,
        field.n,
        rule,
        runs=runs,
        seed=data.seed or 0,
        batch_size=cfg.batch_size,
        max_comparisons=max(cap, 1),
        **fields.selection_options(cfg),
    )
    saving = max(0, est.both_orders_equivalent - est.median) if cfg.position == "once" else 0
    return AdaptiveEstimateOut.model_validate(
        dataclasses.asdict(est)
        | {
            "players": field.n,
            "budget_limit": limit,
            "half_price_saving": saving,
            "cost_per_comparison_usd": cost,
            "cost_usd": est.median * cost,
        }
    )


async def adaptive_estimates(
    *, db: AsyncSession, data: SessionIn
) -> tuple[EstimateOut, AdaptiveEstimateOut]:
    """Both estimates of an adaptive session from one simulation (the new-session page)."""
    m, p = await judge_model(db, data.judge_model_id)
    est = await estimate_adaptive(db=db, data=data)
    return await plan_estimate(db, data, m, p, est), est


async def plan_estimate(
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
    cost = await model_cost(db, data, m, p)
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
    stored verdicts with the ratings' prior (off the event loop), the rule's progress and
    the spend."""
    s = await session_row(db, session_id)
    if s.comparison_mode != "adaptive":
        raise Conflict(f"session {session_id} is not an adaptive session")
    cfg, rule = fields.session_config(s)
    field = await fields.load_field(db, cfg.unit, s.pillar_ids)
    outcomes = await fields.load_outcomes(db, session_id, field)
    a, b, score = outcomes.a, outcomes.b, outcomes.score_a
    rows = list(
        await db.scalars(
            select(AdaptiveRound)
            .where(AdaptiveRound.session_id == session_id)
            .order_by(AdaptiveRound.round)
        )
    )
    names = await fields.player_names(db, field)
    status, total, stop_reason = s.status, s.total, s.stop_reason
    init = np.asarray(rows[-1].theta) if rows and rows[-1].theta else None

    def fit() -> tuple[AdaptiveState, Any, Any, Any]:
        # the rule reads the design's fit of the evidence, as the rounds did; the ranking
        # shown is refitted with the ratings' prior, on the leaderboard's scale
        design = fit_state(field.n, a, b, score, init=init)
        shown = fit_state(field.n, a, b, score, init=design.theta, prior=SHOWN_PRIOR)
        return (
            shown,
            check_stop(
                design,
                rule,
                spent=total,
                width_history=stability_widths(field.n, a, b, score, rule, init=design.theta),
            ),
            shown.intervals(0.95),
            shown.rank_intervals(0.95),
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
        free_for_all=fields.ffa_calls(field, cfg),
        ranking=ranking,
        rounds=[AdaptiveRoundOut.model_validate(r) for r in rows],
        field_rates=fields.field_rates(score, fields.selection_weights(rows, outcomes.position)),
    )
