"""Pure, vectorised analysis of judge verdicts (no database, JSON-ready dataclasses).

- outcomes: the `Outcome` input contract, its columnar `OutcomeTable` (with each verdict's
  strength), aggregation choices
- ratings: Elo, Bradley-Terry with bootstrap intervals, pillar ratings; cluster bootstrap,
  sandwich errors, verdict weights, the Elo scale and its anchor
- ties, style, quality, scales: Davidson's tie model, style control (Bradley-Terry with
  covariates), separability / rank stability / reference agreement / Wilson intervals,
  round histogram bins
- rating_report: one call for ratings with every option (`RatingOptions`, `rate`)
- leaderboard: leaderboard (with how it was made and the tournament's quality), pillar
  matrix, per-pillar score distributions
- style_report, categories: the style-control view (raw and controlled pillar ranking,
  coefficients) and the per-category view (ranking per category, win-rate matrix)
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
