"""Telling a database that is away from a value it refuses, for retry decisions.

A lost connection (or a server starting or shutting down) is worth retrying as is and, at
the edge, a 503 with ``Retry-After``; a refused value (SQLSTATE classes 22 "data exception"
and 23 "integrity", or a value the driver cannot encode) fails the same way every time, so
retrying it forever only blocks what queues behind it.
"""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
from asyncpg.exceptions._base import DataError as ClientDataError
from sqlalchemy.exc import DBAPIError

__all__ = ["is_connection_problem", "is_data_problem"]

# 08: connection exception; 57P01-57P03: admin shutdown, crash shutdown, cannot connect now;
# 53300: too many connections.
_AWAY_STATES = ("08", "57P01", "57P02", "57P03", "53300")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo.extend((e.__cause__, e.__context__, getattr(e, "orig", None)))


def _sqlstate(e: BaseException) -> str:
    return str(getattr(e, "sqlstate", "") or "")


def is_connection_problem(exc: BaseException) -> bool:
    """True when ``exc`` says the database cannot be reached (or is restarting)."""
    for e in _chain(exc):
        if isinstance(e, DBAPIError) and e.connection_invalidated:
            return True
        if isinstance(
            e,
            OSError
            | TimeoutError
            | asyncpg.ConnectionDoesNotExistError
            | asyncpg.InternalClientError
            | asyncpg.CannotConnectNowError
            | asyncpg.PostgresConnectionError,
        ):
            return True
        if isinstance(e, asyncpg.InterfaceError) and not isinstance(e, ClientDataError):
            return True  # "the underlying connection is closed" and the like
        if _sqlstate(e).startswith(_AWAY_STATES):
            return True
    return False


def is_data_problem(exc: BaseException) -> bool:
    """True when the database (or driver) refused a value: the same write fails again."""
    if is_connection_problem(exc):
        return False
    for e in _chain(exc):
        if isinstance(e, ClientDataError | UnicodeError):  # refused before sending
            return True
        if _sqlstate(e).startswith(("22", "23")):
            return True
    return False
