"""ranking rigor: per-thread style features

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
