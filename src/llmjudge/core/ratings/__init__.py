"""Ratings from pairwise outcomes: sequential Elo and the Elo scale (``elo``), the
Bradley-Terry solver and its bootstrap (``bradley_terry``), honest intervals: clusters,
weights, sandwich, ranks (``intervals``), the thread and pillar estimators
(``estimators``), Davidson ties (``ties``), style control (``style``, ``style_report``)
and the one call with every rigor option a leaderboard offers (``report``)."""
