"""The queue is generic: a toy kind of work, registered only here, on a table of its own,
gets exactly-once completion, lease-expiry reclaim and give-back from the same pool that
judges comparisons."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import pytest
from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.types import BigInteger, Boolean, Integer, String

from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.queue.pool import WorkerPool
from llmjudge.infra.queue.registry import Workers
from llmjudge.infra.queue.work import Group, Token, WorkKind, Written
from tests.integration.sessions.test_sessions import wait_for


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    group_id: int
    worker_id: str
    attempts: int
    payload: int


@dataclass(frozen=True, slots=True)
class Done:
    id: int
    worker_id: str
    attempts: int
    status: str
    value: int | None = None
    refund: bool = False


_CLAIM = text(
    """
    WITH expired AS (
        SELECT id, 0 AS rank FROM toy_jobs
        WHERE grp = :grp AND status = 'running' AND lease_expires_at < now()
        ORDER BY lease_expires_at LIMIT :n FOR UPDATE SKIP LOCKED
    ), pending AS (
        SELECT id, 1 AS rank FROM toy_jobs
        WHERE grp = :grp AND status = 'pending' ORDER BY id LIMIT :n FOR UPDATE SKIP LOCKED
    ), numbered AS (
        SELECT id, row_number() OVER (ORDER BY rank, id) AS rn
        FROM (SELECT * FROM expired UNION ALL SELECT * FROM pending) AS c
    )
    UPDATE toy_jobs t
    SET status = 'running', worker_id = (CAST(:worker_ids AS text[]))[numbered.rn],
        attempts = t.attempts + 1, lease_expires_at = now() + make_interval(secs => :lease_s)
    FROM numbered WHERE t.id = numbered.id AND numbered.rn <= :n
    RETURNING t.id, t.grp, t.worker_id, t.attempts, t.payload
    """
)
_TOKENS = (
    bindparam("ids", type_=ARRAY(BigInteger)),
    bindparam("worker_ids", type_=ARRAY(String)),
    bindparam("attempts", type_=ARRAY(Integer)),
)
_RENEW = text(
    """
    UPDATE toy_jobs t SET lease_expires_at = now() + make_interval(secs => :lease_s)
    FROM unnest(:ids, :worker_ids, :attempts) AS h(id, worker_id, attempts)
    WHERE t.id = h.id AND t.status = 'running'
      AND t.worker_id = h.worker_id AND t.attempts = h.attempts
    RETURNING t.id
    """
).bindparams(*_TOKENS)
_WRITE = text(
    """
    UPDATE toy_jobs t
    SET status = f.status, value = f.value, writes = t.writes + 1, lease_expires_at = NULL,
        attempts = t.attempts - CASE WHEN f.refund THEN 1 ELSE 0 END
    FROM unnest(:ids, :worker_ids, :attempts, :statuses, :values, :refunds)
         AS f(id, worker_id, attempts, status, value, refund)
    WHERE t.id = f.id AND t.status = 'running'
      AND t.worker_id = f.worker_id AND t.attempts = f.attempts
    RETURNING t.id
    """
).bindparams(
    *_TOKENS,
    bindparam("statuses", type_=ARRAY(String)),
    bindparam("values", type_=ARRAY(BigInteger)),
    bindparam("refunds", type_=ARRAY(Boolean)),
)


class Toy(WorkKind[Job, Done]):
    """Squares a number after ``latency_s``; ``hang`` makes every run wait forever."""

    name = "toy"
    channel = "toy_work"

    def __init__(self, *, concurrency: int = 4, latency_s: float = 0.01) -> None:
        self.concurrency = concurrency
        self.latency_s = latency_s
        self.hang = False
        self.runs: Counter[int] = Counter()
        self.written: list[Sequence[Done]] = []

    async def groups(self, conn: AsyncConnection) -> Sequence[Group]:
        rows = await conn.execute(
            text("SELECT DISTINCT grp FROM toy_jobs WHERE status IN ('pending', 'running')")
        )
        return [Group(r[0], self.concurrency) for r in rows.all()]

    async def claim(
        self, conn: AsyncConnection, *, group_id: int, worker_ids: Sequence[str], lease_s: float
    ) -> list[Job]:
        rows = await conn.execute(
            _CLAIM,
            {
                "grp": group_id,
                "n": len(worker_ids),
                "worker_ids": list(worker_ids),
                "lease_s": lease_s,
            },
        )
        return [Job(*r) for r in rows.all()]

    async def renew(
        self, conn: AsyncConnection, *, held: Sequence[Token], lease_s: float
    ) -> set[int]:
        ids, workers, attempts = (list(c) for c in zip(*held, strict=True))
        rows = await conn.execute(
            _RENEW, {"ids": ids, "worker_ids": workers, "attempts": attempts, "lease_s": lease_s}
        )
        return {r[0] for r in rows.all()}

    async def write(self, conn: AsyncConnection, results: Sequence[Done]) -> Written:
        rows = await conn.execute(
            _WRITE,
            {
                "ids": [r.id for r in results],
                "worker_ids": [r.worker_id for r in results],
                "attempts": [r.attempts for r in results],
                "statuses": [r.status for r in results],
                "values": [r.value for r in results],
                "refunds": [r.refund for r in results],
            },
        )
        return Written(applied={r[0] for r in rows.all()})

    def give_back(self, item: Job) -> Done:
        return Done(item.id, item.worker_id, item.attempts, "pending", refund=True)

    async def prepare(self, group_id: int, items: Sequence[Job]) -> None:
        pass

    async def run(self, item: Job) -> Done:
        self.runs[item.id] += 1
        if self.hang:
            await asyncio.Event().wait()
        await asyncio.sleep(self.latency_s)
        return Done(item.id, item.worker_id, item.attempts, "completed", item.payload**2)

    def after_written(self, batch: Sequence[Done], written: Written) -> None:
        self.written.append(batch)


@pytest.fixture(scope="module")
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(db_url, pool_size=4)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE TABLE toy_jobs (id bigserial PRIMARY KEY, grp int NOT NULL, "
                "payload bigint NOT NULL, status text NOT NULL DEFAULT 'pending', "
                "worker_id text, attempts int NOT NULL DEFAULT 0, "
                "lease_expires_at timestamptz, value bigint, writes int NOT NULL DEFAULT 0)"
            )
        )
    yield engine
    await engine.dispose()


async def add_jobs(engine: AsyncEngine, grp: int, n: int) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO toy_jobs (grp, payload) SELECT :g, x FROM generate_series(1, :n) x"),
            {"g": grp, "n": n},
        )
        await conn.execute(text("SELECT pg_notify('toy_work', '')"))


async def rows(engine: AsyncEngine, grp: int) -> list[tuple[int, str, int, int | None, int, int]]:
    async with engine.connect() as conn:
        result = await conn.execute(
            text(
                "SELECT id, status, attempts, value, writes, payload FROM toy_jobs "
                "WHERE grp = :g ORDER BY id"
            ),
            {"g": grp},
        )
        return [tuple(r) for r in result.all()]  # type: ignore[misc]


async def test_two_pools_complete_every_toy_job_exactly_once(engine: AsyncEngine) -> None:
    await add_jobs(engine, 1, 300)
    kinds = [Toy(concurrency=6), Toy(concurrency=6)]
    workers = Workers()
    pools = [WorkerPool(engine=engine, kind=k, concurrency=8, poll_s=0.2) for k in kinds]
    for n, pool in enumerate(pools):
        workers.register(f"toy-{n}", pool)
    await workers.start()
    try:

        async def all_done() -> bool:
            return all(r[1] == "completed" for r in await rows(engine, 1))

        await wait_for(all_done)
    finally:
        await workers.stop()
    got = await rows(engine, 1)
    assert len(got) == 300
    for _, status, attempts, value, writes, payload in got:
        assert (status, attempts, value, writes) == ("completed", 1, payload**2, 1)
    runs = kinds[0].runs + kinds[1].runs
    assert sorted(runs) == [r[0] for r in got] and max(runs.values()) == 1
    assert kinds[0].runs and kinds[1].runs  # both pools took a share
    assert pools[0].finished + pools[1].finished == 300
    assert pools[0].discarded == pools[1].discarded == 0


async def test_a_dead_workers_toy_jobs_are_reclaimed_after_their_lease(
    engine: AsyncEngine,
) -> None:
    await add_jobs(engine, 2, 5)
    dead = Toy()
    async with engine.begin() as conn:  # a worker that claims and dies: no heartbeat
        lost = await dead.claim(conn, group_id=2, worker_ids=["dead:0", "dead:1"], lease_s=1.0)
    assert len(lost) == 2
    kind = Toy(concurrency=2)
    pool = WorkerPool(engine=engine, kind=kind, concurrency=4, poll_s=0.2, lease_s=30)
    await pool.start()
    try:

        async def all_done() -> bool:
            return all(r[1] == "completed" for r in await rows(engine, 2))

        await wait_for(all_done)
    finally:
        await pool.stop()
    by_id = {r[0]: r for r in await rows(engine, 2)}
    for job in lost:
        assert by_id[job.id][2] == 2  # claimed again: a second attempt
    assert [r[4] for r in by_id.values()] == [1] * 5  # each written once
    # The dead worker's late result carries a stale token: it changes nothing.
    async with engine.begin() as conn:
        late = await dead.write(conn, [Done(j.id, j.worker_id, j.attempts, "failed") for j in lost])
    assert late.applied == set()
    assert all(r[1] == "completed" for r in await rows(engine, 2))


async def test_a_stopped_pool_gives_unfinished_toy_jobs_back_without_an_attempt(
    engine: AsyncEngine,
) -> None:
    await add_jobs(engine, 3, 10)
    kind = Toy(concurrency=3)
    kind.hang = True
    pool = WorkerPool(engine=engine, kind=kind, concurrency=4, poll_s=0.2)
    await pool.start()

    async def busy() -> bool:
        return (
            pool.in_flight == 3 and sum(1 for r in await rows(engine, 3) if r[1] == "running") >= 3
        )

    await wait_for(busy)
    running = {r[0] for r in await rows(engine, 3) if r[1] == "running"}
    await pool.stop(drain_timeout_s=0.1)
    assert pool.in_flight == 0
    got = await rows(engine, 3)
    assert all(r[1] == "pending" and r[2] == 0 for r in got)  # back, no attempt spent
    assert all(r[4] == 1 for r in got if r[0] in running)  # the give-back was written
    # And they are claimable again: a fresh pool finishes them.
    kind2 = Toy(concurrency=3)
    pool2 = WorkerPool(engine=engine, kind=kind2, concurrency=4, poll_s=0.2)
    await pool2.start()
    try:

        async def all_done() -> bool:
            return all(r[1] == "completed" for r in await rows(engine, 3))

        await wait_for(all_done)
    finally:
        await pool2.stop()
    assert all(r[2] == 1 for r in await rows(engine, 3))


async def test_claim_ahead_holds_one_next_job_per_busy_slot_unless_the_kind_opts_out(
    engine: AsyncEngine,
) -> None:
    for grp, ahead in ((4, True), (5, False)):
        await add_jobs(engine, grp, 10)
        kind = Toy(concurrency=3)
        kind.hang, kind.claim_ahead = True, ahead
        pool = WorkerPool(engine=engine, kind=kind, concurrency=8, poll_s=0.1)
        await pool.start()
        try:

            async def busy(grp: int = grp, pool: WorkerPool[Job, Done] = pool) -> bool:
                return pool.in_flight == 3 and any(
                    r[1] == "running" for r in await rows(engine, grp)
                )

            await wait_for(busy)
            await asyncio.sleep(0.5)  # several claim rounds: nothing more is taken
            running = sum(1 for r in await rows(engine, grp) if r[1] == "running")
            held = sum(1 for w in pool.slots if w.next is not None)
        finally:
            await pool.stop(drain_timeout_s=0.1)
        assert (running, held) == ((6, 3) if ahead else (3, 0))
        assert all(r[1] == "pending" and r[2] == 0 for r in await rows(engine, grp))
        async with engine.begin() as conn:  # not claimable by the next pool
            await conn.execute(text("DELETE FROM toy_jobs WHERE grp = :g"), {"g": grp})
