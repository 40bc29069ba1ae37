"""Adaptive sessions: rounds of comparisons appended to the queue as results come in.

A round is planned from the database alone: the stored verdicts are refitted
(``sessions.adaptive.fit_state``, warm-started from the previous round's ``theta``, off the
event loop), the stopping rule is checked (the ``ranking`` rule on refits of earlier
prefixes of the results in queue order, so where it stops does not depend on worker
timing), and the next batch (``select_batch``) is appended with ``plans.insert_plan`` after the
current last queue position, together with its ``adaptive_rounds`` row, in one
transaction. Nothing lives in memory between rounds, so a process killed between them
loses nothing: the next process to hold the session's advisory lock plans from what is
stored, and the (session, round) primary key refuses a round appended twice.

The next round is planned when the current one is done, from every result so far: what a
round holds then depends on the seed and the verdicts alone, never on worker timing, so a
seeded session asked again chooses the same pairs and stops at the same place (planning at
three quarters of a round, as before, read whichever results had arrived). The cost is the
round's last calls: the workers wait for the slowest before the next round starts. The budget is counted in judge calls queued
(``judge_sessions.total``), each paid for whether it succeeds or not, and never exceeded;
a USD budget becomes calls through the estimated cost per call stored at creation.
``stop_reason`` marks a stopped session: the last comparisons finish and the queue
completes it (``claims.finish``); until then a drained adaptive session waits for its
next round.

The field, the stored verdicts and the stopping rule are read by ``sessions.adaptive.field``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.core.tournaments.adaptive import (
    SOURCE_RANDOM,
    AdaptiveState,
    Batch,
    StopDecision,
    StopRule,
    check_stop,
    fit_state,
    pillar_prompt_keys,
    rank_width,
    select_batch,
    stability_widths,
)
from llmjudge.core.tournaments.pairing import PlanArrays
from llmjudge.core.tournaments.simulation import default_batch_size
from llmjudge.infra.events.hub import EventHub
from llmjudge.sessions.adaptive.field import (
    Field,
    Outcomes,
    load_field,
    load_outcomes,
    selection_options,
    session_config,
)
from llmjudge.sessions.models import AdaptiveRound, Comparison, JudgeSession
from llmjudge.sessions.plans import insert_plan
from llmjudge.sessions.run.claims import notify_work
from llmjudge.sessions.run.judging import session_topic
from llmjudge.sessions.schemas import AdaptiveIn

__all__ = [
    "LOCK_CLASS",
    "AdaptiveRounds",
    "advance",
    "batch_size",
    "pair_keys",
    "plan_arrays",
]

log = logging.getLogger(__name__)

LOCK_CLASS = 0x61647074  # "adpt": the advisory lock class of a session's rounds


def batch_size(cfg: AdaptiveIn, n: int, spent: int, workers: int) -> int:
    """The estimate's schedule (``default_batch_size``), but never fewer calls than
    workers: a round must keep every worker busy."""
    if cfg.batch_size is not None:
        return cfg.batch_size
    return max(default_batch_size(n, spent), workers)


def plan_arrays(
    field: Field,
    state: AdaptiveState,
    cfg: AdaptiveIn,
    rule: StopRule,
    *,
    size: int,
    seed: int,
    round_no: int,
    first_group: int,
    prior: np.ndarray | None = None,
) -> tuple[PlanArrays, Batch]:
    """The next ``size`` comparisons as plan rows (pure; the caller appends them), with
    the batch they came from (how each was chosen, row for row).

    ``prior``: :func:`pair_keys` of the session's comparisons so far. A pair shown again
    in the same order gets the next ``repetition``, so the judge answers afresh instead of
    from the cache (as repetitions of other sessions do)."""
    seeds = np.random.SeedSequence([seed, round_no])
    select_seed, key_seed = seeds.spawn(2)
    batch = select_batch(
        state,
        size,
        rule=rule,
        seed=select_seed,
        allowed=field.allowed(),
        **selection_options(cfg),
    )
    a, b = batch.a, batch.b
    if field.unit == "threads":
        thread_a, thread_b = field.ids[a], field.ids[b]
    else:
        assert field.answered is not None and field.thread_of is not None
        # one prompt key per pair: a swapped twin shares its original's key
        groups, first = np.unique(batch.group, return_index=True)
        keys = pillar_prompt_keys(a[first], b[first], field.answered, seed=key_seed)
        key = keys[np.searchsorted(groups, batch.group)]
        thread_a, thread_b = field.thread_of[a, key], field.thread_of[b, key]
    thread_a = np.asarray(thread_a, dtype=np.int64)
    thread_b = np.asarray(thread_b, dtype=np.int64)
    repetition = np.zeros(a.size, dtype=np.int64)
    if prior is not None and prior.size:
        seen = np.sort(prior)
        keys = pair_keys(thread_a, thread_b)
        repetition = np.searchsorted(seen, keys, "right") - np.searchsorted(seen, keys, "left")
    plan = PlanArrays(
        thread_a=thread_a,
        thread_b=thread_b,
        pillar_a=field.pillar_of[a],
        pillar_b=field.pillar_of[b],
        repetition=repetition,
        swap_group=batch.group + first_group,
        is_swap=batch.is_swap,
    )
    return plan, batch


def pair_keys(thread_a: np.ndarray, thread_b: np.ndarray) -> np.ndarray:
    """One int64 per ordered pair of thread ids (int4 ids)."""
    return np.asarray(thread_a, dtype=np.int64) * (1 << 31) + np.asarray(thread_b, dtype=np.int64)


async def load_pair_keys(db: AsyncSession, session_id: int) -> np.ndarray:
    rows = (
        await db.execute(
            select(Comparison.thread_a_id, Comparison.thread_b_id).where(
                Comparison.session_id == session_id
            )
        )
    ).all()
    if not rows:
        return np.empty(0, dtype=np.int64)
    cols = np.array(rows, dtype=np.int64)
    return pair_keys(cols[:, 0], cols[:, 1])


# -- one step ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    state: AdaptiveState
    decision: StopDecision
    width: float
    plan: PlanArrays | None
    batch: Batch | None = None


def _plan_next(
    field: Field,
    outcomes: Outcomes,
    init: np.ndarray | None,
    cfg: AdaptiveIn,
    rule: StopRule,
    *,
    spent: int,
    workers: int,
    seed: int,
    round_no: int,
    prior: np.ndarray | None = None,
) -> Planned:
    """Refit, check the rule, choose the next batch: CPU work, run in a thread."""
    a, b, s, _ = outcomes
    state = fit_state(field.n, a, b, s, init=init)
    width = rank_width(state, rule.confidence)
    decision = check_stop(
        state,
        rule,
        spent=spent,
        width_history=stability_widths(field.n, a, b, s, rule, init=state.theta),
    )
    if decision.stop:
        return Planned(state, decision, width, None)
    size = batch_size(cfg, field.n, spent, workers)
    if decision.remaining is not None:
        size = min(size, decision.remaining)
    plan, batch = plan_arrays(
        field,
        state,
        cfg,
        rule,
        size=size,
        seed=seed,
        round_no=round_no,
        first_group=spent,
        prior=prior,
    )
    return Planned(state, decision, width, plan, batch)


def selection_columns(batch: Batch | None) -> dict[str, Any]:
    """The round row's record of how its comparisons were chosen."""
    if batch is None or len(batch) == 0:
        return {"sources": None, "random_propensity": None}
    uniform = batch.source == SOURCE_RANDOM
    return {
        "sources": batch.source.astype(int).tolist(),
        "random_propensity": float(batch.propensity[uniform][0]) if uniform.any() else None,
    }


