"""sessions: judge sessions and comparisons (the work queue)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _ts(name: str) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=True)


def upgrade() -> None:
    op.create_table(
        "judge_sessions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("status", sa.String(20), nullable=False, server_default="draft"),
        sa.Column("comparison_mode", sa.String(20), nullable=False),
        sa.Column("pillar_ids", postgresql.ARRAY(sa.Integer()), nullable=False),
        sa.Column("options", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column("worker_count", sa.Integer(), nullable=False, server_default="8"),
        sa.Column("judge_model_id", sa.Integer(), nullable=True),
        sa.Column("criteria", postgresql.JSONB(), nullable=False, server_default="[]"),
        sa.Column("prompt_template", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        _ts("started_at"),
        _ts("finished_at"),
        sa.Column("total", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("completed", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("failed", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Float(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("id", name="pk_judge_sessions"),
        sa.ForeignKeyConstraint(
            ["judge_model_id"],
            ["llm_models.id"],
            name="fk_judge_sessions_judge_model_id_llm_models",
            ondelete="SET NULL",
        ),
        sa.CheckConstraint(
            "status IN ('draft', 'running', 'paused', 'completed', 'cancelled', 'failed')",
            name="ck_judge_sessions_status",
        ),
        sa.CheckConstraint(
            "comparison_mode IN ('pillar_sample', 'round_robin', 'free_for_all', 'imported')",
            name="ck_judge_sessions_mode",
        ),
        sa.CheckConstraint("worker_count BETWEEN 1 AND 1024", name="ck_judge_sessions_workers"),
        sa.CheckConstraint(
            "completed >= 0 AND failed >= 0 AND completed + failed <= total",
            name="ck_judge_sessions_counts",
        ),
    )
    op.create_index("ix_judge_sessions_judge_model_id", "judge_sessions", ["judge_model_id"])

    op.create_table(
        "comparisons",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("queue_position", sa.Integer(), nullable=False),
        sa.Column("thread_a_id", sa.Integer(), nullable=False),
        sa.Column("thread_b_id", sa.Integer(), nullable=False),
        sa.Column("pillar_a_id", sa.Integer(), nullable=False),
        sa.Column("pillar_b_id", sa.Integer(), nullable=False),
        sa.Column("repetition", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("swap_group", sa.Integer(), nullable=False),
        sa.Column("is_swap", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("status", sa.String(10), nullable=False, server_default="pending"),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        _ts("lease_expires_at"),
        _ts("claimed_at"),
        _ts("started_at"),
        _ts("completed_at"),
        sa.Column("winner", sa.String(3), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("scores_a", postgresql.JSONB(), nullable=True),
        sa.Column("scores_b", postgresql.JSONB(), nullable=True),
        sa.Column("reasoning", sa.Text(), nullable=True),
        sa.Column("raw_response", sa.Text(), nullable=True),
        sa.Column("parse_error", sa.Text(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Float(), nullable=False, server_default="0"),
        sa.Column("latency_s", sa.Float(), nullable=True),
        sa.Column("cache_hit", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_comparisons"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["judge_sessions.id"],
            name="fk_comparisons_session_id_judge_sessions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "session_id", "queue_position", name="uq_comparisons_session_id_queue_position"
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'completed', 'failed', 'cancelled')",
            name="ck_comparisons_status",
        ),
        sa.CheckConstraint(
            "winner IS NULL OR winner IN ('A', 'B', 'TIE')", name="ck_comparisons_winner"
        ),
    )
    op.create_index(
        "ix_comparisons_claim",
        "comparisons",
        ["session_id", "queue_position"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_comparisons_lease",
        "comparisons",
        ["lease_expires_at"],
        postgresql_where=sa.text("status = 'running'"),
    )
    op.create_index("ix_comparisons_session_status", "comparisons", ["session_id", "status"])
    op.create_index("ix_comparisons_thread_a_id", "comparisons", ["thread_a_id"])
    op.create_index("ix_comparisons_thread_b_id", "comparisons", ["thread_b_id"])


def downgrade() -> None:
    op.drop_table("comparisons")
    op.drop_table("judge_sessions")
