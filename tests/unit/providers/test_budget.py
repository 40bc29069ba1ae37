"""Spending caps reserved before the call, settled after."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.providers.budget import BudgetExceeded, Budgets


def test_no_cap_means_no_limit() -> None:
    budgets = Budgets()
    assert budgets.reserve("persona:1", 1e9) is None
    budgets.settle(None, 5.0)
    assert budgets.committed("persona:1") == 0.0 and not budgets.exhausted("persona:1")


def test_calls_in_flight_cannot_pass_the_cap_together() -> None:
    budgets = Budgets()
    budgets.set_cap("persona:1", 1.0, spent=0.25)
    held = []
    refused = 0
    for _ in range(100):  # 100 calls start before any returns
        try:
            held.append(budgets.reserve("persona:1", 0.125))
        except BudgetExceeded:
            refused += 1
    assert len(held) == 6 and refused == 94  # 0.25 + 6 x 0.125 = 1.0
    assert budgets.exhausted("persona:1")
    for r in held:
        budgets.settle(r, 0.1)  # each cost a little less than estimated
    assert budgets.committed("persona:1") == pytest.approx(0.25 + 6 * 0.1)


def test_the_lagging_accounting_never_lowers_the_spend_and_a_raise_rearms() -> None:
    budgets = Budgets()
    budgets.set_cap("persona:1", 1.0, spent=0.0)
    budgets.settle(budgets.reserve("persona:1", 0.5), 0.6)
    budgets.set_cap("persona:1", 1.0, spent=0.1)  # accounting not written yet
    assert budgets.committed("persona:1") == pytest.approx(0.6)
    with pytest.raises(BudgetExceeded):
        budgets.reserve("persona:1", 0.5)
    budgets.set_cap("persona:1", 2.0, spent=0.6)
    assert not budgets.exhausted("persona:1")
    assert budgets.reserve("persona:1", 0.5) is not None
    budgets.set_cap("persona:1", None, spent=0.0)
    assert budgets.reserve("persona:1", 100.0) is None


@given(
    cap=st.floats(0.01, 10),
    calls=st.lists(
        st.tuples(st.floats(0, 1), st.floats(0, 1), st.booleans()), min_size=1, max_size=60
    ),
)
def test_settled_spend_never_passes_the_cap_when_estimates_hold(
    cap: float, calls: list[tuple[float, float, bool]]
) -> None:
    """Whatever interleaving, with actual <= estimate the spend stays under the cap."""
    budgets = Budgets()
    budgets.set_cap("k", cap, spent=0.0)
    open_ = []
    for estimate, fraction, finish_now in calls:
        try:
            open_.append((budgets.reserve("k", estimate), estimate * fraction))
        except BudgetExceeded:
            pass
        if finish_now and open_:
            r, actual = open_.pop(0)
            budgets.settle(r, actual)
        assert budgets.committed("k") <= cap + 1e-9
    for r, actual in open_:
        budgets.settle(r, actual)
    assert budgets.committed("k") <= cap + 1e-9
