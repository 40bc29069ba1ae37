"""providers: providers, models, call accounting, response cache

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _now() -> sa.Column:
    return sa.Column(
        "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
    )


def upgrade() -> None:
    op.create_table(
        "providers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=True),
        sa.Column("api_key_encrypted", sa.Text(), nullable=True),
        sa.Column("api_key_last4", sa.String(4), nullable=True),
        sa.Column("rpm", sa.Integer(), nullable=True),
        sa.Column("tpm", sa.Integer(), nullable=True),
        sa.Column("max_concurrency", sa.Integer(), nullable=False, server_default="64"),
        sa.Column("timeout_s", sa.Float(), nullable=False, server_default="60"),
        sa.Column("max_retries", sa.Integer(), nullable=False, server_default="4"),
        sa.Column("settings", postgresql.JSONB(), nullable=False, server_default="{}"),
        _now(),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_providers"),
        sa.UniqueConstraint("name", name="uq_providers_name"),
        sa.CheckConstraint(
            "kind IN ('openai', 'anthropic', 'gemini', 'simulator')", name="ck_providers_kind"
        ),
        sa.CheckConstraint("max_concurrency BETWEEN 1 AND 1024", name="ck_providers_concurrency"),
        sa.CheckConstraint(
            "(rpm IS NULL OR rpm > 0) AND (tpm IS NULL OR tpm > 0)", name="ck_providers_limits"
        ),
        sa.CheckConstraint("timeout_s > 0 AND max_retries >= 0", name="ck_providers_timeouts"),
    )
    op.create_table(
        "llm_models",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("provider_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("model", sa.String(300), nullable=False),
        sa.Column("input_price_per_million", sa.Float(), nullable=False, server_default="0"),
        sa.Column("output_price_per_million", sa.Float(), nullable=False, server_default="0"),
        sa.Column("context_window", sa.Integer(), nullable=True),
        sa.Column("default_temperature", sa.Float(), nullable=True),
        sa.Column("observed_latency_s", sa.Float(), nullable=True),
        _now(),
        sa.PrimaryKeyConstraint("id", name="pk_llm_models"),
        sa.ForeignKeyConstraint(
            ["provider_id"],
            ["providers.id"],
            name="fk_llm_models_provider_id_providers",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("name", name="uq_llm_models_name"),
        sa.CheckConstraint(
            "input_price_per_million >= 0 AND output_price_per_million >= 0",
            name="ck_llm_models_prices",
        ),
    )
    op.create_index("ix_llm_models_provider_id", "llm_models", ["provider_id"])
    op.create_table(
        "llm_calls",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        _now(),
        sa.Column("purpose", sa.String(100), nullable=False, server_default=""),
        sa.Column("provider_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("model", sa.String(300), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=True),
        sa.Column("persona_id", sa.Integer(), nullable=True),
        sa.Column("comparison_id", sa.BigInteger(), nullable=True),
        sa.Column("related", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column("input_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Float(), nullable=False, server_default="0"),
        sa.Column("latency_s", sa.Float(), nullable=False, server_default="0"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("cache_hit", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_llm_calls"),
    )
    op.create_index("ix_llm_calls_session_id", "llm_calls", ["session_id"])
    op.create_index("ix_llm_calls_persona_id", "llm_calls", ["persona_id"])
    op.create_table(
        "llm_cache",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("result", postgresql.JSONB(), nullable=False),
        _now(),
        sa.Column("hits", sa.Integer(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("key", name="pk_llm_cache"),
    )


def downgrade() -> None:
    op.drop_table("llm_cache")
    op.drop_table("llm_calls")
    op.drop_table("llm_models")
    op.drop_table("providers")
