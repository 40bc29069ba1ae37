"""Persona request and response models."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_validator,
    model_validator,
)

from llmjudge.core.personas.templates import DEFAULT_HOLDOUT_FRACTION, DEFAULT_TARGET_F1

PersonaStatus = Literal["draft", "training", "paused", "trained", "incomplete"]
IterationStatus = Literal["generating", "judging", "awaiting_review", "optimising", "done"]
Split = Literal["optimisation", "selection", "calibration"]
# What a `split` query accepts: the splits, and `holdout`, the selection split's name in
# the first release, kept as a deprecated alias for one release (README "Deprecated names").
SplitQuery = Literal["optimisation", "selection", "calibration", "holdout"]
SPLIT_QUERY_HELP = "one split only; `holdout` is a deprecated alias of `selection`"


def canonical_split(split: SplitQuery | None) -> Split | None:
    """The split a query names, its deprecated alias read as the split it became."""
    return "selection" if split == "holdout" else split


def deprecated_alias(name: str) -> Any:
    """A read-only response field repeating ``name`` under its first-release name, for old
    clients (one release; README "Deprecated names"); OpenAPI marks it deprecated.
    (Not pydantic's own ``deprecated=``: it warns on every serialisation.)"""
    return computed_field(
        description=f"deprecated alias of `{name}` (its name in the first release); "
        "removed in the next release",
        json_schema_extra={"deprecated": True},
    )


Label = Literal["correct", "incorrect"]
JudgeKind = Literal["llm", "embedding"]
Basis = Literal["lower_bound", "point"]

TARGET_F1_MIN, TARGET_F1_MAX = 0.70, 0.95
MAX_PROMPT_CHARS = 100_000


def not_blank(message: str) -> Callable[[str], str]:
    """A field validator that refuses whitespace-only text with ``message``."""

    def check(v: str) -> str:
        if not v.strip():
            raise ValueError(message)
        return v

    return check


def _strip_name(v: str) -> str:
    v = v.strip()
    if not v:
        raise ValueError("name must not be blank")
    return v


class PersonaSettings(BaseModel):
    """Settings shared by create and update (all optional in an update)."""

    target_f1: float = Field(
        default=DEFAULT_TARGET_F1,
        ge=TARGET_F1_MIN,
        le=TARGET_F1_MAX,
        description="F1 of the judge against the human at which training stops (0.70-0.95)",
    )
    max_iterations: int = Field(default=20, ge=1, le=200)
    holdout_fraction: float = Field(
        default=DEFAULT_HOLDOUT_FRACTION,
        ge=0.0,
        le=0.5,
        description="share of pairs kept out of prompt optimisation to measure F1 honestly; "
        "0 turns the split off",
    )
    budget_usd: float | None = Field(
        default=None, gt=0, description="pause training with 'budget reached' at this spend"
    )
    iteration_timeout_s: float = Field(
        default=600.0,
        ge=1,
        le=86_400,
        description="time allowed for the automatic steps of one iteration (not human review)",
    )
    min_per_class: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="selection pairs of each human class (correct, incorrect) needed before "
        "the persona may converge",
    )
    convergence_basis: Basis = Field(
        default="lower_bound",
        description="compare the selection F1's 95% lower bound (default) or its point "
        "estimate with the target",
    )
    metrics_annotator: str | None = Field(
        default=None,
        max_length=200,
        description="with several annotators per pair: whose labels the metrics use "
        "(default: the majority)",
    )


class PersonaIn(PersonaSettings):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=5000)
    task_prompt: str = Field(
        min_length=1, max_length=MAX_PROMPT_CHARS, description="uses the {input} placeholder"
    )
    judge_prompt: str = Field(
        min_length=1,
        max_length=MAX_PROMPT_CHARS,
        description="uses {input}, {correct_output} and {answer}; asks for JSON "
        '{"label": "correct"|"incorrect", "reasoning": "..."}',
    )
    task_model_id: int | None = Field(
        default=None, description="may be omitted when every training pair brings its answer"
    )
    judge_model_id: int | None = Field(
        default=None, description="the LLM judge; not needed by an embedding judge"
    )
    engineer_model_id: int | None = Field(
        default=None, description="rewrites the judge prompt; not needed by an embedding judge"
    )
    judge_kind: JudgeKind = Field(
        default="llm",
        description="llm: the judge model labels each answer; embedding: cosine similarity "
        "to the reference against a threshold fitted on the optimisation split",
    )
    embedding_model_id: int | None = Field(
        default=None,
        description="an embeddings model of a provider; none is the bundled local model",
    )

    _name = field_validator("name")(_strip_name)

    @model_validator(mode="after")
    def judge_differs(self) -> PersonaIn:
        if self.judge_model_id is not None and self.judge_model_id == self.task_model_id:
            raise ValueError("the judge model must differ from the task model")
        if self.judge_kind == "llm":
            missing = [
                name
                for name in ("judge_model_id", "engineer_model_id")
                if getattr(self, name) is None
            ]
            if missing:
                raise ValueError(f"an LLM judge needs {' and '.join(missing)}")
        return self


class PersonaPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=5000)
    task_prompt: str | None = Field(default=None, min_length=1, max_length=MAX_PROMPT_CHARS)
    task_model_id: int | None = None
    judge_model_id: int | None = None
    engineer_model_id: int | None = None
    target_f1: float | None = Field(default=None, ge=TARGET_F1_MIN, le=TARGET_F1_MAX)
    max_iterations: int | None = Field(default=None, ge=1, le=200)
    holdout_fraction: float | None = Field(default=None, ge=0.0, le=0.5)
    budget_usd: float | None = Field(default=None, gt=0)
    iteration_timeout_s: float | None = Field(default=None, ge=1, le=86_400)
    min_per_class: int | None = Field(default=None, ge=1, le=10_000)
    convergence_basis: Basis | None = None
    metrics_annotator: str | None = Field(default=None, max_length=200)
    embedding_model_id: int | None = None

    @field_validator("name")
    @classmethod
    def strip_name(cls, v: str | None) -> str | None:
        return None if v is None else _strip_name(v)


class FromTemplateIn(BaseModel):
    """Optional overrides when creating a persona from a template."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    task_model_id: int | None = None
    judge_model_id: int | None = None
    engineer_model_id: int | None = None


class TemplateOut(BaseModel):
    key: str
    name: str
    description: str
    pairs: int


class CloneIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)


class PersonaOut(BaseModel):
    id: int
    name: str
    description: str
    task_prompt: str
    judge_prompt: str
    current_version: int
    task_model_id: int | None
    judge_model_id: int | None
    engineer_model_id: int | None
    target_f1: float
    max_iterations: int
    holdout_fraction: float
    split_seed: int
    budget_usd: float | None
    iteration_timeout_s: float
    execution: Literal["live", "batch"] = Field(
        default="live", description="how training sends its judge's labels"
    )
    batch_fallback: Literal["none", "live"] = "none"
    status: PersonaStatus
    status_reason: str | None
    template_key: str | None
    min_per_class: int = 10
    convergence_basis: Basis = "lower_bound"
    judge_kind: JudgeKind = "llm"
    embedding_model_id: int | None = None
    similarity_threshold: float | None = None
    metrics_annotator: str | None = None
    pair_count: int = 0
    current_iteration: int | None = None
    created_at: datetime
    updated_at: datetime


class PairOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    position: int
    input: str
    input_b: str | None
    correct_output: str
    answer: str | None = Field(default=None, description="the output to judge, if uploaded")
    system: str | None = Field(
        default=None, description="which system gave the answer, if the upload names it"
    )
    split: Split
    labels: dict[str, Label] = Field(
        default_factory=dict, description="uploaded human labels of the answer, by annotator"
    )


class PairRow(BaseModel):
    """One uploaded pair (the CSV rows of one input and answer)."""

    model_config = ConfigDict(extra="forbid")
    input: str = Field(min_length=1)
    correct_output: str = Field(min_length=1)
    input_b: str | None = None
    answer: str | None = None
    system: str | None = Field(default=None, max_length=200)
    labels: dict[str, Label] = Field(default_factory=dict)

    _not_blank = field_validator("input", "correct_output")(not_blank("must not be blank"))


class PairUploadResult(BaseModel):
    preview: bool
    created: int = Field(description="pairs stored (0 for a preview)")
    skipped: int = Field(description="rows identical to pairs already stored")
    total_pairs: int = Field(description="pairs of the persona after this upload")
    rows: list[PairRow] = Field(description="the first rows of the file (preview only)")
    warnings: list[str]


class PromptVersionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    version: int
    text: str
    created_by: Literal["ai", "human"]
    rationale: str
    addressed: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the cases (pair ids) and reviewer notes the rewrite says it addressed",
    )
    created_at: datetime


class PromptEditIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    rationale: str = Field(default="", max_length=5000)


class DiffOpcode(BaseModel):
    tag: Literal["equal", "replace", "delete", "insert"]
    a_start: int
    a_end: int
    b_start: int
    b_end: int
    a_lines: list[str]
    b_lines: list[str]


class PromptDiffOut(BaseModel):
    a: int
    b: int
    unified: str = Field(description="difflib unified diff of a -> b")
    opcodes: list[DiffOpcode] = Field(description="line opcodes for a side-by-side view")


class IntervalOut(BaseModel):
    value: float
    low: float
    high: float
    n: int = Field(description="what the figure is a share of")
    method: str = Field(description="wilson or bayesian-bootstrap")


class MetricsOut(BaseModel):
    precision: float
    recall: float
    f1: float
    kappa: float
    accuracy: float
    n: int
    confusion: dict[str, int]
    intervals: dict[str, IntervalOut] | None = Field(
        default=None, description="each figure's count and 95% interval"
    )


class IterationOut(BaseModel):
    number: int
    status: IterationStatus
    prompt_version: int
    outcome: Literal["continue", "converged", "incomplete"] | None
    metrics_optimisation: MetricsOut | None
    metrics_selection: MetricsOut | None
    metrics_calibration: MetricsOut | None = Field(
        default=None, description="only measured, for the gate; never decides anything"
    )
    convergence: dict[str, Any] | None = Field(
        default=None, description="the convergence status on the selection split"
    )
    cost_usd: float
    timings: dict[str, float]
    note: str | None
    decisions: int
    pending_review: int
    started_at: datetime
    finished_at: datetime | None

    @deprecated_alias("metrics_selection")
    @property
    def metrics_holdout(self) -> MetricsOut | None:
        return self.metrics_selection


class DecisionOut(BaseModel):
    id: int
    iteration: int
    pair_id: int
    split: Split
    input: str
    input_b: str | None
    correct_output: str
    answer: str
    system: str | None = Field(default=None, description="which system gave the answer, if named")
    judge_label: Label
    judge_reasoning: str
    judge_confidence: float | None
    parse_error: bool
    prompt_version: int
    human_agrees: bool | None
    human_notes: str | None
    reviewed_at: datetime | None
    reviewed_by: str | None = None
    carried_forward: bool
    bulk: bool = Field(default=False, description="labelled by a bulk 'agree with all'")
    prefilled: bool = Field(default=False, description="labelled from uploaded human labels")
    similarity: float | None = Field(default=None, description="the embedding judge's cosine")
    to_check: bool = Field(
        default=False,
        description="pre-filled, but the judge disagrees with the label or is not confident: "
        "a person should look",
    )


class ReviewQueueOut(BaseModel):
    """An iteration's review as the review page shows it."""

    iteration: int
    decisions: list[DecisionOut] = Field(
        description="stable review order: least confident first, optimisation before "
        "the other splits, pre-labelled carried-forward decisions last; a decision never moves "
        "once reviewed"
    )
    current_id: int | None = Field(
        description="the asked decision, else the first undecided, else the first"
    )
    previous_id: int | None
    next_id: int | None
    next_pending_id: int | None = Field(
        description="the first undecided decision after the current one, wrapping around"
    )
    total: int
    reviewed: int
    agreed: int = Field(description="reviews that agree with the judge")


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agrees: bool = Field(strict=True)  # 0 and 1 are not answers
    notes: str | None = Field(default=None, max_length=5000)


