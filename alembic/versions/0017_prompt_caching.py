"""prompt caching: cache prices per model, cached tokens and savings per call

A model may set its own prompt-cache prices (NULL: the provider kind's published default,
``providers.base.CACHE_PRICE_SHARES``), and each accounted call keeps the input tokens its
provider read from and wrote to the prompt cache, and what that saved. Adding columns with
constant defaults rewrites no row (PostgreSQL 11 and later).

Revision ID: 0017_prompt_caching
Revises: 0015
Create Date: 2026-12-04
"""

import sqlalchemy as sa

from alembic import op

revision = "0017_prompt_caching"
down_revision = "0016_batches"
branch_labels = None
depends_on = None

_CALL_COLUMNS = ("cached_input_tokens", "cache_write_tokens")


def upgrade() -> None:
    op.add_column(
        "llm_models", sa.Column("cached_input_price_per_million", sa.Float(), nullable=True)
    )
    op.add_column(
        "llm_models", sa.Column("cache_write_price_per_million", sa.Float(), nullable=True)
    )
    op.create_check_constraint(
        "ck_llm_models_cache_prices",
        "llm_models",
        "(cached_input_price_per_million IS NULL OR cached_input_price_per_million >= 0)"
        " AND (cache_write_price_per_million IS NULL OR cache_write_price_per_million >= 0)",
    )
    for name in _CALL_COLUMNS:
        op.add_column(
            "llm_calls",
            sa.Column(name, sa.Integer(), nullable=False, server_default="0"),
        )
    op.add_column(
        "llm_calls",
        sa.Column("cache_saving_usd", sa.Float(), nullable=False, server_default="0"),
    )
    # A session's prompt-cache sums by an index-only scan; empty until calls use the cache.
    op.create_index(
        "ix_llm_calls_prompt_cache",
        "llm_calls",
        ["session_id"],
        postgresql_include=["cached_input_tokens", "cache_write_tokens", "cache_saving_usd"],
        postgresql_where=sa.text("cached_input_tokens > 0 OR cache_write_tokens > 0"),
    )


def downgrade() -> None:
    op.drop_index("ix_llm_calls_prompt_cache", table_name="llm_calls")
    op.drop_column("llm_calls", "cache_saving_usd")
    for name in reversed(_CALL_COLUMNS):
        op.drop_column("llm_calls", name)
    op.drop_constraint("ck_llm_models_cache_prices", "llm_models", type_="check")
    op.drop_column("llm_models", "cache_write_price_per_million")
    op.drop_column("llm_models", "cached_input_price_per_million")
