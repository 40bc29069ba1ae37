"""Adaptive tournaments, the pure part: fit the state, choose the next batch, decide to stop.

A round is: outcomes so far -> :func:`fit_state` (Bradley-Terry, warm-started from the
previous round, with a Laplace covariance; :mod:`.state`) -> :func:`check_stop`
(:mod:`.stopping`) -> :func:`select_batch` (the next judge calls; :mod:`.design`) -> judge
them -> repeat. Everything here works on player indices 0..n-1: players are threads, or
pillars (then :func:`pillar_prompt_keys` draws the prompt key each pillar comparison is
judged on). The design reads the evidence (a negligible prior); the ranking a session
shows is refitted with the ratings' prior, ``SHOWN_PRIOR`` (:mod:`.state` says why). The
caller maps indices to ids and stores rounds; nothing here does I/O or
keeps state between calls, so a round can be rebuilt from the stored comparisons after a
crash.
"""

from llmjudge.core.tournaments.adaptive.design import (
    SOURCE_ADAPTIVE,
    SOURCE_COVERAGE,
    SOURCE_FILL,
    SOURCE_RANDOM,
    SOURCE_SWISS,
    Batch,
    FieldRate,
    Position,
    Strategy,
    field_rate,
    free_for_all_comparisons,
    pillar_prompt_keys,
    select_batch,
)
from llmjudge.core.tournaments.adaptive.state import (
    SHOWN_PRIOR,
    AdaptiveState,
    fit_state,
    state_at,
)
from llmjudge.core.tournaments.adaptive.stopping import (
    Budget,
    StopDecision,
    StopRule,
    check_stop,
    rank_width,
    stability_widths,
)

__all__ = [
    "SOURCE_ADAPTIVE",
    "SOURCE_COVERAGE",
    "SOURCE_FILL",
    "SOURCE_RANDOM",
    "SOURCE_SWISS",
    "SHOWN_PRIOR",
    "AdaptiveState",
    "Batch",
    "Budget",
    "FieldRate",
    "Position",
    "StopDecision",
    "StopRule",
    "Strategy",
    "check_stop",
    "field_rate",
    "fit_state",
    "free_for_all_comparisons",
    "pillar_prompt_keys",
    "rank_width",
    "select_batch",
    "stability_widths",
    "state_at",
]
