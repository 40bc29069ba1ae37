"""Migration 0017 (prompt caching) on a database with models and accounted calls from
before it: they read back with no cache prices (the provider's defaults) and no cached
tokens, the cache columns take values, and it downgrades back."""

from __future__ import annotations

import asyncpg

from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.integration.migrations import database_at, downgrade, migrate

COLUMNS = "SELECT column_name FROM information_schema.columns WHERE table_name = $1"


async def test_prompt_cache_columns_upgrade_and_downgrade(pg: EmbeddedPostgres) -> None:
    name = "providers_migration_0017"
    async with database_at(pg, name, "0015") as url:
        conn = await asyncpg.connect(pg.dsn(name))
        provider = await conn.fetchval(
            "INSERT INTO providers (name, kind) VALUES ('old', 'anthropic') RETURNING id"
        )
        await conn.execute(
            "INSERT INTO llm_models (provider_id, name, model, input_price_per_million)"
            " VALUES ($1, 'claude', 'claude-x', 3)",
            provider,
        )
        await conn.execute(
            "INSERT INTO llm_calls (provider_id, model, session_id, input_tokens, status)"
            " VALUES ($1, 'claude-x', 7, 1000, 'ok')",
            provider,
        )
        await conn.close()

        await migrate(url)
        conn = await asyncpg.connect(pg.dsn(name))
        try:
            model = await conn.fetchrow("SELECT * FROM llm_models")
            assert model["cached_input_price_per_million"] is None
            assert model["cache_write_price_per_million"] is None
            call = await conn.fetchrow("SELECT * FROM llm_calls")
            assert (call["cached_input_tokens"], call["cache_write_tokens"]) == (0, 0)
            assert call["cache_saving_usd"] == 0.0
            await conn.execute(
                "INSERT INTO llm_calls (provider_id, model, session_id, input_tokens, status,"
                " cached_input_tokens, cache_saving_usd) VALUES ($1, 'claude-x', 7, 1000, 'ok',"
                " 800, 0.00216)",
                provider,
            )
            # a negative cache price is refused by the table, not only by the API
            try:
                await conn.execute("UPDATE llm_models SET cache_write_price_per_million = -1")
            except asyncpg.CheckViolationError:
                pass
            else:
                raise AssertionError("a negative cache price was stored")
        finally:
            await conn.close()

        await downgrade(url, "0015")
        conn = await asyncpg.connect(pg.dsn(name))
        try:
            calls = {r["column_name"] for r in await conn.fetch(COLUMNS, "llm_calls")}
            models = {r["column_name"] for r in await conn.fetch(COLUMNS, "llm_models")}
            assert not {"cached_input_tokens", "cache_write_tokens", "cache_saving_usd"} & calls
            assert not {"cached_input_price_per_million", "cache_write_price_per_million"} & models
            assert await conn.fetchval("SELECT count(*) FROM llm_calls") == 2
        finally:
            await conn.close()
        await migrate(url)  # and up again
