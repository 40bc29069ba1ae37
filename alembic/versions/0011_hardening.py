"""hardening: retention, rate shares

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

import sqlalchemy as sa

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Retention deletes by age in small batches: each batch finds its rows by index.
    op.create_index("ix_llm_calls_created_at", "llm_calls", ["created_at"])
    op.create_index("ix_llm_cache_created_at", "llm_cache", ["created_at"])
    # One row per process making model calls: provider rate limits split among the live ones.
    op.create_table(
        "llm_processes",
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column(
            "heartbeat_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name="pk_llm_processes"),
    )


def downgrade() -> None:
    op.drop_table("llm_processes")
    op.drop_index("ix_llm_cache_created_at", table_name="llm_cache")
    op.drop_index("ix_llm_calls_created_at", table_name="llm_calls")
