"""stored figures: a finished session's results figures, computed once and kept

Revision ID: 0020_stored_figures
Revises: 0015
Create Date: 2026-12-04
"""

import sqlalchemy as sa

from alembic import op

revision = "0020_stored_figures"
down_revision = "0019_single_grading"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A cache of what analysis computed (analysis.stored): nothing else reads it, so the
    # downgrade may drop it whole, and sessions finished before it are computed on demand.
    op.create_table(
        "stored_figures",
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("options_hash", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("completed", sa.Integer(), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("compute_s", sa.Float(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["judge_sessions.id"],
            name="fk_stored_figures_session_id_judge_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "name", "options_hash", name="pk_stored_figures"),
    )


def downgrade() -> None:
    op.drop_table("stored_figures")
