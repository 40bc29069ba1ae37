"""An adaptive session's field: its players (threads, or pillars matched on prompt keys),
its stored verdicts in queue order, the stopping rule of its options, and what the state
and estimate read off them (names, field-wide rates, the free-for-all cap). The rounds
planner (``sessions.adaptive.rounds``) and the session reads share these."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import Pillar, Thread
from llmjudge.core.tournaments.adaptive import (
    SOURCE_RANDOM,
    Budget,
    StopRule,
    field_rate,
    free_for_all_comparisons,
)
from llmjudge.infra.errors import Invalid
from llmjudge.sessions.adaptive.schemas import FieldRateOut, RateOut
from llmjudge.sessions.models import AdaptiveRound, Comparison, JudgeSession
from llmjudge.sessions.schemas import AdaptiveIn

__all__ = [
    "Field",
    "Outcomes",
    "check_field",
    "ffa_calls",
    "field_rates",
    "load_field",
    "load_outcomes",
    "new_session_options",
    "player_names",
    "selection_options",
    "selection_weights",
    "session_config",
    "stop_rule",
    "with_default_cap",
]

SCORE = {"A": 1.0, "B": 0.0, "TIE": 0.5}


# The options an AdaptiveIn shares by name with the stopping rule and the pair selector.
RULE_OPTIONS = {"confidence", "tolerance", "k", "min_games"}
SELECTION_OPTIONS = {"strategy", "epsilon", "position", "swap_share"}


def stop_rule(cfg: AdaptiveIn, cost_per_comparison: float) -> StopRule:
    budget = Budget(
        comparisons=cfg.budget_comparisons,
        usd=cfg.budget_usd,
        cost_per_comparison=cost_per_comparison,
    )
    return StopRule(kind=cfg.rule, budget=budget, **cfg.model_dump(include=RULE_OPTIONS))


def selection_options(cfg: AdaptiveIn) -> dict[str, Any]:
    """How the session chooses its pairs, as ``select_batch`` (and its simulation) take it."""
    return cfg.model_dump(include=SELECTION_OPTIONS)


@dataclass(frozen=True, eq=False)
class Field:
    """The players of a session and how a pair of them becomes a comparison."""

    unit: str  # "threads" | "pillars"
    ids: np.ndarray  # player ids, sorted (thread ids, or pillar ids)
    pillar_of: np.ndarray  # threads: each player's pillar; pillars: the ids themselves
    # pillars: (players, keys) bool of answered prompt keys, and the thread answering each
    answered: np.ndarray | None = None
    thread_of: np.ndarray | None = None  # (players, keys) thread id, -1 where none

    @property
    def n(self) -> int:
        return int(self.ids.size)

    def allowed(self) -> np.ndarray | None:
        if self.answered is None:
            return None
        a = self.answered.astype(np.int32)
        return (a @ a.T) > 0

    def index(self, ids: np.ndarray) -> np.ndarray:
        """Player index of each id; -1 for ids not in the field."""
        pos = np.searchsorted(self.ids, ids)
        pos = np.minimum(pos, max(self.n - 1, 0))
        return np.where(self.ids[pos] == ids, pos, -1) if self.n else np.full(ids.size, -1)


async def load_field(db: AsyncSession, unit: str, pillar_ids: Sequence[int]) -> Field:
    if unit == "threads":
        rows = (
            await db.execute(
                select(Thread.id, Thread.pillar_id)
                .where(Thread.pillar_id.in_(list(pillar_ids)))
                .order_by(Thread.id)
            )
        ).all()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        return Field(unit, ids, np.array([r[1] for r in rows], dtype=np.int64))
    pillars = np.array(sorted(pillar_ids), dtype=np.int64)
    rows = (
        await db.execute(
            select(Thread.id, Thread.pillar_id, Thread.prompt_key)
            .where(Thread.pillar_id.in_(list(pillar_ids)), Thread.prompt_key.is_not(None))
            .order_by(Thread.id)
        )
    ).all()
    keys = sorted({r[2] for r in rows})
    key_index = {k: i for i, k in enumerate(keys)}
    thread_of = np.full((pillars.size, len(keys)), -1, dtype=np.int64)
    p_index = {int(p): i for i, p in enumerate(pillars)}
    for tid, pid, key in reversed(rows):  # the lowest thread id of a (pillar, key) wins
        thread_of[p_index[pid], key_index[key]] = tid
    return Field(unit, pillars, pillars.copy(), thread_of >= 0, thread_of)


class Outcomes(NamedTuple):
    """The session's verdicts in queue order (the order the ``ranking`` rule's prefixes
    follow): player indices, the score of the player shown first, the queue position."""

    a: np.ndarray
    b: np.ndarray
    score_a: np.ndarray
    position: np.ndarray


async def load_outcomes(db: AsyncSession, session_id: int, field: Field) -> Outcomes:
    """The session's verdicts as :class:`Outcomes` (one column read)."""
    if field.unit == "threads":
        cols = (Comparison.thread_a_id, Comparison.thread_b_id)
    else:
        cols = (Comparison.pillar_a_id, Comparison.pillar_b_id)
    rows = (
        await db.execute(
            select(*cols, Comparison.winner, Comparison.queue_position)
            .where(
                Comparison.session_id == session_id,
                Comparison.status == "completed",
                Comparison.winner.is_not(None),
            )
            .order_by(Comparison.queue_position)
        )
    ).all()
    if not rows:
        empty = np.empty(0, dtype=np.int64)
        return Outcomes(empty, empty, np.empty(0), empty)
    a = field.index(np.array([r[0] for r in rows], dtype=np.int64))
    b = field.index(np.array([r[1] for r in rows], dtype=np.int64))
    s = np.array([SCORE[r[2]] for r in rows])
    position = np.array([r[3] for r in rows], dtype=np.int64)
    keep = (a >= 0) & (b >= 0) & (a != b)  # a player since removed from the field
    return Outcomes(a[keep], b[keep], s[keep], position[keep])


