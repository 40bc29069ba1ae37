"""persona batches: a persona's judge labels through the provider's batch API

Revision ID: 0021_persona_batches
Revises: 0020_stored_figures
Create Date: 2026-12-04
"""

import sqlalchemy as sa

from alembic import op

revision = "0021_persona_batches"
down_revision = "0020_stored_figures"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # How a persona's training sends its judge's labels: live (as before) or batch, and
    # what happens when the judge's provider has no batch API (chosen at start/resume).
    op.add_column(
        "personas",
        sa.Column("execution", sa.String(10), nullable=False, server_default="live"),
    )
    op.add_column(
        "personas",
        sa.Column("batch_fallback", sa.String(10), nullable=False, server_default="none"),
    )
    # A batch job belongs to a session or to a persona's iteration: exactly one of them.
    op.alter_column("provider_batches", "session_id", existing_type=sa.Integer(), nullable=True)
    op.add_column(
        "provider_batches",
        sa.Column(
            "persona_id",
            sa.Integer(),
            sa.ForeignKey("personas.id", ondelete="CASCADE"),
            nullable=True,
        ),
    )
    op.add_column(
        "provider_batches",
        sa.Column(
            "iteration_id",
            sa.Integer(),
            sa.ForeignKey("persona_iterations.id", ondelete="CASCADE"),
            nullable=True,
        ),
    )
    op.create_index(
        "ix_provider_batches_persona_open",
        "provider_batches",
        ["persona_id"],
        postgresql_where=sa.text("applied_at IS NULL"),
    )
    op.create_check_constraint(
        op.f("ck_provider_batches_one_owner"),
        "provider_batches",
        "(session_id IS NULL) <> (persona_id IS NULL) "
        "AND (persona_id IS NULL) = (iteration_id IS NULL)",
    )
    # A persona job's request answers a pair, not a comparison.
    op.alter_column(
        "provider_batch_requests", "comparison_id", existing_type=sa.BigInteger(), nullable=True
    )
    op.add_column("provider_batch_requests", sa.Column("pair_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    # Persona jobs cannot be kept without their owner columns: they go (their results, once
    # applied, are the persona's stored decisions).
    op.execute("DELETE FROM provider_batches WHERE persona_id IS NOT NULL")
    op.drop_column("provider_batch_requests", "pair_id")
    op.alter_column(
        "provider_batch_requests", "comparison_id", existing_type=sa.BigInteger(), nullable=False
    )
    op.drop_constraint(op.f("ck_provider_batches_one_owner"), "provider_batches", type_="check")
    op.drop_index("ix_provider_batches_persona_open", table_name="provider_batches")
    op.drop_column("provider_batches", "iteration_id")
    op.drop_column("provider_batches", "persona_id")
    op.alter_column("provider_batches", "session_id", existing_type=sa.Integer(), nullable=False)
    op.drop_column("personas", "batch_fallback")
    op.drop_column("personas", "execution")
