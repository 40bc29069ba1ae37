"""The analysis domain: a session's figures, read from the database and computed by the
pure core (`llmjudge.core.analysis`, `core.ratings`, `core.agreement`). It only ever reads;
what writes comparisons (plans, imports) lives in the sessions domain.

- loading: a session's completed comparisons as an `OutcomeTable` (binary COPY, numpy)
- figures: each figure of a session; cache: cached per completed count; options: the
  rating options of a query
- exports: CSV and JSON downloads, streamed
- api: the `/api/sessions/{id}/<figure>` and `/export` routes
"""

from llmjudge.analysis.cache import AnalysisCache, get_cache
from llmjudge.analysis.figures import (
    categories_out,
    findings,
    pillar_matrix_out,
    position_swap,
    score_distribution_out,
    style_out,
    thread_leaderboard,
    thread_performance_out,
)
from llmjudge.analysis.loading import get_analysis_session
from llmjudge.analysis.options import (
    BOOTSTRAP_ROUNDS,
    RatingQuery,
    rating_options,
    rating_query_raw,
)
from llmjudge.analysis.schemas import AnalysisSession, LeaderboardRow, ThreadLeaderboardOut
from llmjudge.core.ratings.report import RatingOptions

__all__ = [
    "AnalysisCache",
    "AnalysisSession",
    "BOOTSTRAP_ROUNDS",
    "LeaderboardRow",
    "RatingOptions",
    "RatingQuery",
    "ThreadLeaderboardOut",
    "categories_out",
    "findings",
    "get_analysis_session",
    "get_cache",
    "pillar_matrix_out",
    "position_swap",
    "rating_options",
    "rating_query_raw",
    "score_distribution_out",
    "style_out",
    "thread_leaderboard",
    "thread_performance_out",
]
