"""Judge votes: every judge's answer to a comparison as a ``comparison_votes`` row (a
single judge's is member 0), written in the transaction that applies the comparison's
finish (``claims.finish``), or from stored comparison rows (an import)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.types import BigInteger, Float, Integer, String, Text

from llmjudge.sessions.run.claims import ANSWER_TYPES, VOTE_COLUMNS, Finish, array_params

__all__ = ["store_solo_votes", "write_votes"]


# A comparison judged again (retry-failed) replaces its votes.
_REPLACE = """
    ON CONFLICT (comparison_id, member) DO UPDATE SET
        model_id = EXCLUDED.model_id, judge = EXCLUDED.judge, status = EXCLUDED.status,
        winner = EXCLUDED.winner, strength = EXCLUDED.strength,
        confidence = EXCLUDED.confidence,
        scores_a = EXCLUDED.scores_a, scores_b = EXCLUDED.scores_b,
        reasoning = EXCLUDED.reasoning, raw_response = EXCLUDED.raw_response,
        input_tokens = EXCLUDED.input_tokens, output_tokens = EXCLUDED.output_tokens,
        cost_usd = EXCLUDED.cost_usd, latency_s = EXCLUDED.latency_s,
        cache_hit = EXCLUDED.cache_hit, error = EXCLUDED.error, prob_a = EXCLUDED.prob_a,
        score = EXCLUDED.score
"""

_INSERT_VOTES = """
    WITH v AS (
        SELECT * FROM unnest(
            CAST(:comparison_id AS bigint[]), CAST(:member AS int[]), CAST(:model_id AS int[]),
            CAST(:judge AS text[]), CAST(:status AS text[]), CAST(:winner AS text[]),
            CAST(:confidence AS float8[]), CAST(:scores_a AS jsonb[]),
            CAST(:scores_b AS jsonb[]), CAST(:reasoning AS text[]),
            CAST(:raw_response AS text[]), CAST(:input_tokens AS int[]),
            CAST(:output_tokens AS int[]), CAST(:cost_usd AS float8[]),
            CAST(:latency_s AS float8[]), CAST(:cache_hit AS bool[]), CAST(:error AS text[]),
            CAST(:strength AS float8[]), CAST(:prob_a AS float8[]), CAST(:score AS float8[])
        ) AS v(comparison_id, member, model_id, judge, status, winner, confidence, scores_a,
               scores_b, reasoning, raw_response, input_tokens, output_tokens, cost_usd,
               latency_s, cache_hit, error, strength, prob_a, score)
    )
    INSERT INTO comparison_votes (comparison_id, session_id, member, model_id, judge, status,
        winner, strength, confidence, scores_a, scores_b, reasoning, raw_response,
        input_tokens, output_tokens, cost_usd, latency_s, cache_hit, error, prob_a, score)
    SELECT v.comparison_id, c.session_id, v.member, v.model_id, v.judge, v.status, v.winner,
           v.strength, v.confidence, v.scores_a, v.scores_b, v.reasoning, v.raw_response,
           v.input_tokens, v.output_tokens, v.cost_usd, v.latency_s, v.cache_hit, v.error,
           v.prob_a, v.score
    FROM v JOIN comparisons c ON c.id = v.comparison_id
