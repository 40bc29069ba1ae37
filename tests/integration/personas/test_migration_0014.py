"""Migration 0014 (issue #28, item 6): stored persona texts that quote the deciding F1 by
the selection split's old names ("holdout F1" from the first release, "held-out F1" since
0010) say "selection F1", as the API names the split; other text is left alone; and it
downgrades back to 0013's wording."""

from __future__ import annotations

import json

import asyncpg

from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.integration.migrations import database_at, downgrade, migrate

FIRST_RELEASE = "holdout F1 0.833 reached the target 0.80"
SINCE_0010 = "Needs more labelled pairs ...; held-out F1 0.222 (95% CI 0.031-0.607) on 11 pairs"
OTHER = "optimisation F1 0.500 after 3 iterations; the holdout fraction stays 0.25"


async def _texts(conn: asyncpg.Connection) -> tuple[list[str | None], list[str | None], str]:
    reasons = [r[0] for r in await conn.fetch("SELECT status_reason FROM personas ORDER BY id")]
    notes = [r[0] for r in await conn.fetch("SELECT note FROM persona_iterations ORDER BY id")]
    message = json.loads(
        await conn.fetchval("SELECT convergence FROM persona_iterations WHERE number = 2")
    )["message"]
    return reasons, notes, message


async def test_stored_f1_wording_names_the_selection_split(pg: EmbeddedPostgres) -> None:
    name = "personas_migration_0014"
    async with database_at(pg, name, "0013") as url:
        conn = await asyncpg.connect(pg.dsn(name))
        pid = await conn.fetchval(
            "INSERT INTO personas (name, task_prompt, status, status_reason)"
            " VALUES ('old', 'Q: {input}', 'trained', $1) RETURNING id",
            FIRST_RELEASE,
        )
        await conn.execute(
            "INSERT INTO personas (name, task_prompt, status_reason) VALUES ('other', 'Q', $1)",
            OTHER,
        )
        await conn.execute(
            "INSERT INTO persona_iterations (persona_id, number, status, prompt_version, note)"
            " VALUES ($1, 1, 'done', 1, $2)",
            pid,
            FIRST_RELEASE,
        )
        convergence = {"status": "needs_more_labelled_pairs", "message": SINCE_0010, "f1": None}
        await conn.execute(
            "INSERT INTO persona_iterations (persona_id, number, status, prompt_version, note,"
            " convergence) VALUES ($1, 2, 'done', 2, $2, $3::jsonb)",
            pid,
            SINCE_0010,
            json.dumps(convergence),
        )
        await conn.close()

        await migrate(url)
        conn = await asyncpg.connect(pg.dsn(name))
        reasons, notes, message = await _texts(conn)
        assert reasons == ["selection F1 0.833 reached the target 0.80", OTHER]
        assert notes == [
            "selection F1 0.833 reached the target 0.80",
            SINCE_0010.replace("held-out F1", "selection F1"),
        ]
        assert message == SINCE_0010.replace("held-out F1", "selection F1")
        # The rest of the convergence status is untouched.
        stored = json.loads(
            await conn.fetchval("SELECT convergence FROM persona_iterations WHERE number = 2")
        )
        assert stored == convergence | {"message": message}
        await conn.close()

        await downgrade(url, "0013")
        conn = await asyncpg.connect(pg.dsn(name))
        reasons, notes, message = await _texts(conn)
        assert reasons == ["held-out F1 0.833 reached the target 0.80", OTHER]
        assert message == SINCE_0010
        await conn.close()
