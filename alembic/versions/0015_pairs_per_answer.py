"""pairs per answer: one input may carry several answers (one pair each)

A calibration set usually holds several systems' answers to each question; a pair was
unique by its input, so such a set was refused. Pairs are now unique by ``pair_hash``
(the input and whose answer: a named ``system``, else the answer's text); ``input_hash``
stays, indexed, as the question its answers share. The stored pairs keep their ids, so
their task outputs (already keyed by pair id), decisions and labels stay theirs.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

import hashlib
import json

import sqlalchemy as sa

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_BATCH = 2000


def _pair_hash(input: str, input_b: str | None, answer: str | None) -> str:
    # keys.pair_hash for a pair without a system, frozen here as this revision computed it.
    blob = json.dumps(
        ("pair", input, input_b, "answer", answer), ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def upgrade() -> None:
    op.add_column("persona_pairs", sa.Column("system", sa.String(200), nullable=True))
    op.add_column("persona_pairs", sa.Column("pair_hash", sa.String(64), nullable=True))
    conn = op.get_bind()
    pairs = sa.table(
        "persona_pairs",
        sa.column("id", sa.Integer),
        sa.column("pair_hash", sa.String),
    )
    last = 0
    while True:  # in batches: a persona may hold 100,000 pairs
        rows = conn.execute(
            sa.text(
                "SELECT id, input, input_b, answer FROM persona_pairs WHERE id > :last "
                "ORDER BY id LIMIT :n"
            ),
            {"last": last, "n": _BATCH},
        ).all()
        if not rows:
            break
        conn.execute(
            pairs.update()
            .where(pairs.c.id == sa.bindparam("pid"))
            .values(pair_hash=sa.bindparam("key")),
            [{"pid": r.id, "key": _pair_hash(r.input, r.input_b, r.answer)} for r in rows],
        )
        last = rows[-1].id
    op.alter_column("persona_pairs", "pair_hash", nullable=False)
    op.drop_constraint("uq_persona_pairs_persona_id_input_hash", "persona_pairs", type_="unique")
    op.create_unique_constraint(
        "uq_persona_pairs_persona_id_pair_hash", "persona_pairs", ["persona_id", "pair_hash"]
    )
    op.create_index(
        "ix_persona_pairs_persona_id_input_hash", "persona_pairs", ["persona_id", "input_hash"]
    )


def downgrade() -> None:
    shared = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT persona_id, count(*) - count(DISTINCT input_hash) FROM persona_pairs "
                "GROUP BY persona_id HAVING count(*) > count(DISTINCT input_hash) ORDER BY 1"
            )
        )
        .all()
    )
    if shared:
        personas = ", ".join(f"{pid} ({n} extra)" for pid, n in shared[:10])
        raise RuntimeError(
            "cannot downgrade below 0015: 0014 holds one pair per input, and these personas "
            f"hold several answers to one input: {personas}; delete those pairs first"
        )
    op.drop_index("ix_persona_pairs_persona_id_input_hash", "persona_pairs")
    op.drop_constraint("uq_persona_pairs_persona_id_pair_hash", "persona_pairs", type_="unique")
    op.create_unique_constraint(
        "uq_persona_pairs_persona_id_input_hash", "persona_pairs", ["persona_id", "input_hash"]
    )
    op.drop_column("persona_pairs", "pair_hash")
    op.drop_column("persona_pairs", "system")
