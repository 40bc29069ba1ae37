"""single-answer grading: a comparison may hold one thread, graded alone, and its score

A session of mode ``single`` grades each thread alone: its work items are comparison rows
whose second thread and pillar are NULL, and the judge's answer is a number on a declared
scale (``score``, on comparisons and on each judge's vote), beside the per-criterion
scores in ``scores_a``. Pairwise rows keep both threads (a check says so).

Revision ID: 0019_single_grading
Revises: 0015
Create Date: 2026-12-04
"""

import sqlalchemy as sa

from alembic import op

revision = "0019_single_grading"
down_revision = "0018_probabilities"
branch_labels = None
depends_on = None

_OLD_MODES = "('pillar_sample', 'round_robin', 'free_for_all', 'imported', 'adaptive')"
_NEW_MODES = "('pillar_sample', 'round_robin', 'free_for_all', 'imported', 'adaptive', 'single')"


def upgrade() -> None:
    op.drop_constraint("ck_judge_sessions_mode", "judge_sessions", type_="check")
    op.create_check_constraint(
        "ck_judge_sessions_mode", "judge_sessions", f"comparison_mode IN {_NEW_MODES}"
    )
    op.alter_column("comparisons", "thread_b_id", existing_type=sa.Integer(), nullable=True)
    op.alter_column("comparisons", "pillar_b_id", existing_type=sa.Integer(), nullable=True)
    # Both sides or neither: a pair, or one thread graded alone.
    op.create_check_constraint(
        "ck_comparisons_second",
        "comparisons",
        "(thread_b_id IS NULL) = (pillar_b_id IS NULL)",
    )
    op.add_column("comparisons", sa.Column("score", sa.Float(), nullable=True))
    op.add_column("comparison_votes", sa.Column("score", sa.Float(), nullable=True))


def downgrade() -> None:
    # Graded single threads have no place in a pairs-only schema: their sessions go (their
    # comparisons and votes with them, by cascade).
    op.execute("DELETE FROM judge_sessions WHERE comparison_mode = 'single'")
    op.drop_column("comparison_votes", "score")
    op.drop_column("comparisons", "score")
    op.drop_constraint("ck_comparisons_second", "comparisons", type_="check")
    op.alter_column("comparisons", "pillar_b_id", existing_type=sa.Integer(), nullable=False)
    op.alter_column("comparisons", "thread_b_id", existing_type=sa.Integer(), nullable=False)
    op.drop_constraint("ck_judge_sessions_mode", "judge_sessions", type_="check")
    op.create_check_constraint(
        "ck_judge_sessions_mode", "judge_sessions", f"comparison_mode IN {_OLD_MODES}"
    )
