"""Adaptive tournaments: the fit's uncertainty, batch selection, stopping rules, the estimate."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from llmjudge.core.ratings.bradley_terry import PairIndex, fit_bradley_terry
from llmjudge.core.tournaments.adaptive import (
    SOURCE_COVERAGE,
    SOURCE_RANDOM,
    AdaptiveState,
    Budget,
    StopRule,
    check_stop,
    field_rate,
    fit_state,
    free_for_all_comparisons,
    pillar_prompt_keys,
    rank_width,
    select_batch,
    stability_widths,
    state_at,
)
from llmjudge.core.tournaments.adaptive.state import DEFAULT_PRIOR as DESIGN_PRIOR
from llmjudge.core.tournaments.simulation import (
    JudgeModel,
    estimate_comparisons,
    judge,
    simulate_session,
)
from llmjudge.providers.simulator import simulate_pairwise
from llmjudge.providers.simulator_params import SimulatorParams


def _random_outcomes(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, m)
    b = rng.integers(0, n - 1, m)
    b += b >= a
    q = rng.standard_normal(n)
    return a, b, judge(JudgeModel(), q[a], q[b], rng)


def _state(theta: list[float] | np.ndarray, sd: float, games: int = 10) -> AdaptiveState:
    """A constructed state: independent strengths with a common standard deviation."""
    theta = np.asarray(theta, dtype=np.float64)
    n = theta.size
    return AdaptiveState(
        theta=theta - theta.mean(),
        games=np.full(n, games),
        var=np.full(n, sd * sd),
        cov=np.eye(n) * sd * sd,
        precision_diag=np.full(n, 1 / (sd * sd)),
        n_comparisons=games * n // 2,
    )


# --------------------------------------------------------------------------- fit


def test_fit_matches_the_ratings_fit_and_the_hessian_inverse() -> None:
    n = 12
    a, b, s = _random_outcomes(n, 200, seed=1)
    state = fit_state(n, a, b, s)
    pairs = PairIndex.build(a, b, s, n)
    wins, games = pairs.totals()
    np.testing.assert_allclose(
        state.theta, fit_bradley_terry(pairs, wins, games, prior=DESIGN_PRIOR), atol=1e-8
    )
    assert state.games.sum() == 2 * 200
    # the covariance is the inverse of the penalised Hessian, built here the slow way
    hess = np.eye(n) * DESIGN_PRIOR
    for i, j in zip(a.tolist(), b.tolist(), strict=True):
        p = 1 / (1 + np.exp(state.theta[j] - state.theta[i]))
        w = p * (1 - p)
        hess[i, i] += w
        hess[j, j] += w
        hess[i, j] -= w
        hess[j, i] -= w
    cov = np.linalg.inv(hess)
    np.testing.assert_allclose(state.cov, cov, rtol=1e-6, atol=1e-9)
    centred = cov - cov.mean(0) - cov.mean(1)[:, None] + cov.mean()
    np.testing.assert_allclose(state.var, np.diag(centred), rtol=1e-6)
    i, j = np.array([0, 3]), np.array([5, 7])
    np.testing.assert_allclose(
        state.diff_var(i, j), cov[i, i] + cov[j, j] - 2 * cov[i, j], rtol=1e-6
    )


def test_fit_warm_start_and_diagonal_approximation() -> None:
    n = 30
    a, b, s = _random_outcomes(n, 400, seed=2)
    cold = fit_state(n, a, b, s)
    warm = fit_state(n, a, b, s, init=cold.theta + 0.3)
    np.testing.assert_allclose(warm.theta, cold.theta, atol=1e-5)
    diag = fit_state(n, a, b, s, dense_limit=0)
    assert diag.cov is None
    np.testing.assert_allclose(diag.var, 1 / diag.precision_diag)
    i, j = np.arange(n - 1), np.arange(1, n)
    np.testing.assert_allclose(
        diag.diff_var(i, j), 1 / diag.precision_diag[i] + 1 / diag.precision_diag[j]
    )
    np.testing.assert_allclose(diag.theta, cold.theta)


def test_more_comparisons_shrink_the_intervals() -> None:
    n = 10
    a, b, s = _random_outcomes(n, 1000, seed=3)
    few, many = fit_state(n, a[:100], b[:100], s[:100]), fit_state(n, a, b, s)
    assert np.all(many.var < few.var)
    assert rank_width(many) <= rank_width(few)


def test_empty_state_and_invalid_input() -> None:
    empty = np.empty(0, dtype=np.int64)
    state = fit_state(4, empty, empty, np.empty(0))
    assert np.all(state.theta == 0) and np.all(state.games == 0)
    best, worst = state.rank_intervals()
    assert np.all(best == 1) and np.all(worst == 4)
    with pytest.raises(ValueError):
        fit_state(3, np.array([0]), np.array([0]), np.array([1.0]))
    with pytest.raises(ValueError):
        fit_state(3, np.array([0]), np.array([3]), np.array([1.0]))


@given(
    theta=st.lists(st.floats(-5, 5), min_size=2, max_size=30, unique=True),
    sd=st.floats(0.01, 3),
)
def test_rank_intervals_contain_the_point_rank(theta: list[float], sd: float) -> None:
    state = _state(theta, sd)
    best, worst = state.rank_intervals(0.95)
    rank = np.empty(state.n, dtype=np.int64)
    rank[state.order()] = np.arange(1, state.n + 1)
    assert np.all(best >= 1) and np.all(worst <= state.n) and np.all(best <= worst)
    assert np.all((best <= rank) & (rank <= worst))


# --------------------------------------------------------------------------- selection


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 60),
    size=st.integers(0, 120),
    epsilon=st.floats(0, 1),
    swap_share=st.floats(0, 0.5),
    strategy=st.sampled_from(["information", "swiss", "random"]),
    position=st.sampled_from(["once", "both"]),
    seed=st.integers(0, 2**32 - 1),
    data=st.integers(0, 300),
)
def test_batch_size_uniqueness_and_twins(
    n: int,
    size: int,
    epsilon: float,
    swap_share: float,
    strategy: str,
    position: str,
    seed: int,
    data: int,
) -> None:
    a, b, s = _random_outcomes(n, data, seed % 1000)
    state = fit_state(n, a, b, s)
    batch = select_batch(
        state,
        size,
        seed=seed,
        strategy=strategy,  # type: ignore[arg-type]
        epsilon=epsilon,
        position=position,  # type: ignore[arg-type]
        swap_share=swap_share,
    )
    field = n * (n - 1) // 2
    originals = ~batch.is_swap
    pairs = np.minimum(batch.a, batch.b) * n + np.maximum(batch.a, batch.b)
    assert len(batch) <= size
    assert np.all(batch.a != batch.b) and np.all((0 <= batch.a) & (batch.a < n))
    assert np.unique(pairs[originals]).size == originals.sum()  # no pair twice
    if position == "both":
        assert originals.sum() == min(size // 2, field)
        assert batch.is_swap.sum() == originals.sum()
    else:
        expected_pairs = min(size - int(np.floor(size * swap_share / (1 + swap_share))), field)
        assert originals.sum() == expected_pairs
        if expected_pairs == size - int(np.floor(size * swap_share / (1 + swap_share))):
            assert len(batch) == size
    # every twin is its original in the other order, in the same group
    orig = {int(g): (int(x), int(y)) for g, x, y, w in zip(batch.group, batch.a, batch.b, batch.is_swap, strict=True) if not w}  # fmt: skip
    for g, x, y in zip(batch.group[batch.is_swap], batch.a[batch.is_swap], batch.b[batch.is_swap], strict=True):  # fmt: skip
        assert orig[int(g)] == (int(y), int(x))
    assert np.all((batch.propensity > 0) & (batch.propensity <= 1))


def test_selection_is_deterministic_by_seed() -> None:
    state = fit_state(50, *_random_outcomes(50, 500, seed=4))
    one, two = select_batch(state, 40, seed=7), select_batch(state, 40, seed=7)
    other = select_batch(state, 40, seed=8)
    for field in ("a", "b", "group", "is_swap", "source", "propensity"):
        np.testing.assert_array_equal(getattr(one, field), getattr(two, field))
    assert not np.array_equal(one.a, other.a)


def test_information_prefers_uncertain_close_pairs() -> None:
    # three clear tiers of players; only the middle pair (1, 2) is uncertain
    state = _state([20.0, 0.05, 0.0, -20.0], sd=0.3)
    batch = select_batch(state, 1, epsilon=0.0, swap_share=0.0, min_games=0)
    assert {int(batch.a[0]), int(batch.b[0])} == {1, 2}


def test_top_k_targets_the_cut() -> None:
    theta = np.r_[np.linspace(20, 10, 5), [0.1, -0.1], np.linspace(-10, -20, 13)]
    state = _state(theta, sd=0.5)
    batch = select_batch(
        state, 3, rule=StopRule(kind="top_k", k=6), epsilon=0.0, swap_share=0.0, min_games=0
    )
    # the 6th and 7th players straddle the top-6 cut: their pair comes first
    pairs = {frozenset((int(x), int(y))) for x, y in zip(batch.a, batch.b, strict=True)}
    assert frozenset((5, 6)) in pairs


def test_no_player_starves() -> None:
    """Even when the state says every order is settled, the uniform share reaches everyone."""
    n = 50
    state = _state(np.linspace(-50, 50, n), sd=0.01)
    seen = np.zeros(n, dtype=bool)
    for r in range(150):  # 2 uniform pairs a round: each player unseen w.p. 0.96^300
        batch = select_batch(state, 10, seed=r, epsilon=0.2, min_games=0)
        seen[batch.a] = seen[batch.b] = True
    assert seen.all()


def test_under_sampled_players_come_first() -> None:
    n = 40
    a, b, s = _random_outcomes(30, 300, seed=5)  # players 30..39 never compared
    state = fit_state(n, a, b, s)
    batch = select_batch(state, 12, epsilon=0.0, swap_share=0.0)
    assert set(range(30, 40)) <= set(batch.a.tolist()) | set(batch.b.tolist())
    # matched among themselves: five coverage pairs reach all ten
    coverage = batch.source == SOURCE_COVERAGE
    assert np.sum(coverage) == 5
    assert set(batch.a[coverage]) | set(batch.b[coverage]) == set(range(30, 40))


def test_allowed_pairs_only() -> None:
    n = 6
    allowed = np.zeros((n, n), dtype=bool)
    allowed[0, 1] = allowed[2, 3] = allowed[4, 5] = allowed[0, 5] = True
    state = fit_state(n, *_random_outcomes(n, 30, seed=6))
    batch = select_batch(state, 10, allowed=allowed, swap_share=0.0)
    sym = allowed | allowed.T
    assert np.all(sym[batch.a, batch.b])
    assert (~batch.is_swap).sum() == 4  # every allowed pair once, and no more


def test_inverse_probability_weights_on_the_uniform_share() -> None:
    state = fit_state(100, *_random_outcomes(100, 2000, seed=7))
    batch = select_batch(state, 100, epsilon=0.3, swap_share=0.0, min_games=0)
    w = batch.random_share_weights()
    uniform = batch.source == SOURCE_RANDOM
    assert uniform.sum() == 30
    np.testing.assert_allclose(w[uniform], 1 / batch.propensity[uniform])
    np.testing.assert_allclose(batch.propensity[uniform], 30 / (100 * 99 / 2))
    assert np.all(w[~uniform] == 0)


def test_selection_for_1000_threads_is_fast() -> None:
    n = 1000
    state = fit_state(n, *_random_outcomes(n, 20_000, seed=8))
    for strategy in ("information", "swiss"):
        start = time.perf_counter()
        batch = select_batch(state, 1000, strategy=strategy, seed=1)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - start
        assert len(batch) == 1000
        assert elapsed < 1.0, f"{strategy} took {elapsed:.2f} s"


# --------------------------------------------------------------------------- stopping


def test_top_k_rule_counts_separated_players() -> None:
    rule = StopRule(kind="top_k", k=3, confidence=0.95)
    clear = check_stop(_state([30, 20, 10, 0, -1, -2], sd=0.5), rule, spent=100)
    assert clear.stop and clear.reason == "rule"
    assert clear.progress.startswith("top 3 separated at 95%: 3 of 3")
    # the 3rd and 4th overlap: two of three separated, keep going
    close = check_stop(_state([30, 20, 0.2, 0, -10, -20], sd=0.5), rule, spent=100)
    assert not close.stop and (close.done, close.total) == (2, 3)
    assert "2 of 3" in close.progress


def test_ranking_rule_adjacent_separation_and_stability() -> None:
    rule = StopRule(kind="ranking", stable_rounds=2, tolerance=0.01)
    separated = check_stop(_state([9, 6, 3, 0, -3], sd=0.2), rule, spent=50)
    assert separated.stop and separated.done == separated.total == 4
    overlapping = _state(np.linspace(6, -6, 20), sd=0.5)  # 19 ranks: moves below 0.19 count
    w = rank_width(overlapping)  # the current width ends the history
    assert w < 9.5
    moving = check_stop(overlapping, rule, spent=50, width_history=[w + 3.0, w + 1.0])
    assert not moving.stop and "stable for 0 of 2" in moving.progress
    once = check_stop(overlapping, rule, spent=50, width_history=[w + 1.0, w + 0.1])
    assert not once.stop and "stable for 1 of 2" in once.progress
    stable = check_stop(overlapping, rule, spent=50, width_history=[w + 0.25, w + 0.15])
    assert stable.stop and stable.reason == "rule"
    assert "stable for 2 of 2 checks" in stable.progress
    # no history: nothing to compare, not stable
    assert not check_stop(overlapping, rule, spent=50).stop
    # saturated intervals (over half the field wide) are not stability
    wide = _state(np.linspace(1, -1, 20), sd=5.0)
    assert rank_width(wide) >= 9.5
    saturated = check_stop(wide, rule, spent=50, width_history=[rank_width(wide)] * 2)
    assert not saturated.stop


def test_stability_widths_are_prefix_fits_independent_of_rounds() -> None:
    n = 15
    a, b, s = _random_outcomes(n, 900, seed=4)
    rule = StopRule(kind="ranking", stable_rounds=2)
    widths = stability_widths(n, a, b, s, rule)
    expected = [
        rank_width(fit_state(n, a[:cut], b[:cut], s[:cut]))
        for cut in (int(900 * (8 / 9) ** 2), int(900 * 8 / 9))
    ]
    np.testing.assert_allclose(widths, expected, rtol=1e-6)
    # more data, narrower intervals: the history falls towards the current width
    assert widths[0] >= widths[1] >= rank_width(fit_state(n, a, b, s)) - 0.5
    # a function of the results alone: the same results give the same history, whatever
    # rounds they came in (there is no round argument), and a warm start changes nothing
    warm = stability_widths(n, a, b, s, rule, init=fit_state(n, a, b, s).theta)
    np.testing.assert_allclose(warm, widths, rtol=1e-6)
    assert len(stability_widths(n, a, b, s, StopRule(kind="ranking", stable_rounds=3))) == 3


def test_rules_fail_closed_below_min_games() -> None:
    rule = StopRule(kind="top_k", k=2, min_games=5)
    decision = check_stop(_state([30, 20, 0, -10], sd=0.1, games=4), rule, spent=8)
    assert not decision.stop and "below 5 comparisons" in decision.progress


def test_budget_in_comparisons_and_usd() -> None:
    state = _state([1, 0, -1], sd=5.0)
    rule = StopRule(kind="budget", budget=Budget(comparisons=100))
    assert not check_stop(state, rule, spent=99).stop
    spent_all = check_stop(state, rule, spent=100)
    assert spent_all.stop and spent_all.reason == "budget" and spent_all.remaining == 0
    usd = Budget(usd=1.0, cost_per_comparison=0.03)
    assert usd.limit() == 33
    assert "$0.30 of $1.00" in usd.describe(10)
    both = Budget(comparisons=20, usd=1.0, cost_per_comparison=0.03)
    assert both.limit() == 20
    # the budget stops every rule, the rule's own condition unmet
    ranking = StopRule(kind="ranking", budget=Budget(comparisons=10))
    assert check_stop(state, ranking, spent=10).reason == "budget"
    with pytest.raises(ValueError):
        Budget(usd=1.0).limit()
    with pytest.raises(ValueError):
        StopRule(kind="budget")


# --------------------------------------------------------------------------- simulation


def test_judge_model_is_the_simulator_model() -> None:
    params = SimulatorParams()
    model = JudgeModel()
    assert (model.noise, model.position_bias, model.tie_band) == (
        params.noise,
        params.position_bias,
        params.tie_band,
    )
    # without noise the verdict is a function of the qualities: both must agree
    quiet = SimulatorParams(noise=0.0)
    qualities = np.linspace(-1, 1, 9)
    rng = np.random.default_rng(0)
    for qa in qualities:
        for qb in qualities:
            ctx = {
                "thread_a": {"id": 1, "quality": float(qa)},
                "thread_b": {"id": 2, "quality": float(qb)},
            }
            winner = simulate_pairwise(quiet, ctx)["winner"]
            score = judge(JudgeModel(noise=0.0), np.array([qa]), np.array([qb]), rng)[0]
            assert {"A": 1.0, "B": 0.0, "TIE": 0.5}[winner] == score


def test_simulated_session_stops_by_its_rule_within_budget() -> None:
    q = np.random.default_rng(9).standard_normal(30)
    rule = StopRule(kind="top_k", k=3, budget=Budget(comparisons=400))
    run = simulate_session(q, rule, seed=1)
    assert run.a.size <= 400
    assert run.stopped_by in ("rule", "budget")
    if run.stopped_by == "rule":
        assert check_stop(run.state, rule, spent=run.a.size).stop
    again = simulate_session(q, rule, seed=1)
    np.testing.assert_array_equal(run.a, again.a)
    np.testing.assert_array_equal(run.score_a, again.score_a)


def test_estimate_is_labelled_seeded_and_fast() -> None:
    rule = StopRule(kind="ranking")
    start = time.perf_counter()
    estimate = estimate_comparisons(100, rule, runs=3, seed=2)
    elapsed = time.perf_counter() - start
    assert estimate.label.startswith("estimate:")
    assert estimate.low <= estimate.median <= estimate.high
    assert estimate.free_for_all == free_for_all_comparisons(100) == 4950
    assert estimate.free_for_all_both_orders == 9900
    # one order plus a few twins costs less than both orders for the same pairs
    assert estimate.median < estimate.both_orders_equivalent
    assert estimate == estimate_comparisons(100, rule, runs=3, seed=2)
    assert elapsed < 5.0, f"estimate took {elapsed:.1f} s"  # generous: shared CPUs


def test_pillar_prompt_keys_are_shared_keys() -> None:
    answered = np.array(
        [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1], [1, 1, 1, 0]], dtype=bool
    )  # pillars x prompt keys
    a = np.array([0, 0, 1, 2, 3, 3])
    b = np.array([1, 3, 3, 0, 1, 0])
    keys = pillar_prompt_keys(a, b, answered, seed=3)
    assert keys[3] == -1  # pillars 2 and 0 share no key
    for r in np.flatnonzero(keys >= 0):
        assert answered[a[r], keys[r]] and answered[b[r], keys[r]]
    np.testing.assert_array_equal(keys, pillar_prompt_keys(a, b, answered, seed=3))
    allowed = answered.astype(int) @ answered.T.astype(int) > 0
    state = fit_state(4, np.empty(0, int), np.empty(0, int), np.empty(0))
    batch = select_batch(state, 6, allowed=allowed, swap_share=0.0)
    assert np.all(pillar_prompt_keys(batch.a, batch.b, answered) >= 0)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 25), k=st.integers(1, 30), seed=st.integers(0, 1000))
def test_top_k_selection_and_rule_for_any_k(n: int, k: int, seed: int) -> None:
    state = fit_state(n, *_random_outcomes(n, 4 * n, seed))
    rule = StopRule(kind="top_k", k=k, min_games=0)
    batch = select_batch(state, 10, rule=rule, seed=seed, swap_share=0.0)
    assert (~batch.is_swap).sum() == min(10, n * (n - 1) // 2)
    decision = check_stop(state, rule, spent=4 * n)
    assert 0 <= decision.done <= decision.total == min(k, n)
    if k >= n:  # nobody outside the top: trivially separated
        assert decision.stop


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 25), m=st.integers(0, 120), seed=st.integers(0, 10_000))
def test_order_gain_is_the_weighted_variance_removed_from_neighbour_pairs(
    n: int, m: int, seed: int
) -> None:
    """_order_gain against the definition: apply the rank-one update of one comparison of
    (i, j) to the covariance and sum, over neighbour pairs (k, l) in the order, the drop of
    Var(theta_k - theta_l) weighted by P(wrong order) / Var."""
    from scipy.special import expit, ndtr

    from llmjudge.core.tournaments.adaptive.design import _order_gain

    a, b, s = _random_outcomes(n, m, seed)
    state = fit_state(n, a, b, s)
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, 12)
    j = (i + 1 + rng.integers(0, n - 1, 12)) % n
    window = 3
    gain = _order_gain(state, i, j, window, chunk=5)  # several chunks
    cov = state.cov
    assert cov is not None
    order = state.order()
    pairs = [
        (order[x], order[x + d]) for d in range(1, min(window, n - 1) + 1) for x in range(n - d)
    ]
    for r in range(i.size):
        e = np.zeros(n)
        e[i[r]], e[j[r]] = 1.0, -1.0
        v = e @ cov @ e
        p = expit(state.theta[i[r]] - state.theta[j[r]])
        f = p * (1 - p)
        u = cov @ e
        after = cov - (f / (1 + v * f)) * np.outer(u, u)
        want = 0.0
        for k, l in pairs:  # noqa: E741
            vkl = cov[k, k] + cov[l, l] - 2 * cov[k, l]
            wkl = after[k, k] + after[l, l] - 2 * after[k, l]
            weight = ndtr(-abs(state.theta[k] - state.theta[l]) / np.sqrt(vkl)) / vkl
            want += weight * (vkl - wkl)
        assert gain[r] * f / (1 + v * f) == pytest.approx(want, rel=1e-6, abs=1e-12)


# --------------------------------------------------------------------------- field-wide


def test_field_rate_is_the_weighted_mean_with_kish_n() -> None:
    r = field_rate(np.array([1.0, 0.0, 1.0, 0.5]), np.array([2.0, 2.0, 0.0, 4.0]))
    assert r.value == pytest.approx((2 * 1 + 2 * 0 + 4 * 0.5) / 8)
    assert r.n == 3 and r.n_eff == pytest.approx(64 / 24)
    assert r.low is not None and r.high is not None and r.low < r.value < r.high
    empty = field_rate(np.array([1.0]), np.array([0.0]))
    assert (empty.value, empty.n, empty.low) == (None, 0, None)


def test_uniform_share_recovers_the_field_rate_that_chosen_pairs_miss() -> None:
    """Ties are common between close players: adaptive rounds pick close pairs, so the
    tie rate over every judged pair overstates the field's, while the inverse-probability
    weighted uniform share estimates it without bias."""
    n, model = 60, JudgeModel(noise=0.5, position_bias=0.0, tie_band=0.3)
    q = np.random.default_rng(3).standard_normal(n)
    rng = np.random.default_rng(4)
    i, j = np.triu_indices(n, 1)
    # the field's tie rate, exactly: P(|q_i - q_j + noise Z| < band) over all pairs
    d = q[i] - q[j]
    truth = float(
        np.mean(norm.cdf((model.tie_band - d) / 0.5) - norm.cdf((-model.tie_band - d) / 0.5))
    )
    empty = np.empty(0, dtype=np.int64)
    state = fit_state(n, empty, empty, np.empty(0))
    a = b = empty
    s, w = np.empty(0), np.empty(0)
    for r in range(40):
        batch = select_batch(state, 60, seed=r, epsilon=0.25, swap_share=0.0)
        score = judge(model, q[batch.a], q[batch.b], rng)
        a, b, s = np.r_[a, batch.a], np.r_[b, batch.b], np.r_[s, score]
        w = np.r_[w, batch.random_share_weights()]
        state = fit_state(n, a, b, s, init=state.theta)
    ties = (s == 0.5).astype(float)
    field = field_rate(ties, w)
    judged = field_rate(ties, np.ones(s.size))
    assert field.n == int(np.count_nonzero(w)) > 400
    assert field.low <= truth <= field.high, (field, truth)
    assert judged.value > truth + 0.05 and not judged.low <= truth <= judged.high


def test_state_at_the_fit_is_the_fit() -> None:
    """The oracle's state at given strengths is the fit's own Laplace state when given
    the fitted strengths (repeated pairs add up as the fit's pair totals do)."""
    n = 9
    a, b, s = _random_outcomes(n, 300, seed=11)
    fit = fit_state(n, a, b, s)
    at = state_at(fit.theta, a, b)
    np.testing.assert_allclose(at.cov, fit.cov, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(at.var, fit.var, rtol=1e-8)
    np.testing.assert_array_equal(at.games, fit.games)
    assert at.n_comparisons == fit.n_comparisons == 300
