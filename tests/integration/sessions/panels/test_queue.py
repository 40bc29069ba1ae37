"""A panel's votes are written by the transaction that applies its comparison's result,
exactly once: a duplicate delivery, a late result from a lost claim and a retry write none."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from llmjudge.providers.models import LLMModel
from llmjudge.sessions import reads, service
from llmjudge.sessions.models import Comparison, ComparisonVote
from llmjudge.sessions.run.claims import Claimed, Finish, JudgeVote
from llmjudge.sessions.run.jobs import JudgeComparisons
from llmjudge.sessions.schemas import PanelIn, SessionIn
from tests.integration.sessions.run.test_claims import take
from tests.integration.sessions.test_sessions import seed_threads

IN_PROCESS_WORKERS = False


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    return await seed_threads(client, 4, pillars=2, prefix="pq")


def voted(c: Claimed, status: str = "completed", attempts: int | None = None) -> Finish:
    votes = tuple(
        JudgeVote(
            member=k,
            model_id=None,
            judge=f"m{k}",
            status="voted" if k < 2 else "missing",
            winner="A" if k < 2 else None,
            input_tokens=10 if k < 2 else 0,
            cost_usd=0.01 if k < 2 else 0.0,
            error=None if k < 2 else "down",
        )
        for k in range(3)
    )
    return Finish(
        id=c.id,
        worker_id=c.worker_id,
        attempts=c.attempts if attempts is None else attempts,
        status=status,  # type: ignore[arg-type]
        answer=JudgeVote(
            status="voted",
            winner="A" if status == "completed" else None,
            input_tokens=20,
            cost_usd=0.02,
        ),
        votes=votes,
        votes_cast=2,
        votes_asked=3,
    )


async def test_votes_are_written_exactly_once(app: FastAPI, pillars: list[int]) -> None:
    async with app.state.sessionmaker() as db:
        judge = await db.scalar(select(LLMModel.id).where(LLMModel.name == "simulated-judge"))
        assert judge is not None
        out = await service.create_session(
            db=db,
            data=SessionIn(
                session_name="panel queue",
                pillar_ids=pillars,
                comparison_mode="free_for_all",
                position_swap=False,
                seed=1,
                auto_start=True,
                panel=PanelIn.model_validate({"members": [{"model_id": judge}] * 3}),
            ),
        )
    sid = out.id
    engine = app.state.engine
    kind = JudgeComparisons(engine=engine, llm=app.state.llm)
    items = await take(engine, sid, ["w:0", "w:1", "w:2"])
    assert len(items) == 3

    async def write(batch: list[Finish]) -> set[int]:
        async with engine.begin() as conn:
            return (await kind.write(conn, batch)).applied

    assert await write([voted(items[0]), voted(items[1], attempts=99)]) == {items[0].id}
    assert await write([voted(items[0])]) == set()  # a duplicate delivery
    retry = voted(items[2], status="pending")
    assert await write([retry]) == {items[2].id}  # applied, but a retry keeps no votes

    async with app.state.sessionmaker() as db:
        per = dict(
            (
                await db.execute(
                    select(ComparisonVote.comparison_id, func.count())
                    .where(ComparisonVote.session_id == sid)
                    .group_by(ComparisonVote.comparison_id)
                )
            ).all()
        )
        row = await db.get(Comparison, items[0].id)
        assert row is not None
        stale = await db.get(Comparison, items[1].id)
        again = await db.get(Comparison, items[2].id)
    assert per == {items[0].id: 3}
    assert (row.status, row.votes_cast, row.votes_asked, row.input_tokens) == (
        "completed",
        2,
        3,
        20,
    )
    assert stale is not None and stale.status == "running" and stale.votes_cast is None
    assert again is not None and again.status == "pending" and again.votes_cast is None
    async with app.state.sessionmaker() as db:
        s = await reads.get_session(db=db, session_id=sid)
    assert (s.completed, s.input_tokens) == (1, 20 + 20)  # the retry's spend counts, once
