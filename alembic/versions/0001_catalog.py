"""catalog: pillars and threads

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pillars",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_pillars"),
        sa.UniqueConstraint("name", name="uq_pillars_name"),
    )
    op.create_table(
        "threads",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("pillar_id", sa.Integer(), nullable=False),
        sa.Column("external_id", sa.String(300), nullable=False),
        sa.Column("title", sa.Text(), nullable=False, server_default=""),
        sa.Column("prompt_key", sa.String(300), nullable=True),
        sa.Column("content", postgresql.JSONB(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("metadata", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_threads"),
        sa.ForeignKeyConstraint(
            ["pillar_id"], ["pillars.id"], name="fk_threads_pillar_id_pillars", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("pillar_id", "external_id", name="uq_threads_pillar_id_external_id"),
    )
    op.create_index("ix_threads_pillar_id", "threads", ["pillar_id"])
    op.create_index("ix_threads_prompt_key", "threads", ["prompt_key"])


def downgrade() -> None:
    op.drop_table("threads")
    op.drop_table("pillars")
