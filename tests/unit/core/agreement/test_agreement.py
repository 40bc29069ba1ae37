"""Agreement core: hand-worked cases, scikit-learn / scipy / krippendorff as oracles, and
hypothesis properties (symmetries, order invariance, counts that add up)."""

from __future__ import annotations

import random
import warnings

import krippendorff
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from sklearn.metrics import cohen_kappa_score, precision_recall_fscore_support
from sklearn.metrics import confusion_matrix as sk_confusion

from llmjudge.core import stats
from llmjudge.core.agreement import judges as ag
from llmjudge.core.agreement.judges import (
    CLASSES,
    Judgment,
    ReferenceLabel,
    agreement_by_group,
    agreement_report,
    confusion_matrix,
    flip,
    macro_prf,
    pair_group,
    select_references,
    to_pair_order,
    wilson,
)
from llmjudge.core.agreement.people import (
    fleiss_kappa,
    human_agreement,
    krippendorff_alpha_nominal,
)
from llmjudge.core.stats import cohen_kappa

LABEL = st.sampled_from(CLASSES)

# --------------------------------------------------------------------------- Wilson


def test_wilson_hand_worked() -> None:
    # 8 of 10: centre (0.8 + 1.96²/20) / (1 + 1.96²/10), half-width 1.96·sqrt(.016 + .0096)/1.384
    e = wilson(8, 10)
    assert (e.value, e.n) == (0.8, 10)
    assert e.low == pytest.approx(0.4902, abs=1e-4) and e.high == pytest.approx(0.9433, abs=1e-4)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_equals_scipy(case: tuple[int, int]) -> None:
    k, n = case
    ours = wilson(k, n)
    theirs = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert ours.low == pytest.approx(theirs.low, abs=1e-9)
    assert ours.high == pytest.approx(theirs.high, abs=1e-9)
    assert 0 <= ours.low <= ours.value <= ours.high <= 1


def test_wilson_without_data_and_bad_counts() -> None:
    assert wilson(0, 0) == ag.Estimate(None, 0, None, None)
    with pytest.raises(ValueError):
        wilson(3, 2)


# --------------------------------------------------------------------------- kappa, F1


def test_kappa_hand_worked() -> None:
    # po = 3/4; reference 1/2 A 1/2 B, judge 1/4 A 3/4 B: pe = 1/8 + 3/8 = 1/2; kappa = 1/2
    assert cohen_kappa(["A", "A", "B", "B"], ["A", "B", "B", "B"]) == pytest.approx(0.5)
    assert cohen_kappa(["A", "B", "TIE"], ["A", "B", "TIE"]) == pytest.approx(1.0)
    assert cohen_kappa(["A", "A"], ["A", "A"]) is None  # undefined, not 0 or 1
    assert cohen_kappa([], []) is None


_PAIRED = st.integers(1, 60).flatmap(
    lambda n: st.tuples(
        st.lists(LABEL, min_size=n, max_size=n), st.lists(LABEL, min_size=n, max_size=n)
    )
)


@settings(max_examples=300, deadline=None)
@given(_PAIRED)
def test_kappa_confusion_and_prf_equal_scikit_learn(case: tuple[list[str], list[str]]) -> None:
    ref, judge = case
    assert (
        confusion_matrix(ref, judge).tolist() == sk_confusion(ref, judge, labels=CLASSES).tolist()
    )
    ours = cohen_kappa(ref, judge)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        theirs = cohen_kappa_score(ref, judge, labels=list(CLASSES))
        p, r, f, _ = precision_recall_fscore_support(ref, judge, average="macro", zero_division=0)
    if np.isnan(theirs):
        assert ours is None
    else:
        assert ours == pytest.approx(theirs, abs=1e-12)
    assert macro_prf(ref, judge) == pytest.approx((p, r, f), abs=1e-12)


def test_macro_prf_hand_worked() -> None:
    # A: tp 1, predicted 1, actual 2 -> P 1, R 1/2, F 2/3; B: tp 1, predicted 2, actual 1 ->
    # P 1/2, R 1, F 2/3; TIE never occurs and is not averaged.
    p, r, f = macro_prf(["A", "A", "B"], ["A", "B", "B"])  # type: ignore[misc]
    assert (p, r, f) == pytest.approx((0.75, 0.75, 2 / 3))
    assert macro_prf([], []) is None


