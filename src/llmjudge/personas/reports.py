"""Results of a persona: metrics per iteration, the final report, and the full export
(JSON, or CSV with formula-neutralised cells)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge import __version__
from llmjudge.core.personas.replies import human_label
from llmjudge.core.text.csvsafe import provenance_lines, write_csv
from llmjudge.infra.db.rows import columns
from llmjudge.personas.iterations import (
    iterations_in_order,
    list_iterations,
    metrics_out,
    spent_usd,
)
from llmjudge.personas.lookup import persona_row, rows_in_order
from llmjudge.personas.models import PersonaDecision, PersonaIteration, PersonaPair, TaskOutput
from llmjudge.personas.pairs import pair_labels
from llmjudge.personas.prompt_versions import list_versions
from llmjudge.personas.schemas import MetricsRow, PairOut, ReportDecision, ReportOut
from llmjudge.personas.service import get_persona, pairs_in_order
from llmjudge.providers import LLMModel, Provider


async def metrics(*, db: AsyncSession, persona_id: int) -> list[MetricsRow]:
    await persona_row(db, persona_id)
    return [
        _metrics_row(it)
        for it in await iterations_in_order(db, persona_id)
        if it.metrics_optimisation is not None or it.metrics_selection is not None
    ]


def _metrics_row(it: PersonaIteration) -> MetricsRow:
    return MetricsRow(
        iteration=it.number,
        prompt_version=it.prompt_version,
        optimisation=metrics_out(it.metrics_optimisation),
        selection=metrics_out(it.metrics_selection),
        calibration=metrics_out(it.metrics_calibration),
    )


async def _report_decisions(
    db: AsyncSession, iteration_id: int, agrees: bool, limit: int = 5
) -> list[ReportDecision]:
    rows = await db.execute(
        select(PersonaDecision, PersonaPair.input, TaskOutput.output)
        .join(PersonaPair, PersonaPair.id == PersonaDecision.pair_id)
        .join(TaskOutput, TaskOutput.id == PersonaDecision.output_id)
        .where(
            PersonaDecision.iteration_id == iteration_id,
            PersonaDecision.human_agrees.is_(agrees),
        )
        .order_by(PersonaDecision.judge_confidence.desc().nulls_last(), PersonaPair.position)
        .limit(limit)
    )
    return [
        ReportDecision.model_validate(
            columns(d)
            | {"decision_id": d.id, "input": inp, "answer": answer, "human_agrees": agrees}
        )
        for d, inp, answer in rows.all()
    ]


async def report(*, db: AsyncSession, persona_id: int) -> ReportOut:
    """Final metrics, iterations to convergence, prompt evolution, and the judge's most
    confident decisions of the last scored iteration that the human confirmed or rejected."""
    p = await persona_row(db, persona_id)
    iterations = await iterations_in_order(db, persona_id)
    scored = [it for it in iterations if it.metrics_optimisation or it.metrics_selection]
    last = scored[-1] if scored else None
    versions = await list_versions(db=db, persona_id=persona_id)
    evolution = []
    for v in versions:
        used = [it for it in scored if it.prompt_version == v.version]
        evolution.append(
            {
                "version": v.version,
                "created_by": v.created_by,
                "rationale": v.rationale,
                "created_at": v.created_at.isoformat(),
                "iterations": [it.number for it in used],
                "optimisation_f1": used[-1].metrics_optimisation["f1"]
                if used and used[-1].metrics_optimisation
                else None,
                "selection_f1": used[-1].metrics_selection["f1"]
                if used and used[-1].metrics_selection
                else None,
            }
        )
    converged = next((it.number for it in iterations if it.outcome == "converged"), None)
    return ReportOut(
        persona_id=persona_id,
        status=p.status,  # type: ignore[arg-type]
        target_f1=p.target_f1,
        iterations=len(iterations),
        converged_at=converged,
        final=None if last is None else _metrics_row(last),
        prompt_evolution=evolution,
        best_decisions=[] if last is None else await _report_decisions(db, last.id, True),
        worst_decisions=[] if last is None else await _report_decisions(db, last.id, False),
        spent_usd=await spent_usd(db=db, persona_id=persona_id),
    )


EXPORT_COLUMNS = (
    "pair_id",
    "split",
    "input",
    "input_b",
    "correct_output",
    "iteration",
    "decision_id",
    "prompt_version",
    "answer",
    "system",
    "judge_label",
    "judge_reasoning",
    "judge_confidence",
    "human_agrees",
    "human_label",
    "human_notes",
    "reviewed_by",
    "carried_forward",
    "iteration_f1_optimisation",
    "iteration_f1_selection",
)


async def export_data(*, db: AsyncSession, persona_id: int) -> dict[str, Any]:
    """Everything about a persona: settings, prompts, pairs, answers, decisions, metrics."""
    persona = await get_persona(db=db, persona_id=persona_id)
    pairs = await pairs_in_order(db, persona_id)
    labels = await pair_labels(db, persona_id)
    outputs = await rows_in_order(db, TaskOutput, persona_id, TaskOutput.id)
    decisions = await rows_in_order(
        db, PersonaDecision, persona_id, PersonaDecision.iteration, PersonaDecision.pair_id
    )
    prompts = await list_versions(db=db, persona_id=persona_id)
    return {
        "provenance": await _provenance(db, persona.model_dump(mode="json"), prompts),
        "persona": persona.model_dump(mode="json"),
        "prompts": [v.model_dump(mode="json") for v in prompts],
        "pairs": [
            PairOut.model_validate(pair).model_dump(mode="json")
            | {
                "labels": {
                    who: "correct" if ok else "incorrect"
                    for who, ok in sorted(labels.get(pair.id, {}).items())
                }
            }
            for pair in pairs
        ],
        "outputs": [
            {"id": o.id, "pair_id": o.pair_id, "prompt_hash": o.prompt_hash, "output": o.output}
            for o in outputs
        ],
        "decisions": [
            {
                "id": d.id,
                "iteration": d.iteration,
                "pair_id": d.pair_id,
                "output_id": d.output_id,
                "split": d.split,
                "prompt_version": d.prompt_version,
                "judge_label": d.judge_label,
                "judge_reasoning": d.judge_reasoning,
                "judge_confidence": d.judge_confidence,
                "parse_error": d.parse_error,
                "human_agrees": d.human_agrees,
                "human_label": None
                if d.human_agrees is None
                else human_label(d.judge_label, d.human_agrees),
                "human_notes": d.human_notes,
                "reviewed_by": d.reviewed_by,
                "carried_forward": d.carried_forward,
                "bulk": d.bulk,
                "prefilled": d.prefilled,
                "similarity": d.similarity,
            }
            for d in decisions
        ],
        "iterations": [
            it.model_dump(mode="json") for it in await list_iterations(db=db, persona_id=persona_id)
        ],
    }


async def _provenance(
    db: AsyncSession, persona: dict[str, Any], prompts: list[Any]
) -> dict[str, Any]:
    """What produced a persona export: product version and time, the persona's models with
    their provider kinds and the simulated flag, its judge kind, current judge prompt (hash),
    target, split seed and evidence rule."""
    roles = {
        role: persona.get(f"{role}_model_id") for role in ("task", "judge", "engineer", "embedding")
    }
    ids = [i for i in roles.values() if isinstance(i, int)]
    rows = {
        r[0]: r
        for r in (
            await db.execute(
                select(LLMModel.id, LLMModel.name, LLMModel.model, Provider.kind)
                .join(Provider, Provider.id == LLMModel.provider_id)
                .where(LLMModel.id.in_(ids))
            )
        ).all()
    }
    models = {
        role: None
        if i is None
        else {"model_id": i, "deleted": True}
        if i not in rows
        else {
            "model_id": i,
            "name": rows[i][1],
            "model": rows[i][2],
            "provider_kind": rows[i][3],
            "simulated": rows[i][3] == "simulator",
        }
        for role, i in roles.items()
    }
    current = next((v for v in prompts if v.version == persona.get("current_version")), None)
    return {
        "product": "llmjudge",
        "version": __version__,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "persona": {"id": persona.get("id"), "name": persona.get("name")},
        "models": models,
        "simulated": any(m and m.get("simulated") for m in models.values()),
        "judge_kind": persona.get("judge_kind"),
        "judge_prompt": None
        if current is None
        else {
            "version": current.version,
            "sha256": hashlib.sha256(current.text.encode()).hexdigest(),
        },
        "settings": {
            k: persona.get(k)
            for k in (
                "target_f1",
                "split_seed",
                "holdout_fraction",
                "max_iterations",
                "min_per_class",
                "convergence_basis",
            )
            if k in persona
        },
    }


def export_csv(data: dict[str, Any]) -> str:
    """One row per decision (and one per pair never judged), formula-neutralised."""
    pairs = {pair["id"]: pair for pair in data["pairs"]}
    outputs = {o["id"]: o["output"] for o in data["outputs"]}
    f1 = {
        it["number"]: (
            (it["metrics_optimisation"] or {}).get("f1"),
            (it["metrics_selection"] or {}).get("f1"),
        )
        for it in data["iterations"]
    }
    rows: list[dict[str, Any]] = []
    judged: set[int] = set()
    for d in data["decisions"]:
        pair = pairs[d["pair_id"]]
        judged.add(pair["id"])
        opt_f1, held_f1 = f1.get(d["iteration"], (None, None))
        row = {
            "pair_id": pair["id"],
            "split": d["split"],
            "input": pair["input"],
            "input_b": pair["input_b"],
            "correct_output": pair["correct_output"],
            "iteration": d["iteration"],
            "decision_id": d["id"],
            "prompt_version": d["prompt_version"],
            "answer": outputs.get(d["output_id"], ""),
            "system": pair["system"],
            "judge_label": d["judge_label"],
            "judge_reasoning": d["judge_reasoning"],
            "judge_confidence": d["judge_confidence"],
            "human_agrees": d["human_agrees"],
            "human_label": d["human_label"],
            "human_notes": d["human_notes"],
            "reviewed_by": d["reviewed_by"],
            "carried_forward": d["carried_forward"],
            "iteration_f1_optimisation": opt_f1,
            "iteration_f1_selection": held_f1,
        }
        rows.append(row)
    for pair in data["pairs"]:
        if pair["id"] not in judged:
            row = {
                k: pair.get(k) for k in ("input", "input_b", "correct_output", "system", "split")
            }
            row["pair_id"] = pair["id"]
            rows.append(row)
    return provenance_lines(data["provenance"]) + write_csv(rows, EXPORT_COLUMNS)


def export_json(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)
