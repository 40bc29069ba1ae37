"""The gate's request and response models (``POST /api/personas/{id}/evaluate``) and the
body of a session judged by a persona."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmjudge.personas.schemas import not_blank
from llmjudge.sessions import SessionIn

MAX_ITEMS = 1000
MAX_ITEM_CHARS = 200_000

# -- request and response models -------------------------------------------------------------


class EvaluateItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: str = Field(min_length=1, max_length=MAX_ITEM_CHARS, description="what was asked")
    output: str = Field(max_length=MAX_ITEM_CHARS, description="the answer to judge")
    correct_output: str | None = Field(
        default=None,
        max_length=MAX_ITEM_CHARS,
        description="reference answer; the persona was calibrated with one, so give it "
        "where you have it",
    )
    human_label: Literal["correct", "incorrect"] | None = Field(
        default=None,
        description="a person's label of this output, when known: with enough of them "
        "(a random sample of the batch) the gate uses PPI++",
    )

    _not_blank = field_validator("input")(not_blank("input must not be blank"))


class EscalationIn(BaseModel):
    """Embedding similarity first: it decides the clear cases, the LLM judge the middle."""

    model_config = ConfigDict(extra="forbid")
    accept_at: float = Field(ge=-1.0, le=1.0, description="correct at or above this cosine")
    reject_below: float = Field(ge=-1.0, le=1.0, description="incorrect below this cosine")

    @model_validator(mode="after")
    def ordered(self) -> EscalationIn:
        if self.reject_below > self.accept_at:
            raise ValueError("reject_below must not be above accept_at")
        return self


class EvaluateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[EvaluateItem] = Field(min_length=1, max_length=MAX_ITEMS)
    min_pass_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="gate threshold: passes when the lower bound of the corrected pass "
        "rate's 95% interval reaches it",
    )
    escalation: EscalationIn | None = Field(
        default=None,
        description="an LLM persona only: decide by embedding similarity to the reference "
        "where it is clear (``similarity.fit_escalation`` fits the two thresholds), and ask "
        "the judge model about the rest",
    )


class ItemVerdict(BaseModel):
    index: int = Field(description="position of the item in the request")
    label: str = Field(description="correct | incorrect")
    passed: bool
    reasoning: str
    confidence: float | None
    parse_error: bool = Field(description="the judge's reply was unreadable (counted as fail)")
    decided_by: Literal["judge", "similarity"] = "judge"
    similarity: float | None = None


class CalibrationOut(BaseModel):
    """The judge's error rates on the persona's calibration pairs, as reviewed by a human."""

    iteration: int | None = Field(description="the latest fully reviewed iteration, if any")
    prompt_version: int | None
    tpr: float = Field(description="judge said correct among human-correct calibration answers")
    tnr: float = Field(description="judge said incorrect among human-incorrect ones")
    calib_pos: int = Field(description="calibration answers the human labelled correct")
    calib_neg: int = Field(description="calibration answers the human labelled incorrect")
    tpr_ci: tuple[float, float] = Field(
        default=(0.0, 1.0), description="95% Wilson interval of the TPR over calib_pos"
    )
    tnr_ci: tuple[float, float] = Field(
        default=(0.0, 1.0), description="95% Wilson interval of the TNR over calib_neg"
    )


class PassRateOut(BaseModel):
    estimator: str = Field(description="rogan_gladen or ppi")
    defined: bool
    value: float | None
    low: float | None
    high: float | None
    n: int
    n_human: int
    reason: str | None
    lam: float | None = Field(default=None, description="PPI++'s power-tuning weight")


class EvaluateOut(BaseModel):
    persona_id: int
    persona_name: str
    persona_status: str
    prompt_version: int = Field(description="judge prompt version used")
    n: int
    verdicts: list[ItemVerdict]
    observed_pass_rate: float
    corrected_pass_rate: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    defined: bool = Field(description="false when the correction is impossible (see reason)")
    reason: str | None
    min_pass_rate: float | None
    passed: bool | None = Field(
        description="ci_low >= min_pass_rate; false when the correction is undefined; "
        "null without a threshold"
    )
    summary: str
    calibration: CalibrationOut
    warnings: list[str]
    estimator: str = Field(description="the estimator the gate used: rogan_gladen or ppi")
    estimates: list[PassRateOut] = Field(description="every estimator's result")
    n_human: int = Field(description="items that carried a human label")


_JUDGE_FIELDS = ("judge_model_id", "prompt_template")


def _hide_judge_fields(schema: dict[str, Any]) -> None:
    for key in _JUDGE_FIELDS:
        schema.get("properties", {}).pop(key, None)


class PersonaSessionIn(SessionIn):
    """A tournament session judged by the persona: `POST /api/sessions`'s body without
    `judge_model_id` and `prompt_template`, which the persona supplies."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_hide_judge_fields)
    criteria: list[str] = Field(
        default_factory=lambda: ["quality"],
        max_length=20,
        description="scored per thread; the persona's guidance decides the winner",
    )

    @model_validator(mode="before")
    @classmethod
    def no_judge_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = sorted(set(_JUDGE_FIELDS) & set(data))
            if given:
                raise ValueError(
                    f"{', '.join(given)}: the persona supplies the judge model and prompt"
                )
        return data
