"""Adaptive design: which pairs to judge next, and field-wide rates from the uniform share.

Pair value (strategy ``information``): for a candidate pair with difference variance ``V``,
win probability ``p`` and Fisher information ``f = p(1 - p)``, one more comparison is a
rank-one update of the covariance. Its value is the variance it removes from the
differences of all neighbour pairs in the current order (within ``window``), each weighted
by the probability that the pair's order is still wrong over its variance: the pairs a
Kendall tau counts and still doubts (``_order_gain``; with the diagonal approximation, the
pair's own ``V^2 f / (1 + V f)`` times ``Phi(-|d| / sqrt(V))``). For ``top_k`` it is further
weighted by how uncertain each side is about the top-k cut. Candidates are the near
neighbours in the current order (plus the players around the cut, plus random pairs),
scored in one vectorised pass, so a batch for 1,000 threads takes milliseconds. A share
``epsilon`` of each batch is uniformly random pairs, drawn first (so the pairs chosen on
purpose cannot bend it), so no player starves and field-wide estimates have known
propensities (:func:`field_rate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.sparse import coo_matrix
from scipy.special import expit, ndtr

from llmjudge.core.stats import wilson_bounds as wilson
from llmjudge.core.tournaments.adaptive.state import AdaptiveState
from llmjudge.core.tournaments.adaptive.stopping import StopRule

Strategy = Literal["information", "swiss", "random"]
Position = Literal["once", "both"]

SOURCE_ADAPTIVE = 0  # chosen by expected information
SOURCE_RANDOM = 1  # the uniform epsilon share
SOURCE_COVERAGE = 2  # a player below min_games, paired with a random partner
SOURCE_SWISS = 3  # neighbours in a posterior draw of the order
SOURCE_FILL = 4  # random pairs filling what the strategy could not (not uniform: weight 0)

DEFAULT_RULE = StopRule()


def free_for_all_comparisons(n: int, *, both_orders: bool = False) -> int:
    """Judge calls of a full free-for-all over ``n`` players, for comparison."""
    return n * (n - 1) // 2 * (2 if both_orders else 1)


@dataclass(frozen=True, eq=False)
class Batch:
    """The next judge calls, in queue order. ``a`` is shown in position A.

    ``group`` numbers the distinct pairs of the batch (0..); a swapped twin shares its
    original's group and has ``is_swap``. ``propensity`` is the probability the pair was
    drawn by the uniform share (1.0 for pairs chosen on purpose): weight the random rows
    by ``1 / propensity`` for estimates over all pairs of the field.
    """

    a: np.ndarray
    b: np.ndarray
    group: np.ndarray
    is_swap: np.ndarray
    source: np.ndarray  # SOURCE_* per row
    propensity: np.ndarray
    position: str  # how positions were assigned, in words

    def __len__(self) -> int:
        return int(self.a.size)

    def random_share_weights(self) -> np.ndarray:
        """Inverse-probability weights: 1/propensity on uniform rows, 0 elsewhere."""
        return np.where(self.source == SOURCE_RANDOM, 1.0 / self.propensity, 0.0)


def _pair_keys(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(i, j) * n + np.maximum(i, j)


def _random_pairs(
    n: int, count: int, rng: np.random.Generator, allowed: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` uniform pairs i != j (with repeats; the caller dedupes)."""
    if allowed is not None:
        lo, hi = np.nonzero(np.triu(allowed, 1))
        if lo.size == 0:
            return lo, hi
        pick = rng.integers(0, lo.size, count)
        return lo[pick], hi[pick]
    i = rng.integers(0, n, count)
    j = rng.integers(0, n - 1, count)
    return i, j + (j >= i)


def _occurrence(values: np.ndarray) -> np.ndarray:
    """For each element, how many equal elements come before it."""
    order = np.argsort(values, kind="stable")
    sorted_v = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1]])
    run = np.repeat(starts, np.diff(np.r_[starts, values.size]))
    occ = np.empty(values.size, dtype=np.int64)
    occ[order] = np.arange(values.size) - run
    return occ


