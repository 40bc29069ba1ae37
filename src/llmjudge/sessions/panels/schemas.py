"""The panel report's response schemas (``GET /api/sessions/{id}/panel``): the shape of
``report.panel_report``'s answer, which they validate themselves from: ``PanelReportOut``
for a panel of judges of pairs, ``GradersPanelReportOut`` for a panel of graders, told
apart by ``kind`` (``PanelReport``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from llmjudge.references import FigureOut

__all__ = ["GradersPanelReportOut", "PanelReport", "PanelReportOut"]


class PanelMemberOut(BaseModel):
    index: int
    label: str
    model_id: int | None
    weight: float | None
    voted: int = Field(description="comparisons this member voted on")
    missing: int = Field(description="calls that failed or whose answer did not parse")
    agreement_with_panel: FigureOut
    accuracy: FigureOut = Field(description="agreement with the reference labels")
    consistency: FigureOut = Field(description="same verdict on a pair and its swap")
    cost_usd: float
    mean_latency_s: float | None


class PanelFiguresOut(BaseModel):
    accuracy: FigureOut
    consistency: FigureOut
    cost_usd: float
    voted: dict[str, int] = Field(description="comparisons by how many members voted")


class PanelVersusMemberOut(BaseModel):
    """The panel against one of its members on the comparisons both answered."""

    member: int
    label: str
    n: int
    panel_accuracy: FigureOut
    member_accuracy: FigureOut
    difference: FigureOut
    beats: bool
    member_cost_usd: float
    member_consistency: FigureOut


class PanelNEffOut(BaseModel):
    value: float | None
    members: int
    n: int
    mean_error_correlation: float | None
    explanation: str


class PanelCascadeOut(BaseModel):
    """A cascade session: where it stopped and what that saved over asking everyone."""

    stop_share: list[float]
    escalated: FigureOut
    agreement: FigureOut
    spent_usd: float
    everyone_usd: float
    saving_usd: float
    policy: dict[str, Any] | None


class CascadeCalibrationUnavailableOut(BaseModel):
    n: int
    target: float | None
    available: Literal[False]
    reason: str


class CascadeCalibrationOut(BaseModel):
    available: Literal[True]
    n: int
    target: float
    target_met: bool
    threshold: float | None
    agreement: FigureOut
    escalated: FigureOut
    stop_share: list[float]
    expected_cost_usd: float
    everyone_cost_usd: float


class PanelReportOut(BaseModel):
    """Every figure of a panel session's report (``core.judging.panel_report`` defines each)."""

    kind: Literal["pairs"] = Field("pairs", description="the members judged pairs (A/B votes)")
    session_id: int
    rule: str | None
    members: list[PanelMemberOut]
    comparisons: int
    labelled: int = Field(description="comparisons with a reference label")
    kappa: list[list[float | None]] = Field(description="Cohen's kappa between members")
    panel: PanelFiguresOut
    vs_best: PanelVersusMemberOut | None
    vs_cheapest: PanelVersusMemberOut | None
    verdict: str
    n_eff: PanelNEffOut
    cascade: PanelCascadeOut | None
    cascade_calibration: Annotated[
        CascadeCalibrationOut | CascadeCalibrationUnavailableOut, Field(discriminator="available")
    ] = Field(description="the cascade these members would make, calibrated on the labels")


# -- a panel of graders (single-answer grading) -----------------------------------------


class GraderMeanOut(BaseModel):
    """A mean over items with its 95 % Student-t interval (null below two items)."""

    n: int = Field(description="items (graded threads) averaged")
    mean: float | None
    sd: float | None
    low: float | None
    high: float | None


class GraderAgreementOut(BaseModel):
    """Two sets of grades over the items both graded, each figure with its count and 95 %
    bootstrap interval over those items."""

    n: int = Field(description="items both graded")
    spearman: FigureOut
    pearson: FigureOut
    mean_abs_difference: FigureOut = Field(description="in scale points")
    qwk: FigureOut = Field(
        description="quadratic-weighted kappa; null unless every grade on both sides is a "
        "whole point (not a mean of repetitions or of a panel, nor a weighted grade)"
    )


class GraderMemberOut(BaseModel):
    index: int
    label: str
    model_id: int | None
    items: int = Field(description="items (graded threads) this member graded")
    grades: int = Field(description="grades it gave (repetitions count)")
    missing: int = Field(description="calls that failed or whose grade did not parse")
    mean_grade: GraderMeanOut = Field(description="mean of its grades of the items")
    agreement_with_panel: GraderAgreementOut
    offset: GraderMeanOut | None = Field(
        description="mean of (its grade - the panel's) over the items both graded: above 0 "
        "lenient, below 0 severe; null when none"
    )
    cost_usd: float
    mean_latency_s: float | None


class GraderPairOut(BaseModel):
    first: int
    second: int
    first_label: str
    second_label: str
    agreement: GraderAgreementOut


class GradersPanelFiguresOut(BaseModel):
    mean_grade: GraderMeanOut = Field(description="mean of the panel's grades of the items")
    cost_usd: float


class GraderDeviationOut(BaseModel):
    """The member whose grades stand furthest from the panel's, named only when its offset
    rests on ``min_items`` items and its interval excludes 0."""

    member: int | None
    label: str | None
    offset: GraderMeanOut | None
    statement: str = Field(description="the finding, or what evidence is missing")
    min_items: int


class GradersPanelReportOut(BaseModel):
    """A panel of graders' report (single-answer grading): each member's grades against
    the panel's and each other's, the panel's reliability, and the member that deviates
    most. The unit is the graded thread (its repetitions averaged)."""

    kind: Literal["grades"] = Field(description="the members graded single answers")
    session_id: int
    rule: str | None = Field(description="the panel's grade: mean or median of the members'")
    scale_min: float
    scale_max: float
    comparisons: int = Field(description="completed items with a panel grade")
    items: int = Field(description="graded threads")
    members: list[GraderMemberOut]
    pairs: list[GraderPairOut] = Field(description="every two members, over items both graded")
    alpha: FigureOut = Field(
        description="Krippendorff's alpha (interval metric) of the members' grades, over "
        "the items at least two graded, with a 95 % bootstrap interval over items"
    )
    panel: GradersPanelFiguresOut
    deviation: GraderDeviationOut


PanelReport = Annotated[PanelReportOut | GradersPanelReportOut, Field(discriminator="kind")]
