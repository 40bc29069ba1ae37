"""adaptive tournaments: rounds

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

An adaptive session's comparisons are appended round by round. Each round is a row of
``adaptive_rounds`` (its queue positions, the fit and the stopping rule's decision when it
was planned); the primary key (session, round) means two processes can never append the
same round twice. ``judge_sessions.stop_reason`` is set when the rule or the budget stops
the session: until then a drained adaptive session waits for its next round instead of
completing.
"""

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_OLD_MODES = "('pillar_sample', 'round_robin', 'free_for_all', 'imported')"
_NEW_MODES = "('pillar_sample', 'round_robin', 'free_for_all', 'imported', 'adaptive')"


def upgrade() -> None:
    op.drop_constraint("ck_judge_sessions_mode", "judge_sessions", type_="check")
    op.create_check_constraint(
        "ck_judge_sessions_mode", "judge_sessions", f"comparison_mode IN {_NEW_MODES}"
    )
    op.add_column("judge_sessions", sa.Column("stop_reason", sa.Text(), nullable=True))
    op.create_table(
        "adaptive_rounds",
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("first_position", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("spent", sa.Integer(), nullable=False),
        sa.Column("results", sa.Integer(), nullable=False),
        sa.Column("width", sa.Float(), nullable=True),
        sa.Column("progress", sa.Text(), nullable=False, server_default=""),
        sa.Column("done", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("needed", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("stop", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("theta", postgresql.JSONB(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("session_id", "round", name="pk_adaptive_rounds"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["judge_sessions.id"],
            name="fk_adaptive_rounds_session_id_judge_sessions",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "size >= 0 AND spent >= 0 AND round >= 0", name="ck_adaptive_rounds_counts"
        ),
    )


def downgrade() -> None:
    op.drop_table("adaptive_rounds")
    op.drop_column("judge_sessions", "stop_reason")
    op.execute("DELETE FROM judge_sessions WHERE comparison_mode = 'adaptive'")
    op.drop_constraint("ck_judge_sessions_mode", "judge_sessions", type_="check")
    op.create_check_constraint(
        "ck_judge_sessions_mode", "judge_sessions", f"comparison_mode IN {_OLD_MODES}"
    )
