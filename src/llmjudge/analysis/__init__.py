"""The analysis domain: a session's figures, read from the database and computed by the
pure core (`llmjudge.core.analysis`, `core.ratings`, `core.agreement`). It only reads the
product's data (what writes comparisons, plans and imports, lives in the sessions domain);
its one write is its own cache of computed figures (`stored`), which nothing else reads.

- loading: a session's completed comparisons as an `OutcomeTable` (binary COPY, numpy)
- figures: each figure of a session; leaderboards: the rankings; cache: cached per
  completed count; options: the rating options of a query
- exports: CSV and JSON downloads, streamed
- baseline: win rates against a baseline pillar, raw and length-controlled
- grading: single-answer grading's grades, and the pairwise outcomes they imply
- stored: a finished session's figures kept in PostgreSQL (a cache analysis writes);
  storing: the background job computing them when a session finishes
- api: the `/api/sessions/{id}/<figure>` and `/export` routes"""

from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        "llmjudge.analysis.baseline": ("BaselineOut", "baseline_report", "pillar_names"),
        "llmjudge.analysis.cache": (
            "FINISHED",
            "AnalysisCache",
            "get_cache",
        ),
        "llmjudge.analysis.figures": (
            "categories_out",
            "findings",
            "pillar_matrix_out",
            "position_swap",
            "score_distribution_out",
            "style_out",
            "thread_performance_out",
        ),
        "llmjudge.analysis.grading": ("ScoresOut", "scores_report"),
        "llmjudge.analysis.leaderboards": ("pillar_leaderboard", "thread_leaderboard"),
        "llmjudge.analysis.loading": ("get_analysis_session",),
        "llmjudge.analysis.storing": ("FigureStore",),
        "llmjudge.analysis.options": (
            "BOOTSTRAP_ROUNDS",
            "RatingQuery",
            "rating_options",
            "rating_query_raw",
        ),
        "llmjudge.analysis.schemas": (
            "AnalysisSession",
            "LeaderboardRow",
            "ThreadLeaderboardOut",
        ),
        "llmjudge.core.ratings.report": ("RatingOptions",),
    },
)
