"""The rules of the human pairwise review queue, pure: no I/O, no domain state.

- A pair is two thread ids in canonical order (``lo < hi``); labels are stored that way.
- Each reviewer sees a pair with its sides in an order of their own, fixed by a hash of the
  reviewer and the pair, so position bias averages out over reviewers while one reviewer
  always sees a pair the same way.
- The queue order is a seeded hash of each pair: stable when pairs are added, and a seeded
  random sample of K pairs is its first K (a larger K keeps the smaller sample's pairs).
- A reviewer gets the next pair (cyclically after their cursor) that they have not labelled
  and that is not finished: its human labels plus the live claims of other reviewers are
  fewer than the labels a pair needs. The claim keeps two reviewers off one pair while one
  of them is looking at it.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "Label",
    "canonical",
    "choose_next",
    "count_per_pair",
    "finished_count",
    "is_inconsistent",
    "pair_keys",
    "pool_order",
    "queue_keys",
    "reviewer_key",
    "shown_sides",
    "to_canonical",
    "to_shown",
]

Label = Literal["A", "B", "TIE"]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_FLIP: dict[str, Label] = {"A": "B", "B": "A", "TIE": "TIE"}
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def canonical(a: int, b: int) -> tuple[int, int]:
    """The pair's stored order: the smaller thread id first."""
    if a == b:
        raise ValueError("a pair needs two different threads")
    return (a, b) if a < b else (b, a)


def to_canonical(shown_a: int, shown_b: int, label: Label) -> tuple[int, int, Label]:
    """A label given for the sides as shown -> (lo, hi, label for lo/hi)."""
    lo, hi = canonical(shown_a, shown_b)
    return lo, hi, label if shown_a == lo else _FLIP[label]


def to_shown(left: int, right: int, label: Label) -> Label:
    """A stored (canonical) label of the pair as it reads for the sides shown (left, right)."""
    canonical(left, right)  # refuses a thread paired with itself
    return label if left < right else _FLIP[label]


def _digest(*parts: object) -> bytes:
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()


def shown_sides(reviewer: str, lo: int, hi: int) -> tuple[int, int]:
    """(left, right) thread ids as this reviewer sees the pair: a fair coin per reviewer and
    pair, the same every time they see it."""
    flipped = _digest("sides", reviewer, lo, hi)[0] & 1
    return (hi, lo) if flipped else (lo, hi)


def reviewer_key(reviewer: str) -> str:
    """A short stable key for a reviewer's claim, so stored claims do not list names."""
    return _digest("reviewer", reviewer).hex()


def pair_keys(lo: IntArray, hi: IntArray) -> IntArray:
    """One int64 per pair (thread ids are 32-bit), for sorting and lookups."""
    return (np.asarray(lo, dtype=np.int64) << 32) | np.asarray(hi, dtype=np.int64)


def queue_keys(lo: IntArray, hi: IntArray, seed: int) -> npt.NDArray[np.uint64]:
    """A seeded pseudo-random key per pair (splitmix64 of the pair key and the seed),
    vectorised: sorting by it is a seeded shuffle that does not depend on the input order."""
    with np.errstate(over="ignore"):
        x = pair_keys(lo, hi).astype(np.uint64) ^ (np.uint64(seed & 0xFFFFFFFFFFFFFFFF))
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        return x ^ (x >> np.uint64(31))


def is_inconsistent(lo_wins: IntArray, hi_wins: IntArray, ties: IntArray) -> BoolArray:
    """Per pair: did the judge's verdicts (both orders and every repetition, already mapped
    to the pair's canonical order) name more than one outcome?"""
    kinds = (
        (np.asarray(lo_wins) > 0).astype(np.int8)
        + (np.asarray(hi_wins) > 0).astype(np.int8)
        + (np.asarray(ties) > 0).astype(np.int8)
    )
    return kinds >= 2


def pool_order(
    lo: IntArray,
    hi: IntArray,
    *,
    seed: int,
    sample_size: int | None = None,
    keep: BoolArray | None = None,
) -> IntArray:
    """The session's review queue as indices into ``lo``/``hi``, in queue order: the pairs
    ``keep`` selects (all when None; for example the inconsistent ones), then the first
    ``sample_size`` of them."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    chosen = np.arange(len(lo)) if keep is None else np.flatnonzero(keep)
    lo, hi = lo[chosen], hi[chosen]
    # Ties on the hash (vanishingly rare) fall back to the pair itself: a total order.
    order = np.lexsort((hi, lo, queue_keys(lo, hi, seed)))
    if sample_size is not None:
        order = order[: max(sample_size, 0)]
    return chosen[order]


def count_per_pair(pool_keys: IntArray, keys: IntArray) -> IntArray:
    """How many of ``keys`` fall on each pool pair (keys outside the pool are ignored)."""
    pool_keys = np.asarray(pool_keys, dtype=np.int64)
    counts = np.zeros(len(pool_keys), dtype=np.int64)
    keys = np.asarray(keys, dtype=np.int64)
    if len(pool_keys) == 0 or len(keys) == 0:
        return counts
    sorter = np.argsort(pool_keys, kind="stable")
    sorted_keys = pool_keys[sorter]
    pos = np.searchsorted(sorted_keys, keys)
    pos_clipped = np.minimum(pos, len(sorted_keys) - 1)
    hit = sorted_keys[pos_clipped] == keys
    np.add.at(counts, sorter[pos_clipped[hit]], 1)
    return counts


def finished_count(labels: IntArray, needed: int) -> int:
    """Pairs with at least ``needed`` human labels: the X of "X of Y"."""
    return int(np.count_nonzero(np.asarray(labels) >= needed))


def choose_next(
    labels: IntArray,
    mine: BoolArray,
    claimed_by_others: IntArray,
    *,
    needed: int,
    cursor: int | None,
    stay: bool,
) -> int | None:
    """The index (in queue order) of the pair this reviewer gets, or None when none is left.

    Eligible: not labelled by this reviewer, and its labels plus the live claims of others
    are fewer than ``needed``. With ``stay`` the cursor's own pair is kept while it is
    eligible (asking twice gives the same pair); otherwise (a skip, or after a label) the
    search starts just after the cursor and wraps around, so a skipped pair comes back only
    after every other one.
    """
    eligible = ~np.asarray(mine, dtype=bool) & (
        np.asarray(labels) + np.asarray(claimed_by_others) < needed
    )
    candidates = np.flatnonzero(eligible)
    if len(candidates) == 0:
        return None
    if cursor is None:
        return int(candidates[0])
    if stay and 0 <= cursor < len(eligible) and eligible[cursor]:
        return cursor
    after = candidates[candidates > cursor]
    return int(after[0] if len(after) else candidates[0])
