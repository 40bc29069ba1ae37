"""Migration 0019_single_grading: pairs stored before it are untouched, a graded thread
(no second thread, a score) can be stored after it, and it downgrades, dropping grading
sessions (a pairs-only schema has no place for them) and keeping the pairs."""

from __future__ import annotations

import asyncpg
import pytest

from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.integration.migrations import database_at, downgrade, migrate

SESSION = (
    "INSERT INTO judge_sessions (name, comparison_mode, pillar_ids) "
    "VALUES ($1, $2, ARRAY[1, 2]) RETURNING id"
)
PAIR = (
    "INSERT INTO comparisons (session_id, queue_position, thread_a_id, thread_b_id,"
    " pillar_a_id, pillar_b_id, swap_group, status, winner) "
    "VALUES ($1, 0, 10, 20, 1, 2, 0, 'completed', 'A') RETURNING id"
)


async def test_grades_fit_after_it_and_pairs_survive_both_ways(pg: EmbeddedPostgres) -> None:
    name = "sessions_migration_0019"
    async with database_at(pg, name, "0015") as url:
        conn = await asyncpg.connect(pg.dsn(name))
        pairs = await conn.fetchval(SESSION, "pairs", "round_robin")
        pair = await conn.fetchval(PAIR, pairs)
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.fetchval(SESSION, "too early", "single")
        await conn.close()

        await migrate(url)
        conn = await asyncpg.connect(pg.dsn(name))
        row = await conn.fetchrow("SELECT winner, score, thread_b_id FROM comparisons")
        assert (row["winner"], row["score"], row["thread_b_id"]) == ("A", None, 20)
        graded = await conn.fetchval(SESSION, "graded", "single")
        item = await conn.fetchval(
            "INSERT INTO comparisons (session_id, queue_position, thread_a_id, pillar_a_id,"
            " swap_group, status, score) VALUES ($1, 0, 10, 1, 0, 'completed', 7.5) RETURNING id",
            graded,
        )
        await conn.execute(
            "INSERT INTO comparison_votes (comparison_id, session_id, member, status, score)"
            " VALUES ($1, $2, 0, 'voted', 7.5)",
            item,
            graded,
        )
        with pytest.raises(asyncpg.CheckViolationError):  # both sides or neither
            await conn.execute(
                "INSERT INTO comparisons (session_id, queue_position, thread_a_id,"
                " thread_b_id, pillar_a_id, swap_group) VALUES ($1, 1, 10, 20, 1, 0)",
                graded,
            )
        await conn.close()

        await downgrade(url, "0015")
        conn = await asyncpg.connect(pg.dsn(name))
        assert await conn.fetchval("SELECT count(*) FROM judge_sessions") == 1
        assert await conn.fetchval("SELECT id FROM comparisons") == pair
        assert await conn.fetchval("SELECT count(*) FROM comparison_votes") == 0
        with pytest.raises(asyncpg.NotNullViolationError):
            await conn.execute(
                "INSERT INTO comparisons (session_id, queue_position, thread_a_id,"
                " pillar_a_id, swap_group) VALUES ($1, 5, 10, 1, 0)",
                pairs,
            )
        await conn.close()
