"""references: reference labels per thread pair; sessions carry their own verdict format and
system prompt; threads may carry the text of the prompt they answer

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reference_labels",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("thread_a_id", sa.Integer(), nullable=False),
        sa.Column("thread_b_id", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(3), nullable=False),
        sa.Column("both_bad", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("source", sa.String(10), nullable=False),
        sa.Column("annotator", sa.String(200), nullable=False, server_default=""),
        sa.Column("note", sa.Text(), nullable=False, server_default=""),
        sa.Column("session_id", sa.Integer(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_reference_labels"),
        sa.ForeignKeyConstraint(
            ["thread_a_id"],
            ["threads.id"],
            name="fk_reference_labels_thread_a_id_threads",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["thread_b_id"],
            ["threads.id"],
            name="fk_reference_labels_thread_b_id_threads",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["judge_sessions.id"],
            name="fk_reference_labels_session_id_judge_sessions",
            ondelete="SET NULL",
        ),
        sa.CheckConstraint("thread_a_id < thread_b_id", name="ck_reference_labels_canonical"),
        sa.CheckConstraint("label IN ('A', 'B', 'TIE')", name="ck_reference_labels_label"),
        sa.CheckConstraint("source IN ('human', 'gold')", name="ck_reference_labels_source"),
        sa.UniqueConstraint(
            "thread_a_id",
            "thread_b_id",
            "source",
            "annotator",
            name="uq_reference_labels_thread_a_id_thread_b_id_source_annotator",
        ),
    )
    op.create_index("ix_reference_labels_thread_b_id", "reference_labels", ["thread_b_id"])
    op.add_column("judge_sessions", sa.Column("verdict_format", postgresql.JSONB(), nullable=True))
    op.add_column("judge_sessions", sa.Column("system_prompt", sa.Text(), nullable=True))
    op.add_column("threads", sa.Column("prompt", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("threads", "prompt")
    op.drop_column("judge_sessions", "system_prompt")
    op.drop_column("judge_sessions", "verdict_format")
    op.drop_index("ix_reference_labels_thread_b_id", table_name="reference_labels")
    op.drop_table("reference_labels")