def _information_candidates(
    state: AdaptiveState, rule: StopRule, window: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    n = state.n
    order = state.order()
    parts_i, parts_j = [], []
    for d in range(1, min(window, n - 1) + 1):  # neighbours in the current order
        parts_i.append(order[:-d])
        parts_j.append(order[d:])
    if rule.kind == "top_k" and rule.k < n:  # everyone against the players at the cut
        cut = order[max(0, rule.k - window) : min(n, rule.k + window)]
        parts_i.append(np.repeat(np.arange(n), cut.size))
        parts_j.append(np.tile(cut, n))
    ri, rj = _random_pairs(n, 2 * n, rng, None)
    parts_i.append(ri)
    parts_j.append(rj)
    i, j = np.concatenate(parts_i), np.concatenate(parts_j)
    keep = i != j
    return i[keep], j[keep]


def _order_gain(
    state: AdaptiveState, i: np.ndarray, j: np.ndarray, window: int, chunk: int = 4096
) -> np.ndarray:
    """For each candidate (i, j): the variance it removes from the differences of every
    neighbour pair (k, l) within ``window`` in the current order, each weighted by
    ``P(order of k, l wrong) / V_kl`` -- the pairs a Kendall tau counts and still doubts.

    One more comparison of (i, j) updates the covariance by ``-c u u^T`` with
    ``u = C (e_i - e_j)`` and ``c = f / (1 + V f)``, so the weighted reduction is
    ``c u^T L u`` for the weighted Laplacian ``L`` of the neighbour graph; with
    ``M = L C`` precomputed (sparse times dense) that is a dot product per candidate."""
    cov = state.cov
    assert cov is not None
    n = state.n
    order = state.order()
    w = min(window, n - 1)
    k = np.concatenate([order[:-d] for d in range(1, w + 1)])
    l = np.concatenate([order[d:] for d in range(1, w + 1)])  # noqa: E741
    v_kl = state.diff_var(k, l)
    g = ndtr(-np.abs(state.theta[k] - state.theta[l]) / np.sqrt(v_kl)) / v_kl
    lap = coo_matrix(
        (np.r_[g, g, -g, -g], (np.r_[k, l, k, l], np.r_[k, l, l, k])), shape=(n, n)
    ).tocsr()
    # C and L are symmetric, so row r of (L C)^T = C L is column r of L C: gather rows
    # (contiguous), not columns
    mt = np.ascontiguousarray(np.asarray(lap @ cov).T)
    gain = np.empty(i.size)
    for start in range(0, i.size, chunk):  # (chunk, n) blocks: bounded memory
        ci, cj = i[start : start + chunk], j[start : start + chunk]
        u = cov[ci] - cov[cj]
        gain[start : start + chunk] = np.einsum("cr,cr->c", u, mt[ci] - mt[cj])
    return np.maximum(gain, 0.0)


def _information_scores(
    state: AdaptiveState, rule: StopRule, i: np.ndarray, j: np.ndarray, window: int = 8
) -> np.ndarray:
    theta = state.theta
    v = state.diff_var(i, j)
    d = theta[i] - theta[j]
    p = expit(d)
    f = p * (1.0 - p)
    if state.cov is not None:
        # dense: what the comparison tells about every doubtful neighbour order
        score = _order_gain(state, i, j, window) * f / (1.0 + v * f)
    else:
        # diagonal approximation: the pair's own variance, where its order is in doubt
        shrink = v * v * f / (1.0 + v * f)
        score = shrink * ndtr(-np.abs(d) / np.sqrt(v))
    if rule.kind == "top_k" and rule.k < state.n:
        order = state.order()
        cut = 0.5 * (theta[order[rule.k - 1]] + theta[order[rule.k]])
        side = ndtr(-np.abs(theta - cut) / np.sqrt(state.var))  # P(on the wrong side)
        score = score * (side[i] + side[j])
    return score


def _swiss_pairs(
    state: AdaptiveState, count: int, rng: np.random.Generator, passes: int = 8
) -> tuple[np.ndarray, np.ndarray]:
    """Neighbours in posterior draws of the order (Thompson-style Swiss rounds)."""
    n = state.n
    parts_i, parts_j = [], []
    sd = np.sqrt(state.var)
    for p in range(passes):
        draw = state.theta + sd * rng.standard_normal(n)
        order = np.argsort(-draw)[p % 2 :]
        m = order.size // 2
        parts_i.append(order[0 : 2 * m : 2])
        parts_j.append(order[1 : 2 * m : 2])
        if sum(x.size for x in parts_i) >= 2 * count:
            break
    return np.concatenate(parts_i), np.concatenate(parts_j)


def select_batch(
    state: AdaptiveState,
    size: int,
    *,
    rule: StopRule = DEFAULT_RULE,
    seed: int | np.random.SeedSequence = 0,
    strategy: Strategy = "information",
    epsilon: float = 0.1,
    position: Position = "once",
    swap_share: float = 0.1,
    allowed: np.ndarray | None = None,
    window: int = 8,
    min_games: int | None = None,
    max_per_player: int | None = None,
) -> Batch:
    """The next ``size`` judge calls (fewer only when the field has fewer distinct pairs).

    - ``strategy``: ``information`` (expected variance reduction, see the module doc),
      ``swiss`` (neighbours in a posterior draw of the order) or ``random``.
    - ``epsilon``: share of uniformly random pairs.
    - ``position``: ``once`` judges each pair once in a random order and adds swapped
      twins for a share ``swap_share`` of the pairs (position consistency stays
      measured); ``both`` judges every pair in both orders (half as many pairs).
    - ``allowed``: (n, n) bool, pairs that may meet (pillars sharing a prompt key);
      None allows all.
    - ``min_games``: players below it are paired first (default ``rule.min_games``).
    - ``max_per_player``: appearances of one player among the chosen pairs of a batch
      (default: twice the average, at least 2), so one uncertain player cannot take it all.

    No pair appears twice in a batch (twins aside). Deterministic for a given seed.
    """
    n = state.n
    if size < 0:
        raise ValueError("size cannot be negative")
    if not 0.0 <= epsilon <= 1.0 or not 0.0 <= swap_share <= 1.0:
        raise ValueError("epsilon and swap_share must be in [0, 1]")
    if allowed is not None:
        allowed = np.asarray(allowed, dtype=bool)
        if allowed.shape != (n, n):
            raise ValueError("allowed must be an (n, n) matrix")
        allowed = allowed | allowed.T  # either triangle may say so
        np.fill_diagonal(allowed, False)
        n_pairs_field = int(np.count_nonzero(np.triu(allowed, 1)))
    else:
        n_pairs_field = n * (n - 1) // 2
    rng = np.random.default_rng(seed)
    if position == "both":
        n_pairs = size // 2
    elif position == "once":
        n_pairs = size - math.floor(size * swap_share / (1.0 + swap_share))
    else:
        raise ValueError(f"unknown position option {position!r}")
    n_pairs = min(n_pairs, n_pairs_field)
    if n_pairs == 0:
        empty = np.empty(0, dtype=np.int64)
        return Batch(empty, empty, empty, empty.astype(bool), empty, empty.astype(float), "")

    n_random = round(epsilon * n_pairs) if strategy != "random" else n_pairs
    n_chosen = n_pairs - n_random
    cap = max_per_player or max(2, math.ceil(4 * n_pairs / n))
    floor_games = rule.min_games if min_games is None else min_games

    chosen_keys: list[np.ndarray] = []
    sources: list[np.ndarray] = []
    taken = np.empty(0, dtype=np.int64)

    def add(i: np.ndarray, j: np.ndarray, src: int, limit: int) -> None:
        nonlocal taken
        if limit <= 0 or i.size == 0:
            return
        keys = _pair_keys(i, j, n)
        ok = i != j
        if allowed is not None:
            ok &= allowed[i, j]
        keys = keys[ok]
        _, first = np.unique(keys, return_index=True)  # first occurrence, keep priority order
        keys = keys[np.sort(first)]
        keys = keys[~np.isin(keys, taken)][:limit]
        taken = np.concatenate([taken, keys])
        chosen_keys.append(keys)
        sources.append(np.full(keys.size, src))

    def draw(src: int, upto: int) -> None:
        """Random pairs until ``upto`` pairs are taken (or the field runs out)."""
        for _ in range(50):
            need = upto - taken.size
            if need <= 0:
                break
            i, j = _random_pairs(n, 2 * need + 8, rng, allowed)
            add(i, j, src, need)

    # the uniform share first: distinct uniform draws are a uniform subset of the field's
    # pairs, each pair in it with probability (its size) / (the field's pairs)
    draw(SOURCE_RANDOM, n_random)
    n_uniform = int(taken.size)
    # players below the evidence floor next (those the uniform share missed): a random
    # matching among them first (a first round of n/2 pairs then covers about every
    # player once), then a random partner for each
    # one the matching missed (an odd one out, or a pair that may not meet)
    under = np.flatnonzero(state.games < floor_games)
    under = under[~np.isin(under, np.r_[taken // n, taken % n])]  # in the uniform share
    if under.size and n_chosen > 0:
        under = rng.permutation(under)
        half = under.size // 2
        add(under[0 : 2 * half : 2], under[1 : 2 * half : 2], SOURCE_COVERAGE, n_chosen)
        met = np.isin(under, np.r_[taken // n, taken % n])
        missed = under[~met]
        partner = rng.integers(0, n - 1, missed.size)
        partner += partner >= missed
        add(missed, partner, SOURCE_COVERAGE, n_chosen - taken.size + n_uniform)
    left = n_pairs - taken.size
    if left > 0 and strategy == "information":
        i, j = _information_candidates(state, rule, window, rng)
        if allowed is not None:
            ok = allowed[i, j]
            i, j = i[ok], j[ok]
        score = _information_scores(state, rule, i, j, window)
        best = np.argsort(-score, kind="stable")
        i, j = i[best], j[best]
        keys = _pair_keys(i, j, n)
        _, first = np.unique(keys, return_index=True)
        first = np.sort(first)
        i, j = i[first], j[first]
        ends = np.empty(2 * i.size, dtype=np.int64)
        ends[0::2], ends[1::2] = i, j
        occ = _occurrence(ends)
        within = np.maximum(occ[0::2], occ[1::2]) < cap
        add(i[within], j[within], SOURCE_ADAPTIVE, left)
        add(i[~within], j[~within], SOURCE_ADAPTIVE, n_pairs - taken.size)
    elif left > 0 and strategy == "swiss":
        i, j = _swiss_pairs(state, left, rng)
        add(i, j, SOURCE_SWISS, left)
    # whatever the strategies could not fill: random among the pairs left, not uniform
    draw(SOURCE_FILL, n_pairs)

    keys = np.concatenate(chosen_keys) if chosen_keys else np.empty(0, dtype=np.int64)
    src = np.concatenate(sources) if sources else np.empty(0, dtype=np.int64)
    lo, hi = keys // n, keys % n
    flip = rng.random(keys.size) < 0.5  # random order: position bias averages out
    a, b = np.where(flip, hi, lo), np.where(flip, lo, hi)
    uniform = src == SOURCE_RANDOM
    propensity = np.where(uniform, min(1.0, n_uniform / max(n_pairs_field, 1)), 1.0)
    group = np.arange(keys.size, dtype=np.int64)
    if position == "both":
        twins = group
        words = "every pair in both orders"
    else:
        n_twins = min(size - keys.size, keys.size)
        twins = np.sort(rng.choice(keys.size, size=n_twins, replace=False))
        words = (
            f"each pair once in a random order; {n_twins:,} of {keys.size:,} pairs "
            "also swapped, to measure position consistency"
        )
    out_a = np.concatenate([a, b[twins]])
    out_b = np.concatenate([b, a[twins]])
    is_swap = np.r_[np.zeros(keys.size, bool), np.ones(twins.size, bool)]
    queue = rng.permutation(out_a.size)
    return Batch(
        a=out_a[queue],
        b=out_b[queue],
        group=np.concatenate([group, group[twins]])[queue],
        is_swap=is_swap[queue],
        source=np.concatenate([src, src[twins]])[queue],
        propensity=np.concatenate([propensity, propensity[twins]])[queue],
        position=words,
    )


# --------------------------------------------------------------------------- field-wide


@dataclass(frozen=True)
class FieldRate:
    """A rate over every pair of the field, from the uniform share alone (inverse-
    probability weighted): adaptive pairs are chosen close, so a rate over them (ties,
    position sway) describes close pairs, not the field."""

    value: float | None
    low: float | None
    high: float | None
    n: int  # uniform-share verdicts it rests on
    n_eff: float  # Kish's effective n of the weights (the interval's n)


def field_rate(values: np.ndarray, weights: np.ndarray, confidence: float = 0.95) -> FieldRate:
    """Hajek estimate ``sum(w x) / sum(w)`` of the mean of ``values`` (in [0, 1]) over the
    field's pairs, from the rows with ``weight > 0`` (``1 / propensity`` of the uniform
    share: rounds draw it with different propensities), with a Wilson interval at Kish's
    effective n. None below one weighted row."""
    x = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    keep = w > 0
    if not keep.any():
        return FieldRate(None, None, None, 0, 0.0)
    x, w = x[keep], w[keep]
    value = float(np.sum(w * x) / np.sum(w))
    n_eff = float(np.sum(w) ** 2 / np.sum(w * w))
    low, high = wilson(np.array([value * n_eff]), np.array([n_eff]), confidence)
    return FieldRate(value, float(low[0]), float(high[0]), int(keep.sum()), n_eff)


# --------------------------------------------------------------------------- pillars


def pillar_prompt_keys(
    a: np.ndarray, b: np.ndarray, answered: np.ndarray, *, seed: int | np.random.SeedSequence = 0
) -> np.ndarray:
    """For each pillar pair (a[r], b[r]), a prompt key index drawn uniformly among those
    both pillars answered (``answered``: (pillars, keys) bool); -1 where they share none.

    ``allowed = answered @ answered.T > 0`` is the matching ``allowed`` for
    :func:`select_batch`, so selected pillar pairs always get a key.
    """
    answered = np.asarray(answered, dtype=bool)
    rng = np.random.default_rng(seed)
    shared = answered[a] & answered[b]  # (pairs, keys)
    draw = np.where(shared, rng.random(shared.shape), -1.0)
    key = np.argmax(draw, axis=1) if shared.shape[1] else np.zeros(len(a), dtype=np.int64)
    return np.where(shared.any(axis=1), key, -1)
