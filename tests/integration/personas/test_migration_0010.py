"""Migration 0010 on a database written before it: the held-out pairs (and their
decisions) become the selection split, the iterations' held-out metrics become their
selection metrics, nothing is lost; and it downgrades back."""

from __future__ import annotations

import asyncpg
import pytest

from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.integration.migrations import database_at, downgrade, migrate


async def test_holdout_pairs_become_the_selection_split(pg: EmbeddedPostgres) -> None:
    name = "personas_migration_0010"
    async with database_at(pg, name, "0009") as url:
        conn = await asyncpg.connect(pg.dsn(name))
        pid = await conn.fetchval(
            "INSERT INTO personas (name, task_prompt) VALUES ('old', 'Q: {input}') RETURNING id"
        )
        pair_ids = [
            await conn.fetchval(
                "INSERT INTO persona_pairs (persona_id, position, input, correct_output,"
                " input_hash, split) VALUES ($1, $2, $3, '1', $4, $5) RETURNING id",
                pid,
                k,
                f"q{k}",
                f"h{k}",
                "holdout" if k % 2 else "optimisation",
            )
            for k in range(4)
        ]
        it = await conn.fetchval(
            "INSERT INTO persona_iterations (persona_id, number, status, prompt_version,"
            " metrics_holdout) VALUES ($1, 1, 'done', 1, '{\"f1\": 0.5}') RETURNING id",
            pid,
        )
        out = await conn.fetchval(
            "INSERT INTO persona_task_outputs (persona_id, pair_id, prompt_hash, input_hash,"
            " output) VALUES ($1, $2, 'p', 'h1', '1') RETURNING id",
            pid,
            pair_ids[1],
        )
        await conn.execute(
            "INSERT INTO persona_decisions (persona_id, iteration_id, iteration, pair_id,"
            " output_id, split, judge_label, prompt_version, human_agrees)"
            " VALUES ($1, $2, 1, $3, $4, 'holdout', 'correct', 1, true)",
            pid,
            it,
            pair_ids[1],
            out,
        )
        await conn.close()

        await migrate(url)
        conn = await asyncpg.connect(pg.dsn(name))
        splits = [
            r["split"] for r in await conn.fetch("SELECT split FROM persona_pairs ORDER BY id")
        ]
        assert splits == ["optimisation", "selection", "optimisation", "selection"]
        assert await conn.fetchval("SELECT split FROM persona_decisions") == "selection"
        row = await conn.fetchrow(
            "SELECT metrics_selection, metrics_calibration, convergence FROM persona_iterations"
        )
        assert row["metrics_selection"] == '{"f1": 0.5}' and row["metrics_calibration"] is None
        p = await conn.fetchrow(
            "SELECT min_per_class, convergence_basis, judge_kind FROM personas WHERE id = $1", pid
        )
        assert tuple(p) == (10, "lower_bound", "llm")
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("UPDATE persona_pairs SET split = 'holdout'")
        await conn.close()

        await downgrade(url, "0009")
        conn = await asyncpg.connect(pg.dsn(name))
        splits = [
            r["split"] for r in await conn.fetch("SELECT split FROM persona_pairs ORDER BY id")
        ]
        assert splits == ["optimisation", "holdout", "optimisation", "holdout"]
        assert await conn.fetchval("SELECT metrics_holdout FROM persona_iterations") == (
            '{"f1": 0.5}'
        )
        await conn.close()