def test_bad_label_is_refused() -> None:
    with pytest.raises(ValueError, match="one of A, B, TIE"):
        confusion_matrix(["A"], ["C"])
    with pytest.raises(ValueError, match="verdicts"):
        confusion_matrix(["A"], [])


# --------------------------------------------------------------------------- the report


def test_orders() -> None:
    assert [flip(x) for x in CLASSES] == ["B", "A", "TIE"]
    assert to_pair_order("A", swapped=True) == "B" and to_pair_order("A", swapped=False) == "A"
    assert to_pair_order("TIE", swapped=True) == "TIE"


def _hand_case() -> tuple[list[Judgment], dict[str, str]]:
    refs = {"p1": "A", "p2": "A", "p3": "B", "p4": "TIE", "p5": "A"}
    judgments = [
        Judgment("p1", 1, "A"),
        Judgment("p1", 2, "B", swapped=True),  # -> A: both right, net +2, consistent
        Judgment("p2", 3, "A"),
        Judgment("p2", 4, "A", swapped=True),  # -> B: inconsistent, net 0
        Judgment("p3", 5, "TIE"),
        Judgment("p3", 6, "A", swapped=True),  # -> B: net +1, not both, inconsistent
        Judgment("p4", 7, "TIE"),
        Judgment("p4", 8, "TIE", swapped=True),  # tie label, both ties: all right
        Judgment("p5", 9, "A"),  # one order only: per-judgment figures only
        Judgment("p6", 10, "B"),  # no reference
    ]
    return judgments, refs


def test_report_hand_worked() -> None:
    judgments, refs = _hand_case()
    report = agreement_report(judgments, refs, rounds=300)
    assert (report.judgments, report.pairs, report.unlabelled) == (9, 5, 1)
    assert (report.accuracy.value, report.accuracy.n) == (pytest.approx(7 / 9), 9)
    assert (report.accuracy_without_ties.value, report.accuracy_without_ties.n) == (
        pytest.approx(5 / 6),
        6,
    )
    assert (report.both_orders_correct.value, report.both_orders_correct.n) == (0.5, 4)
    assert (report.net_vote.value, report.net_vote.n) == (0.75, 4)
    assert (report.consistency.value, report.consistency.n) == (0.5, 4)
    assert report.confusion == ((4, 1, 0), (0, 1, 1), (0, 0, 2))
    assert [(d.pair, d.comparison, d.reference, d.judge) for d in report.disagreements] == [
        ("p2", 4, "A", "B"),
        ("p3", 5, "B", "TIE"),
    ]
    flat_ref = ["A", "A", "A", "A", "B", "B", "TIE", "TIE", "A"]
    flat_judge = ["A", "A", "A", "B", "TIE", "B", "TIE", "TIE", "A"]
    assert report.kappa.value == pytest.approx(cohen_kappa_score(flat_ref, flat_judge))
    assert report.kappa.n == 9
    p, r, f, _ = precision_recall_fscore_support(
        flat_ref, flat_judge, average="macro", zero_division=0
    )
    assert (report.precision.value, report.recall.value, report.f1.value) == pytest.approx(
        (p, r, f)
    )
    for e in (report.kappa, report.precision, report.recall, report.f1):
        assert e.low is not None and e.high is not None and e.low <= e.high


def test_net_vote_against_a_tie_label() -> None:
    refs = {"p": "TIE", "q": "TIE"}
    report = agreement_report(
        [
            Judgment("p", 1, "TIE"),
            Judgment("p", 2, "A", swapped=True),  # +1 -1 = 0: not correct
            Judgment("q", 3, "TIE"),
            Judgment("q", 4, "TIE", swapped=True),
        ],
        refs,
        rounds=0,
    )
    assert report.net_vote.value == 0.5
    assert report.kappa.low is None  # no rounds, no interval


def test_empty_report_is_all_missing() -> None:
    report = agreement_report([Judgment("x", 1, "A")], {}, rounds=50)
    assert report.unlabelled == 1 and report.judgments == 0
    for e in (report.accuracy, report.kappa, report.f1, report.consistency, report.net_vote):
        assert e.value is None and e.n == 0


