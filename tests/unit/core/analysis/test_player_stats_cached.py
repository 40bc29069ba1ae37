"""A table's per-player win rates are computed once: the leaderboard and thread
performance read them per thread, and an array rebuilt per lookup made a 10,000-thread
page quadratic (issue 27)."""

from __future__ import annotations

import numpy as np

from llmjudge.core.analysis.outcomes import OutcomeTable, PlayerStats


def test_win_rates_are_computed_once_and_right() -> None:
    table = OutcomeTable.from_columns(
        comparison_id=np.arange(4),
        thread_a=np.array([1, 1, 2, 3]),
        thread_b=np.array([2, 3, 3, 1]),
        score_a=np.array([1.0, 0.5, 0.0, 1.0]),
    )
    stats = PlayerStats.of(table)
    assert stats.win_rate is stats.win_rate
    assert stats.raw_win_rate is stats.raw_win_rate
    # thread 1: a win, a tie, a loss; thread 3: a win over 1, a tie, a win over 2
    np.testing.assert_allclose(stats.win_rate, [1.5 / 3, 0.0, 2.5 / 3])
    np.testing.assert_allclose(stats.raw_win_rate, [1 / 3, 0.0, 2 / 3])
