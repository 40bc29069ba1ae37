"""Calibration of a judge's probabilities: Brier score, log loss and reliability bins equal
scikit-learn's on the same data; intervals cover the value; what is left out is counted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, log_loss

from llmjudge.core.agreement.confidence import (
    ProbabilityJudgment,
    confidence_report,
    probability_of_a,
)

# A judgment: pair number, verdict, confidence (edges and exact 0/1 included), swapped.
JUDGMENT = st.tuples(
    st.integers(0, 11),
    st.sampled_from(["A", "B", "TIE"]),
    st.one_of(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), st.floats(0, 1)),
    st.booleans(),
)


def _judgments(rows: list[tuple[int, str, float, bool]]) -> list[ProbabilityJudgment]:
    return [ProbabilityJudgment(("p", k), w, c, swapped=s) for k, w, c, s in rows]


@settings(max_examples=150, deadline=None)
@given(st.lists(JUDGMENT, min_size=1, max_size=60), st.lists(st.sampled_from("AB"), min_size=12))
def test_figures_equal_scikit_learn(rows: list, labels: list[str]) -> None:
    references = {("p", k): labels[k] for k in range(12)}
    judgments = _judgments(rows)
    out = confidence_report(judgments, references, rounds=50)
    p = np.array([j.probability_of_a for j in judgments])
    y = np.array([references[j.pair] == "A" for j in judgments], dtype=int)
    assert out.judgments == len(rows) and out.left_out == 0
    assert out.pairs == len({k for k, *_ in rows})
    assert out.brier.value == pytest.approx(brier_score_loss(y, p, pos_label=1), abs=1e-12)
    assert out.log_loss.value == pytest.approx(log_loss(y, p, labels=[0, 1]), rel=1e-9)
    true, pred = calibration_curve(y, p, n_bins=10, strategy="uniform")
    shown = [b for b in out.bins if b.n]
    assert [b.observed.value for b in shown] == pytest.approx(list(true))
    assert [b.mean_probability for b in shown] == pytest.approx(list(pred))
    assert sum(b.n for b in out.bins) == len(rows)
    for e in (out.brier, out.log_loss):
        assert e.n == len(rows)
        assert e.low is not None and e.high is not None and e.low <= e.high


def test_the_probability_follows_the_pair_order() -> None:
    assert probability_of_a("A", 0.8) == 0.8
    assert probability_of_a("B", 0.8) == pytest.approx(0.2)
    assert probability_of_a("TIE", 0.9) == 0.5
    # shown swapped, "A" on screen is the pair's B
    assert ProbabilityJudgment(1, "A", 0.8, swapped=True).probability_of_a == pytest.approx(0.2)
    assert ProbabilityJudgment(1, "A", None).probability_of_a is None


def test_ties_unlabelled_pairs_and_missing_confidence_are_left_out() -> None:
    judgments = [
        ProbabilityJudgment("tie", "A", 0.9),  # reference tie: no binary outcome
        ProbabilityJudgment("a", "A", None),  # no confidence stated
        ProbabilityJudgment("none", "A", 0.9),  # no reference at all: not counted
        ProbabilityJudgment("a", "A", 0.7),
    ]
    out = confidence_report(judgments, {"tie": "TIE", "a": "A"}, rounds=20)
    assert (out.judgments, out.pairs, out.left_out) == (1, 1, 2)
    assert out.brier.value == pytest.approx(0.09)


def test_nothing_scored_is_undefined_not_zero() -> None:
    out = confidence_report([ProbabilityJudgment("a", "A", None)], {"a": "A"})
    assert out.brier.value is None and out.log_loss.value is None and out.judgments == 0
    assert all(b.n == 0 and b.mean_probability is None for b in out.bins)


def test_a_well_calibrated_judge_matches_its_bins_and_an_overconfident_one_does_not() -> None:
    rng = np.random.default_rng(3)
    p = rng.random(4000)
    y = rng.random(4000) < p  # calibrated: A is better with probability p
    refs = {k: ("A" if y[k] else "B") for k in range(p.size)}
    good = confidence_report([ProbabilityJudgment(k, "A", p[k]) for k in range(p.size)], refs)
    for b in good.bins:
        assert b.observed.low <= b.mean_probability <= b.observed.high
    sharp = np.where(p > 0.5, 0.99, 0.01)  # the same verdicts, stated as near certain
    bad = confidence_report([ProbabilityJudgment(k, "A", sharp[k]) for k in range(p.size)], refs)
    assert bad.log_loss.low > good.log_loss.high
    top = bad.bins[-1]
    assert top.observed.high < top.mean_probability


# A judgment with the judge's own probability: pair number, verdict, P(shown A), swapped.
OWN = st.tuples(
    st.integers(0, 11),
    st.sampled_from(["A", "B", "TIE"]),
    st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 1)),
    st.booleans(),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(OWN, min_size=1, max_size=60), st.lists(st.sampled_from("AB"), min_size=12))
def test_the_judges_own_probability_equals_scikit_learn(rows: list, labels: list[str]) -> None:
    """prob_a (log probabilities, an imported preference) through the same report: the
    verdict is ignored, the probability turned to the pair's order when shown swapped."""
    references = {("p", k): labels[k] for k in range(12)}
    judgments = [ProbabilityJudgment(("p", k), w, None, swapped=s, prob_a=q) for k, w, q, s in rows]
    out = confidence_report(judgments, references, rounds=50)
    p = np.array([1.0 - q if s else q for _, _, q, s in rows])
    y = np.array([labels[k] == "A" for k, *_ in rows], dtype=int)
    assert out.judgments == len(rows) and out.left_out == 0
    assert out.brier.value == pytest.approx(brier_score_loss(y, p, pos_label=1), abs=1e-12)
    assert out.log_loss.value == pytest.approx(log_loss(y, p, labels=[0, 1]), rel=1e-9)
    true, pred = calibration_curve(y, p, n_bins=10, strategy="uniform")
    shown = [b for b in out.bins if b.n]
    assert [b.observed.value for b in shown] == pytest.approx(list(true))
    assert [b.mean_probability for b in shown] == pytest.approx(list(pred))
    assert out.brier.low is not None and out.brier.high is not None
    assert out.brier.low <= out.brier.high and out.brier.n == len(rows)
