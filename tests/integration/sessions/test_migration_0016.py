"""Migration 0016_batches: sessions made before it run live, models get the published batch
discount, and it downgrades cleanly (the batch tables and columns go) and upgrades again."""

from __future__ import annotations

import asyncpg

from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.integration.migrations import database_at, downgrade, migrate


async def test_batches_migration_round_trip(pg: EmbeddedPostgres) -> None:
    name = "sessions_migration_0016"
    async with database_at(pg, name, "0015") as url:
        conn = await asyncpg.connect(pg.dsn(name))
        try:
            provider = await conn.fetchval(
                "INSERT INTO providers (name, kind) VALUES ('p', 'openai') RETURNING id"
            )
            await conn.execute(
                "INSERT INTO llm_models (provider_id, name, model) VALUES ($1, 'm', 'gpt')",
                provider,
            )
            sid = await conn.fetchval(
                "INSERT INTO judge_sessions (name, comparison_mode, pillar_ids) "
                "VALUES ('old', 'free_for_all', '{}') RETURNING id"
            )
            await migrate(url, "0016_batches")
            assert await conn.fetchval("SELECT execution FROM judge_sessions") == "live"
            assert await conn.fetchval("SELECT batch_discount FROM llm_models") == 0.5
            job = await conn.fetchval(
                "INSERT INTO provider_batches (session_id, provider_id, model_id, provider_kind) "
                "VALUES ($1, $2, 1, 'openai') RETURNING id",
                sid,
                provider,
            )
            await conn.execute(
                "INSERT INTO provider_batch_requests (batch_id, custom_id, comparison_id, "
                "attempts, request) VALUES ($1, 'c1-a1', 1, 1, '{}')",
                job,
            )
            await downgrade(url, "0015")
            tables = await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'provider_batch%'"
            )
            assert tables == []
            columns = await conn.fetch(
                "SELECT column_name FROM information_schema.columns "
                "WHERE column_name IN ('execution', 'batch_discount')"
            )
            assert columns == []
            await migrate(url, "0016_batches")
            assert await conn.fetchval("SELECT count(*) FROM provider_batches") == 0
        finally:
            await conn.close()
