"""personas: settings, judge prompt versions, pairs, task outputs, iterations, decisions

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _created_at(name: str = "created_at") -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def _persona_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["persona_id"], ["personas.id"], name=f"fk_{table}_persona_id_personas", ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "personas",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("task_prompt", sa.Text(), nullable=False),
        sa.Column("current_version", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("task_model_id", sa.Integer(), nullable=True),
        sa.Column("judge_model_id", sa.Integer(), nullable=True),
        sa.Column("engineer_model_id", sa.Integer(), nullable=True),
        sa.Column("target_f1", sa.Float(), nullable=False, server_default="0.8"),
        sa.Column("max_iterations", sa.Integer(), nullable=False, server_default="20"),
        sa.Column("holdout_fraction", sa.Float(), nullable=False, server_default="0.25"),
        sa.Column("split_seed", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("budget_usd", sa.Float(), nullable=True),
        sa.Column("iteration_timeout_s", sa.Float(), nullable=False, server_default="600"),
        sa.Column("status", sa.String(20), nullable=False, server_default="draft"),
        sa.Column("status_reason", sa.Text(), nullable=True),
        sa.Column("template_key", sa.String(100), nullable=True),
        _created_at(),
        _created_at("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_personas"),
        sa.UniqueConstraint("name", name="uq_personas_name"),
        *(
            sa.ForeignKeyConstraint(
                [f"{role}_model_id"],
                ["llm_models.id"],
                name=f"fk_personas_{role}_model_id_llm_models",
                ondelete="SET NULL",
            )
            for role in ("task", "judge", "engineer")
        ),
        sa.CheckConstraint(
            "status IN ('draft', 'training', 'paused', 'trained', 'incomplete')",
            name="ck_personas_status",
        ),
        sa.CheckConstraint("target_f1 >= 0.70 AND target_f1 <= 0.95", name="ck_personas_target_f1"),
        sa.CheckConstraint("max_iterations >= 1", name="ck_personas_max_iterations"),
        sa.CheckConstraint(
            "holdout_fraction >= 0 AND holdout_fraction < 1", name="ck_personas_holdout"
        ),
        sa.CheckConstraint("budget_usd IS NULL OR budget_usd > 0", name="ck_personas_budget"),
        sa.CheckConstraint("iteration_timeout_s > 0", name="ck_personas_timeout"),
    )
    op.create_table(
        "judge_prompt_versions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("persona_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(10), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False, server_default=""),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name="pk_judge_prompt_versions"),
        _persona_fk("judge_prompt_versions"),
        sa.UniqueConstraint(
            "persona_id", "version", name="uq_judge_prompt_versions_persona_id_version"
        ),
        sa.CheckConstraint(
            "created_by IN ('ai', 'human')", name="ck_judge_prompt_versions_created_by"
        ),
    )
    op.create_table(
        "persona_pairs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("persona_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("input_b", sa.Text(), nullable=True),
        sa.Column("correct_output", sa.Text(), nullable=False),
        sa.Column("input_hash", sa.String(64), nullable=False),
        sa.Column("split", sa.String(20), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name="pk_persona_pairs"),
        _persona_fk("persona_pairs"),
        sa.UniqueConstraint(
            "persona_id", "input_hash", name="uq_persona_pairs_persona_id_input_hash"
        ),
        sa.CheckConstraint("split IN ('optimisation', 'holdout')", name="ck_persona_pairs_split"),
    )
    op.create_table(
        "persona_task_outputs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("persona_id", sa.Integer(), nullable=False),
        sa.Column("pair_id", sa.Integer(), nullable=False),
        sa.Column("prompt_hash", sa.String(64), nullable=False),
        sa.Column("input_hash", sa.String(64), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name="pk_persona_task_outputs"),
        _persona_fk("persona_task_outputs"),
        sa.ForeignKeyConstraint(
            ["pair_id"],
            ["persona_pairs.id"],
            name="fk_persona_task_outputs_pair_id_persona_pairs",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "persona_id",
            "pair_id",
            "prompt_hash",
            "input_hash",
            name="uq_persona_task_outputs_key",
        ),
    )
    op.create_index("ix_persona_task_outputs_pair_id", "persona_task_outputs", ["pair_id"])
    op.create_table(
        "persona_iterations",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("persona_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("prompt_version", sa.Integer(), nullable=False),
        sa.Column("metrics_optimisation", postgresql.JSONB(), nullable=True),
        sa.Column("metrics_holdout", postgresql.JSONB(), nullable=True),
        sa.Column("outcome", sa.String(20), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=False, server_default="0"),
        sa.Column("timings", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column("note", sa.Text(), nullable=True),
        _created_at("started_at"),
        _created_at("step_started_at"),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_persona_iterations"),
        _persona_fk("persona_iterations"),
        sa.UniqueConstraint("persona_id", "number", name="uq_persona_iterations_persona_id_number"),
        sa.CheckConstraint(
            "status IN ('generating', 'judging', 'awaiting_review', 'optimising', 'done')",
            name="ck_persona_iterations_status",
        ),
        sa.CheckConstraint(
            "outcome IS NULL OR outcome IN ('continue', 'converged', 'incomplete')",
            name="ck_persona_iterations_outcome",
        ),
    )
    op.create_table(
        "persona_decisions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("persona_id", sa.Integer(), nullable=False),
        sa.Column("iteration_id", sa.Integer(), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("pair_id", sa.Integer(), nullable=False),
        sa.Column("output_id", sa.Integer(), nullable=False),
        sa.Column("split", sa.String(20), nullable=False),
        sa.Column("judge_label", sa.String(10), nullable=False),
        sa.Column("judge_reasoning", sa.Text(), nullable=False, server_default=""),
        sa.Column("judge_confidence", sa.Float(), nullable=True),
        sa.Column("raw", sa.Text(), nullable=False, server_default=""),
        sa.Column("parse_error", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("prompt_version", sa.Integer(), nullable=False),
        sa.Column("human_agrees", sa.Boolean(), nullable=True),
        sa.Column("human_notes", sa.Text(), nullable=True),
        sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reviewed_by", sa.String(200), nullable=True),
        sa.Column("carried_forward", sa.Boolean(), nullable=False, server_default="false"),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name="pk_persona_decisions"),
        _persona_fk("persona_decisions"),
        sa.ForeignKeyConstraint(
            ["iteration_id"],
            ["persona_iterations.id"],
            name="fk_persona_decisions_iteration_id_persona_iterations",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["pair_id"],
            ["persona_pairs.id"],
            name="fk_persona_decisions_pair_id_persona_pairs",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["output_id"],
            ["persona_task_outputs.id"],
            name="fk_persona_decisions_output_id_persona_task_outputs",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "iteration_id", "pair_id", name="uq_persona_decisions_iteration_id_pair_id"
        ),
        sa.CheckConstraint(
            "judge_label IN ('correct', 'incorrect')", name="ck_persona_decisions_judge_label"
        ),
    )
    op.create_index(
        "ix_persona_decisions_persona_id_pair_id", "persona_decisions", ["persona_id", "pair_id"]
    )


def downgrade() -> None:
    for table in (
        "persona_decisions",
        "persona_iterations",
        "persona_task_outputs",
        "persona_pairs",
        "judge_prompt_versions",
        "personas",
    ):
        op.drop_table(table)
