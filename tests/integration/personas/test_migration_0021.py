"""Migration 0021_persona_batches: personas made before it train live, a batch job belongs
to exactly one owner (a session, or a persona's iteration), and it downgrades cleanly (a
persona's jobs go, a session's stay) and upgrades again."""

from __future__ import annotations

import asyncpg
import pytest

from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.integration.migrations import database_at, downgrade, migrate

JOB = (
    "INSERT INTO provider_batches (session_id, persona_id, iteration_id, provider_id, "
    "model_id, provider_kind) VALUES ($1, $2, $3, 1, 1, 'openai') RETURNING id"
)


async def test_persona_batches_migration_round_trip(pg: EmbeddedPostgres) -> None:
    name = "personas_migration_0021"
    async with database_at(pg, name, "0020_stored_figures") as url:
        conn = await asyncpg.connect(pg.dsn(name))
        try:
            pid = await conn.fetchval(
                "INSERT INTO personas (name, task_prompt) VALUES ('old', 'Q: {input}') RETURNING id"
            )
            it = await conn.fetchval(
                "INSERT INTO persona_iterations (persona_id, number, status, prompt_version) "
                "VALUES ($1, 1, 'judging', 1) RETURNING id",
                pid,
            )
            sid = await conn.fetchval(
                "INSERT INTO judge_sessions (name, comparison_mode, pillar_ids) "
                "VALUES ('s', 'free_for_all', '{}') RETURNING id"
            )
            session_job = await conn.fetchval(
                "INSERT INTO provider_batches (session_id, provider_id, model_id, provider_kind) "
                "VALUES ($1, 1, 1, 'openai') RETURNING id",
                sid,
            )
            await migrate(url, "0021_persona_batches")
            assert await conn.fetchrow("SELECT execution, batch_fallback FROM personas") == (
                "live",
                "none",
            )
            persona_job = await conn.fetchval(JOB, None, pid, it)
            await conn.execute(
                "INSERT INTO provider_batch_requests (batch_id, custom_id, attempts, request, "
                "pair_id) VALUES ($1, 'pair1', 1, '{}', 1)",
                persona_job,
            )
            for owners in ((sid, pid, it), (None, None, None), (None, pid, None)):
                with pytest.raises(asyncpg.CheckViolationError):
                    await conn.fetchval(JOB, *owners)
            await downgrade(url, "0020_stored_figures")
            assert [r[0] for r in await conn.fetch("SELECT id FROM provider_batches")] == [
                session_job
            ]
            assert await conn.fetchval("SELECT count(*) FROM provider_batch_requests") == 0
            columns = await conn.fetch(
                "SELECT column_name FROM information_schema.columns WHERE column_name IN "
                "('execution', 'batch_fallback', 'persona_id', 'iteration_id', 'pair_id') "
                "AND table_name IN ('personas', 'provider_batches', 'provider_batch_requests')"
            )
            assert columns == []
            await migrate(url, "0021_persona_batches")
            assert await conn.fetchval("SELECT count(*) FROM provider_batches") == 1
        finally:
            await conn.close()