def selection_weights(rounds: Sequence[AdaptiveRound], position: np.ndarray) -> np.ndarray:
    """Inverse-probability weight of each comparison (by queue position): ``1 / propensity``
    for pairs its round drew uniformly, 0 for pairs chosen on purpose or rounds stored
    before selection was recorded (see :func:`~llmjudge.core.tournaments.adaptive.field_rate`)."""
    weights = np.zeros(position.size)
    for r in rounds:
        if not r.sources or not r.random_propensity:
            continue
        offset = position - r.first_position
        mine = (offset >= 0) & (offset < len(r.sources))
        uniform = np.asarray(r.sources, dtype=np.int64)[offset[mine]] == SOURCE_RANDOM
        weights[np.flatnonzero(mine)[uniform]] = 1.0 / r.random_propensity
    return weights


def field_rates(score_a: np.ndarray, weights: np.ndarray) -> list[FieldRateOut]:
    """Position sway and ties over the field (the uniform share, weighted by its inverse
    propensities) and over every verdict (unweighted): the adaptive pairs are close ones,
    where position sways a judge most, so only the first describes the field."""
    every = np.ones(score_a.size)

    def rate(x: np.ndarray, w: np.ndarray) -> RateOut:
        return RateOut.model_validate(vars(field_rate(x, w)))

    shown = {
        "score of the answer shown first (ties half; 0.5 = no position sway)": score_a,
        "ties": (score_a == 0.5).astype(np.float64),
    }
    return [
        FieldRateOut(what=what, field=rate(x, weights), judged=rate(x, every))
        for what, x in shown.items()
    ]


def session_config(s: JudgeSession) -> tuple[AdaptiveIn, StopRule]:
    cfg = AdaptiveIn.model_validate(s.options["adaptive"])
    return cfg, stop_rule(cfg, float(s.options.get("cost_per_comparison", 0.0)))


def new_session_options(
    cfg: AdaptiveIn, base: dict[str, Any], cost_per_comparison: float
) -> dict[str, Any]:
    return base | {"adaptive": cfg.model_dump(), "cost_per_comparison": cost_per_comparison}


def check_field(field: Field, cfg: AdaptiveIn, rule: StopRule) -> None:
    """422s for a field the rule cannot work on."""
    what = "threads" if field.unit == "threads" else "pillars"
    if field.n < 2:
        raise Invalid(f"an adaptive session needs at least two {what}; found {field.n}")
    if field.unit == "pillars":
        allowed = field.allowed()
        assert allowed is not None
        np.fill_diagonal(allowed, False)
        if not allowed.any():
            raise Invalid("no two pillars answered a common prompt key")
    if cfg.rule == "top_k" and cfg.k >= field.n:
        raise Invalid(f"top_k needs k below the number of {what} ({field.n})")
    try:
        limit = rule.budget.limit()
    except ValueError:
        raise Invalid("a USD budget needs a judge model with a price per token") from None
    if limit is not None and limit < 2:
        raise Invalid(f"the budget buys {limit} comparison(s): at least 2 are needed")


async def player_names(db: AsyncSession, field: Field) -> dict[int, tuple[str, str | None]]:
    """Display name and pillar name of each player."""
    pillars = dict((await db.execute(select(Pillar.id, Pillar.name))).all())
    if field.unit == "pillars":
        return {int(p): (pillars.get(int(p), f"pillar {p}"), None) for p in field.ids}
    rows = await db.execute(
        select(Thread.id, Thread.title, Thread.external_id, Thread.pillar_id).where(
            Thread.id.in_(field.ids.tolist())
        )
    )
    return {
        tid: (title or ext or f"thread {tid}", pillars.get(pid)) for tid, title, ext, pid in rows
    }


def with_default_cap(cfg: AdaptiveIn, field: Field) -> AdaptiveIn:
    """Without a budget, a free-for-all's worth of calls is the cap: an adaptive session
    never costs more than the plan it replaces (fail closed on spend)."""
    if cfg.budget_comparisons is not None or cfg.budget_usd is not None or field.n < 2:
        return cfg
    return cfg.model_copy(update={"budget_comparisons": ffa_calls(field, cfg)})


def ffa_calls(field: Field, cfg: AdaptiveIn) -> int:
    return free_for_all_comparisons(field.n, both_orders=cfg.position == "both")
