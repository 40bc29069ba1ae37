"""Judge panels (judging.panels): hand-checked cases and hypothesis properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score

from llmjudge.core.judging.panel_report import (
    codes,
    kappa_matrix,
    n_eff,
    panel_vs_member,
    position_consistency,
)
from llmjudge.core.judging.panels import (
    CascadePolicy,
    Vote,
    aggregate,
    calibrate_cascade,
    calibrated_weights,
    cascade,
    cascade_stops,
    expected_cascade_cost,
    majority,
    mean,
    panel_strength,
    weighted,
)

FLIP = {"A": "B", "B": "A", "TIE": "TIE", None: None}
labels = st.sampled_from(["A", "B", "TIE", None])


def votes(*ws: str | None) -> list[Vote]:
    return [Vote(w) for w in ws]


# --------------------------------------------------------------------------- hand-checked


def test_majority_hand_cases() -> None:
    assert majority(votes("A", "A", "B")).winner == "A"
    assert majority(votes("A", "B")).winner == "TIE"  # member tie
    assert majority(votes("A", "B", "TIE")).winner == "TIE"
    agg = majority(votes("B", None, "B"))
    assert (agg.winner, agg.voted, agg.members) == ("B", 2, 3)
    assert majority(votes(None, None)).winner is None
    assert majority(votes("A", "A", "B")).confidence == pytest.approx(2 / 3)


def test_mean_of_signed_verdicts_and_scores() -> None:
    vs = [
        Vote("A", scores_a={"x": 4}, scores_b={"x": 2}),
        Vote("A", scores_a={"x": 5}, scores_b={"x": 3}),
        Vote("B", scores_a={"x": 3}, scores_b={"x": 4}),
    ]
    agg = mean(vs)
    assert agg.winner == "TIE"  # (1 + 1 - 1) / 3 = 1/3: inside the tie band
    assert agg.scores_a == {"x": 4.0} and agg.scores_b == {"x": 3.0}
    assert mean(votes("A", "A", "TIE")).winner == "A"  # 2/3
    assert mean(votes("TIE", "TIE", "B")).winner == "TIE"  # -1/3
    assert mean(votes("B", "B", None)).confidence == 1.0


def test_weighted_hand_cases() -> None:
    # A weighs 3, B weighs 1 + 1: A wins although it has fewer members.
    assert weighted(votes("A", "B", "B"), [3, 1, 1]).winner == "A"
    assert weighted(votes("A", "B", "B"), [2, 1, 1]).winner == "TIE"  # 2 vs 2
    assert weighted(votes(None, "B", "A"), [10, 1, 2]).winner == "A"  # missing drops out
    with pytest.raises(ValueError):
        weighted(votes("A"), [1, 2])
    with pytest.raises(ValueError):
        weighted(votes("A"), [-1])


def test_calibrated_weights_hand_case() -> None:
    # Member 0 right 90 of 100, member 1 right 60 of 100; pooled 0.75, shrink 20.
    correct = np.zeros((100, 2), dtype=bool)
    correct[:90, 0] = True
    correct[:60, 1] = True
    labelled = np.ones_like(correct)
    w = calibrated_weights(correct, labelled)
    p0 = (90 + 20 * 0.75) / 120
    p1 = (60 + 20 * 0.75) / 120
    assert w == pytest.approx([math.log(p0 / (1 - p0)), math.log(p1 / (1 - p1))])
    # Too few labels: equal weights.
    assert calibrated_weights(correct[:10], labelled[:10]).tolist() == [1.0, 1.0]
    # A member at chance gets no vote.
    correct[:, 1] = np.arange(100) % 2 == 0
    correct[:, 0] = True
    w = calibrated_weights(correct, labelled, shrink=0.0)
    assert w[1] == 0.0 and w[0] > 0


def test_calibrated_aggregate_follows_the_stronger_members() -> None:
    w = [2.0, 0.5, 0.5]
    assert aggregate("calibrated", votes("B", "A", "A"), weights=w).winner == "B"
    assert aggregate("majority", votes("B", "A", "A")).winner == "A"


def test_cascade_rules() -> None:
    conf = CascadePolicy("confidence", 0.8)
    vs = [Vote("A", 0.6), Vote("B", 0.9), Vote("A", 0.99)]
    agg = cascade(vs, conf)
    assert (agg.winner, agg.asked, agg.stopped_at) == ("B", 2, 1)
    # Nobody confident: the last member settles it.
    agg = cascade([Vote("A", 0.1), Vote("B", 0.2)], conf)
    assert (agg.winner, agg.asked, agg.stopped_at) == ("B", 2, None)
    # A missing member is skipped.
    agg = cascade([Vote(None), Vote("A", 0.85)], conf)
    assert (agg.winner, agg.voted, agg.asked) == ("A", 1, 2)
    two = CascadePolicy("agreement")
    assert cascade(votes("A", "A", "B"), two).asked == 2
    agg = cascade(votes("A", "B", "B"), two)
    assert (agg.winner, agg.asked) == ("B", 3)
    swap = CascadePolicy("swap")
    agg = cascade([Vote("A", swapped_winner="B"), Vote("B", swapped_winner="B")], swap)
    assert (agg.winner, agg.asked, agg.stopped_at) == ("B", 2, 1)


def test_expected_cascade_cost() -> None:
    # Half stop at the first (cost 1), the rest go to the second (cost 10).
    assert expected_cascade_cost([1, 10], [0.5, 0.5]) == pytest.approx(1 + 0.5 * 10)
    assert expected_cascade_cost([1, 10, 100], [1.0, 0, 0]) == pytest.approx(1)


def test_cascade_stops_vectorised() -> None:
    conf = np.array([[0.9, 0.1], [0.2, 0.95], [np.nan, 0.1]])
    assert cascade_stops(conf, 0.8).tolist() == [0, 1, 1]


def test_calibration_hand_case() -> None:
    # Member 0 right when confident (0.9), wrong when not (0.3); member 1 always right.
    winners = np.array([[0, 0], [1, 0], [0, 0], [1, 0]])
    conf = np.array([[0.9, 1], [0.3, 1], [0.9, 1], [0.3, 1]], dtype=float)
    ref = np.array([0, 0, 0, 0])
    cal = calibrate_cascade(winners, conf, ref, target=1.0, member_cost=[1, 10])
    assert cal.target_met and cal.agreement.value == 1.0
    assert 0.3 < cal.threshold <= 0.9
    assert cal.escalated.value == 0.5 and cal.stop_share == (0.5, 0.5)
    assert cal.expected_cost == pytest.approx(1 + 0.5 * 10) and cal.all_cost == 11
    cal = calibrate_cascade(winners, conf, ref, target=0.5, member_cost=[1, 10])
    assert cal.threshold == pytest.approx(0.3) and cal.escalated.value == 0.0


def test_kappa_matrix_equals_sklearn() -> None:
    rng = np.random.default_rng(3)
    v = rng.integers(0, 3, size=(200, 3))
    v[rng.random((200, 3)) < 0.1] = -1
    k = kappa_matrix(v)
    for i in range(3):
        for j in range(3):
            both = (v[:, i] >= 0) & (v[:, j] >= 0)
            assert k[i][j] == pytest.approx(cohen_kappa_score(v[both, i], v[both, j]))


def test_position_consistency_hand_case() -> None:
    w = codes(["A", "A", "B", "A", "TIE", None])
    g = np.array([0, 0, 1, 1, 2, 2])
    s = np.array([False, True, False, True, False, True])
    est = position_consistency(w, g, s)
    assert (est.value, est.n) == (0.5, 2)


def test_panel_vs_member() -> None:
    ref = np.zeros(100, dtype=int)
    panel = np.zeros(100, dtype=int)
    member = np.zeros(100, dtype=int)
    member[:30] = 1
    out = panel_vs_member(panel, member, ref, 0)
    assert out.beats and out.difference.value == pytest.approx(0.3)
    out = panel_vs_member(member, panel, ref, 0)
    assert not out.beats
    assert not panel_vs_member(panel, panel, ref, 0).beats  # equal: no win


def test_n_eff_extremes() -> None:
    rng = np.random.default_rng(0)
    e = rng.random((5000, 1)) < 0.3
    same = np.repeat(e, 3, axis=1)
    assert n_eff(same).value == pytest.approx(1.0)
    indep = rng.random((20000, 3)) < 0.3
    assert n_eff(indep).value == pytest.approx(3.0, abs=0.1)
    assert n_eff(np.zeros((10, 3), dtype=bool)).value is None  # errors never vary
    assert n_eff(indep[:, :1]).value is None


# --------------------------------------------------------------------------- properties


@given(st.lists(labels, min_size=1, max_size=7), st.randoms())
def test_majority_ignores_member_order(ws: list[str | None], rnd) -> None:  # type: ignore[no-untyped-def]
    shuffled = list(ws)
    rnd.shuffle(shuffled)
    assert majority(votes(*ws)).winner == majority(votes(*shuffled)).winner


@given(st.lists(labels, min_size=1, max_size=7), st.sampled_from(["majority", "mean"]))
def test_flipping_every_vote_flips_the_aggregate(ws: list[str | None], rule: str) -> None:
    assert (
        aggregate(rule, votes(*(FLIP[w] for w in ws))).winner
        == FLIP[aggregate(rule, votes(*ws)).winner]
    )


@given(st.lists(labels, min_size=1, max_size=7), st.floats(0.1, 10))
def test_equal_weights_are_the_majority(ws: list[str | None], w: float) -> None:
    assert weighted(votes(*ws), [w] * len(ws)).winner == majority(votes(*ws)).winner


@given(st.lists(labels, min_size=1, max_size=7))
def test_unanimity_and_counts(ws: list[str | None]) -> None:
    agg = majority(votes(*ws))
    present = [w for w in ws if w is not None]
    assert agg.voted == len(present) and agg.members == len(ws)
    if present and len(set(present)) == 1:
        assert agg.winner == present[0] and mean(votes(*ws)).winner == present[0]


@given(
    st.lists(st.tuples(labels, st.floats(0, 1)), min_size=1, max_size=6),
    st.floats(0, 1),
)
def test_cascade_asks_a_prefix_and_threshold_extremes(
    answers: list[tuple[str | None, float]], t: float
) -> None:
    vs = [Vote(w, c) for w, c in answers]
    agg = cascade(vs, CascadePolicy("confidence", t))
    assert 1 <= agg.asked <= len(vs)
    assert cascade(vs, CascadePolicy("confidence", 2.0)).asked == len(vs)
    if vs[0].winner is not None:
        assert cascade(vs, CascadePolicy("confidence", 0.0)).asked == 1


@settings(max_examples=50)
@given(
    st.lists(st.floats(0, 100), min_size=1, max_size=5),
    st.lists(st.floats(0, 1), min_size=1, max_size=5),
)
def test_expected_cost_between_cheapest_first_and_all(costs: list[float], raw: list[float]) -> None:
    m = min(len(costs), len(raw))
    costs, raw = costs[:m], raw[:m]
    share = np.array(raw) + 1e-9
    share = share / share.sum()
    cost = expected_cascade_cost(costs, share.tolist())
    assert costs[0] - 1e-6 <= cost <= sum(costs) + 1e-6


@settings(max_examples=40)
@given(st.integers(0, 10_000), st.integers(2, 5))
def test_kappa_matrix_is_symmetric_with_unit_diagonal(seed: int, m: int) -> None:
    v = np.random.default_rng(seed).integers(0, 3, size=(30, m))
    k = kappa_matrix(v)
    for i in range(m):
        assert k[i][i] is None or k[i][i] == pytest.approx(1.0)
        for j in range(m):
            assert k[i][j] == k[j][i]


@settings(max_examples=40)
@given(st.integers(0, 10_000), st.integers(2, 6))
def test_n_eff_within_one_and_members(seed: int, m: int) -> None:
    e = np.random.default_rng(seed).random((200, m)) < 0.4
    out = n_eff(e)
    assert out.value is not None and 1.0 <= out.value <= m


@settings(max_examples=40)
@given(st.integers(0, 10_000))
def test_calibrated_weights_nonnegative_and_ordered(seed: int) -> None:
    rng = np.random.default_rng(seed)
    acc = np.sort(rng.uniform(0.3, 0.95, 3))
    correct = rng.random((300, 3)) < acc
    w = calibrated_weights(correct, np.ones_like(correct))
    assert (w >= 0).all()
    rates = correct.mean(axis=0)
    order = np.argsort(rates)
    assert np.all(np.diff(w[order]) >= -1e-12)  # more accurate, at least as heavy


@settings(max_examples=30)
@given(st.integers(0, 10_000), st.floats(0.5, 1.0))
def test_calibration_meets_a_reachable_target(seed: int, target: float) -> None:
    rng = np.random.default_rng(seed)
    winners = rng.integers(0, 2, size=(80, 3))
    winners[:, -1] = 0  # the last member is always right
    conf = rng.random((80, 3))
    cal = calibrate_cascade(winners, conf, np.zeros(80, dtype=int), target=target)
    assert cal.target_met and cal.agreement.value is not None
    assert cal.agreement.value >= target - 1e-9
    assert sum(cal.stop_share) == pytest.approx(1.0)


def _simulate(rng: np.random.Generator, n: int, accuracy: list[float]):  # type: ignore[no-untyped-def]
    """Judges of known accuracy whose confidence is higher when they are right."""
    ref = rng.integers(0, 2, size=n)
    right = rng.random((n, len(accuracy))) < np.array(accuracy)
    winners = np.where(right, ref[:, None], 1 - ref[:, None])
    conf = np.where(right, rng.beta(5, 2, right.shape), rng.beta(2, 5, right.shape))
    return winners, conf, ref


def test_cascade_calibration_holds_on_fresh_comparisons() -> None:
    """The threshold calibrated on 2,000 labelled comparisons, applied to 20,000 new ones
    from the same judges, reaches the promised agreement and escalation share within
    sampling error (3 standard errors of both samples)."""
    rng = np.random.default_rng(16)
    accuracy = [0.7, 0.85, 0.95]
    w, c, r = _simulate(rng, 2000, accuracy)
    cal = calibrate_cascade(w, c, r, target=0.88, member_cost=[1, 5, 25])
    assert cal.target_met
    w2, c2, r2 = _simulate(rng, 20_000, accuracy)
    stops = cascade_stops(c2, cal.threshold)
    agree = float((w2[np.arange(len(r2)), stops] == r2).mean())
    escalated = float((stops > 0).mean())

    def se(p: float) -> float:
        return math.sqrt(p * (1 - p) / 2000) + math.sqrt(p * (1 - p) / 20_000)

    assert cal.agreement.value is not None and cal.escalated.value is not None
    assert abs(agree - cal.agreement.value) <= 3 * se(cal.agreement.value)
    assert abs(escalated - cal.escalated.value) <= 3 * se(cal.escalated.value)
    # Cheaper than asking everyone, and more accurate than the cheapest member alone.
    assert cal.expected_cost < cal.all_cost
    assert agree > accuracy[0] + 0.05


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(st.sampled_from(["A", "B", "TIE"]), st.sampled_from(["A", "B", "TIE"])),
        min_size=2,
        max_size=60,
    )
)
def test_kappa_matrix_matches_sklearn_on_any_verdicts(pairs: list[tuple[str, str]]) -> None:
    v = np.array([codes([a, b]) for a, b in pairs])
    k = kappa_matrix(v)[0][1]
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    if len(set(a) | set(b)) == 1:  # one class only: undefined (sklearn returns nan)
        assert k is None
        return
    expected = cohen_kappa_score(a, b)
    if math.isnan(expected):
        assert k is None
    else:
        assert k == pytest.approx(expected)


def test_panel_strength_is_the_winners_voters_majority() -> None:
    # Two of the three A voters said "much better"; the B voter does not count.
    assert panel_strength("A", [("A", 2), ("A", 2), ("A", 1), ("B", 2)]) == 2
    # A split among the winner's voters is not a majority for "much better".
    assert panel_strength("A", [("A", 2), ("A", 1)]) == 1
    # Voters without a strength (the JSON format) are left out; none gives none.
    assert panel_strength("B", [("B", None), ("B", 2), None]) == 2
    assert panel_strength("B", [("B", None), ("A", 2)]) is None
    assert panel_strength("TIE", [("TIE", 1)]) is None
    assert panel_strength(None, [("A", 2)]) is None


strengths = st.sampled_from([None, 1, 2])


@given(st.lists(st.one_of(st.none(), st.tuples(labels, strengths)), max_size=9), labels)
def test_panel_strength_depends_only_on_the_winners_voters(
    vs: list[tuple[str | None, int | None] | None], winner: str | None
) -> None:
    got = panel_strength(winner, vs)
    mine = [v for v in vs if v is not None and v[0] == winner]
    assert panel_strength(winner, mine) == got
    assert got in (None, 1, 2)
    if got is not None:
        assert winner in ("A", "B") and any(s is not None for _, s in mine)