@st.composite
def _sessions(draw: st.DrawFn) -> tuple[list[Judgment], dict[str, str]]:
    n_pairs = draw(st.integers(1, 25))
    refs = {f"p{i}": draw(LABEL) for i in range(n_pairs)}
    judgments = []
    for i in range(n_pairs + 3):  # a few pairs without a reference
        for order in draw(st.lists(st.booleans(), min_size=1, max_size=3)):
            judgments.append(Judgment(f"p{i}", len(judgments), draw(LABEL), swapped=order))
    return judgments, refs


def _same(left: tuple[object, ...], right: tuple[object, ...]) -> bool:
    """Equal up to float rounding (values may be None or nested tuples of counts)."""
    if len(left) != len(right):
        return False
    for a, b in zip(left, right, strict=True):
        if isinstance(a, tuple) and isinstance(b, tuple):
            if not _same(a, b):
                return False
        elif isinstance(a, float) and isinstance(b, float):
            if abs(a - b) > 1e-9:
                return False
        elif a != b:
            return False
    return True


def _values(report: ag.AgreementReport) -> tuple[object, ...]:
    fields = ("accuracy", "accuracy_without_ties", "both_orders_correct", "net_vote")
    fields += ("consistency", "kappa", "precision", "recall", "f1")
    return tuple((getattr(report, f).value, getattr(report, f).n) for f in fields) + (
        report.confusion,
        report.judgments,
        report.unlabelled,
    )


@settings(max_examples=150, deadline=None)
@given(_sessions(), st.randoms(use_true_random=False))
def test_report_properties(
    session: tuple[list[Judgment], dict[str, str]], rnd: random.Random
) -> None:
    judgments, refs = session
    report = agreement_report(judgments, refs, rounds=20)
    scored = [j for j in judgments if j.pair in refs]
    ref = [refs[j.pair] for j in scored]
    judge = [j.in_pair_order for j in scored]
    # per-judgment figures equal the independent implementations on the mapped verdicts
    assert report.accuracy.value == pytest.approx(
        np.mean([a == b for a, b in zip(ref, judge, strict=True)])
    )
    expected_kappa = cohen_kappa(ref, judge)
    assert report.kappa.value == (None if expected_kappa is None else pytest.approx(expected_kappa))
    assert sum(map(sum, report.confusion)) == len(scored) == report.judgments
    assert report.unlabelled == len(judgments) - len(scored)
    assert len(report.disagreements) == sum(a != b for a, b in zip(ref, judge, strict=True))
    # both orders correct implies a winning net vote and a consistent pair
    assert (report.both_orders_correct.value or 0) <= (report.net_vote.value or 0) + 1e-12
    assert (report.both_orders_correct.value or 0) <= (report.consistency.value or 0) + 1e-12
    # the order of the input does not matter
    shuffled = list(judgments)
    rnd.shuffle(shuffled)
    assert _same(_values(agreement_report(shuffled, refs, rounds=20)), _values(report))
    # naming the sides the other way round changes nothing
    mirrored = [Judgment(j.pair, j.comparison, flip(j.winner), j.swapped) for j in judgments]
    mirrored_refs = {p: flip(label) for p, label in refs.items()}  # type: ignore[arg-type]
    mirrored_report = agreement_report(mirrored, mirrored_refs, rounds=20)
    assert _same(_values(mirrored_report)[:6], _values(report)[:6])
    # showing a comparison the other way round, with the verdict to match, is the same judgment
    reshown = [Judgment(j.pair, j.comparison, flip(j.winner), not j.swapped) for j in judgments]
    assert _same(_values(agreement_report(reshown, refs, rounds=20)), _values(report))


def test_bootstrap_is_seeded_and_chunking_does_not_change_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judgments, refs = _hand_case()
    first = agreement_report(judgments, refs, rounds=400, seed=7)
    assert agreement_report(judgments, refs, rounds=400, seed=7) == first
    monkeypatch.setattr(stats, "_CELLS_PER_CHUNK", 17)  # many small chunks of rounds
    assert agreement_report(judgments, refs, rounds=400, seed=7).kappa == first.kappa


