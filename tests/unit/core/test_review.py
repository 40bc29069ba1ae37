"""The pure rules of the pair review queue: sides, label mapping, queue order, sample,
inconsistency, and who gets which pair."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core import review as rules


def build_pool(lo: np.ndarray, hi: np.ndarray, **options: object) -> tuple[np.ndarray, np.ndarray]:
    """The pool's pairs themselves, in queue order."""
    idx = rules.pool_order(lo, hi, **options)  # type: ignore[arg-type]
    return np.asarray(lo)[idx], np.asarray(hi)[idx]


ids = st.integers(1, 2**31 - 1)
labels = st.sampled_from(["A", "B", "TIE"])


def test_canonical_and_mapping_by_hand() -> None:
    assert rules.canonical(7, 3) == (3, 7) and rules.canonical(3, 7) == (3, 7)
    with pytest.raises(ValueError):
        rules.canonical(4, 4)
    # left=7 better, shown as (7, 3): stored for (3, 7) that is B
    assert rules.to_canonical(7, 3, "A") == (3, 7, "B")
    assert rules.to_canonical(3, 7, "A") == (3, 7, "A")
    assert rules.to_canonical(7, 3, "TIE") == (3, 7, "TIE")
    assert rules.to_shown(7, 3, "B") == "A" and rules.to_shown(3, 7, "B") == "B"


@given(ids, ids, labels)
def test_mapping_round_trips(a: int, b: int, label: str) -> None:
    if a == b:
        return
    lo, hi, stored = rules.to_canonical(a, b, label)  # type: ignore[arg-type]
    assert lo < hi and {lo, hi} == {a, b}
    assert rules.to_shown(a, b, stored) == label
    # The same judgement given from the other side stores the same thing.
    flipped = {"A": "B", "B": "A", "TIE": "TIE"}[label]
    assert rules.to_canonical(b, a, flipped) == (lo, hi, stored)  # type: ignore[arg-type]


@given(st.text(min_size=1, max_size=20), ids, ids)
def test_sides_are_a_fixed_order_of_the_pair(reviewer: str, a: int, b: int) -> None:
    if a == b:
        return
    lo, hi = rules.canonical(a, b)
    left, right = rules.shown_sides(reviewer, lo, hi)
    assert {left, right} == {lo, hi}
    assert rules.shown_sides(reviewer, lo, hi) == (left, right)


def test_sides_are_randomised_over_reviewers_and_pairs() -> None:
    flips = [rules.shown_sides(f"r{r}", p, p + 1)[0] != p for r in range(20) for p in range(1, 51)]
    # 1000 fair coins: 500 +- 5 sigma (sigma ~ 16)
    assert 420 < sum(flips) < 580
    per_pair = {rules.shown_sides(f"r{r}", 10, 11) for r in range(40)}
    assert per_pair == {(10, 11), (11, 10)}


def test_reviewer_key_is_stable_and_hides_the_name() -> None:
    assert rules.reviewer_key("alice") == rules.reviewer_key("alice")
    assert rules.reviewer_key("alice") != rules.reviewer_key("bob")
    assert "alice" not in rules.reviewer_key("alice")


def test_inconsistent_by_hand() -> None:
    lo_wins = np.array([2, 1, 0, 1, 0, 0])
    hi_wins = np.array([0, 1, 0, 0, 2, 0])
    ties = np.array([0, 0, 3, 1, 0, 0])
    assert rules.is_inconsistent(lo_wins, hi_wins, ties).tolist() == [
        False,  # two orders, same winner
        True,  # the orders disagree
        False,  # ties every time
        True,  # a win and a tie
        False,
        False,  # no completed verdict: nothing to disagree about
    ]


pair_lists = st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), max_size=60).map(
    lambda ps: sorted({rules.canonical(a, b) for a, b in ps if a != b})
)


