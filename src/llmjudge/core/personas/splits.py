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
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
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
) -> dict[int, str]:
    """Splits of ``new_pairs`` ((pair id, human label or None) each), given ``existing``.

    ``existing`` maps the ids already assigned to (split, the label they were stratified
    by). Returns the new pairs' splits only; raises on an id given twice or already
    assigned, and on an unknown split name in ``existing``.
    """
    existing = existing or {}
    counts: dict[bool | None, dict[str, int]] = {}
    for pid, (split, label) in existing.items():
        if split not in SPLITS:
            raise ValueError(f"pair {pid} has unknown split {split!r}")
        counts.setdefault(label, dict.fromkeys(SPLITS, 0))[split] += 1
    pairs = list(new_pairs)
    ids = [pid for pid, _ in pairs]
    if len(set(ids)) != len(ids):
        raise ValueError("new_pairs contains duplicate ids")
    if clash := set(ids) & set(existing):
        raise ValueError(f"pairs already assigned: {sorted(clash)[:5]}")
    shares = dict(zip(SPLITS, fractions.as_tuple(), strict=True))
    out: dict[int, str] = {}
    for pid, label in sorted(pairs, key=lambda p: (split_key(p[0], seed), p[0])):
        stratum = counts.setdefault(label, dict.fromkeys(SPLITS, 0))
        total = sum(stratum.values()) + 1
        deficit = {s: shares[s] * total - stratum[s] for s in SPLITS}
        best = max(deficit.values())
        tied = [s for s in SPLITS if deficit[s] >= best - 1e-12]
        preferred = hashed_split(pid, seed, fractions)
        choice = preferred if preferred in tied else tied[0]
        stratum[choice] += 1
        out[pid] = choice
    return out