"""
_VOTES = text(_INSERT_VOTES + _REPLACE).bindparams(
    *array_params(
        {
            "comparison_id": BigInteger,
            "member": Integer,
            "model_id": Integer,
            "judge": String,
            "status": String,
            "error": Text,
            "strength": Float,
        }
        | ANSWER_TYPES
    )
)

_VOTE_COUNTS = text(
    """
    UPDATE comparisons c SET votes_cast = v.cast_, votes_asked = v.asked
    FROM unnest(CAST(:ids AS bigint[]), CAST(:cast_ AS int[]), CAST(:asked AS int[]))
         AS v(id, cast_, asked)
    WHERE c.id = v.id
    """
).bindparams(
    bindparam("ids", type_=ARRAY(BigInteger)),
    bindparam("cast_", type_=ARRAY(Integer)),
    bindparam("asked", type_=ARRAY(Integer)),
)


async def write_votes(conn: AsyncConnection, items: Sequence[Finish], applied: set[int]) -> int:
    """Store the votes of the finishes that ``finish`` applied, in the caller's transaction
    (so a comparison's votes are written exactly when its result is): a retry (``pending``)
    keeps none, a lost claim writes nothing. A panel's come with its finish; a single
    judge's one is its comparison row's answer (``store_solo_votes``). Returns the panel
    votes written."""
    done = [f for f in items if f.id in applied and f.status != "pending" and not f.refund]
    await store_solo_votes(conn, [f.id for f in done if f.votes_asked is None])
    panels = [f for f in done if f.votes]
    if not panels:
        return 0
    votes = [(f.id, v) for f in panels for v in f.votes]
    columns = {name: [getattr(v, name) for _, v in votes] for name in VOTE_COLUMNS}
    await conn.execute(_VOTES, {"comparison_id": [i for i, _ in votes], **columns})
    await conn.execute(
        _VOTE_COUNTS,
        {
            "ids": [f.id for f in panels],
            "cast_": [f.votes_cast or 0 for f in panels],
            "asked": [f.votes_asked for f in panels],
        },
    )
    return len(votes)


# A single judge's answers as its member-0 votes, copied from the comparison rows that hold
# them (in the database: the answer is not sent twice). The worker runs it for the single
# judge's finishes it applied, an import for the rows it stored; migration 0013 ran the
# same over every older session.
_SOLO_INSERT_VOTES = """
    INSERT INTO comparison_votes (comparison_id, session_id, member, model_id, judge, status,
        winner, strength, confidence, scores_a, scores_b, reasoning, raw_response,
        input_tokens, output_tokens, cost_usd, latency_s, cache_hit, error, prob_a, score)
    SELECT c.id, c.session_id, 0, s.judge_model_id,
           left(COALESCE(s.options->>'judge_label', ''), 200),
           CASE WHEN c.status = 'completed' AND (c.winner IS NOT NULL OR c.score IS NOT NULL)
                THEN 'voted' ELSE 'missing' END,
           c.winner, c.strength, c.confidence, c.scores_a, c.scores_b, c.reasoning,
           c.raw_response, c.input_tokens, c.output_tokens, c.cost_usd, c.latency_s,
           c.cache_hit,
           CASE WHEN c.status = 'completed' AND c.winner IS NOT NULL
                THEN left('unparsed, a tie: ' || c.parse_error, 2000)
                WHEN c.status = 'completed' AND c.score IS NOT NULL THEN NULL
                ELSE COALESCE(c.parse_error, c.error) END,
           c.prob_a, c.score
    FROM comparisons c JOIN judge_sessions s ON s.id = c.session_id
    -- one judge: no panel (SQL NULL, or JSON null as the ORM writes None)
    WHERE c.id = ANY(:ids) AND jsonb_typeof(s.panel) IS DISTINCT FROM 'object'
      AND c.votes_asked IS NULL
      AND c.status IN ('completed', 'failed')
      -- an answer, or a call that failed (no call: a deleted thread, an abandoned item)
      AND (c.status = 'completed' OR c.started_at IS NOT NULL OR c.raw_response IS NOT NULL
           OR c.parse_error IS NOT NULL)
"""
_SOLO_VOTES = text(_SOLO_INSERT_VOTES + _REPLACE).bindparams(
    bindparam("ids", type_=ARRAY(BigInteger))
)


async def store_solo_votes(conn: AsyncConnection | AsyncSession, ids: Sequence[int]) -> None:
    """Write the member-0 votes of the single-judge comparisons ``ids`` whose answers are
    stored (the others of ``ids`` are left alone)."""
    if ids:
        await conn.execute(_SOLO_VOTES, {"ids": list(ids)})
