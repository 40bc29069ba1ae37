"""Response models of the session analysis API.

The figures themselves are the pure analysis dataclasses (ratings, leaderboard,
performance, position, findings), used here as field types so OpenAPI documents them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from llmjudge.core.analysis.categories import CategoryReport
from llmjudge.core.analysis.findings import Finding
from llmjudge.core.analysis.leaderboard import (
    MatrixCell,
    PillarDistribution,
    PillarRef,
    RatingMethod,
    TournamentQuality,
)
from llmjudge.core.analysis.outcomes import Aggregation
from llmjudge.core.analysis.performance import CoverageStats, PillarCoverage, ThreadStats
from llmjudge.core.analysis.position import (
    Interpretation,
    LikertStability,
    PositionBias,
    ProbabilityShift,
    SwapPair,
    SwapSummary,
)
from llmjudge.core.ratings.style_report import StyleReport

ScoreKind = Literal["elo", "bt"]
ExportFormat = Literal["csv", "json"]
ExportTable = Literal["comparisons", "leaderboard"]
ClusterChoice = Literal["pair", "swap", "none"]


class AnalysisSession(BaseModel):
    """The session the figures describe, read fresh on every request."""

    id: int
    name: str
    status: str
    comparison_mode: str
    total: int
    completed: int = Field(description="the figures use these completed comparisons")
    failed: int
    calculate_elo: bool
    criteria: list[str]
    pillar_ids: list[int]


class PillarLabel(BaseModel):
    id: int
    name: str


class ThreadLabel(BaseModel):
    thread_id: int
    title: str | None = Field(description="None when the thread was deleted from the catalog")
    external_id: str | None
    pillar: PillarLabel


class LeaderboardRow(BaseModel):
    rank: int = Field(
        description="1 + threads whose BT interval lies wholly above this one's; rows sort "
        "by rank, then by bt_score"
    )
    thread_id: int
    thread_title: str | None
    thread_external_id: str | None
    pillar: PillarLabel
    elo_score: float | None = Field(
        description="sequential Elo (K=32) replayed in completion order: order-dependent, "
        "kept for comparison; None when the session has calculate_elo off"
    )
    bt_score: float = Field(
        description="Bradley-Terry on the Elo scale (400/ln 10 points per logit), the mean "
        "thread or method.baseline_id at method.base"
    )
    bt_ci_low: float | None = Field(
        description="interval at method.level (cluster bootstrap percentile or sandwich); "
        "None without intervals"
    )
    bt_ci_high: float | None
    rank_low: float | None = Field(
        default=None,
        description="bootstrap band of the rank at method.level; None without bootstrap",
    )
    rank_high: float | None = None
    rank_held: float | None = Field(
        default=None,
        description="share of bootstrap rounds in which the thread holds exactly its rank",
    )
    matches_played: int
    wins: int
    losses: int
    ties: int
    win_rate: float = Field(description="(wins + ties/2) / matches")
    raw_win_rate: float = Field(description="wins / matches")
    avg_confidence: float | None
    avg_likert_scores: dict[str, float | None]


class PillarAggregateOut(BaseModel):
    """A pillar: averages of its threads, and its own Bradley-Terry rating with pillars as
    players (the pillar-level ranking; best first)."""

    pillar_id: int
    name: str
    thread_count: int = Field(description="threads of the pillar on the leaderboard")
    avg_elo: float | None
    avg_bt: float
    bt_score: float | None
    bt_ci_low: float | None
    bt_ci_high: float | None
    bt_rank: int | None


class ThreadLeaderboardOut(BaseModel):
    session: AnalysisSession
    aggregation: Aggregation
    bootstrap_rounds: int
    confidence_level: float = Field(description="the level of every interval shown")
    outcome_count: int = Field(description="outcomes rated, after aggregation")
    method: RatingMethod = Field(
        description="how the thread scores were made: level, interval, clusters, tie "
        "model (with Davidson's nu), strong-verdict weight, anchor"
    )
    pillar_method: RatingMethod
    quality: TournamentQuality = Field(
        description="separability, rank stability, agreement with a reference; `advice` "
        "says in one line whether to buy more comparisons"
    )
    pillar_quality: TournamentQuality
    entries: list[LeaderboardRow]
    pillar_aggregates: list[PillarAggregateOut]


class ScoreDistributionOut(BaseModel):
    session: AnalysisSession
    aggregation: Aggregation
    score: ScoreKind = Field(description="which thread score is distributed")
    bin_edges: list[float] = Field(description="shared by every pillar's histogram")
    pillars: list[PillarDistribution]


class PillarMatrixOut(BaseModel):
    session: AnalysisSession
    aggregation: Aggregation
    pillars: list[PillarRef] = Field(description="row and column order: best pillar first")
    cells: list[list[MatrixCell | None]] = Field(
        description="cells[row][col]: the row pillar's record against the column pillar; "
        "None on the diagonal"
    )


class ThreadPerformanceOut(BaseModel):
    session: AnalysisSession
    aggregation: Aggregation
    threads: list[ThreadStats] = Field(description="best performance_score first")
    coverage_stats: CoverageStats
    pillars: list[PillarCoverage]
    thread_labels: dict[int, ThreadLabel]


class PositionSwapOut(BaseModel):
    session: AnalysisSession
    summary: SwapSummary
    position_bias: PositionBias
    likert_stability: list[LikertStability]
    interpretation: Interpretation
    pairs_total: int
    pairs_offset: int
    pairs_limit: int
    pairs: list[SwapPair]
    thread_labels: dict[int, ThreadLabel]
    probability_shift: ProbabilityShift = Field(
        description="where the judge gives P(A is better): the mean shift of P(first "
        "position wins) between the two orders (prob_a + twin's prob_a - 1; 0 = order-blind, "
        "> 0 primacy), with a bootstrap interval over swap pairs"
    )


class FindingsOut(BaseModel):
    session: AnalysisSession
    aggregation: Aggregation
    findings: list[Finding]
    thread_labels: dict[int, ThreadLabel]


class StyleOut(BaseModel):
    session: AnalysisSession
    aggregation: Aggregation
    available_metadata: list[str] = Field(
        description="numeric thread metadata keys usable as extra covariates (`metadata`)"
    )
    style: StyleReport


class CategoriesOut(BaseModel):
    session: AnalysisSession
    aggregation: Aggregation
    available_keys: list[str] = Field(description="thread metadata keys of this session")
    categories: CategoryReport
