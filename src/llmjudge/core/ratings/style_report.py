"""The style-control view of a session: the pillar ranking with style held out.

Beside the raw ranking, with the style coefficients and their intervals. Pure: no I/O.

Pillars are the players and the threads' stored style features the covariates (see
analysis.style: with threads as players, one text per thread, style is a function of who
plays and is not identified). Clusters stay thread pairs. Numeric thread metadata keys the
user picks enter as extra covariates (meta_a - meta_b, z-scored).

Comparisons whose threads lack stored features (a thread deleted from the catalog) or a
picked metadata value are left out, and counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmjudge.core.analysis.outcomes import OutcomeTable, map_ids, opt_float
from llmjudge.core.fields import build_from
from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR
from llmjudge.core.ratings.elo import ELO_SCALE
from llmjudge.core.ratings.intervals import (
    comparison_clusters,
    ranks_from_intervals,
    verdict_weights,
)
from llmjudge.core.ratings.report import RatingOptions, rate
from llmjudge.core.ratings.style import (
    MAX_CONFOUNDING,
    STYLE_FEATURES,
    pair_style_covariates,
    style_control,
)

MIN_PILLARS = 2
MIN_COMPARISONS = 10
# Each style bootstrap round is a full Newton fit over the comparisons (about 0.7 s at a
# million): rounds x comparisons stays under this, so a page never waits minutes; the
# report says how many rounds were run.
ROUND_BUDGET = 20_000_000
MIN_ROUNDS = 20


@dataclass(frozen=True)
class StyleCovariate:
    name: str  # a STYLE_FEATURES name, or "meta:<key>"
    coef: float | None  # logit per standard deviation of the pair difference; None if not
    ci_low: float | None  # identified
    ci_high: float | None
    se: float | None  # cluster-robust (sandwich)
    identified: bool
    confounding: float | None  # share absorbed by the pillar strengths (near 1: unidentified)
    why: str | None = None  # why it is not identified: "constant", "collinear", "confounded"


@dataclass(frozen=True)
class StyleRow:
    pillar_id: int
    name: str
    raw_score: float  # Bradley-Terry on the Elo scale, same rows, no covariates
    raw_ci_low: float | None
    raw_ci_high: float | None
    raw_rank: int
    controlled_score: float  # with style held out
    controlled_ci_low: float | None
    controlled_ci_high: float | None
    controlled_rank: int
    rank_change: int  # raw_rank - controlled_rank: > 0 moves up once style is held out


@dataclass(frozen=True)
class StyleReport:
    identified: bool  # False: nothing below is estimated, `reason` says why
    reason: str | None
    covariates: list[StyleCovariate]
    pillars: list[StyleRow]  # by controlled rank, then score
    comparisons_used: int
    comparisons_skipped: int  # missing features or metadata, or within one pillar
    metadata_keys: list[str]  # the picked numeric metadata covariates
    level: float
    bootstrap_rounds: int
    base: float


def numeric_metadata_keys(thread_meta: Mapping[int, Mapping[str, object]]) -> list[str]:
    """Metadata keys whose values are numbers (not booleans) on every thread carrying them
    and that vary: the ones usable as covariates."""
    pairs = [(k, v) for meta in thread_meta.values() for k, v in meta.items()]
    bad = {k for k, v in pairs if isinstance(v, bool) or not isinstance(v, int | float)}
    values: dict[str, list[float]] = {}
    for k, v in pairs:
        if k not in bad:
            values.setdefault(k, []).append(float(v))
    return sorted(k for k, seen in values.items() if len(set(seen)) > 1)


def collinearity(x: np.ndarray) -> np.ndarray:
    """(k,) R^2 of each column of `x` (m, k) regressed on the others (with an intercept):
    near 1, its effect cannot be told apart from theirs. From the k x k covariance, so
    O(m k^2) once; a constant column scores 0 (it is reported as constant instead)."""
    x = np.asarray(x, np.float64)
    k = x.shape[1]
    out = np.zeros(k)
    if x.shape[0] < 2 or k < 2:
        return out
    cov = np.cov(x, rowvar=False)
    for j in range(k):
        if cov[j, j] <= 0:
            continue
        rest = [i for i in range(k) if i != j and cov[i, i] > 0]
        if not rest:
            continue
        c = cov[np.ix_(rest, [j])]
        explained = float((c.T @ np.linalg.pinv(cov[np.ix_(rest, rest)]) @ c)[0, 0])
        out[j] = min(max(explained / cov[j, j], 0.0), 1.0)
    return out


def _empty(
    reason: str, options: RatingOptions, keys: Sequence[str], used: int, skipped: int
) -> StyleReport:
    return build_from(
        StyleReport,
        options,  # level and base
        identified=False,
        reason=reason,
        covariates=[],
        pillars=[],
        comparisons_used=used,
        comparisons_skipped=skipped,
        metadata_keys=list(keys),
        bootstrap_rounds=0,
    )


def style_report(
    table: OutcomeTable,
    thread_pillar: Mapping[int, int],
    pillar_names: Mapping[int, str],
    features: Mapping[int, Sequence[float]],
    thread_meta: Mapping[int, Mapping[str, object]],
    options: RatingOptions,
    *,
    metadata_keys: Sequence[str] = (),
    prior: float = DEFAULT_PRIOR,
) -> StyleReport:
    """Raw and style-controlled pillar ratings over the same comparisons, and the style
    coefficients. Ties count half (the style fit's model); intervals are cluster bootstrap
    percentiles at options.level (Wald from the sandwich without rounds)."""
    n = table.n_players
    threads = table.players.tolist()
    feat = np.full((n, len(STYLE_FEATURES)), np.nan)
    for i, t in enumerate(threads):
        f = features.get(t)
        if f is not None:
            feat[i] = f
    meta = np.full((n, len(metadata_keys)), np.nan)
    for i, t in enumerate(threads):
        m = thread_meta.get(t, {})
        for j, k in enumerate(metadata_keys):
            v = m.get(k)
            if isinstance(v, int | float) and not isinstance(v, bool):
                meta[i, j] = float(v)
    pillars = map_ids(table.players, thread_pillar)
    usable = ~np.isnan(feat).any(axis=1) & ~np.isnan(meta).any(axis=1)
    keep = usable[table.a] & usable[table.b] & (pillars[table.a] != pillars[table.b])
    used, skipped = int(keep.sum()), int(len(table) - keep.sum())
    rows = np.flatnonzero(keep)
    kept = table.take(rows)
    pillar_ids, inverse = np.unique(
        np.concatenate([pillars[kept.a], pillars[kept.b]]), return_inverse=True
    )
    if pillar_ids.size < MIN_PILLARS:
        return _empty(
            "style control compares pillars: it needs comparisons between threads of at "
            f"least {MIN_PILLARS} pillars (threads are not identified: one answer each, so "
            "their style is a function of who plays)",
            options,
            metadata_keys,
            used,
            skipped,
        )
    if used < MIN_COMPARISONS:
        return _empty(
            f"only {used} usable comparisons between pillars; style control needs at least "
            f"{MIN_COMPARISONS}",
            options,
            metadata_keys,
            used,
            skipped,
        )
    a, b = inverse[:used], inverse[used:]
    raw_cov = pair_style_covariates(feat, kept.a, kept.b, meta if metadata_keys else None)
    names = [*STYLE_FEATURES, *(f"meta:{k}" for k in metadata_keys)]
    # thread pairs are the clusters, as for the raw pillar ranking
    clusters = comparison_clusters(kept, options.clusters or "pair")
    if options.clusters is None:
        clusters = np.arange(used)
    weights = verdict_weights(kept.strength, options.strong_weight)
    rounds = options.bootstrap_rounds if options.interval == "bootstrap" else 0
    rounds = min(rounds, max(MIN_ROUNDS, ROUND_BUDGET // max(used, 1)))
    fit = style_control(
        a,
        b,
        kept.rating_score,  # the judge's probability where it gave one
        int(pillar_ids.size),
        raw_cov,
        names,
        clusters,
        weights=weights,
        prior=prior,
        level=options.level,
        bootstrap_rounds=rounds,
        seed=options.seed,
    )
    pillar_kept = kept.map_players(thread_pillar)
    raw = rate(
        pillar_kept,
        # the style fit's own choices: its rounds, ties as half wins, the mean anchored
        dataclasses.replace(
            options,
            interval="bootstrap" if rounds else "sandwich",
            bootstrap_rounds=rounds,
            tie_model="half",
            baseline_thread=None,
            baseline_pillar=None,
        ),
        cluster_ids=clusters,
        prior=prior,
    )
    raw_by = {p.player_id: p for p in raw.players}
    scores = options.base + ELO_SCALE * fit.theta
    if fit.theta_low is not None and fit.theta_high is not None:
        low = options.base + ELO_SCALE * fit.theta_low
        high = options.base + ELO_SCALE * fit.theta_high
        ranks = ranks_from_intervals(low, high)
    else:
        low = high = None
        ranks = ranks_from_intervals(scores, scores)
    order = np.lexsort((pillar_ids, -scores, ranks))
    table_rows = []
    for i in order.tolist():
        pid = int(pillar_ids[i])
        r = raw_by[pid]
        table_rows.append(
            StyleRow(
                pillar_id=pid,
                name=pillar_names.get(pid, f"pillar {pid}"),
                raw_score=r.score,
                raw_ci_low=r.ci_low,
                raw_ci_high=r.ci_high,
                raw_rank=r.rank,
                controlled_score=float(scores[i]),
                controlled_ci_low=None if low is None else opt_float(low[i]),
                controlled_ci_high=None if high is None else opt_float(high[i]),
                controlled_rank=int(ranks[i]),
                rank_change=int(r.rank - ranks[i]),
            )
        )
    covariates = []
    constant = fit.covariate_std <= 0  # no variation at all: nothing to estimate
    collinear = collinearity(raw_cov) >= MAX_CONFOUNDING
    for j, name in enumerate(names):
        ok = bool(fit.identified[j]) and not constant[j] and not collinear[j]
        covariates.append(
            StyleCovariate(
                name=name,
                coef=opt_float(fit.coef[j]) if ok else None,
                ci_low=opt_float(fit.coef_low[j]) if ok else None,
                ci_high=opt_float(fit.coef_high[j]) if ok else None,
                se=opt_float(fit.coef_se[j]) if ok else None,
                identified=ok,
                confounding=opt_float(fit.confounding[j]),
                why=None
                if ok
                else "constant"
                if constant[j]
                else "collinear"
                if collinear[j]
                else "confounded",
            )
        )
    flat = [n for n, c in zip(names, constant.tolist(), strict=True) if c]
    tied = [n for n, c, f in zip(names, collinear, constant, strict=True) if c and not f]
    confounded = [c.name for c in covariates if not c.identified and c.name not in {*flat, *tied}]
    reasons = []
    if flat:
        reasons.append(f"{', '.join(flat)}: the same in every comparison (no variation)")
    if tied:
        reasons.append(
            f"{', '.join(tied)}: (almost) a linear function of the other covariates, so the "
            "data cannot tell their effects apart"
        )
    if confounded:
        reasons.append(
            f"{', '.join(confounded)}: almost a function of which pillars play (it hardly "
            "varies within a pillar)"
        )
    return build_from(
        StyleReport,
        options,  # level and base
        identified=True,
        reason="; ".join(reasons) + ", so not identified" if reasons else None,
        covariates=covariates,
        pillars=table_rows,
        comparisons_used=used,
        comparisons_skipped=skipped,
        metadata_keys=list(metadata_keys),
        bootstrap_rounds=rounds,
    )
