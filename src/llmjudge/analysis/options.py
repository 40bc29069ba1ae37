"""The rating options of a leaderboard: from a query's parameters (the API's and the
page's defaults are the same, so both share one cached computation), checked together."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query

from llmjudge.analysis.schemas import ClusterChoice
from llmjudge.core.ratings.report import (
    ELO_BASES,
    LEVELS,
    MAX_STRONG_WEIGHT,
    IntervalMethod,
    RatingOptions,
    TieModel,
)
from llmjudge.infra.errors import Invalid, value_errors_as_invalid

__all__ = [
    "BOOTSTRAP_ROUNDS",
    "BT_CONFIDENCE",
    "Rating",
    "RatingQuery",
    "rating_options",
    "rating_query",
    "rating_query_raw",
]

BT_CONFIDENCE = 0.95
BOOTSTRAP_ROUNDS = 200  # the default of the API and the page: one shared computation
SEED = 0  # bootstrap seed: the same data gives the same intervals on every poll

RoundsQuery = Annotated[
    int, Query(ge=0, le=2000, description="bootstrap resamples for the BT intervals (0: none)")
]
LEVELS_TEXT = ", ".join(f"{v:g}" for v in LEVELS)


def rating_query_raw(
    bootstrap_rounds: RoundsQuery = BOOTSTRAP_ROUNDS,
    level: Annotated[
        float,
        Query(
            ge=0.5,
            le=0.99,
            description=f"level of every interval (usual: {LEVELS_TEXT}); default 0.95",
        ),
    ] = BT_CONFIDENCE,
    interval: Annotated[
        IntervalMethod,
        Query(
            description="bootstrap: percentile interval of the cluster bootstrap; sandwich: "
            "Wald interval from the cluster-robust standard error (ties half, mean anchor)"
        ),
    ] = "bootstrap",
    clusters: Annotated[
        ClusterChoice,
        Query(
            description="what is resampled together: pair (every verdict on one pair of "
            "threads: swaps and repetitions; the honest default), swap (an original and "
            "its swapped twin), none (verdicts as independent: too narrow when they are not)"
        ),
    ] = "pair",
    ties: Annotated[
        TieModel,
        Query(
            description="half: a tie is half a win; davidson: Davidson's tie model, with "
            "its fitted tie parameter nu reported"
        ),
    ] = "half",
    strong_weight: Annotated[
        float,
        Query(
            ge=1,
            le=MAX_STRONG_WEIGHT,
            description="wins a strong verdict (A>>B) counts as; 1 = off (default), "
            "Arena-Hard uses 3",
        ),
    ] = 1.0,
    elo_base: Annotated[
        int,
        Query(
            ge=1000,
            le=1500,
            description="the score of the anchor (the mean, or the baseline): 1000 or 1500",
        ),
    ] = 1500,
    baseline_thread: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9]{0,10}$",
            description="a thread id: anchor the thread scores on it (empty: the mean)",
        ),
    ] = None,
    baseline_pillar: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9]{0,10}$",
            description="a pillar id: anchor the pillar scores on it (empty: the mean)",
        ),
    ] = None,
) -> dict[str, Any]:
    """Every rating choice a leaderboard takes, as its query gave them (bounded, not yet
    checked together): the keyword arguments of rating_options."""
    return {
        "bootstrap_rounds": bootstrap_rounds,
        "level": level,
        "interval": interval,
        "clusters": clusters,
        "tie_model": ties,
        "strong_weight": strong_weight,
        "base": _elo_base(elo_base),
        # an id, or None for an empty value (a form's "the mean" choice)
        "baseline_thread": _id_or_none(baseline_thread, "baseline_thread"),
        "baseline_pillar": _id_or_none(baseline_pillar, "baseline_pillar"),
    }


def _elo_base(value: int) -> float:
    if float(value) not in ELO_BASES:
        raise Invalid("elo_base must be 1000 or 1500")
    return float(value)


def _id_or_none(value: str | None, name: str) -> int | None:
    if not value:
        return None
    found = int(value)
    if not 1 <= found <= 2**31 - 1:
        raise Invalid(f"{name} must be an id between 1 and 2^31 - 1")
    return found


RatingQuery = Annotated[dict[str, Any], Depends(rating_query_raw)]


def rating_query(raw: RatingQuery) -> RatingOptions:
    """The rating options of a query; 422 for a combination the ratings refuse (sandwich
    with Davidson or a baseline)."""
    return rating_options(**raw)


Rating = Annotated[RatingOptions, Depends(rating_query)]


def rating_options(
    *,
    bootstrap_rounds: int = BOOTSTRAP_ROUNDS,
    level: float = BT_CONFIDENCE,
    interval: IntervalMethod = "bootstrap",
    clusters: ClusterChoice = "pair",
    tie_model: TieModel = "half",
    strong_weight: float = 1.0,
    base: float = 1500.0,
    baseline_thread: int | None = None,
    baseline_pillar: int | None = None,
) -> RatingOptions:
    """The options of a leaderboard from its query parameters (the API's and the page's
    defaults are these, so both share one cached computation); Invalid for a combination
    the ratings refuse."""
    options = RatingOptions(
        level=level,
        interval=interval,
        clusters=None if clusters == "none" else clusters,
        bootstrap_rounds=bootstrap_rounds if interval == "bootstrap" else 0,
        tie_model=tie_model,
        strong_weight=strong_weight,
        base=base,
        baseline_thread=baseline_thread,
        baseline_pillar=baseline_pillar,
        seed=SEED,
    )
    with value_errors_as_invalid():
        options.validate()
    return options
