"""Win rates against a baseline pillar (``/api/sessions/{id}/baseline``): the session's
completed comparisons between a pillar and the baseline on the same prompt key, the
preference that the pillar's answer is better, and each answer's length (its stored style
features: characters of the answer), handed to the pure
:mod:`llmjudge.core.analysis.baseline`; the bootstrap runs off the event loop."""

from __future__ import annotations

import asyncio

import numpy as np
from pydantic import BaseModel, Field
from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from llmjudge.analysis.schemas import AnalysisSession
from llmjudge.catalog import Pillar, Thread
from llmjudge.core.analysis.baseline import RIDGE, baseline_win_rates
from llmjudge.infra.errors import Invalid
from llmjudge.sessions import Comparison

__all__ = ["BaselineOut", "BaselinePillarOut", "baseline_report", "pillar_names"]

BOOTSTRAP_ROUNDS = 200
_PREFERENCE = {"A": 1.0, "B": 0.0, "TIE": 0.5}


class BaselinePillarOut(BaseModel):
    pillar_id: int
    pillar_name: str
    judgments: int = Field(description="comparisons with the baseline on a shared prompt")
    prompts: int = Field(description="prompts those comparisons share")
    win_rate: float | None = Field(description="mean preference over prompts; a tie is half")
    win_rate_low: float | None
    win_rate_high: float | None
    lc_win_rate: float | None = Field(
        description="length-controlled win rate: the length term set to zero"
    )
    lc_win_rate_low: float | None
    lc_win_rate_high: float | None
    length_effect: float | None = Field(
        description="logits the judge adds for a much longer answer (at tanh = 1)"
    )
    penalty: float | None = Field(
        default=None,
        description="L2 strength of this pillar's length-controlled fit, chosen by 5-fold "
        "cross-validation over prompts (fixed `ridge` below 5 prompts)",
    )
    mean_length: float | None = Field(description="characters of the pillar's answers")
    baseline_mean_length: float | None = Field(description="of the baseline's, same rows")


class BaselineOut(BaseModel):
    session_id: int
    baseline_pillar_id: int
    baseline_pillar_name: str
    pillars: list[BaselinePillarOut] = Field(description="by length-controlled win rate")
    left_out: int = Field(
        description="comparisons with the baseline whose threads have no shared prompt key"
    )
    bootstrap_rounds: int
    ridge: float = Field(
        description="L2 penalty of the length-controlled fits of pillars with fewer than 5 "
        "prompts (the others' is cross-validated: `penalty`)"
    )


async def pillar_names(db: AsyncSession, ids: list[int]) -> dict[int, str]:
    """The names of these pillars, by id (the baseline choices of a session)."""
    rows = await db.execute(select(Pillar.id, Pillar.name).where(Pillar.id.in_(ids)))
    return dict(rows.all())  # type: ignore[arg-type]


async def baseline_report(
    *, db: AsyncSession, session: AnalysisSession, baseline_pillar_id: int
) -> BaselineOut:
    if baseline_pillar_id not in session.pillar_ids:
        raise Invalid(
            f"pillar {baseline_pillar_id} is not in session {session.id}; "
            f"choose one of {', '.join(map(str, session.pillar_ids))}"
        )
    ta, tb = aliased(Thread), aliased(Thread)
    rows = (
        await db.execute(
            select(
                Comparison.pillar_a_id,
                Comparison.pillar_b_id,
                Comparison.winner,
                Comparison.prob_a,
                ta.prompt_key,
                tb.prompt_key,
                ta.style_features[1],  # PostgreSQL arrays count from 1: the length
                tb.style_features[1],
            )
            .join(ta, ta.id == Comparison.thread_a_id)
            .join(tb, tb.id == Comparison.thread_b_id)
            .where(
                Comparison.session_id == session.id,
                Comparison.status == "completed",
                Comparison.winner.is_not(None),
                Comparison.pillar_a_id != Comparison.pillar_b_id,
                or_(
                    Comparison.pillar_a_id == baseline_pillar_id,
                    Comparison.pillar_b_id == baseline_pillar_id,
                ),
            )
        )
    ).all()
    names = await pillar_names(db, session.pillar_ids)
    await db.close()  # nothing more to read: the fits need no connection
    others = [p for p in session.pillar_ids if p != baseline_pillar_id]
    index = {p: k for k, p in enumerate(others)}
    kept = [r for r in rows if r[4] is not None and r[4] == r[5]]
    pillar, prompt, preference, length, base_length = [], [], [], [], []
    for pa, pb, winner, prob_a, key, _, len_a, len_b in kept:
        mine_first = pb == baseline_pillar_id
        pillar.append(index[pa if mine_first else pb])
        prompt.append(key)
        # the judge's probability where it gave one (AlpacaEval's weighted preference)
        p = _PREFERENCE[winner] if prob_a is None else prob_a
        preference.append(p if mine_first else 1.0 - p)
        length.append((len_a if mine_first else len_b) or 0.0)
        base_length.append((len_b if mine_first else len_a) or 0.0)
    found = await asyncio.to_thread(
        baseline_win_rates,
        np.asarray(pillar, dtype=np.int64),
        np.asarray(prompt, dtype=object),
        np.asarray(preference, dtype=float),
        np.asarray(length, dtype=float),
        np.asarray(base_length, dtype=float),
        pillars=len(others),
        rounds=BOOTSTRAP_ROUNDS,
        seed=session.id,
    )
    out = [
        BaselinePillarOut.model_validate(
            vars(r)
            | {"pillar_id": others[r.pillar], "pillar_name": names.get(others[r.pillar], "")}
        )
        for r in found
    ]
    out.sort(key=lambda r: (r.lc_win_rate is None, -(r.lc_win_rate or 0.0), r.pillar_name))
    return BaselineOut(
        session_id=session.id,
        baseline_pillar_id=baseline_pillar_id,
        baseline_pillar_name=names.get(baseline_pillar_id, ""),
        pillars=out,
        left_out=len(rows) - len(kept),
        bootstrap_rounds=BOOTSTRAP_ROUNDS,
        ridge=RIDGE,
    )
