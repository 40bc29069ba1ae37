"""What the worker pool needs from a kind of work: the contract a domain implements.

The pool (``queue.pool``) knows rows only through this contract: a claimed **item** has an
id, a **group** (the unit that bounds concurrency, e.g. a judge session and its
``worker_count``), the slot id that claimed it and its attempt number. The pair
(``worker_id``, ``attempts``) is the claim's token: the kind's SQL applies a **result** only
while the row still carries that token, which is what makes completion exactly-once when a
lease expires and the item is claimed again.

A result whose ``status`` is ``"pending"`` put its item back in the queue (a retry, or a
give-back with ``refund``: the attempt does not count).

All SQL lives in the kind (the domain); each method that takes a connection runs its
statements in the caller's transaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

if TYPE_CHECKING:
    from llmjudge.infra.queue.pool import WorkerPool

__all__ = ["Claimed", "Group", "Item", "Result", "Token", "WorkKind", "Written", "token"]

# (item id, worker id, attempts): who holds which claim of an item.
Token = tuple[int, str, int]


class Claimed(Protocol):
    """What names one claim of an item: an item and its result both carry it."""

    @property
    def id(self) -> int: ...
    @property
    def worker_id(self) -> str: ...
    @property
    def attempts(self) -> int: ...


class Item(Claimed, Protocol):
    @property
    def group_id(self) -> int: ...


class Result(Claimed, Protocol):
    @property
    def status(self) -> str: ...
    @property
    def refund(self) -> bool: ...


def token(x: Claimed) -> Token:
    return (x.id, x.worker_id, x.attempts)


@dataclass(frozen=True, slots=True)
class Group:
    """A claimable group of items, and how many of them one process runs at once."""

    id: int
    concurrency: int


@dataclass(slots=True)
class Written:
    """What a batch write did: the ids of the results that hit their row (the others had
    lost their claim), and anything the kind wants back in ``after_written``."""

    applied: set[int]
    extra: object = None


I = TypeVar("I", bound=Item)  # noqa: E741
R = TypeVar("R", bound=Result)


class WorkKind(ABC, Generic[I, R]):
    """One kind of queued work. Subclasses hold the SQL and the domain logic."""

    name: str = "work"
    # NOTIFY channel that wakes idle dispatchers (None: polling only).
    channel: str | None = None
    # Each busy slot holds its next item, claimed ahead, so it never waits for a claim
    # round. Off for work whose items must not wait under a lease.
    claim_ahead: bool = True

    @abstractmethod
    async def groups(self, conn: AsyncConnection) -> Sequence[Group]:
        """The groups that may be claimed from now (e.g. running sessions)."""

    @abstractmethod
    async def claim(
        self, conn: AsyncConnection, *, group_id: int, worker_ids: Sequence[str], lease_s: float
    ) -> list[I]:
        """Claim up to ``len(worker_ids)`` items of the group, one per worker id, in one
        statement (``FOR UPDATE SKIP LOCKED``), expired leases first."""

    @abstractmethod
    async def renew(
        self, conn: AsyncConnection, *, held: Sequence[Token], lease_s: float
    ) -> set[int]:
        """Extend the leases of ``held`` in one statement; the ids still held."""

    @abstractmethod
    async def write(self, conn: AsyncConnection, results: Sequence[R]) -> Written:
        """Apply many results (one per item) exactly once each, by claim token."""

    @abstractmethod
    def give_back(self, item: I) -> R:
        """The result that returns ``item`` to the queue without spending an attempt."""

    @abstractmethod
    async def prepare(self, group_id: int, items: Sequence[I]) -> None:
        """Load what ``run`` needs for these items (may raise a database error: the pool
        then gives the items back)."""

    @abstractmethod
    async def run(self, item: I) -> R:
        """Run one item after ``prepare``; raises only ``CancelledError``."""

    def poisoned(self, result: R, reason: str) -> R | None:
        """The result that ends an item whose own result the database refuses (a value it
        cannot store), so it stops blocking every batch it is in; None drops the result
        (the item's lease then runs out and it is claimed again)."""
        return None

    def after_written(self, batch: Sequence[R], written: Written) -> None:  # noqa: B027
        """Called once a batch is committed (publish events); must not block."""

    async def report(  # noqa: B027
        self, conn: AsyncConnection, pool: WorkerPool, group_ids: Collection[int]
    ) -> None:
        """Publish this process's status for the groups active lately (optional)."""
