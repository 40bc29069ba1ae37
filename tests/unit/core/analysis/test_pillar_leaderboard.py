"""The Overview's pillar ranking (`leaderboard(threads=False)`) has the full leaderboard's
pillar figures exactly, without computing the threads' intervals (issue 27: at 10,000
threads those are 200 fits of 10,000 players)."""

from __future__ import annotations

import numpy as np
import pytest

from llmjudge.core.analysis import leaderboard as board_module
from llmjudge.core.analysis.leaderboard import leaderboard
from llmjudge.core.analysis.outcomes import OutcomeTable
from llmjudge.core.ratings.report import RatingOptions


def _table(seed: int) -> tuple[OutcomeTable, dict[int, int], dict[int, str]]:
    rng = np.random.default_rng(seed)
    n, m = 24, 400
    a = rng.integers(0, n, m)
    b = rng.integers(0, n - 1, m)
    b += b >= a
    quality = rng.normal(0, 1, n) + np.arange(n) % 4 * 0.4
    u = rng.random(m)
    score = np.where(u < 0.1, 0.5, (u < 1 / (1 + np.exp(quality[b] - quality[a]))) * 1.0)
    table = OutcomeTable.from_columns(
        comparison_id=np.arange(m),
        thread_a=a + 100,
        thread_b=b + 100,
        score_a=score,
        confidence=rng.random(m),
        swap_group=np.arange(m) // 2,
        is_swap=np.arange(m) % 2 == 1,
    )
    thread_pillar = {t + 100: t % 4 + 1 for t in range(n)}
    return table, thread_pillar, {p: f"pillar {p}" for p in range(1, 5)}


@pytest.mark.parametrize(
    "options",
    [
        RatingOptions(bootstrap_rounds=40),
        RatingOptions(bootstrap_rounds=40, baseline_pillar=2, clusters=None),
        RatingOptions(interval="sandwich"),
        RatingOptions(bootstrap_rounds=30, tie_model="davidson"),
    ],
)
def test_the_pillar_figures_are_the_full_leaderboards(options: RatingOptions) -> None:
    table, thread_pillar, names = _table(3)
    full = leaderboard(table, thread_pillar, names, options=options)
    pillars = leaderboard(table, thread_pillar, names, options=options, threads=False)
    assert pillars.pillar_aggregates == full.pillar_aggregates
    assert pillars.pillar_method == full.pillar_method
    assert pillars.pillar_quality == full.pillar_quality
    assert pillars.entries == [] and full.entries


def test_the_threads_intervals_are_not_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    table, thread_pillar, names = _table(4)
    asked: list[int] = []
    rate = board_module.rate

    def counting(t: OutcomeTable, options: RatingOptions, **kwargs: object) -> object:
        asked.append(options.bootstrap_rounds)
        return rate(t, options, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(board_module, "rate", counting)
    leaderboard(
        table, thread_pillar, names, options=RatingOptions(bootstrap_rounds=40), threads=False
    )
    assert asked == [0, 40]  # the threads' point estimates, then the pillars' intervals
