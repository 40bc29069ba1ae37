"""The progress tab: metric cards with their movement, the F1 chart per iteration, and the
live fragment the page's event listener asks for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from sqlalchemy import select

from llmjudge.core.charts import line_chart
from llmjudge.infra.web import DbSession, render
from llmjudge.personas import iterations as iteration_service
from llmjudge.personas.execution import persona_batches_out
from llmjudge.personas.pages.common import METRIC_LABELS, METRICS, detail_ctx
from llmjudge.personas.schemas import IntervalOut, IterationOut, MetricsOut, PersonaOut
from llmjudge.providers import LLMModel, Provider

router = APIRouter(include_in_schema=False)


# Movements smaller than this show as "unchanged" (metrics are printed with 3 decimals).
TREND_EPS = 5e-4


@dataclass(frozen=True)
class Card:
    key: str
    label: str
    value: float
    delta: float | None  # vs the previous scored iteration
    ci: IntervalOut | None = None  # count and 95% interval (None for old iterations)
    n: int = 0

    @property
    def trend(self) -> Literal["up", "down", "flat", "none"]:
        if self.delta is None:
            return "none"
        if abs(self.delta) < TREND_EPS:
            return "flat"
        return "up" if self.delta > 0 else "down"


def metric_cards(latest: MetricsOut | None, previous: MetricsOut | None) -> list[Card]:
    if latest is None:
        return []
    return [
        Card(
            key,
            METRIC_LABELS[key],
            getattr(latest, key),
            None if previous is None else getattr(latest, key) - getattr(previous, key),
            (latest.intervals or {}).get(key),
            latest.n,
        )
        for key in METRICS
    ]


def scored(iterations: Sequence[IterationOut]) -> list[IterationOut]:
    return [it for it in iterations if it.metrics_optimisation or it.metrics_selection]


def deciding_split(iterations: Sequence[IterationOut]) -> Literal["selection", "optimisation"]:
    """Held-out when the persona has a held-out part (as the loop decides convergence)."""
    return "selection" if any(it.metrics_selection for it in iterations) else "optimisation"


def progress_chart(iterations: Sequence[IterationOut], target: float) -> Markup:
    rows = scored(iterations)
    split = deciding_split(rows)

    def values(key: str, side: str) -> list[float | None]:
        out = []
        for it in rows:
            m = it.metrics_selection if side == "selection" else it.metrics_optimisation
            out.append(None if m is None else getattr(m, key))
        return out

    series: dict[str, list[float | None]] = {
        f"F1 ({split})": values("f1", split),
        f"Precision ({split})": values("precision", split),
        f"Recall ({split})": values("recall", split),
    }
    if split == "selection":
        series["F1 (optimisation)"] = values("f1", "optimisation")
    return line_chart(
        [it.number for it in rows],
        series,
        title=f"Agreement with the human per iteration ({split} split)",
        x_label="iteration",
        y_label="score",
        target=target,
        width=720,
    )


async def _progress_ctx(db: DbSession, persona: PersonaOut) -> dict[str, Any]:
    iterations = await iteration_service.list_iterations(db=db, persona_id=persona.id)
    rows = scored(iterations)
    latest, previous = (rows[-1] if rows else None), (rows[-2] if len(rows) > 1 else None)
    split = deciding_split(rows)
    deciding = None
    if latest is not None:
        deciding = latest.metrics_selection if split == "selection" else latest.metrics_optimisation
    return {
        "iterations": iterations,
        "current": iterations[-1] if iterations else None,
        "latest": latest,
        "split": split,
        "deciding": deciding,
        "cards_selection": metric_cards(
            latest.metrics_selection if latest else None,
            previous.metrics_selection if previous else None,
        ),
        "cards_optimisation": metric_cards(
            latest.metrics_optimisation if latest else None,
            previous.metrics_optimisation if previous else None,
        ),
        "cards_calibration": metric_cards(
            latest.metrics_calibration if latest else None,
            previous.metrics_calibration if previous else None,
        ),
        "convergence": latest.convergence if latest else None,
        "simulated": await uses_simulator(db, persona),
        "chart": progress_chart(iterations, persona.target_f1),
        "spent": await iteration_service.spent_usd(db=db, persona_id=persona.id),
        # Its judge's batch jobs (execution batch; kept after a switch back to live).
        "batches": await persona_batches_out(db=db, persona_id=persona.id),
    }


async def uses_simulator(db: DbSession, persona: PersonaOut) -> bool:
    """Whether any model of the persona is simulated: its convergence is then no evidence
    that the prompt optimiser works (the simulator's judge improves by construction)."""
    ids = [persona.task_model_id, persona.judge_model_id, persona.engineer_model_id]
    ids = [i for i in ids if i is not None]
    if not ids:
        return False
    kinds = await db.scalars(
        select(Provider.kind)
        .join(LLMModel, LLMModel.provider_id == Provider.id)
        .where(LLMModel.id.in_(ids))
    )
    return "simulator" in set(kinds)


@router.get("/personas/{persona_id}/progress", response_class=HTMLResponse)
async def progress_page(request: Request, persona_id: int, db: DbSession):
    ctx = await detail_ctx(request, db, persona_id, "progress")
    ctx.update(await _progress_ctx(db, ctx["persona"]))
    return render(request, "personas/progress.html", **ctx)


@router.get("/personas/{persona_id}/progress/live", response_class=HTMLResponse)
async def progress_live(request: Request, persona_id: int, db: DbSession):
    ctx = await detail_ctx(request, db, persona_id, "progress")
    ctx.update(await _progress_ctx(db, ctx["persona"]))
    return render(request, "personas/_progress_live.html", **ctx)
