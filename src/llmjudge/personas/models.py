"""Judge personas: settings, versioned judge prompts, training pairs, and the loop's state.

Every step of the calibration loop is persisted (task outputs, judge decisions, human
reviews, iteration metrics), so a restarted process resumes from the last stored result.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from llmjudge.core.personas.keys import pair_hash
from llmjudge.infra.db.base import Base, created_at_column, owned_by, refers_to, updated_at_column

PERSONA_STATUSES = ("draft", "training", "paused", "trained", "incomplete")
ITERATION_STATUSES = ("generating", "judging", "awaiting_review", "optimising", "done")
ITERATION_OUTCOMES = ("continue", "converged", "incomplete")
SPLITS = ("optimisation", "selection", "calibration")
JUDGE_KINDS = ("llm", "embedding")
BASES = ("lower_bound", "point")
LABELS = ("correct", "incorrect")
AUTHORS = ("ai", "human")


class Persona(Base):
    __tablename__ = "personas"
    __table_args__ = (
        CheckConstraint(f"status IN {PERSONA_STATUSES!r}", name="status"),
        CheckConstraint("target_f1 >= 0.70 AND target_f1 <= 0.95", name="target_f1"),
        CheckConstraint("max_iterations >= 1", name="max_iterations"),
        CheckConstraint("holdout_fraction >= 0 AND holdout_fraction < 1", name="selection"),
        CheckConstraint("budget_usd IS NULL OR budget_usd > 0", name="budget"),
        CheckConstraint("iteration_timeout_s > 0", name="timeout"),
        CheckConstraint("min_per_class >= 1", name="min_per_class"),
        CheckConstraint(f"convergence_basis IN {BASES!r}", name="basis"),
        CheckConstraint(f"judge_kind IN {JUDGE_KINDS!r}", name="judge_kind"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    task_prompt: Mapped[str] = mapped_column(Text)
    # The judge prompt's text lives in judge_prompt_versions; this is the version in use.
    current_version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # Nullable so deleting a model never deletes a persona; start() refuses a missing model.
    task_model_id: Mapped[int | None] = refers_to("llm_models")
    judge_model_id: Mapped[int | None] = refers_to("llm_models")
    engineer_model_id: Mapped[int | None] = refers_to("llm_models")
    target_f1: Mapped[float] = mapped_column(Float, default=0.8, server_default="0.8")
    max_iterations: Mapped[int] = mapped_column(Integer, default=20, server_default="20")
    holdout_fraction: Mapped[float] = mapped_column(Float, default=0.25, server_default="0.25")
    split_seed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    budget_usd: Mapped[float | None] = mapped_column(Float)
    iteration_timeout_s: Mapped[float] = mapped_column(Float, default=600.0, server_default="600")
    # How training sends the judge's labels: "live" or "batch" (the provider's batch API,
    # ``batch_labels``), and "live" or "none" when the judge's provider has none; chosen
    # at start and resume.
    execution: Mapped[str] = mapped_column(String(10), default="live", server_default="live")
    batch_fallback: Mapped[str] = mapped_column(String(10), default="none", server_default="none")
    status: Mapped[str] = mapped_column(String(20), default="draft", server_default="draft")
    # Why the persona is paused, incomplete or failed, in words for the page.
    status_reason: Mapped[str | None] = mapped_column(Text)
    template_key: Mapped[str | None] = mapped_column(String(100))
    # Convergence needs this many selection pairs of each human class (ConvergenceRule).
    min_per_class: Mapped[int] = mapped_column(Integer, default=10, server_default="10")
    # Compare the selection F1's lower bound (default) or its point estimate with the target.
    convergence_basis: Mapped[str] = mapped_column(
        String(20), default="lower_bound", server_default="lower_bound"
    )
    # "llm": the judge model labels each answer; "embedding": cosine similarity to the
    # reference against a threshold fitted on the optimisation split.
    judge_kind: Mapped[str] = mapped_column(String(20), default="llm", server_default="llm")
    # A provider's embeddings model; None with judge_kind "embedding" is the local model.
    embedding_model_id: Mapped[int | None] = refers_to("llm_models")
    similarity_threshold: Mapped[float | None] = mapped_column(Float)
    # Whose labels the metrics use when pairs carry several; None is the majority.
    metrics_annotator: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = updated_at_column()


class JudgePromptVersion(Base):
    __tablename__ = "judge_prompt_versions"
    __table_args__ = (
        UniqueConstraint("persona_id", "version"),
        CheckConstraint(f"created_by IN {AUTHORS!r}", name="created_by"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    persona_id: Mapped[int] = owned_by("personas")
    version: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(10))
    rationale: Mapped[str] = mapped_column(Text, default="", server_default="")
    # The cases (pair ids) and reviewer notes the engineer's rewrite says it addressed.
    addressed: Mapped[list[Any]] = mapped_column(JSONB, default=list, server_default="[]")
    created_at: Mapped[datetime] = created_at_column()


def _pair_hash_of_row(context: Any) -> str:
    row = context.get_current_parameters()
    return pair_hash(row["input"], row.get("input_b"), row.get("system"), row.get("answer"))


class PersonaPair(Base):
    """One (input, correct_output) training pair, the answer to judge, and its split.

    One input may appear in several pairs, one per answer (several systems answering the
    same question); all of them share the input's split."""

    __tablename__ = "persona_pairs"
    __table_args__ = (
        UniqueConstraint("persona_id", "pair_hash"),
        Index("ix_persona_pairs_persona_id_input_hash", "persona_id", "input_hash"),
        CheckConstraint(f"split IN {SPLITS!r}", name="split"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    persona_id: Mapped[int] = owned_by("personas")
    position: Mapped[int] = mapped_column(Integer)
    input: Mapped[str] = mapped_column(Text)
    input_b: Mapped[str | None] = mapped_column(Text)
    correct_output: Mapped[str] = mapped_column(Text)
    # The output to judge, when the user brings it: then no task model is called.
    answer: Mapped[str | None] = mapped_column(Text)
    # Which system gave the answer, when the upload names it (then it identifies the answer).
    system: Mapped[str | None] = mapped_column(String(200))
    # sha256 of (input, input_b): the question, shared by its answers (splits group by it).
    input_hash: Mapped[str] = mapped_column(String(64))
    # keys.pair_hash: the input and whose answer; duplicates are refused by it. Derived from
    # the row when an insert does not give it, so no writer can store a wrong identity.
    pair_hash: Mapped[str] = mapped_column(String(64), default=_pair_hash_of_row)
    split: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = created_at_column()


class PersonaPairLabel(Base):
    """One annotator's human label of a pair's answer (uploaded with the pair)."""

    __tablename__ = "persona_pair_labels"
    __table_args__ = (
        UniqueConstraint("pair_id", "annotator"),
        CheckConstraint(f"label IN {LABELS!r}", name="label"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    persona_id: Mapped[int] = owned_by("personas", index=True)
    pair_id: Mapped[int] = owned_by("persona_pairs")
    annotator: Mapped[str] = mapped_column(String(200))
    label: Mapped[str] = mapped_column(String(10))
    created_at: Mapped[datetime] = created_at_column()


class TaskOutput(Base):
    """The task model's answer, reused while the prompt (and model) and input are unchanged."""

    __tablename__ = "persona_task_outputs"
    __table_args__ = (
        UniqueConstraint(
            "persona_id",
            "pair_id",
            "prompt_hash",
            "input_hash",
            name="uq_persona_task_outputs_key",  # the convention's name is too long
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    persona_id: Mapped[int] = owned_by("personas")
    pair_id: Mapped[int] = owned_by("persona_pairs", index=True)
    # sha256 of (task model id, task prompt): a new model must answer again too.
    prompt_hash: Mapped[str] = mapped_column(String(64))
    input_hash: Mapped[str] = mapped_column(String(64))
    output: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = created_at_column()


class PersonaIteration(Base):
    __tablename__ = "persona_iterations"
    __table_args__ = (
        UniqueConstraint("persona_id", "number"),
        CheckConstraint(f"status IN {ITERATION_STATUSES!r}", name="status"),
        CheckConstraint(f"outcome IS NULL OR outcome IN {ITERATION_OUTCOMES!r}", name="outcome"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    persona_id: Mapped[int] = owned_by("personas")
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default="generating")
    prompt_version: Mapped[int] = mapped_column(Integer)
    # Metrics.to_dict() of each split, written once every decision is reviewed.
    metrics_optimisation: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    metrics_selection: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # The calibration split: only measured (TPR/TNR for the gate), never decides anything.
    metrics_calibration: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # convergence_status() of the selection split, as shown on the pages.
    convergence: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    outcome: Mapped[str | None] = mapped_column(String(20))
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # Seconds per step (generate, judge, review, optimise) as they complete.
    timings: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict, server_default="{}")
    # Last failure (timeout, provider error) or the engineer's note when it kept the prompt.
    note: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = created_at_column()
    step_started_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class PersonaDecision(Base):
    """The judge's label of one answer in one iteration, and the human's review of it."""

    __tablename__ = "persona_decisions"
    __table_args__ = (
        UniqueConstraint("iteration_id", "pair_id"),
        CheckConstraint(f"judge_label IN {LABELS!r}", name="judge_label"),
        Index("ix_persona_decisions_persona_id_pair_id", "persona_id", "pair_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    persona_id: Mapped[int] = owned_by("personas")
    iteration_id: Mapped[int] = owned_by("persona_iterations")
    iteration: Mapped[int] = mapped_column(Integer)
    pair_id: Mapped[int] = owned_by("persona_pairs")
    output_id: Mapped[int] = owned_by("persona_task_outputs")
    split: Mapped[str] = mapped_column(String(20))
    judge_label: Mapped[str] = mapped_column(String(10))
    judge_reasoning: Mapped[str] = mapped_column(Text, default="", server_default="")
    judge_confidence: Mapped[float | None] = mapped_column(Float)
    raw: Mapped[str] = mapped_column(Text, default="", server_default="")
    # The judge's reply could not be read: stored as "incorrect" for the human to review.
    parse_error: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    prompt_version: Mapped[int] = mapped_column(Integer)
    human_agrees: Mapped[bool | None] = mapped_column(Boolean)
    human_notes: Mapped[str | None] = mapped_column(Text)
    reviewed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Who gave the label (username, or the one who gave it first when carried forward).
    reviewed_by: Mapped[str | None] = mapped_column(String(200))
    carried_forward: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    # The review came from a bulk "agree with all": clicked, not checked.
    bulk: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    # The review was filled in from the pair's uploaded human label(s).
    prefilled: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    # The embedding judge's cosine similarity of the answer to the reference.
    similarity: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = created_at_column()
