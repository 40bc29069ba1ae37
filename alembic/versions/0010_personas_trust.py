"""personas you can trust: answers, human labels, splits

Three splits replace the held-out one: the old held-out pairs decided convergence, so
they become the selection split (and their decisions with them); the calibration split
starts empty, so the gate fails closed until the persona is re-split (a draft is, on its
next start) or given new pairs. Pairs may carry their own answer; their human labels
live in ``persona_pair_labels`` (one per annotator).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

SPLITS3 = "split IN ('optimisation', 'selection', 'calibration')"


def upgrade() -> None:
    # personas: convergence rule, judge kind
    op.add_column(
        "personas", sa.Column("min_per_class", sa.Integer(), nullable=False, server_default="10")
    )
    op.add_column(
        "personas",
        sa.Column("convergence_basis", sa.String(20), nullable=False, server_default="lower_bound"),
    )
    op.add_column(
        "personas", sa.Column("judge_kind", sa.String(20), nullable=False, server_default="llm")
    )
    op.add_column("personas", sa.Column("embedding_model_id", sa.Integer(), nullable=True))
    op.create_foreign_key(
        "fk_personas_embedding_model_id_llm_models",
        "personas",
        "llm_models",
        ["embedding_model_id"],
        ["id"],
        ondelete="SET NULL",
    )
    op.add_column("personas", sa.Column("similarity_threshold", sa.Float(), nullable=True))
    op.add_column("personas", sa.Column("metrics_annotator", sa.String(200), nullable=True))
    op.create_check_constraint("ck_personas_min_per_class", "personas", "min_per_class >= 1")
    op.create_check_constraint(
        "ck_personas_basis", "personas", "convergence_basis IN ('lower_bound', 'point')"
    )
    op.create_check_constraint(
        "ck_personas_judge_kind", "personas", "judge_kind IN ('llm', 'embedding')"
    )

    # pairs: three splits, own answers
    op.drop_constraint("ck_persona_pairs_split", "persona_pairs", type_="check")
    op.execute("UPDATE persona_pairs SET split = 'selection' WHERE split = 'holdout'")
    op.create_check_constraint("ck_persona_pairs_split", "persona_pairs", SPLITS3)
    op.add_column("persona_pairs", sa.Column("answer", sa.Text(), nullable=True))
    op.execute("UPDATE persona_decisions SET split = 'selection' WHERE split = 'holdout'")

    op.create_table(
        "persona_pair_labels",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("persona_id", sa.Integer(), nullable=False),
        sa.Column("pair_id", sa.Integer(), nullable=False),
        sa.Column("annotator", sa.String(200), nullable=False),
        sa.Column("label", sa.String(10), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_persona_pair_labels"),
        sa.ForeignKeyConstraint(
            ["persona_id"],
            ["personas.id"],
            name="fk_persona_pair_labels_persona_id_personas",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["pair_id"],
            ["persona_pairs.id"],
            name="fk_persona_pair_labels_pair_id_persona_pairs",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "pair_id", "annotator", name="uq_persona_pair_labels_pair_id_annotator"
        ),
        sa.CheckConstraint(
            "label IN ('correct', 'incorrect')", name="ck_persona_pair_labels_label"
        ),
    )
    op.create_index("ix_persona_pair_labels_persona_id", "persona_pair_labels", ["persona_id"])

    # decisions: bulk labels, pre-filled labels, similarity
    for name, type_, default in (
        ("bulk", sa.Boolean(), "false"),
        ("prefilled", sa.Boolean(), "false"),
    ):
        op.add_column(
            "persona_decisions",
            sa.Column(name, type_, nullable=False, server_default=default),
        )
    op.add_column("persona_decisions", sa.Column("similarity", sa.Float(), nullable=True))

    # iterations: selection (was held-out) and calibration metrics, convergence status
    op.alter_column("persona_iterations", "metrics_holdout", new_column_name="metrics_selection")
    op.add_column(
        "persona_iterations",
        sa.Column("metrics_calibration", postgresql.JSONB(), nullable=True),
    )
    op.add_column("persona_iterations", sa.Column("convergence", postgresql.JSONB(), nullable=True))
    # prompt versions: which cases and notes a rewrite addressed
    op.add_column(
        "judge_prompt_versions",
        sa.Column("addressed", postgresql.JSONB(), nullable=False, server_default="[]"),
    )


def downgrade() -> None:
    op.drop_column("judge_prompt_versions", "addressed")
    op.drop_column("persona_iterations", "convergence")
    op.drop_column("persona_iterations", "metrics_calibration")
    op.alter_column("persona_iterations", "metrics_selection", new_column_name="metrics_holdout")
    for name in ("similarity", "prefilled", "bulk"):
        op.drop_column("persona_decisions", name)
    op.drop_index("ix_persona_pair_labels_persona_id", "persona_pair_labels")
    op.drop_table("persona_pair_labels")
    op.execute("UPDATE persona_decisions SET split = 'holdout' WHERE split <> 'optimisation'")
    op.drop_column("persona_pairs", "answer")
    op.drop_constraint("ck_persona_pairs_split", "persona_pairs", type_="check")
    op.execute("UPDATE persona_pairs SET split = 'holdout' WHERE split <> 'optimisation'")
    op.create_check_constraint(
        "ck_persona_pairs_split", "persona_pairs", "split IN ('optimisation', 'holdout')"
    )
    for name in ("judge_kind", "basis", "min_per_class"):
        op.drop_constraint(f"ck_personas_{name}", "personas", type_="check")
    op.drop_constraint("fk_personas_embedding_model_id_llm_models", "personas", type_="foreignkey")
    for name in (
        "metrics_annotator",
        "similarity_threshold",
        "embedding_model_id",
        "judge_kind",
        "convergence_basis",
        "min_per_class",
    ):
        op.drop_column("personas", name)
