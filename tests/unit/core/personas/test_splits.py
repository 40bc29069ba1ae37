"""Three stable, stratified splits of a persona's training pairs."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.personas.splits import (
    DEFAULT_FRACTIONS,
    SPLITS,
    SplitFractions,
    assign_splits,
    hashed_split,
    split_key,
)

labels = st.sampled_from([True, False, None])
pair_lists = st.lists(st.tuples(st.integers(0, 10**6), labels), unique_by=lambda p: p[0])
fractions = st.sampled_from(
    [DEFAULT_FRACTIONS, SplitFractions(0.6, 0.2, 0.2), SplitFractions(0.7, 0.3, 0.0)]
)


def test_default_fractions_are_documented_values() -> None:
    assert DEFAULT_FRACTIONS.as_tuple() == (0.5, 0.25, 0.25)
    assert SPLITS == ("optimisation", "selection", "calibration")
    for bad in ((0.5, 0.5, 0.5), (1.2, -0.1, -0.1), (0.0, 0.5, 0.5)):
        with pytest.raises(ValueError):
            SplitFractions(*bad)


@given(pair_lists, fractions, st.integers(0, 1000))
def test_every_stratum_is_within_one_pair_of_its_share(
    pairs: list[tuple[int, bool | None]], f: SplitFractions, seed: int
) -> None:
    out = assign_splits(pairs, fractions=f, seed=seed)
    assert set(out) == {pid for pid, _ in pairs}
    for label in (True, False, None):
        members = [pid for pid, lab in pairs if lab is label]
        got = Counter(out[pid] for pid in members)
        for split, share in zip(SPLITS, f.as_tuple(), strict=True):
            assert abs(got[split] - share * len(members)) < 1.0 + 1e-9, (label, split)
            if share == 0.0:
                assert got[split] == 0


@given(pair_lists, pair_lists, fractions, st.integers(0, 1000))
def test_adding_pairs_never_moves_old_ones_and_keeps_the_shares(
    old: list[tuple[int, bool | None]],
    added: list[tuple[int, bool | None]],
    f: SplitFractions,
    seed: int,
) -> None:
    old_ids = {pid for pid, _ in old}
    added = [(pid + 2 * 10**6, lab) for pid, lab in added if pid not in old_ids]
    first = assign_splits(old, fractions=f, seed=seed)
    existing = {pid: (first[pid], lab) for pid, lab in old}
    more = assign_splits(added, existing=existing, fractions=f, seed=seed)
    assert set(more) == {pid for pid, _ in added}  # only the new ones are returned
    # in two steps, the shares hold as they do in one
    together = {**first, **more}
    everything = old + added
    for label in (True, False, None):
        members = [pid for pid, lab in everything if lab is label]
        got = Counter(together[pid] for pid in members)
        for split, share in zip(SPLITS, f.as_tuple(), strict=True):
            assert abs(got[split] - share * len(members)) < 1.0 + 1e-9


@given(pair_lists, st.integers(0, 1000))
def test_assignment_ignores_input_order_and_depends_on_the_seed(
    pairs: list[tuple[int, bool | None]], seed: int
) -> None:
    assert assign_splits(pairs, seed=seed) == assign_splits(pairs[::-1], seed=seed)


def test_seed_changes_the_assignment_and_ids_are_not_taken_in_order() -> None:
    pairs = [(i, i % 3 == 0) for i in range(300)]
    a, b = assign_splits(pairs, seed=1), assign_splits(pairs, seed=2)
    assert a != b
    by = {s: sorted(pid for pid, side in a.items() if side == s) for s in SPLITS}
    assert sorted(by) == sorted(SPLITS) and sum(map(len, by.values())) == 300
    assert by["optimisation"] != list(range(150))
    assert len(by["optimisation"]) == 150 and len(by["calibration"]) == 75


def test_small_persona_gets_every_class_in_every_split() -> None:
    pairs = [(i, True) for i in range(4)] + [(100 + i, False) for i in range(4)]
    out = assign_splits(pairs, seed=0)
    for label in (True, False):
        got = Counter(out[pid] for pid, lab in pairs if lab is label)
        assert got == {"optimisation": 2, "selection": 1, "calibration": 1}


def test_hashed_split_and_key() -> None:
    keys = [split_key(i, 0) for i in range(4000)]
    assert all(0.0 <= k < 1.0 for k in keys)
    counts = Counter(hashed_split(i, 0) for i in range(4000))
    assert counts["optimisation"] == pytest.approx(2000, abs=150)
    assert counts["selection"] == pytest.approx(1000, abs=120)
    assert hashed_split(5, 0) == hashed_split(5, 0)


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        assign_splits([(1, True), (1, False)])
    with pytest.raises(ValueError):
        assign_splits([(1, True)], existing={1: ("selection", True)})
    with pytest.raises(ValueError):
        assign_splits([(2, True)], existing={1: ("holdout", True)})


# Several answers to one question (#27 item 6): pair id -> its question.
grouped = st.lists(
    st.tuples(st.integers(0, 10**6), labels, st.integers(0, 30)), unique_by=lambda p: p[0]
)


@given(grouped, st.integers(0, 100), fractions, st.integers(0, 1000))
def test_the_answers_to_one_question_share_a_split_as_pairs_are_added(
    rows: list[tuple[int, bool | None, int]], cut: int, f: SplitFractions, seed: int
) -> None:
    groups = {pid: question for pid, _, question in rows}
    old, added = rows[: cut % (len(rows) + 1)], rows[cut % (len(rows) + 1) :]
    first = assign_splits([(p, lab) for p, lab, _ in old], fractions=f, seed=seed, groups=groups)
    existing = {pid: (first[pid], lab) for pid, lab, _ in old}
    more = assign_splits(
        [(p, lab) for p, lab, _ in added], existing=existing, fractions=f, seed=seed, groups=groups
    )
    assert set(more) == {pid for pid, _, _ in added}
    together = {**first, **more}
    by_question: dict[int, set[str]] = {}
    for pid, _, question in rows:
        by_question.setdefault(question, set()).add(together[pid])
    assert all(len(splits) == 1 for splits in by_question.values())
    for split, share in zip(SPLITS, f.as_tuple(), strict=True):
        if share == 0.0:
            assert split not in set(together.values())
    # independent of the order given
    again = assign_splits(
        [(p, lab) for p, lab, _ in reversed(old)], fractions=f, seed=seed, groups=groups
    )
    assert again == first


@given(pair_lists, fractions, st.integers(0, 1000))
def test_groups_of_one_are_the_ungrouped_assignment(
    pairs: list[tuple[int, bool | None]], f: SplitFractions, seed: int
) -> None:
    groups = {pid: f"q{pid}" for pid, _ in pairs}
    assert assign_splits(pairs, fractions=f, seed=seed, groups=groups) == assign_splits(
        pairs, fractions=f, seed=seed
    )


def test_three_systems_per_question_keep_the_shares_by_question() -> None:
    # 3 systems x 400 questions, labels varying within a question
    pairs = [(q * 3 + s, (q + s) % 3 != 0) for q in range(400) for s in range(3)]
    groups = {pid: pid // 3 for pid, _ in pairs}
    out = assign_splits(pairs, seed=7, groups=groups)
    questions = Counter(out[q * 3] for q in range(400))
    assert all(out[q * 3] == out[q * 3 + s] for q in range(400) for s in range(3))
    assert questions["optimisation"] == pytest.approx(200, abs=3)
    assert questions["selection"] == pytest.approx(100, abs=3)
    for label in (True, False):
        got = Counter(out[pid] for pid, lab in pairs if lab is label)
        n = sum(got.values())
        assert got["calibration"] == pytest.approx(n / 4, abs=6), label
