"""Analysis of a session's verdicts: the outcome table every analysis reads
(``outcomes``), the leaderboard (``leaderboard``), position-swap bias (``position``),
per-thread performance and coverage (``performance``), per-category views
(``categories``), surprise findings (``findings``) and whether the ranking is resolved
and matches a reference (``quality``)."""
