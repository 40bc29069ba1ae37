"""Reference labels in and out, and the agreement report of a session."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from llmjudge.infra.rowfiles import RowError as RowError

Label = Literal["A", "B", "TIE"]
Source = Literal["human", "gold"]


class ReferenceRowIn(BaseModel):
    """One imported label. The threads are named by id (``thread_a``, ``thread_b``) or by
    ``pillar_a, external_id_a, pillar_b, external_id_b``; ``label`` is relative to the pair
    as written. ``source`` is gold unless it says human."""

    model_config = ConfigDict(extra="forbid")
    thread_a: StrictInt | None = None
    thread_b: StrictInt | None = None
    pillar_a: str | None = Field(default=None, min_length=1, max_length=200)
    external_id_a: str | None = Field(default=None, min_length=1, max_length=300)
    pillar_b: str | None = Field(default=None, min_length=1, max_length=200)
    external_id_b: str | None = Field(default=None, min_length=1, max_length=300)
    label: Label
    both_bad: bool = False
    annotator: str = Field(default="", max_length=200)
    source: Source = "gold"
    note: str = Field(default="", max_length=10_000)

    @field_validator("label", mode="before")
    @classmethod
    def _label_case(cls, v: object) -> object:
        # "a", " tie " are the same labels; anything else is refused by the Literal.
        return v.strip().upper() if isinstance(v, str) else v

    @field_validator("source", mode="before")
    @classmethod
    def _source_case(cls, v: object) -> object:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("external_id_a", "external_id_b", mode="before")
    @classmethod
    def _id_as_text(cls, v: object) -> object:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("annotator")
    @classmethod
    def _strip(cls, v: str) -> str:
        return v.strip()

    @model_validator(mode="after")
    def _names_both_threads(self) -> ReferenceRowIn:
        for side in ("a", "b"):
            by_id = getattr(self, f"thread_{side}") is not None
            pillar = getattr(self, f"pillar_{side}")
            external = getattr(self, f"external_id_{side}")
            if by_id and (pillar is not None or external is not None):
                raise ValueError(
                    f"name thread {side} by thread_{side} or by pillar_{side} + "
                    f"external_id_{side}, not both"
                )
            if not by_id and (pillar is None or external is None):
                raise ValueError(
                    f"thread {side} needs thread_{side} (an id) or both pillar_{side} and "
                    f"external_id_{side}"
                )
        if self.both_bad and self.label != "TIE":
            raise ValueError("both_bad labels are ties: label must be TIE")
        return self


class ReferenceOut(BaseModel):
    """A stored label, in the pair's canonical order (thread_a_id < thread_b_id)."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    thread_a_id: int
    thread_b_id: int
    label: Label
    both_bad: bool
    source: Source
    annotator: str
    note: str
    session_id: int | None
    created_at: datetime


class ReferencePage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[ReferenceOut]


class ReferenceImportOut(BaseModel):
    created: int
    updated: int
    total: int


class DeletedOut(BaseModel):
    deleted: int


# --------------------------------------------------------------------------- agreement


class FigureOut(BaseModel):
    """A figure (None when undefined), the count it rests on and its 95 % interval."""

    value: float | None
    n: int
    low: float | None = None
    high: float | None = None


class JudgeAgreementOut(BaseModel):
    judgments: int
    pairs: int
    accuracy: FigureOut
    accuracy_without_ties: FigureOut
    both_orders_correct: FigureOut
    net_vote: FigureOut
    consistency: FigureOut
    kappa: FigureOut
    precision: FigureOut
    recall: FigureOut
    f1: FigureOut
    confusion: list[list[int]] = Field(description="rows reference, columns judge: A, B, TIE")


class GroupAgreementOut(JudgeAgreementOut):
    group: str


class AnnotatorPairOut(BaseModel):
    first: str
    second: str
    kappa: FigureOut
    agreement: FigureOut


class HumanAgreementOut(BaseModel):
    items: int
    annotators: list[str]
    percent_agreement: FigureOut
    fleiss_kappa: FigureOut
    krippendorff_alpha: FigureOut
    pairwise: list[AnnotatorPairOut]


class DisagreementOut(BaseModel):
    comparison_id: int
    thread_a_id: int  # the pair's canonical order
    thread_b_id: int
    reference: Label
    judge: Label  # mapped to the pair's order
    swapped: bool  # the comparison showed thread_b first
    thread_a_url: str
    thread_b_url: str
    pair_url: str = Field(description="the two threads side by side (the review page)")


class ConfidenceBinOut(BaseModel):
    low: float
    high: float
    n: int
    mean_probability: float | None = Field(description="mean P(A is better) in the bin")
    observed: FigureOut = Field(description="share of the bin's judgments whose label is A")


class StatedConfidenceOut(BaseModel):
    """A judge's probability that A is better (its stated confidence turned to P(A), or
    its own prob_a), against A/B labels (ties left out)."""

    model_config = ConfigDict(from_attributes=True)

    judgments: int
    pairs: int
    left_out: int = Field(
        description="judgments of labelled pairs without a probability, or labelled a tie"
    )
    brier: FigureOut = Field(description="mean squared error of P(A); 0 is perfect, 0.25 a coin")
    log_loss: FigureOut
    bins: list[ConfidenceBinOut] = Field(description="ten equal-width bins of P(A)")


class SessionAgreementOut(BaseModel):
    session_id: int
    reference: str
    group_by: str | None
    completed: int = Field(description="completed comparisons of the session")
    unlabelled: int = Field(description="completed comparisons whose pair has no reference")
    labelled_pairs: int
    judge: JudgeAgreementOut
    by_pillar_pair: list[GroupAgreementOut]
    by_metadata: list[GroupAgreementOut]
    human: HumanAgreementOut
    disagreements: list[DisagreementOut]
    disagreements_total: int
    stated_confidence: StatedConfidenceOut
    judge_probability: StatedConfidenceOut = Field(
        description="the judge's own P(A is better) (prob_a: token log probabilities or an "
        "imported preference), scored like the stated confidence"
    )