async def open_count(db: AsyncSession, session_id: int) -> int:
    return int(
        await db.scalar(
            select(func.count()).where(
                Comparison.session_id == session_id,
                Comparison.status.in_(("pending", "running")),
            )
        )
        or 0
    )


async def advance(
    sessionmaker: async_sessionmaker[AsyncSession], session_id: int, hub: EventHub | None = None
) -> bool:
    """Plan the session's next round once its current one is done. Returns
    False once the session needs no more rounds (stopped, or no longer running)."""
    async with sessionmaker() as db:
        s = await db.get(JudgeSession, session_id)
        if s is None or s.comparison_mode != "adaptive" or s.stop_reason is not None:
            return False
        if s.status != "running":
            return False
        rounds = list(
            await db.scalars(
                select(AdaptiveRound)
                .where(AdaptiveRound.session_id == session_id)
                .order_by(AdaptiveRound.round)
            )
        )
        last = rounds[-1] if rounds else None
        if last is not None and await open_count(db, session_id):
            return True  # the current round is not done
        cfg, rule = session_config(s)
        field = await load_field(db, cfg.unit, s.pillar_ids)
        outcomes = await load_outcomes(db, session_id, field)
        prior = await load_pair_keys(db, session_id)
        total, seed, workers = s.total, int(s.options.get("seed", 0)), s.worker_count
        round_no = last.round + 1 if last is not None else 0
        init = np.asarray(last.theta) if last is not None and last.theta else None
        await db.rollback()  # no transaction open while fitting
        planned = await asyncio.to_thread(
            _plan_next,
            field,
            outcomes,
            init,
            cfg,
            rule,
            spent=total,
            workers=workers,
            seed=seed,
            round_no=round_no,
            prior=prior,
        )
        stop, reason = planned.decision.stop, planned.decision.reason
        if not stop and (planned.plan is None or len(planned.plan) == 0):
            # nothing left to choose: a budget too small for one more pair, or no pair
            stop, reason = True, "budget" if planned.decision.remaining is not None else "exhausted"
        # Append under the session row's lock (the queue's finish takes it first too).
        s = (
            await db.scalars(
                select(JudgeSession)
                .where(JudgeSession.id == session_id)
                .with_for_update(key_share=True, of=JudgeSession)
                .execution_options(populate_existing=True)
            )
        ).one()
        if s.status != "running" or s.stop_reason is not None or s.total != total:
            # paused, cancelled, stopped, or another planner appended this round first
            still_open = s.status == "running" and s.stop_reason is None
            await db.rollback()
            return still_open
        size = 0 if stop or planned.plan is None else len(planned.plan)
        db.add(
            AdaptiveRound(
                session_id=session_id,
                round=round_no,
                first_position=total,
                size=size,
                spent=total,
                results=int(outcomes[0].size),
                width=planned.width if outcomes[0].size else None,
                progress=planned.decision.progress,
                done=planned.decision.done,
                needed=planned.decision.total,
                stop=stop,
                reason=reason or None,
                theta=[round(float(t), 6) for t in planned.state.theta],
                **selection_columns(None if stop else planned.batch),
            )
        )
        try:
            if stop:
                s.stop_reason = reason
                if s.completed + s.failed >= s.total:  # nothing in flight: it ends now
                    s.status = "completed" if s.completed else "failed"
                    s.finished_at = func.now()
            else:
                assert planned.plan is not None
                await db.flush()  # the round row first: a duplicate fails before the COPY
                await insert_plan(db, session_id, planned.plan, first_position=total)
                s.total = total + size
                await notify_work(await db.connection(), session_id)
            await db.commit()
        except IntegrityError:  # another process appended this round first
            await db.rollback()
            return True
        status = s.status
    if hub is not None:
        topic = session_topic(session_id)
        hub.publish_nowait(
            topic,
            "adaptive_round",
            {
                "round": round_no,
                "size": size,
                "spent": total + size,
                "progress": planned.decision.progress,
                "stop": stop,
                "reason": reason or None,
            },
        )
        if status in ("completed", "failed"):
            hub.publish_nowait(topic, "session_status", {"status": status})
    return not stop


async def runnable_sessions(db: AsyncSession) -> list[int]:
    rows = await db.execute(
        text(
            "SELECT id FROM judge_sessions WHERE comparison_mode = 'adaptive' "
            "AND status = 'running' AND stop_reason IS NULL ORDER BY id"
        )
    )
    return [r[0] for r in rows.all()]


class AdaptiveRounds:
    """The rounds of running adaptive sessions as a ``queue.locks.LockedJob``: one loop per
    session, in the process that holds its advisory lock."""

    name = "adaptive-rounds"
    lock_class = LOCK_CLASS

    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker[AsyncSession],
        hub: EventHub | None = None,
        poll_s: float = 0.05,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.hub = hub
        self.poll_s = poll_s

    async def runnable(self) -> Sequence[int]:
        async with self.sessionmaker() as db:
            return await runnable_sessions(db)

    async def run(self, key: int, stop: asyncio.Event) -> None:
        delay = self.poll_s
        while not stop.is_set():
            try:
                if not await advance(self.sessionmaker, key, self.hub):
                    return
                delay = self.poll_s
            except Exception:  # the database, or a bug: retry, slower
                log.exception("adaptive session %d: planning a round failed; retrying", key)
                delay = min(delay * 2, 10.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
