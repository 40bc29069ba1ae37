"""provider batch jobs: a session may run its judge calls through a provider's batch API

``judge_sessions.execution`` says how a session's calls go (``live`` or ``batch``);
``llm_models.batch_discount`` is the share of the live price a batch call saves (0.5, the
published OpenAI and Anthropic discount). ``provider_batches`` holds one row per batch
job and ``provider_batch_requests`` its requests by ``custom_id``, stored before anything is
sent, so a worker killed at any stage resumes from here.

Revision ID: 0016_batches
Revises: 0015
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op

revision = "0016_batches"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "judge_sessions",
        sa.Column("execution", sa.String(10), nullable=False, server_default="live"),
    )
    op.execute(
        "ALTER TABLE judge_sessions ADD CONSTRAINT ck_judge_sessions_execution "
        "CHECK (execution IN ('live', 'batch'))"
    )
    op.add_column(
        "llm_models",
        sa.Column("batch_discount", sa.Float(), nullable=False, server_default="0.5"),
    )
    op.execute(
        "ALTER TABLE llm_models ADD CONSTRAINT ck_llm_models_batch_discount "
        "CHECK (batch_discount BETWEEN 0 AND 1)"
    )
    op.create_table(
        "provider_batches",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column(
            "session_id",
            sa.Integer(),
            sa.ForeignKey("judge_sessions.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("provider_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("provider_kind", sa.String(20), nullable=False),
        sa.Column("provider_batch_id", sa.String(200), nullable=True),
        sa.Column("state", sa.String(20), nullable=False, server_default="prepared"),
        sa.Column("requests", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("bytes", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("succeeded", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("errored", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("input_file_id", sa.String(200), nullable=True),
        sa.Column("output_file_id", sa.String(200), nullable=True),
        sa.Column("error_file_id", sa.String(200), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("submitting_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("polled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("provider_id", "provider_batch_id", name="uq_provider_batches_remote"),
    )
    op.create_index(
        "ix_provider_batches_open",
        "provider_batches",
        ["session_id"],
        postgresql_where=sa.text("applied_at IS NULL"),
    )
    op.create_table(
        "provider_batch_requests",
        sa.Column(
            "batch_id",
            sa.BigInteger(),
            sa.ForeignKey("provider_batches.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("custom_id", sa.String(64), primary_key=True),
        sa.Column("comparison_id", sa.BigInteger(), nullable=False, index=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("member", sa.SmallInteger(), nullable=False, server_default="0"),
        sa.Column("request", JSONB(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("provider_batch_requests")
    op.drop_index("ix_provider_batches_open", table_name="provider_batches")
    op.drop_table("provider_batches")
    op.drop_column("llm_models", "batch_discount")
    op.drop_column("judge_sessions", "execution")
