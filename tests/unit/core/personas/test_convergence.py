"""Convergence needs evidence: per-class minimums, honest bulk labels, F1's lower bound."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.personas.convergence import (
    BELOW_TARGET,
    CONVERGED,
    MOSTLY_BULK,
    NEEDS_MORE,
    ConvergenceRule,
    bulk_summary,
    convergence_status,
)


def labels(tp: int, tn: int, fp: int, fn: int) -> tuple[list[bool], list[bool]]:
    human = [True] * tp + [False] * tn + [False] * fp + [True] * fn
    judge = [True] * tp + [False] * tn + [True] * fp + [False] * fn
    return human, judge


def test_the_issue_case_seven_pairs_is_not_trained() -> None:
    """F1 0.80 on 7 held-out pairs was called Trained; now it needs more pairs."""
    # kappa 0.36, one of three wrong answers caught
    human, judge = labels(tp=4, tn=1, fp=2, fn=0)
    s = convergence_status(human, judge, rule=ConvergenceRule(target_f1=0.8, basis="point"))
    assert s.f1.value == pytest.approx(0.8) and s.compared == pytest.approx(0.8)
    assert s.status == NEEDS_MORE and not s.converged
    assert (s.positives, s.negatives) == (4, 3)
    assert (s.more_positives, s.more_negatives) == (6, 7)
    assert s.message.startswith(
        "Needs more labelled pairs: 6 more pairs the human calls correct and "
        "7 more pairs the human calls incorrect in the selection split (at least 10 of each)"
    )
    assert s.f1.low < 0.6  # and its interval would not have let it through either


def test_one_class_short_says_which() -> None:
    s = convergence_status(*labels(tp=30, tn=9, fp=0, fn=0))
    assert s.status == NEEDS_MORE and (s.more_positives, s.more_negatives) == (0, 1)
    assert "1 more pair the human calls incorrect" in s.message
    assert "correct and" not in s.message


def test_lower_bound_is_stricter_than_the_point_estimate() -> None:
    data = labels(tp=17, tn=17, fp=3, fn=3)  # F1 0.85 on 40 pairs
    point = convergence_status(*data, rule=ConvergenceRule(target_f1=0.8, basis="point"))
    lower = convergence_status(*data, rule=ConvergenceRule(target_f1=0.8))
    assert point.status == CONVERGED and point.compared == pytest.approx(0.85)
    assert lower.status == BELOW_TARGET and lower.compared < 0.8 < lower.f1.value
    assert "F1 lower bound" in lower.message and lower.f1.n == 40
    big = convergence_status(*labels(tp=170, tn=170, fp=10, fn=10))
    assert big.status == CONVERGED and big.converged and big.compared >= 0.8


def test_a_mostly_bulk_persona_cannot_converge_and_says_so() -> None:
    human, judge = labels(tp=20, tn=20, fp=0, fn=0)  # "agree with all": perfect by click
    bulk = [True] * 30 + [False] * 10
    s = convergence_status(human, judge, bulk=bulk)
    assert s.status == MOSTLY_BULK and not s.converged
    assert s.bulk.bulk == 30 and s.bulk.share == pytest.approx(0.75) and s.bulk.mostly
    assert "30 of 40 labels (75%) are bulk 'agree with all' labels, more than 50%" in s.message
    assert s.warnings == (s.bulk.message,)
    # the user may let it through, but the warning stays
    lenient = convergence_status(human, judge, bulk=bulk, rule=ConvergenceRule(bulk_blocks=False))
    assert lenient.status == CONVERGED and lenient.warnings
    # half is not "most"
    half = convergence_status(human, judge, bulk=[True] * 20 + [False] * 20)
    assert half.status == CONVERGED and not half.bulk.mostly and half.warnings == ()


def test_configurable_minimum() -> None:
    data = labels(tp=5, tn=5, fp=0, fn=0)
    assert convergence_status(*data).status == NEEDS_MORE
    s = convergence_status(*data, rule=ConvergenceRule(min_per_class=5, target_f1=0.5))
    assert s.status == CONVERGED


@given(
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 10),
    st.integers(0, 10),
    st.integers(1, 20),
    st.floats(0, 1),
)
def test_converged_only_with_evidence_and_target(
    tp: int, tn: int, fp: int, fn: int, minimum: int, target: float
) -> None:
    rule = ConvergenceRule(min_per_class=minimum, target_f1=target)
    s = convergence_status(*labels(tp, tn, fp, fn), rule=rule, rounds=200)
    if s.converged:
        assert tp + fn >= minimum and tn + fp >= minimum
        assert s.f1.low >= target
    if tp + fn < minimum or tn + fp < minimum:
        assert s.status == NEEDS_MORE
        assert s.more_positives == max(0, minimum - tp - fn)
        assert s.more_negatives == max(0, minimum - tn - fp)


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        convergence_status([True], [True], bulk=[True, False])
    for kwargs in ({"target_f1": 1.5}, {"basis": "median"}, {"min_per_class": 0}):
        with pytest.raises(ValueError):
            ConvergenceRule(**kwargs)
    assert bulk_summary([]).share == 0.0 and not bulk_summary([]).mostly


@given(tp=st.integers(0, 30), tn=st.integers(0, 30), fp=st.integers(0, 30), fn=st.integers(0, 30))
def test_messages_name_the_split_as_the_api_does(tp: int, tn: int, fp: int, fn: int) -> None:
    """The deciding F1 is the selection split's (issue #28, item 6): never "held-out"."""
    s = convergence_status(*labels(tp=tp, tn=tn, fp=fp, fn=fn))
    assert f"selection F1 {s.f1.value:.3f}" in s.message
    assert "held-out" not in s.message and "holdout" not in s.message
