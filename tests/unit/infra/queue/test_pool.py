"""The generic pool's bookkeeping, without a database: holds are keyed by claim token (a
stale result of a lost claim must not drop a newer claim's hold, issue 14), and the queue
package imports no domain."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmjudge.infra.queue.pool import WorkerPool
from llmjudge.infra.queue.work import Group, Token, WorkKind, Written, token

QUEUE = Path(__file__).resolve().parents[4] / "src" / "llmjudge" / "infra" / "queue"
ALLOWED = (
    "llmjudge.infra.config",
    "llmjudge.infra.db",
    "llmjudge.infra.events",
    "llmjudge.infra.queue",
)


@dataclass(frozen=True)
class Job:
    id: int
    group_id: int
    worker_id: str
    attempts: int


@dataclass(frozen=True)
class Done:
    id: int
    worker_id: str
    attempts: int
    status: str = "completed"
    refund: bool = False


class Nothing(WorkKind[Job, Done]):
    async def groups(self, conn: AsyncConnection) -> Sequence[Group]:
        return []

    async def claim(self, conn: AsyncConnection, **kw: Any) -> list[Job]:
        return []

    async def renew(
        self, conn: AsyncConnection, *, held: Sequence[Token], lease_s: float
    ) -> set[int]:
        return set()

    async def write(self, conn: AsyncConnection, results: Sequence[Done]) -> Written:
        return Written(applied=set())

    def give_back(self, item: Job) -> Done:
        return Done(item.id, item.worker_id, item.attempts, "pending", refund=True)

    async def prepare(self, group_id: int, items: Sequence[Job]) -> None:
        pass

    async def run(self, item: Job) -> Done:
        return Done(item.id, item.worker_id, item.attempts)


def test_a_stale_result_keeps_the_newer_claims_hold() -> None:
    kind = Nothing()
    pool = WorkerPool(engine=cast(AsyncEngine, None), kind=kind, concurrency=2, listen=False)
    # Item 7 was held by slot 0 (attempt 1), its lease ran out, and slot 0 won it again.
    newer = Job(7, 1, "h:1:0", 2)
    pool._held[token(newer)] = newer
    stale = Done(7, "h:1:0", 1)
    pool._after_write([stale], Written(applied=set()))
    assert pool._held == {(7, "h:1:0", 2): newer}  # still heartbeated
    assert (pool.finished, pool.discarded) == (1, 1)
    # The newer claim's own result releases its hold.
    pool._after_write([Done(7, "h:1:0", 2)], Written(applied={7}))
    assert pool._held == {} and (pool.finished, pool.discarded) == (2, 1)


def test_the_queue_imports_no_domain() -> None:
    offenders = []
    for path in sorted(QUEUE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("llmjudge") and not name.startswith(ALLOWED):
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []
    assert len(list(QUEUE.glob("*.py"))) >= 4  # pool, work, locks, registry: the rule bites
