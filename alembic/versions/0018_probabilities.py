"""probabilities: P(A is better) beside a judge's hard verdict

A judge that answers with token log probabilities (a ``logprobs`` verdict format), or an
imported file's ``preference`` column, gives the probability that the answer shown as A is
better. It is stored on the comparison (a single judge's, or a panel's mean) and on each
judge's vote; NULL where only a hard verdict exists, so every stored row reads as before.

Revision ID: 0018_probabilities
Revises: 0015
Create Date: 2026-12-04
"""

import sqlalchemy as sa

from alembic import op

revision = "0018_probabilities"
down_revision = "0017_prompt_caching"
branch_labels = None
depends_on = None

_TABLES = ("comparisons", "comparison_votes")


def upgrade() -> None:
    for table in _TABLES:
        op.add_column(table, sa.Column("prob_a", sa.Float(), nullable=True))
        op.create_check_constraint(
            op.f(f"ck_{table}_prob_a"), table, "prob_a IS NULL OR (prob_a >= 0 AND prob_a <= 1)"
        )


def downgrade() -> None:
    for table in _TABLES:
        op.drop_constraint(op.f(f"ck_{table}_prob_a"), table, type_="check")
        op.drop_column(table, "prob_a")
