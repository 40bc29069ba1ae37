"""Issue 27, scores on pages: intervals as "a to b", what 100 Elo points mean (from the
scale), the prior in words, and the adaptive table in Elo points rather than logits."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR
from llmjudge.core.ratings.elo import ELO_SCALE
from llmjudge.infra.web import templates
from llmjudge.sessions.pages.formatting import elo_points, interval, points_meaning, prior_text


def test_a_negative_interval_reads_with_to_not_a_double_dash() -> None:
    assert interval(-513.2, -272.4) == "-513 to -272"
    assert interval(1480, 1520) == "1480 to 1520"
    assert interval(0.125, 0.5, "{:.1%}") == "12.5% to 50.0%"
    assert interval(None, 3.0) == "–" and interval(1.0, math.nan) == "–"


@given(st.floats(-5000, 5000), st.floats(-5000, 5000))
def test_an_interval_always_splits_back_into_its_two_ends(low: float, high: float) -> None:
    text = interval(low, high)
    assert "--" not in text and "–" not in text
    left, right = text.split(" to ")
    assert left == f"{low:.0f}" and right == f"{high:.0f}"


def test_what_100_points_mean_comes_from_the_scale() -> None:
    expected = 1 / (1 + 10 ** (-100 / 400))  # the Elo formula: 0.640
    assert points_meaning() == f"100 points = {expected:.0%} expected win rate"
    assert points_meaning() == "100 points = 64% expected win rate"
    assert points_meaning(400) == "400 points = 91% expected win rate"


def test_the_prior_is_stated_in_points() -> None:
    text = prior_text("pillars")
    assert f"{4 * DEFAULT_PRIOR:g} drawn games" in text
    assert f"{ELO_SCALE / math.sqrt(DEFAULT_PRIOR):.0f} points" in text
    assert text.endswith("keeps unbeaten pillars finite")


def _player(i: int, theta: float) -> SimpleNamespace:
    return SimpleNamespace(
        id=i,
        name=f"t{i}",
        pillar="p",
        rank=i,
        rank_best=1,
        rank_worst=3,
        theta=theta,
        theta_low=theta - 3.0,
        theta_high=theta + 1.5,
        games=12,
    )


def test_the_adaptive_table_shows_elo_points_with_intervals_and_their_meaning() -> None:
    # a strong thread 8.15 logits above the mean: "+8.15 [-1.11, +17.41]" had no unit
    ranking = [_player(1, 8.15), _player(2, -0.5)]
    adaptive = SimpleNamespace(
        unit="threads",
        results=40,
        rounds=[1, 2],
        progress="2 of 3 rounds stable",
        stop_reason=None,
        spent_text="40 comparisons",
        free_for_all=100,
        spent=40,
        ranking=ranking,
        field_rates=[],
    )
    html = templates.env.get_template("sessions/_adaptive.html").render(
        adaptive=adaptive, shown=10, s=SimpleNamespace(id=5)
    )
    assert "Elo points" in html
    assert "+8.15" not in html
    top = f"{elo_points(8.15):.0f}"
    assert f"<td>{top} " in html
    assert f"[{elo_points(5.15):.0f} to {elo_points(9.65):.0f}]" in html
    assert f"{elo_points(-3.5):.0f} to {elo_points(1.0):.0f}" in html
    assert "100 points = 64% expected win rate" in html
    assert "1 to 3" in html  # the rank interval too
    # refitted with the leaderboard's prior, said in the page's words
    assert "a weak prior worth 2 drawn games" in html
    assert not re.search(r"\d–\d", html)
