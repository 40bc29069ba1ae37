"""Migration 0013 on a database written before it: every single-judge comparison that a
judge answered gets its member-0 vote (the answer as the comparison row holds it), a panel's
votes stay as they were, the API's comparison detail reads back the same; and it
downgrades back."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg
from sqlalchemy.ext.asyncio import async_sessionmaker

from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.db.migrate import upgrade
from llmjudge.sessions.reads import get_comparison
from tests.integration.migrations import database_at, downgrade

_SESSION = (
    "INSERT INTO judge_sessions (name, status, comparison_mode, pillar_ids, panel, options)"
    " VALUES ($1, 'completed', 'round_robin', '{1,2}', $2, $3) RETURNING id"
)
_COMPARISON = (
    "INSERT INTO comparisons (session_id, queue_position, thread_a_id, thread_b_id,"
    " pillar_a_id, pillar_b_id, swap_group, status, attempts, started_at, winner, confidence,"
    " strength, scores_a, scores_b, reasoning, raw_response, parse_error, error, input_tokens,"
    " output_tokens, cost_usd, latency_s, cache_hit, votes_cast, votes_asked)"
    " VALUES ($1, $2, 1, 2, 1, 2, $2, $3, 1, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,"
    " $15, $16, $17, $18, $19, $20) RETURNING id"
)
_VOTES = (
    "SELECT comparison_id, member, model_id, judge, status, winner, strength, confidence,"
    " scores_a, scores_b, reasoning, raw_response, input_tokens, output_tokens, cost_usd,"
    " latency_s, cache_hit, error FROM comparison_votes ORDER BY comparison_id, member"
)


async def test_single_judge_answers_become_member_zero_votes(pg: EmbeddedPostgres) -> None:
    name = "votes_migration_0013"
    async with database_at(pg, name, "0012") as url:
        conn = await asyncpg.connect(pg.dsn(name))
        solo = await conn.fetchval(_SESSION, "one judge", None, '{"judge_label": "gpt"}')
        # the ORM writes a single judge's panel as JSON null, an import leaves it NULL
        other = await conn.fetchval(_SESSION, "orm", "null", "{}")
        other_read = await conn.fetchval(
            _COMPARISON, other, 0, "completed", _now(), "B", None, None, None, None,
            None, "B", None, None, 1, 1, 0.0, 0.1, False, None, None,
        )  # fmt: skip
        scores = json.dumps({"q": 4.0})
        read = await conn.fetchval(
            _COMPARISON, solo, 0, "completed", _now(), "A", 0.9, 2, scores, scores,
            "A is better", '{"winner": "A"}', None, None, 100, 20, 0.01, 1.5, False, None, None,
        )  # fmt: skip
        tie = await conn.fetchval(
            _COMPARISON, solo, 1, "completed", _now(), "TIE", None, None, None, None,
            "hmm", "hmm", "no verdict", None, 90, 10, 0.005, 1.0, True, None, None,
        )  # fmt: skip
        unread = await conn.fetchval(
            _COMPARISON, solo, 2, "failed", _now(), None, None, None, None, None,
            None, "garbled", "no JSON object", None, 80, 5, 0.004, 0.7, False, None, None,
        )  # fmt: skip
        down = await conn.fetchval(
            _COMPARISON, solo, 3, "failed", _now(), None, None, None, None, None,
            None, None, None, "bad request (400)", 0, 0, 0.0, None, False, None, None,
        )  # fmt: skip
        # no call made (a deleted thread), and one still to judge: no answer, no vote
        await conn.fetchval(
            _COMPARISON, solo, 4, "failed", None, None, None, None, None, None,
            None, None, None, "a thread of this comparison was deleted", 0, 0, 0.0, None,
            False, None, None,
        )  # fmt: skip
        await conn.fetchval(
            _COMPARISON, solo, 5, "pending", None, None, None, None, None, None,
            None, None, None, None, 0, 0, 0.0, None, False, None, None,
        )  # fmt: skip
        panel = json.dumps({"rule": "majority", "members": [{"label": "a"}, {"label": "b"}]})
        psid = await conn.fetchval(_SESSION, "panel", panel, "{}")
        pc = await conn.fetchval(
            _COMPARISON, psid, 0, "completed", _now(), "B", 0.7, None, None, None,
            "panel (majority): 2 of 2 members voted", None, None, None, 30, 6, 0.02, 2.0,
            False, 2, 2,
        )  # fmt: skip
        for k, winner in enumerate(("B", "B")):
            await conn.execute(
                "INSERT INTO comparison_votes (comparison_id, session_id, member, judge,"
                " status, winner, raw_response, input_tokens, cost_usd)"
                " VALUES ($1, $2, $3, $4, 'voted', $5, $6, 15, 0.01)",
                pc,
                psid,
                k,
                "ab"[k],
                winner,
                f"answer {k}",
            )
        panel_before = [tuple(r) for r in await conn.fetch(_VOTES)]
        await conn.close()

        engine = make_engine(url, pool_size=1)
        await upgrade(engine)
        conn = await asyncpg.connect(pg.dsn(name))
        votes = {(r["comparison_id"], r["member"]): r for r in await conn.fetch(_VOTES)}
        assert set(votes) == {
            (read, 0),
            (tie, 0),
            (unread, 0),
            (down, 0),
            (other_read, 0),
            (pc, 0),
            (pc, 1),
        }
        assert votes[(other_read, 0)]["winner"] == "B"
        v = votes[(read, 0)]
        assert (v["status"], v["winner"], v["strength"], v["confidence"]) == ("voted", "A", 2, 0.9)
        assert json.loads(v["scores_a"]) == {"q": 4.0} and v["reasoning"] == "A is better"
        assert (v["raw_response"], v["input_tokens"], v["output_tokens"]) == (
            '{"winner": "A"}',
            100,
            20,
        )
        assert (v["cost_usd"], v["latency_s"], v["judge"], v["error"]) == (0.01, 1.5, "gpt", None)
        v = votes[(tie, 0)]  # a format that counts an unreadable answer as a tie
        assert (v["status"], v["winner"], v["cache_hit"]) == ("voted", "TIE", True)
        assert v["error"] == "unparsed, a tie: no verdict"
        v = votes[(unread, 0)]
        assert (v["status"], v["winner"], v["raw_response"]) == ("missing", None, "garbled")
        assert v["error"] == "no JSON object"
        v = votes[(down, 0)]
        assert (v["status"], v["error"], v["raw_response"]) == (
            "missing",
            "bad request (400)",
            None,
        )
        assert [tuple(r) for r in await conn.fetch(_VOTES) if r["comparison_id"] == pc] == (
            panel_before
        )
        await conn.close()

        # The API reads back what it read before: a single judge's detail lists no votes
        # (its answer is the comparison), a panel's lists its members.
        maker = async_sessionmaker(engine, expire_on_commit=False)
        async with maker() as db:
            one = await get_comparison(db=db, session_id=solo, comparison_id=read)
            assert one.votes == [] and one.winner == "A" and one.raw_response == '{"winner": "A"}'
            assert one.votes_cast is None and one.votes_asked is None
            many = await get_comparison(db=db, session_id=psid, comparison_id=pc)
            assert [(x.member, x.judge, x.winner) for x in many.votes] == [
                (0, "a", "B"),
                (1, "b", "B"),
            ]
        await engine.dispose()

        await downgrade(url, "0012")
        conn = await asyncpg.connect(pg.dsn(name))
        assert [tuple(r) for r in await conn.fetch(_VOTES)] == panel_before
        await conn.close()


def _now() -> datetime:
    return datetime.now(UTC)
