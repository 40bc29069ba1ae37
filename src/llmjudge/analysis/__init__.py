"""Pure, vectorised analysis of judge verdicts (no database, JSON-ready dataclasses).

- outcomes: the `Outcome` input contract, its columnar `OutcomeTable`, aggregation choices
- ratings: Elo, Bradley-Terry with bootstrap intervals, pillar ratings
- leaderboard: leaderboard, pillar matrix, per-pillar score distributions
- performance: per-thread performance, Likert consistency, sampling coverage
- position: position-swap consistency and bias
- findings: surprise findings

Results are frozen dataclasses of plain Python values; `dataclasses.asdict` gives JSON.

The read side around that core, which only ever reads the database (judgments made
elsewhere are imported by the sessions domain):

- loading: a session's completed comparisons as an `OutcomeTable` (binary COPY, numpy)
- figures: each figure of a session, cached per completed count
- exports: CSV and JSON downloads, streamed
- api: the `/api/sessions/{id}/<figure>` and `/export` routes
"""
