"""adaptive selection: how each comparison of a round was chosen

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Per queue position of the round (first_position + i): how the pair was chosen
    # (sessions.adaptive.SOURCE_*), and the probability with which the round's uniform
    # share drew a given pair: the inverse-probability weights of field-wide estimates.
    op.add_column(
        "adaptive_rounds", sa.Column("sources", postgresql.ARRAY(sa.SmallInteger()), nullable=True)
    )
    op.add_column("adaptive_rounds", sa.Column("random_propensity", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("adaptive_rounds", "random_propensity")
    op.drop_column("adaptive_rounds", "sources")
