"""Small pieces of issue 14: telling a database that is away from a refused value, the
server limits of `llmjudge serve`, and judge answers made storable."""

from __future__ import annotations

import asyncpg
from sqlalchemy.exc import DBAPIError

from llmjudge.cli import uvicorn_options
from llmjudge.infra.config import Settings
from llmjudge.infra.db.faults import is_connection_problem, is_data_problem
from llmjudge.sessions.run.claims import Finish, JudgeVote
from llmjudge.sessions.run.jobs import storable_finish


def _wrapped(orig: BaseException) -> DBAPIError:
    try:
        raise orig
    except BaseException as e:
        return DBAPIError("UPDATE ...", {}, e)


def test_refused_values_and_lost_servers_are_told_apart() -> None:
    nul = asyncpg.exceptions.CharacterNotInRepertoireError("invalid byte sequence: 0x00")
    overflow = asyncpg.exceptions.NumericValueOutOfRangeError("out of range")
    for e in (nul, overflow, _wrapped(nul), ValueError("x").with_traceback(None)):
        assert not is_connection_problem(e)
    assert is_data_problem(_wrapped(nul)) and is_data_problem(overflow)
    lost = [
        ConnectionRefusedError(),
        FileNotFoundError(2, "no socket"),
        asyncpg.ConnectionDoesNotExistError("closed in the middle of operation"),
        asyncpg.InternalClientError("unexpected connection_lost() call"),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
    ]
    for e in lost:
        assert is_connection_problem(e) and is_connection_problem(_wrapped(e)), e
        assert not is_data_problem(_wrapped(e)), e
    assert not is_data_problem(RuntimeError("a bug")) and not is_connection_problem(KeyError())


def test_serve_bounds_slow_and_numerous_clients() -> None:
    opts = uvicorn_options(Settings(keep_alive_timeout_s=7, max_connections=321))
    assert opts["timeout_keep_alive"] == 7 and opts["limit_concurrency"] == 321
    assert 0 < int(opts["h11_max_incomplete_event_size"]) <= 1024 * 1024  # type: ignore[arg-type]
    defaults = uvicorn_options(Settings())
    assert defaults["limit_concurrency"] == 1000 and defaults["timeout_keep_alive"] == 5


def test_judge_answers_with_nul_bytes_become_storable() -> None:
    answer = JudgeVote(status="voted", reasoning="a\x00b", raw_response="\x00{}\ud800")
    f = Finish(
        id=1,
        worker_id="w",
        attempts=1,
        status="completed",
        answer=answer,
        votes=(answer, JudgeVote(member=1, judge="j\x00")),
        error=None,
        parse_error="bad \x00",
    )
    out = storable_finish(f)
    assert out.answer.reasoning == "a\ufffdb" and out.answer.raw_response == "\ufffd{}\ufffd"
    assert out.parse_error == "bad \ufffd" and out.error is None
    assert out.votes[0] == out.answer and out.votes[1].judge == "j\ufffd"
    fine = JudgeVote(status="voted", reasoning="fine")
    clean = Finish(id=2, worker_id="w", attempts=1, status="completed", answer=fine, votes=(fine,))
    assert storable_finish(clean) is clean
