"""Migration 0018: ``prob_a`` on comparisons and votes, NULL for every stored row, held to
[0, 1] by the database, and gone again after a downgrade."""

from __future__ import annotations

import asyncpg
import pytest

from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.integration.migrations import database_at, downgrade, migrate

COLUMNS = """
    SELECT table_name FROM information_schema.columns
    WHERE column_name = 'prob_a' ORDER BY table_name
"""


async def test_probabilities_column_up_and_down(pg: EmbeddedPostgres) -> None:
    name = "sessions_migration_0018"
    async with database_at(pg, name, "0015") as url:
        conn = await asyncpg.connect(pg.dsn(name))
        try:
            sid = await conn.fetchval(
                "INSERT INTO judge_sessions (name, comparison_mode, pillar_ids)"
                " VALUES ('old', 'round_robin', '{1,2}') RETURNING id"
            )
            await conn.execute(
                "INSERT INTO comparisons (session_id, queue_position, thread_a_id, thread_b_id,"
                " pillar_a_id, pillar_b_id, swap_group, status, winner)"
                " VALUES ($1, 0, 1, 2, 1, 2, 0, 'completed', 'A')",
                sid,
            )
        finally:
            await conn.close()
        await migrate(url, "0018_probabilities")
        conn = await asyncpg.connect(pg.dsn(name))
        try:
            tables = [r[0] for r in await conn.fetch(COLUMNS)]
            assert tables == ["comparison_votes", "comparisons"]
            assert await conn.fetchval("SELECT prob_a FROM comparisons") is None
            await conn.execute("UPDATE comparisons SET prob_a = 0.25")
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute("UPDATE comparisons SET prob_a = 1.5")
        finally:
            await conn.close()
        await downgrade(url, "0015")
        conn = await asyncpg.connect(pg.dsn(name))
        try:
            assert await conn.fetch(COLUMNS) == []
            assert await conn.fetchval("SELECT winner FROM comparisons") == "A"
        finally:
            await conn.close()
