"""Response models of an adaptive session: its expected cost and its live state."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from llmjudge.sessions.schemas import SessionStatus


class AdaptiveEstimateOut(BaseModel):
    """Judge calls an adaptive session is expected to make: an estimate from simulations."""

    label: str = Field(description="how the estimate was made: it is an estimate")
    players: int
    runs: int
    median: int = Field(description="median judge calls to stop over the simulated runs")
    low: int
    high: int
    stopped_by_rule: int = Field(description="runs the rule stopped (others: budget or cap)")
    budget_limit: int | None = Field(description="the budget in judge calls (USD / cost)")
    free_for_all: int = Field(description="judge calls of a full free-for-all, one order")
    free_for_all_both_orders: int
    both_orders_equivalent: int = Field(
        description="median calls had every chosen pair been judged in both orders"
    )
    half_price_saving: int = Field(
        description="calls the position option 'once' saves against 'both' (0 with 'both')"
    )
    cost_per_comparison_usd: float
    cost_usd: float = Field(description="median calls x cost per call")
    notes: list[str]


class RankedPlayer(BaseModel):
    id: int
    name: str
    pillar: str | None
    rank: int
    rank_best: int = Field(description="95% rank interval, best end")
    rank_worst: int
    theta: float = Field(description="Bradley-Terry log-strength")
    theta_low: float
    theta_high: float
    games: int


class AdaptiveRoundOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    round: int
    first_position: int
    size: int
    spent: int
    results: int
    width: float | None
    progress: str
    stop: bool
    reason: str | None
    created_at: datetime


class RateOut(BaseModel):
    value: float | None
    low: float | None = Field(description="95% Wilson interval at the effective n")
    high: float | None
    n: int = Field(description="verdicts it rests on")
    n_eff: float = Field(description="Kish's effective n of the weights (n when unweighted)")


class FieldRateOut(BaseModel):
    """A rate over the whole field (the uniform share of pairs, inverse-probability
    weighted) beside the same rate over every pair judged (chosen close on purpose)."""

    what: str
    field: RateOut
    judged: RateOut


class AdaptiveOut(BaseModel):
    """The live state of an adaptive session, refitted from its stored results."""

    session_id: int
    status: SessionStatus
    unit: Literal["threads", "pillars"]
    rule: str
    stop_reason: str | None
    progress: str = Field(description="the stopping rule's progress, in words")
    done: int
    needed: int
    spent: int = Field(description="judge calls made or queued")
    spent_text: str
    budget_limit: int | None
    results: int = Field(description="verdicts the ranking is fitted on")
    free_for_all: int = Field(description="calls a full free-for-all would have needed")
    ranking: list[RankedPlayer]
    rounds: list[AdaptiveRoundOut]
    field_rates: list[FieldRateOut] = Field(
        default_factory=list,
        description="position sway and ties over the field, from the uniform share",
    )
