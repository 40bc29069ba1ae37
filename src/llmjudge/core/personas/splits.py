"""Three splits of a persona's training pairs, stable as pairs are added.

optimisation (default 50%)
    The prompt engineer sees its failures and rewrites the judge prompt from them.
selection (default 25%)
    Decides convergence and which prompt version is best. Never shown to the engineer.
calibration (default 25%)
    Only measures the final prompt's TPR and TNR for the gate. Choosing the best of
    several prompt versions on the selection set makes that set's error rates
    optimistic (the winner is partly the luckiest), so the gate's rates come from pairs
    no decision was taken on.

Pairs are stratified by their human label where it is known (correct, incorrect, and
unknown form three strata), so each split gets its share of each class. Assignment is
incremental: ``assign_splits`` takes the pairs already assigned and only places the new
ones, so adding pairs never moves an old one. Within a stratum each new pair goes to the
split furthest below its share of the stratum (counting the new pair), so from an empty
start every split stays within one pair of its exact share. New pairs are placed in the
order of a seeded hash of their id, so the result does not depend on the order they are
given in; ties go to the split the pair's hash falls in (``hashed_split``), then to the
first split in ``SPLITS`` order.

Pairs may form groups (the answers of several systems to one question): a group goes to
one split whole, since one question in both the selection and the calibration split would
let the judge's errors on it count twice, and a judge tuned on a question's answers would
look better on its other answers than on unseen questions. A new pair of a group already
placed joins it; a new group is placed as one unit where its pairs' deficits, summed over
their strata, are largest, in the order of its smallest id's hash. Pairs of no group are
groups of one, which is the placement above.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

OPTIMISATION = "optimisation"
SELECTION = "selection"
CALIBRATION = "calibration"
SPLITS = (OPTIMISATION, SELECTION, CALIBRATION)


@dataclass(frozen=True)
class SplitFractions:
    optimisation: float = 0.5
    selection: float = 0.25
    calibration: float = 0.25

    def __post_init__(self) -> None:
        values = self.as_tuple()
        if any(v < 0.0 for v in values):
            raise ValueError(f"split fractions must be non-negative, got {values}")
        if abs(sum(values) - 1.0) > 1e-9:
            raise ValueError(f"split fractions must sum to 1, got {sum(values)}")
        if self.optimisation <= 0.0:
            raise ValueError("the optimisation split needs a positive fraction")

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.optimisation, self.selection, self.calibration)


DEFAULT_FRACTIONS = SplitFractions()


def split_key(pair_id: int, seed: int) -> float:
    """A seeded uniform number in [0, 1) from the pair id alone."""
    digest = hashlib.sha256(f"split3:{seed}:{pair_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def hashed_split(pair_id: int, seed: int, fractions: SplitFractions = DEFAULT_FRACTIONS) -> str:
    """The split a pair's hash falls in, ignoring all other pairs (stateless)."""
    u = split_key(pair_id, seed)
    edge = 0.0
    for name, fraction in zip(SPLITS, fractions.as_tuple(), strict=True):
        edge += fraction
        if u < edge and fraction > 0.0:
            return name
    # float rounding can leave the edges' sum a hair below 1: the last non-empty split
    pairs = list(zip(SPLITS, fractions.as_tuple(), strict=True))
    return next(name for name, fraction in reversed(pairs) if fraction > 0)


def assign_splits(
    new_pairs: Iterable[tuple[int, bool | None]],
    *,
    existing: Mapping[int, tuple[str, bool | None]] | None = None,
    fractions: SplitFractions = DEFAULT_FRACTIONS,
    seed: int = 0,
    groups: Mapping[int, Hashable] | None = None,
) -> dict[int, str]:
    """Splits of ``new_pairs`` ((pair id, human label or None) each), given ``existing``.

    ``existing`` maps the ids already assigned to (split, the label they were stratified
    by); ``groups`` maps pair ids (new or existing) to the group they belong to (a pair
    missing from it is a group of its own). Returns the new pairs' splits only; raises on
    an id given twice or already assigned, and on an unknown split name in ``existing``.
    """
    existing = existing or {}
    groups = groups or {}
    counts: dict[bool | None, dict[str, int]] = {}
    placed: dict[Hashable, Counter[str]] = {}  # group -> its existing pairs' splits
    for pid, (split, label) in existing.items():
        if split not in SPLITS:
            raise ValueError(f"pair {pid} has unknown split {split!r}")
        counts.setdefault(label, dict.fromkeys(SPLITS, 0))[split] += 1
        if pid in groups:
            placed.setdefault(groups[pid], Counter())[split] += 1
    pairs = list(new_pairs)
    ids = [pid for pid, _ in pairs]
    if len(set(ids)) != len(ids):
        raise ValueError("new_pairs contains duplicate ids")
    if clash := set(ids) & set(existing):
        raise ValueError(f"pairs already assigned: {sorted(clash)[:5]}")
    shares = dict(zip(SPLITS, fractions.as_tuple(), strict=True))
    members: dict[Hashable, list[tuple[int, bool | None]]] = {}
    for pid, label in pairs:
        members.setdefault(groups.get(pid, ("pair", pid)), []).append((pid, label))
    out: dict[int, str] = {}

    def place(group: list[tuple[int, bool | None]], choice: str) -> None:
        for pid, label in group:
            counts.setdefault(label, dict.fromkeys(SPLITS, 0))[choice] += 1
            out[pid] = choice

    for key in [k for k in members if k in placed]:
        # joins its group's split (the most common one, should an old group be divided)
        got = placed[key]
        place(members.pop(key), max(SPLITS, key=lambda s: (got[s], -SPLITS.index(s))))
    firsts = {key: min(pid for pid, _ in group) for key, group in members.items()}
    order = sorted(members, key=lambda k: (split_key(firsts[k], seed), firsts[k]))
    for key in order:
        group = members[key]
        adding = {group[0][1]: 1} if len(group) == 1 else Counter(lab for _, lab in group)
        deficit = dict.fromkeys(SPLITS, 0.0)
        for label, n in adding.items():
            stratum = counts.get(label, dict.fromkeys(SPLITS, 0))
            total = sum(stratum.values()) + n
            for s in SPLITS:
                deficit[s] += n * (shares[s] * total - stratum[s])
        best = max(deficit.values())
        tied = [s for s in SPLITS if deficit[s] >= best - 1e-12 * len(group)]
        preferred = hashed_split(firsts[key], seed, fractions)
        place(group, preferred if preferred in tied else tied[0])
    return out
