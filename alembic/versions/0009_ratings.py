"""ranking rigor: per-thread style features; the strength of a verdict

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

threads.style_features holds analysis.style.STYLE_FEATURES of each thread's answer
(length in characters, markdown headers / list items / bold per character), computed at
import; existing rows are backfilled here from their content, in batches, in Python (the
same function the import uses, so old and new rows agree). comparisons.strength is 2 for
a strong verdict (A>>B), 1 for a weak one, NULL when the verdict format has none.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BATCH = 2000


def upgrade() -> None:
    op.add_column("comparisons", sa.Column("strength", sa.SmallInteger(), nullable=True))
    op.create_check_constraint(
        op.f("ck_comparisons_strength"), "comparisons", "strength IS NULL OR strength IN (1, 2)"
    )
    op.add_column(
        "threads", sa.Column("style_features", postgresql.ARRAY(sa.Float()), nullable=True)
    )
    _backfill_style_features()


def _backfill_style_features() -> None:
    from llmjudge.core.ratings.style import stored_features

    bind = op.get_bind()
    threads = sa.table(
        "threads",
        sa.column("id", sa.Integer()),
        sa.column("content", postgresql.JSONB()),
        sa.column("style_features", postgresql.ARRAY(sa.Float())),
    )
    last = 0
    while True:
        rows = bind.execute(
            sa.select(threads.c.id, threads.c.content)
            .where(threads.c.id > last)
            .order_by(threads.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        bind.execute(
            threads.update()
            .where(threads.c.id == sa.bindparam("tid"))
            .values(style_features=sa.bindparam("features")),
            [{"tid": t, "features": stored_features(content)} for t, content in rows],
        )
        last = rows[-1][0]


def downgrade() -> None:
    op.drop_column("threads", "style_features")
    op.drop_constraint(op.f("ck_comparisons_strength"), "comparisons", type_="check")
    op.drop_column("comparisons", "strength")
