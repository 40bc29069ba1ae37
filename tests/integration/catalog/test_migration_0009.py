"""Migration 0009: threads imported before it get their style features from their content,
computed by the same function as the import; comparisons get a checked strength column."""

from __future__ import annotations

import json

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from alembic import command
from llmjudge.core.ratings.style import stored_features
from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.db.migrate import alembic_config, upgrade
from tests.conftest import drop_database

CONTENTS = [
    "## Title\n\n- one\n- two\n\n**bold** text",
    [
        {"role": "user", "content": "# not the answer"},
        {"role": "assistant", "content": "plain answer"},
    ],
    "",
]


async def test_0009_backfills_style_features_and_adds_strength(pg) -> None:
    conn = await asyncpg.connect(pg.dsn("postgres"))
    await conn.execute('CREATE DATABASE "migrate_0009"')
    await conn.close()
    engine = make_engine(pg.url("migrate_0009"), pool_size=1)
    try:
        await upgrade(engine, "0008")
        async with engine.begin() as c:
            await c.execute(text("INSERT INTO pillars (id, name) VALUES (1, 'p')"))
            for i, content in enumerate(CONTENTS):
                await c.execute(
                    text(
                        "INSERT INTO threads (id, pillar_id, external_id, content, content_hash)"
                        " VALUES (:id, 1, :ext, CAST(:content AS jsonb), 'h')"
                    ),
                    {"id": i + 1, "ext": f"t{i}", "content": json.dumps(content)},
                )
        await upgrade(engine, "0009")
        async with engine.connect() as c:
            rows = dict((await c.execute(text("SELECT id, style_features FROM threads"))).all())
            checks = set(
                (
                    await c.execute(
                        text(
                            "SELECT conname FROM pg_constraint"
                            " WHERE conrelid = 'comparisons'::regclass AND contype = 'c'"
                        )
                    )
                ).scalars()
            )
        for i, content in enumerate(CONTENTS):
            assert rows[i + 1] == pytest.approx(stored_features(content))
        assert rows[1][1] > 0 and rows[1][2] > 0 and rows[1][3] > 0  # header, list, bold
        assert rows[2] == [len("plain answer"), 0.0, 0.0, 0.0]  # the assistant turn only
        assert rows[3] == [0.0, 0.0, 0.0, 0.0]
        assert "ck_comparisons_strength" in checks

        def down(conn: Connection) -> None:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0008")

        async with engine.begin() as c:
            await c.run_sync(down)
        async with engine.connect() as c:
            columns = set(
                (
                    await c.execute(
                        text(
                            "SELECT column_name FROM information_schema.columns"
                            " WHERE table_name IN ('threads', 'comparisons')"
                        )
                    )
                ).scalars()
            )
        assert "style_features" not in columns and "strength" not in columns
    finally:
        await engine.dispose()
        await drop_database(pg, "migrate_0009")
