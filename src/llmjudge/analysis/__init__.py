"""Pure, vectorised analysis of judge verdicts (no database, JSON-ready dataclasses).

- outcomes: the `Outcome` input contract, its columnar `OutcomeTable`, aggregation choices
- ratings: Elo, Bradley-Terry with bootstrap intervals, pillar ratings
- leaderboard: leaderboard, pillar matrix, per-pillar score distributions
- performance: per-thread performance, Likert consistency, sampling coverage
- position: position-swap consistency and bias
- findings: surprise findings

Results are frozen dataclasses of plain Python values; `dataclasses.asdict` gives JSON.
"""