class FeedbackOut(BaseModel):
    decision: DecisionOut
    pending_review: int = Field(description="decisions of the iteration still to review")


class BulkFeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decision_ids: list[int] = Field(min_length=1, max_length=10_000)
    agrees: bool = Field(strict=True)  # 0 and 1 are not answers
    notes: str | None = Field(default=None, max_length=5000)


class BulkFeedbackOut(BaseModel):
    updated: int
    pending_review: int


class TrainingStatusOut(BaseModel):
    persona_id: int
    status: PersonaStatus
    status_reason: str | None
    iteration: IterationOut | None
    spent_usd: float
    budget_usd: float | None
    running_here: bool = Field(description="this process is running the persona's loop now")


class CallEstimate(BaseModel):
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


class EstimateOut(BaseModel):
    # Its own title: sessions.schemas.EstimateOut is another schema (generated clients).
    model_config = ConfigDict(title="PersonaEstimateOut")

    pairs: int
    one_iteration: CallEstimate
    max_iterations: CallEstimate = Field(
        description="all max_iterations iterations; task answers are generated once and reused"
    )
    per_model: dict[str, CallEstimate] = Field(description="one iteration, by role")
    batch_cost_usd: float | None = Field(
        default=None,
        description="max_iterations' cost with execution batch (the judge's labels at its "
        "batch price; the task model and the engineer stay live); None: see batch_unavailable",
    )
    batch_unavailable: str | None = Field(default=None, description="why there is no batch")
    spent_usd: float
    budget_usd: float | None
    notes: list[str]


class MetricsRow(BaseModel):
    iteration: int
    prompt_version: int
    optimisation: MetricsOut | None
    selection: MetricsOut | None
    calibration: MetricsOut | None = None

    @deprecated_alias("selection")
    @property
    def holdout(self) -> MetricsOut | None:
        return self.selection


class ReportDecision(BaseModel):
    decision_id: int
    iteration: int
    input: str
    answer: str
    judge_label: Label
    judge_reasoning: str
    judge_confidence: float | None
    human_agrees: bool
    human_notes: str | None


class ReportOut(BaseModel):
    persona_id: int
    status: PersonaStatus
    target_f1: float
    iterations: int
    converged_at: int | None = Field(description="iteration that reached the target, if any")
    final: MetricsRow | None
    prompt_evolution: list[dict[str, Any]]
    best_decisions: list[ReportDecision] = Field(
        description="confident judge decisions the human agreed with"
    )
    worst_decisions: list[ReportDecision] = Field(
        description="confident judge decisions the human disagreed with"
    )
    spent_usd: float