def test_kappa_interval_narrows_with_more_pairs() -> None:
    rng = np.random.default_rng(3)

    def session(n: int) -> tuple[list[Judgment], dict[int, str]]:
        refs = {i: CLASSES[int(rng.integers(2))] for i in range(n)}
        js = [
            Judgment(i, i, refs[i] if rng.random() < 0.8 else flip(refs[i]))  # type: ignore[arg-type]
            for i in range(n)
        ]
        return js, refs

    small = agreement_report(*session(40), rounds=500).kappa
    large = agreement_report(*session(4000), rounds=500).kappa
    assert small.low is not None and large.low is not None
    assert large.high - large.low < (small.high - small.low) / 4  # ~ 1/sqrt(n)
    assert large.low <= large.value <= large.high


def test_breakdown_by_group() -> None:
    judgments, refs = _hand_case()
    groups = {"p1": "formal", "p2": "formal", "p3": "casual", "p4": "casual", "p6": "casual"}
    by_group = agreement_by_group(judgments, refs, groups, rounds=50)
    assert set(by_group) == {"formal", "casual"}
    assert by_group["formal"].judgments == 4 and by_group["casual"].judgments == 4
    assert by_group["casual"].unlabelled == 1
    formal = [j for j in judgments if groups.get(j.pair) == "formal"]
    assert _values(by_group["formal"]) == _values(agreement_report(formal, refs, rounds=50))
    assert pair_group("x", "x") == "x" and pair_group("x", "y") == "x vs y"


# --------------------------------------------------------------------------- references


def test_select_references() -> None:
    labels = [
        ReferenceLabel("p1", "A", "gold"),
        ReferenceLabel("p1", "B", "human", "ann"),
        ReferenceLabel("p1", "B", "human", "bob"),
        ReferenceLabel("p1", "A", "human", "cy"),
        ReferenceLabel("p2", "A", "human", "ann"),
        ReferenceLabel("p2", "B", "human", "bob"),  # 1 A / 1 B: no majority
        ReferenceLabel("p3", "TIE", "human", "ann"),
        ReferenceLabel("p3", "A", "human", "ann"),  # ann's later label replaces the first
        ReferenceLabel("p4", "A", "gold", "set1"),
        ReferenceLabel("p4", "B", "gold", "set2"),  # conflicting gold: none
    ]
    assert select_references(labels, "gold") == {"p1": "A"}
    assert select_references(labels, "majority") == {"p1": "B", "p3": "A"}
    assert select_references(labels, "human") == {"p3": "A"}  # unanimous only
    assert select_references(labels, "annotator:ann") == {"p1": "B", "p2": "A", "p3": "A"}
    assert select_references(labels, "annotator:nobody") == {}
    with pytest.raises(ValueError, match="reference must be"):
        select_references(labels, "crowd")
    with pytest.raises(ValueError, match="one of A, B, TIE"):
        select_references([ReferenceLabel("p", "C", "gold")], "gold")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="source must be"):
        select_references([ReferenceLabel("p", "A", "crowd")], "gold")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- people with people


def test_fleiss_worked_example() -> None:
    # The classic worked example (10 subjects, 14 raters, 5 categories): kappa = 0.210.
    counts = np.array(
        [
            [0, 0, 0, 0, 14],
            [0, 2, 6, 4, 2],
            [0, 0, 3, 5, 6],
            [0, 3, 9, 2, 0],
            [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0],
            [3, 2, 6, 3, 0],
            [2, 5, 3, 2, 2],
            [6, 5, 2, 1, 0],
            [0, 2, 2, 3, 7],
        ]
    )
    assert fleiss_kappa(counts) == pytest.approx(0.20993, abs=1e-4)


def test_fleiss_hand_worked_and_degenerate() -> None:
    # two items, two raters each: (A, A) and (A, B): P = (1 + 0)/2; p_A = 3/4, p_B = 1/4,
    # Pe = 9/16 + 1/16 = 5/8; kappa = (1/2 - 5/8) / (3/8) = -1/3
    assert fleiss_kappa(np.array([[2, 0, 0], [1, 1, 0]])) == pytest.approx(-1 / 3)
    assert fleiss_kappa(np.array([[3, 0, 0], [2, 0, 0]])) is None  # one category only
    assert fleiss_kappa(np.array([[1, 0, 0]])) is None  # nothing pairable
    assert fleiss_kappa(np.array([[2, 0], [0, 2]])) == pytest.approx(1.0)


