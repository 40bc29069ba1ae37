"""The panel report's response schema (``GET /api/sessions/{id}/panel``): the shape of
``report.panel_report``'s answer, which it validates itself from (``model_validate``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from llmjudge.references import FigureOut

__all__ = ["PanelReportOut"]


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
