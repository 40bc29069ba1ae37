"""The queue's SQL against PostgreSQL: claims, leases, exactly-once finishes, counters.

No worker pool runs here (workers_enabled=False): the tests play the workers."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmjudge.core.tournaments.pairing import PlanOptions, ThreadRef, build_plan_arrays
from llmjudge.sessions import control, plans, service
from llmjudge.sessions.models import Comparison, ComparisonVote, JudgeSession
from llmjudge.sessions.run.claims import (
    Claimed,
    Finish,
    JudgeVote,
    claim,
    finish,
    renew,
    running_sessions,
    token,
)
from llmjudge.sessions.run.votes import write_votes
from llmjudge.sessions.schemas import SessionIn
from tests.integration.sessions.test_sessions import seed_threads

# The tests play the workers or start their own pools: no pool inside the app.
IN_PROCESS_WORKERS = False


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    return await seed_threads(client, 6, pillars=2, prefix="q")


async def new_session(app: FastAPI, pillars: list[int], *, start: bool = True) -> int:
    async with app.state.sessionmaker() as db:
        out = await service.create_session(
            db=db,
            data=SessionIn(
                session_name="queue",
                pillar_ids=pillars,
                comparison_mode="free_for_all",
                position_swap=False,
                seed=1,
                auto_start=start,
            ),
        )
    assert out.total == 15
    return out.id


def done(c: Claimed, **kw: object) -> Finish:
    fields = {"winner": "A", "confidence": 0.9, "input_tokens": 10, "output_tokens": 5}
    fields |= {"cost_usd": 0.01, "scores_a": {"q": 4.0}, "scores_b": {"q": 2.0}}
    answer = JudgeVote(status="voted", **(fields | kw))  # type: ignore[arg-type]
    return Finish(**token(c), status="completed", answer=answer)


async def take(engine: AsyncEngine, sid: int, workers: list[str], lease_s: float = 30):
    async with engine.begin() as conn:
        return await claim(conn, session_id=sid, worker_ids=workers, lease_s=lease_s)


async def apply(engine: AsyncEngine, items: list[Finish]):
    async with engine.begin() as conn:
        return await finish(conn, items)


async def counters(app: FastAPI, sid: int) -> tuple[tuple[int, int, int, str], dict[str, int]]:
    async with app.state.sessionmaker() as db:
        s = await db.get(JudgeSession, sid, populate_existing=True)
        assert s is not None
        rows = dict(
            (
                await db.execute(
                    select(Comparison.status, func.count())
                    .where(Comparison.session_id == sid)
                    .group_by(Comparison.status)
                )
            ).all()
        )
        return (s.total, s.completed, s.failed, s.status), rows


async def test_claim_takes_queue_order_one_item_per_worker(app: FastAPI, pillars: list[int]):
    sid = await new_session(app, pillars)
    got = await take(app.state.engine, sid, ["w:0", "w:1", "w:2"])
    assert [c.worker_id for c in got] == ["w:0", "w:1", "w:2"]
    assert [c.queue_position for c in got] == [0, 1, 2]
    assert all(c.attempts == 1 and c.session_id == sid for c in got)
    more = await take(app.state.engine, sid, ["w:3"])
    assert [c.queue_position for c in more] == [3]


async def test_draft_and_paused_sessions_are_not_claimed(app: FastAPI, pillars: list[int]):
    sid = await new_session(app, pillars, start=False)
    assert await take(app.state.engine, sid, ["w:0"]) == []
    async with app.state.sessionmaker() as db:
        await control.start_session(db=db, session_id=sid)
        assert sid in [s.id for s in await running_sessions(await db.connection())]
        await control.pause_session(db=db, session_id=sid)
    assert await take(app.state.engine, sid, ["w:0"]) == []
    async with app.state.sessionmaker() as db:
        await control.resume_session(db=db, session_id=sid)
    assert len(await take(app.state.engine, sid, ["w:0"])) == 1


async def test_concurrent_claims_never_overlap(app: FastAPI, pillars: list[int]):
    sid = await new_session(app, pillars)
    engine = app.state.engine
    batches = await asyncio.gather(
        *(take(engine, sid, [f"p{p}:{i}" for i in range(4)]) for p in range(6))
    )
    ids = [c.id for b in batches for c in b]
    assert len(ids) == len(set(ids)) == 15  # 24 asked, 15 exist: each given once


async def test_finish_is_exactly_once_and_counters_follow_rows(app: FastAPI, pillars: list[int]):
    sid = await new_session(app, pillars)
    engine = app.state.engine
    items = await take(engine, sid, [f"w:{i}" for i in range(15)])
    first = await apply(engine, [done(c) for c in items[:5]])
    assert [(s.id, s.completed, s.status) for s in first] == [(sid, 5, "running")]
    assert sorted(first[0].applied) == sorted(c.id for c in items[:5])
    again = await apply(engine, [done(c) for c in items[:5]])  # a duplicate delivery
    assert again == []
    (total, completed, failed, status), rows = await counters(app, sid)
    assert (total, completed, failed) == (15, 5, 0) and rows == {"completed": 5, "running": 10}

    async with engine.connect() as conn:
        tokens = (
            await conn.execute(
                text("SELECT input_tokens, cost_usd FROM judge_sessions WHERE id = :id"),
                {"id": sid},
            )
        ).one()
    assert tokens[0] == 50 and tokens[1] == pytest.approx(0.05)

    rest = [done(c) for c in items[5:14]] + [
        Finish(id=items[14].id, worker_id="w:14", attempts=1, status="failed", error="boom")
    ]
    last = await apply(engine, rest)
    assert last[0].status == "completed" and (last[0].completed, last[0].failed) == (14, 1)
    (total, completed, failed, status), rows = await counters(app, sid)
    assert status == "completed" and rows == {"completed": 14, "failed": 1}


async def test_a_session_where_everything_failed_is_failed(app: FastAPI, pillars: list[int]):
    sid = await new_session(app, pillars)
    items = await take(app.state.engine, sid, [f"w:{i}" for i in range(15)])
    fails = [
        Finish(id=c.id, worker_id=c.worker_id, attempts=1, status="failed", error="x")
        for c in items
    ]
    assert (await apply(app.state.engine, fails))[0].status == "failed"
    async with app.state.sessionmaker() as db:
        result = await control.retry_failed(db=db, session_id=sid)
    assert result.requeued == 15 and result.session.status == "running"
    assert result.session.failed == 0 and result.session.counts.pending == 15
    again = await take(app.state.engine, sid, ["w:0"])
    assert again[0].attempts == 1  # attempts were reset


async def test_an_expired_lease_is_claimed_again_and_the_late_result_discarded(
    app: FastAPI, pillars: list[int]
):
    sid = await new_session(app, pillars)
    engine = app.state.engine
    (dead,) = await take(engine, sid, ["dead:0"], lease_s=0.2)
    await asyncio.sleep(0.3)
    (alive,) = await take(engine, sid, ["alive:0"])
    assert alive.id == dead.id and alive.attempts == 2  # expired items go first

    assert await apply(engine, [done(dead, winner="B")]) == []  # the stale worker is too late
    async with engine.begin() as conn:
        assert await renew(conn, held=[(dead.id, "dead:0", 1)], lease_s=30) == set()
        assert await renew(conn, held=[(alive.id, "alive:0", 2)], lease_s=30) == {alive.id}
    (applied,) = await apply(engine, [done(alive)])
    assert applied.applied == [alive.id]
    async with app.state.sessionmaker() as db:
        row = await db.get(Comparison, alive.id)
        assert row is not None
        assert (row.status, row.winner, row.worker_id, row.attempts) == (
            "completed",
            "A",
            "alive:0",
            2,
        )


async def test_renewed_leases_are_not_taken(app: FastAPI, pillars: list[int]):
    sid = await new_session(app, pillars)
    engine = app.state.engine
    (held,) = await take(engine, sid, ["w:0"], lease_s=0.3)
    async with engine.begin() as conn:
        await renew(conn, held=[(held.id, "w:0", 1)], lease_s=30)
    await asyncio.sleep(0.4)
    (other,) = await take(engine, sid, ["w:1"])
    assert other.id != held.id


async def test_retry_keeps_the_attempt_and_a_release_refunds_it(app: FastAPI, pillars: list[int]):
    sid = await new_session(app, pillars)
    engine = app.state.engine
    a, b = await take(engine, sid, ["w:0", "w:1"])
    await apply(
        engine,
        [
            Finish(
                id=a.id,
                worker_id="w:0",
                attempts=1,
                status="pending",
                parse_error="no verdict",
                answer=JudgeVote(raw_response="hmm", input_tokens=7),
            ),
            Finish(id=b.id, worker_id="w:1", attempts=1, status="pending", refund=True),
        ],
    )
    again = {c.id: c for c in await take(engine, sid, ["w:2", "w:3"])}
    assert again[a.id].attempts == 2 and again[b.id].attempts == 1
    async with app.state.sessionmaker() as db:
        row = await db.get(Comparison, a.id)
        assert row is not None
        assert (row.parse_error, row.raw_response, row.input_tokens) == ("no verdict", "hmm", 7)
        assert row.worker_id == "w:2"  # the claim rewrote it
    (total, completed, failed, status), _ = await counters(app, sid)
    assert (completed, failed, status) == (0, 0, "running")


async def test_cancel_keeps_results_and_running_items_finish(app: FastAPI, pillars: list[int]):
    sid = await new_session(app, pillars)
    engine = app.state.engine
    items = await take(engine, sid, ["w:0", "w:1", "w:2"])
    await apply(engine, [done(items[0])])
    async with app.state.sessionmaker() as db:
        out = await control.cancel_session(db=db, session_id=sid)
    assert out.status == "cancelled"
    assert out.counts.model_dump() == {
        "total": 15,
        "pending": 0,
        "running": 2,
        "completed": 1,
        "failed": 0,
        "cancelled": 12,
    }
    assert await take(engine, sid, ["w:9"]) == []
    await apply(engine, [done(c) for c in items[1:]])  # in-flight results are kept
    (total, completed, failed, status), rows = await counters(app, sid)
    assert (completed, status) == (3, "cancelled")
    assert rows == {"completed": 3, "cancelled": 12}


async def test_a_big_plan_is_copied_fast_and_exactly(app: FastAPI):
    refs = [ThreadRef(id=i, pillar_id=i % 4) for i in range(1, 301)]
    plan = build_plan_arrays(refs, PlanOptions(mode="free_for_all", position_swap=True))
    assert len(plan) == 89_700
    async with app.state.sessionmaker() as db:
        s = JudgeSession(
            name="big", comparison_mode="free_for_all", pillar_ids=[0], total=len(plan)
        )
        db.add(s)
        await db.flush()
        start = time.perf_counter()
        assert await plans.insert_plan(db, s.id, plan, chunk=10_000) == 89_700
        elapsed = time.perf_counter() - start
        await db.commit()
        rows = (
            await db.execute(
                select(
                    Comparison.queue_position,
                    Comparison.thread_a_id,
                    Comparison.thread_b_id,
                    Comparison.pillar_a_id,
                    Comparison.pillar_b_id,
                    Comparison.repetition,
                    Comparison.swap_group,
                    Comparison.is_swap,
                    Comparison.status,
                    Comparison.attempts,
                )
                .where(Comparison.session_id == s.id)
                .order_by(Comparison.queue_position)
            )
        ).all()
    cols = list(zip(*rows, strict=True))
    assert list(cols[0]) == list(range(89_700))
    expected = (
        plan.thread_a,
        plan.thread_b,
        plan.pillar_a,
        plan.pillar_b,
        plan.repetition,
        plan.swap_group,
        plan.is_swap,
    )
    for got, want in zip(cols[1:8], expected, strict=True):
        assert np.array_equal(np.array(got), want)
    assert set(cols[8]) == {"pending"} and set(cols[9]) == {0}
    assert elapsed < 10  # ~0.5 s here; row-by-row ORM inserts take minutes


async def test_an_item_given_back_after_cancel_is_cancelled(app: FastAPI, pillars: list[int]):
    """A pool stopping gracefully gives its in-flight items back; in a cancelled session they
    must end cancelled, not pending forever."""
    sid = await new_session(app, pillars)
    engine = app.state.engine
    items = await take(engine, sid, ["w:0", "w:1"])
    async with app.state.sessionmaker() as db:
        await control.cancel_session(db=db, session_id=sid)
    c = items[0]
    release = Finish(**token(c), status="pending", refund=True)
    await apply(engine, [release, done(items[1])])
    (_, completed, _, status), rows = await counters(app, sid)
    assert (completed, status) == (1, "cancelled")
    assert rows == {"completed": 1, "cancelled": 14}


async def test_a_single_judges_answers_become_its_member_zero_votes(
    app: FastAPI, pillars: list[int]
):
    sid = await new_session(app, pillars)
    engine = app.state.engine
    a, b, c, d = await take(engine, sid, ["w:0", "w:1", "w:2", "w:3"])
    started = datetime.now(UTC)
    unread = JudgeVote(raw_response="garbled", input_tokens=3, error="no JSON")
    batch = [
        done(a),
        Finish(**token(b), status="failed", started_at=started, error="bad request (400)"),
        Finish(**token(c), status="pending", started_at=started, answer=unread),
        # failed before any call (a deleted thread): no answer, no vote
        Finish(**token(d), status="failed", error="a thread of this comparison was deleted"),
    ]
    async with engine.begin() as conn:
        applied = {i for s in await finish(conn, batch) for i in s.applied}
        assert await write_votes(conn, batch, applied) == 0  # no panel votes
    async with app.state.sessionmaker() as db:
        votes = {
            v.comparison_id: v
            for v in await db.scalars(
                select(ComparisonVote).where(ComparisonVote.session_id == sid)
            )
        }
        assert set(votes) == {a.id, b.id}
        assert (votes[a.id].member, votes[a.id].status, votes[a.id].winner) == (0, "voted", "A")
        assert (votes[a.id].input_tokens, votes[a.id].scores_a) == (10, {"q": 4.0})
        assert (votes[b.id].status, votes[b.id].error) == ("missing", "bad request (400)")
        # judged again (retry-failed), a comparison's vote is replaced
        await control.retry_failed(db=db, session_id=sid)
    (again,) = [x for x in await take(engine, sid, [f"w:{i}" for i in range(9)]) if x.id == b.id]
    async with engine.begin() as conn:
        applied = {i for s in await finish(conn, [done(again, winner="B")]) for i in s.applied}
        await write_votes(conn, [done(again, winner="B")], applied)
    async with app.state.sessionmaker() as db:
        vote = await db.scalar(select(ComparisonVote).where(ComparisonVote.comparison_id == b.id))
        assert vote is not None and (vote.status, vote.winner, vote.error) == ("voted", "B", None)