@st.composite
def _reliability(draw: st.DrawFn) -> np.ndarray:
    raters = draw(st.integers(2, 5))
    units = draw(st.integers(1, 30))
    k = draw(st.integers(2, 4))
    cell = st.one_of(st.none(), st.integers(0, k - 1))
    data = [[draw(cell) for _ in range(units)] for _ in range(raters)]
    return np.array([[np.nan if v is None else v for v in row] for row in data], dtype=float)


def _counts_of(data: np.ndarray, k: int) -> np.ndarray:
    counts = np.zeros((data.shape[1], k), dtype=int)
    for unit in range(data.shape[1]):
        for v in data[:, unit]:
            if not np.isnan(v):
                counts[unit, int(v)] += 1
    return counts


@settings(max_examples=300, deadline=None)
@given(_reliability())
def test_krippendorff_equals_the_krippendorff_package(data: np.ndarray) -> None:
    k = 4
    counts = _counts_of(data, k)
    ours = krippendorff_alpha_nominal(counts)
    pairable = counts[counts.sum(axis=1) >= 2]
    values = np.unique(data[~np.isnan(data)])
    if pairable.sum() == 0 or len(np.unique(np.nonzero(pairable)[1])) < 2:
        assert ours is None  # nothing pairable, or a single value: undefined
        return
    theirs = krippendorff.alpha(
        reliability_data=data, level_of_measurement="nominal", value_domain=list(range(k))
    )
    assert len(values) >= 2
    assert ours == pytest.approx(theirs, abs=1e-9)


def test_human_agreement_hand_worked() -> None:
    annotations = {
        "p1": {"ann": "A", "bob": "A", "cy": "A"},
        "p2": {"ann": "A", "bob": "B", "cy": "A"},
        "p3": {"ann": "B", "bob": "B"},
        "p4": {"ann": "TIE", "bob": "B"},
        "p5": {"ann": "A"},  # one annotator: not an item
    }
    human = human_agreement(annotations, rounds=300)
    assert human.items == 4 and human.annotators == ("ann", "bob", "cy")
    # annotator pairs agreeing: p1 3 of 3, p2 1 of 3, p3 1 of 1, p4 0 of 1 -> 5 of 8
    assert (human.percent_agreement.value, human.percent_agreement.n) == (5 / 8, 4)
    counts = np.array([[3, 0, 0], [2, 1, 0], [0, 2, 0], [0, 1, 1]])
    assert human.fleiss_kappa.value == pytest.approx(fleiss_kappa(counts))
    assert human.krippendorff_alpha.value == pytest.approx(
        krippendorff.alpha(
            reliability_data=[
                [0, 0, 1, 2, 0],
                [0, 1, 1, 1, np.nan],
                [0, 0, np.nan, np.nan, np.nan],
            ],
            level_of_measurement="nominal",
        )
    )
    pairs = {(p.first, p.second): p for p in human.pairwise}
    assert set(pairs) == {("ann", "bob"), ("ann", "cy"), ("bob", "cy")}
    ann_bob = pairs[("ann", "bob")]
    assert ann_bob.kappa.n == 4
    assert ann_bob.kappa.value == pytest.approx(
        cohen_kappa_score(["A", "A", "B", "TIE"], ["A", "B", "B", "B"])
    )
    assert (ann_bob.agreement.value, ann_bob.agreement.n) == (0.5, 4)
    assert pairs[("ann", "cy")].kappa.value is None  # both said A twice: undefined
    for e in (human.percent_agreement, human.fleiss_kappa, human.krippendorff_alpha):
        assert e.low is not None and e.high is not None and e.low <= e.high


def test_human_agreement_without_overlap() -> None:
    human = human_agreement({"p1": {"ann": "A"}, "p2": {"bob": "B"}}, rounds=50)
    assert human.items == 0 and human.pairwise == ()
    assert human.percent_agreement.value is None and human.fleiss_kappa.value is None
    assert human.krippendorff_alpha.value is None
