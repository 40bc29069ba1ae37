"""judge panels: a session may name several judges (its panel) with an aggregation rule;
each member's vote on a comparison is kept in comparison_votes; a comparison says how many
members voted on its aggregate verdict

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # {"rule", "members": [{"model_id", "label", "weight"}], "cascade": {"rule", "threshold"}}
    op.add_column("judge_sessions", sa.Column("panel", postgresql.JSONB(), nullable=True))
    op.add_column("comparisons", sa.Column("votes_cast", sa.SmallInteger(), nullable=True))
    op.add_column("comparisons", sa.Column("votes_asked", sa.SmallInteger(), nullable=True))
    op.create_table(
        "comparison_votes",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("comparison_id", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("member", sa.SmallInteger(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("judge", sa.String(200), nullable=False, server_default=""),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("winner", sa.String(3), nullable=True),
        sa.Column("strength", sa.Float(), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("scores_a", postgresql.JSONB(), nullable=True),
        sa.Column("scores_b", postgresql.JSONB(), nullable=True),
        sa.Column("reasoning", sa.Text(), nullable=True),
        sa.Column("raw_response", sa.Text(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Float(), nullable=False, server_default="0"),
        sa.Column("latency_s", sa.Float(), nullable=True),
        sa.Column("cache_hit", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_comparison_votes"),
        sa.ForeignKeyConstraint(
            ["comparison_id"],
            ["comparisons.id"],
            name="fk_comparison_votes_comparison_id_comparisons",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["judge_sessions.id"],
            name="fk_comparison_votes_session_id_judge_sessions",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["llm_models.id"],
            name="fk_comparison_votes_model_id_llm_models",
            ondelete="SET NULL",
        ),
        sa.CheckConstraint(
            "status IN ('voted', 'missing', 'skipped')", name="ck_comparison_votes_status"
        ),
        sa.CheckConstraint(
            "winner IS NULL OR winner IN ('A', 'B', 'TIE')", name="ck_comparison_votes_winner"
        ),
        sa.UniqueConstraint(
            "comparison_id", "member", name="uq_comparison_votes_comparison_id_member"
        ),
    )
    op.create_index("ix_comparison_votes_session_id", "comparison_votes", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_comparison_votes_session_id", table_name="comparison_votes")
    op.drop_table("comparison_votes")
    op.drop_column("comparisons", "votes_asked")
    op.drop_column("comparisons", "votes_cast")
    op.drop_column("judge_sessions", "panel")