def _arrays(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    lo = np.array([p[0] for p in pairs], dtype=np.int64)
    hi = np.array([p[1] for p in pairs], dtype=np.int64)
    return lo, hi


@given(pair_lists, st.integers(0, 2**40), st.randoms())
def test_queue_order_ignores_input_order_and_samples_are_prefixes(
    pairs: list[tuple[int, int]], seed: int, rnd
) -> None:
    lo, hi = _arrays(pairs)
    full = list(zip(*build_pool(lo, hi, seed=seed), strict=True))
    shuffled = pairs[:]
    rnd.shuffle(shuffled)
    assert list(zip(*build_pool(*_arrays(shuffled), seed=seed), strict=True)) == full
    assert sorted(full) == pairs
    for k in (0, 1, 3, len(pairs) + 5):
        sample = list(zip(*build_pool(lo, hi, seed=seed, sample_size=k), strict=True))
        assert sample == full[: min(k, len(pairs))]


def test_sample_depends_on_the_seed() -> None:
    lo, hi = np.arange(1, 201), np.arange(1001, 1201)
    a = set(build_pool(lo, hi, seed=1, sample_size=20)[0].tolist())
    b = set(build_pool(lo, hi, seed=2, sample_size=20)[0].tolist())
    assert a != b and len(a) == len(b) == 20


def test_pool_keeps_only_selected_pairs() -> None:
    lo, hi = np.array([1, 2, 3, 4]), np.array([9, 9, 9, 9])
    keep = np.array([True, False, True, False])
    got = build_pool(lo, hi, seed=0, keep=keep)
    assert sorted(got[0].tolist()) == [1, 3]


def test_count_per_pair() -> None:
    pool = rules.pair_keys(np.array([1, 2, 5]), np.array([3, 3, 8]))
    keys = rules.pair_keys(np.array([2, 1, 2, 4, 5]), np.array([3, 3, 3, 9, 8]))
    assert rules.count_per_pair(pool, keys).tolist() == [1, 2, 1]
    assert rules.count_per_pair(pool, np.array([], dtype=np.int64)).tolist() == [0, 0, 0]
    assert rules.count_per_pair(np.array([], dtype=np.int64), keys).tolist() == []


def test_choose_next_by_hand() -> None:
    labels = np.array([1, 0, 0, 0, 0])
    mine = np.array([False, False, True, False, False])
    others = np.array([0, 1, 0, 0, 0])
    pick = lambda cursor, stay, needed=1: rules.choose_next(  # noqa: E731
        labels, mine, others, needed=needed, cursor=cursor, stay=stay
    )
    # 0 finished, 1 claimed by someone else, 2 mine: 3 first
    assert pick(None, True) == 3
    assert pick(3, True) == 3  # asking again keeps it
    assert pick(3, False) == 4  # a skip moves on
    assert pick(4, False) == 3  # and wraps around
    # with two labels per pair, 0 and 1 are open again
    assert pick(None, True, needed=2) == 0
    assert pick(0, False, needed=2) == 1
    none_left = rules.choose_next(
        labels, np.ones(5, dtype=bool), others, needed=1, cursor=None, stay=True
    )
    assert none_left is None
    assert rules.finished_count(labels, 1) == 1 and rules.finished_count(labels, 2) == 0


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 25),
    st.integers(1, 4),
    st.integers(1, 3),
    st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from(["next", "label", "skip"])), max_size=120
    ),
)
def test_simulated_reviewers_follow_the_rules(
    n_pairs: int, n_reviewers: int, needed: int, script: list[tuple[int, str]]
) -> None:
    """Reviewers act in any interleaving; claims never expire here. Nobody gets a pair
    twice or a finished one, and with one label per pair no two reviewers hold one pair."""
    labelled: list[set[int]] = [set() for _ in range(n_reviewers)]
    claims: list[int | None] = [None] * n_reviewers
    cursors: list[int | None] = [None] * n_reviewers
    counts = np.zeros(n_pairs, dtype=np.int64)

    def others(r: int) -> np.ndarray:
        out = np.zeros(n_pairs, dtype=np.int64)
        for j, c in enumerate(claims):
            if j != r and c is not None:
                out[c] += 1
        return out

    def get(r: int, stay: bool) -> None:
        mine = np.zeros(n_pairs, dtype=bool)
        mine[list(labelled[r])] = True
        i = rules.choose_next(counts, mine, others(r), needed=needed, cursor=cursors[r], stay=stay)
        if i is not None:
            assert i not in labelled[r], "a reviewer got a pair they labelled"
            assert counts[i] < needed, "a finished pair was handed out"
            cursors[r] = i
        claims[r] = i

    for who, action in script:
        r = who % n_reviewers
        if action == "next":
            get(r, True)
        elif action == "skip":
            get(r, False)
        elif claims[r] is not None:
            i = claims[r]
            labelled[r].add(i)
            counts[i] += 1
            claims[r] = None
            get(r, False)
        held = [c for c in claims if c is not None]
        for i in set(held):
            assert held.count(i) + counts[i] <= needed, "more reviewers than a pair needs"
    assert (counts <= needed).all()
    assert sum(len(s) for s in labelled) == int(counts.sum())


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 30), st.integers(1, 3), st.integers(1, 3))
def test_everyone_working_finishes_every_pair(n_pairs: int, n_reviewers: int, needed: int) -> None:
    """Reviewers who always label what they get finish the queue when there are enough of
    them; each pair ends with exactly min(needed, reviewers) labels."""
    counts = np.zeros(n_pairs, dtype=np.int64)
    labelled = [np.zeros(n_pairs, dtype=bool) for _ in range(n_reviewers)]
    progress = True
    while progress:
        progress = False
        for r in range(n_reviewers):
            i = rules.choose_next(
                counts,
                labelled[r],
                np.zeros(n_pairs, dtype=np.int64),
                needed=needed,
                cursor=None,
                stay=True,
            )
            if i is not None:
                labelled[r][i] = True
                counts[i] += 1
                progress = True
    assert (counts == min(needed, n_reviewers)).all()


@given(pair_lists, st.integers(0, 2**40), st.integers(0, 70))
def test_pool_order_indexes_the_pool(pairs: list[tuple[int, int]], seed: int, k: int) -> None:
    lo, hi = _arrays(pairs)
    keep = (lo + hi) % 2 == 0
    idx = rules.pool_order(lo, hi, seed=seed, sample_size=k, keep=keep)
    got_lo, got_hi = build_pool(lo, hi, seed=seed, sample_size=k, keep=keep)
    assert lo[idx].tolist() == got_lo.tolist() and hi[idx].tolist() == got_hi.tolist()
    assert keep[idx].all() and len(set(idx.tolist())) == len(idx) == min(k, int(keep.sum()))
