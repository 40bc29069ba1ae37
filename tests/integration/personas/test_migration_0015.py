"""Migration 0015 (#27 item 6) on a database holding pairs from before it: the pairs keep
their ids, task outputs, decisions and labels, and get the identity the upload computes
(so re-uploading them is skipped); a second answer to a stored input can then be stored;
and it downgrades back, refusing while an input holds several answers."""

from __future__ import annotations

import asyncpg
import pytest

from llmjudge.core.personas.keys import input_hash, pair_hash
from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.integration.migrations import database_at, downgrade, migrate

OLD_PAIRS = [  # (input, input_b, correct_output, answer)
    ("What is 2+2?", None, "4", None),
    ("Compare", "these two", "same", "different"),
    ("Capital of France?", None, "Paris", "Paris"),
]


async def test_old_pairs_are_kept_with_their_identity(pg: EmbeddedPostgres) -> None:
    name = "personas_migration_0015"
    async with database_at(pg, name, "0014") as url:
        conn = await asyncpg.connect(pg.dsn(name))
        pid = await conn.fetchval(
            "INSERT INTO personas (name, task_prompt) VALUES ('old', 'Q: {input}') RETURNING id"
        )
        ids = []
        for position, (q, q_b, ref, answer) in enumerate(OLD_PAIRS, start=1):
            ids.append(
                await conn.fetchval(
                    "INSERT INTO persona_pairs (persona_id, position, input, input_b,"
                    " correct_output, answer, input_hash, split)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, 'selection') RETURNING id",
                    pid,
                    position,
                    q,
                    q_b,
                    ref,
                    answer,
                    input_hash(q, q_b),
                )
            )
        await conn.execute(
            "INSERT INTO persona_task_outputs (persona_id, pair_id, prompt_hash, input_hash,"
            " output) VALUES ($1, $2, 'p', $3, '4')",
            pid,
            ids[0],
            input_hash("What is 2+2?", None),
        )
        await conn.execute(
            "INSERT INTO persona_pair_labels (persona_id, pair_id, annotator, label)"
            " VALUES ($1, $2, 'ann', 'correct')",
            pid,
            ids[2],
        )
        await conn.close()

        await migrate(url)
        conn = await asyncpg.connect(pg.dsn(name))
        rows = await conn.fetch(
            "SELECT id, input, input_b, correct_output, answer, system, pair_hash, split"
            " FROM persona_pairs ORDER BY id"
        )
        assert [r["id"] for r in rows] == ids
        assert [(r["input"], r["input_b"], r["correct_output"], r["answer"]) for r in rows] == (
            OLD_PAIRS
        )
        assert all(r["system"] is None and r["split"] == "selection" for r in rows)
        # the identity the upload computes, so the same rows uploaded again are skipped
        assert [r["pair_hash"] for r in rows] == [
            pair_hash(q, q_b, None, answer) for q, q_b, _, answer in OLD_PAIRS
        ]
        assert await conn.fetchval("SELECT pair_id FROM persona_task_outputs") == ids[0]
        assert await conn.fetchval("SELECT pair_id FROM persona_pair_labels") == ids[2]
        # a second answer to a stored input is a pair of its own now; a copy is refused
        second = (pid, 4, "Capital of France?", "Paris", "Lyon")
        insert = (
            "INSERT INTO persona_pairs (persona_id, position, input, correct_output, answer,"
            " input_hash, pair_hash, split) VALUES ($1, $2, $3, $4, $5, $6, $7, 'selection')"
        )
        keys = (input_hash(second[2], None), pair_hash(second[2], None, None, "Lyon"))
        await conn.execute(insert, *second, *keys)
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(insert, pid, 5, *second[2:], *keys)
        await conn.close()

        with pytest.raises(RuntimeError, match="several answers to one input"):
            await downgrade(url, "0014")
        conn = await asyncpg.connect(pg.dsn(name))
        await conn.execute("DELETE FROM persona_pairs WHERE answer = 'Lyon'")
        await conn.close()
        await downgrade(url, "0014")
        conn = await asyncpg.connect(pg.dsn(name))
        columns = {
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'persona_pairs'"
            )
        }
        assert "pair_hash" not in columns and "system" not in columns
        assert await conn.fetchval("SELECT count(*) FROM persona_pairs") == 3
        with pytest.raises(asyncpg.UniqueViolationError):  # one pair per input again
            await conn.execute(
                "INSERT INTO persona_pairs (persona_id, position, input, correct_output,"
                " input_hash, split) VALUES ($1, 9, 'What is 2+2?', '4', $2, 'selection')",
                pid,
                input_hash("What is 2+2?", None),
            )
        await conn.close()
