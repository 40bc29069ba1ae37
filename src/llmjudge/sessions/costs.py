"""What one judge call of a session costs: tokens, price and latency per call, from the
judge's model row and the session's prompt (shared by the planned and adaptive estimates
and by an adaptive session's stored cost per call)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from sqlalchemy import Text, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import Thread
from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.core.judging.grading import build_grading_messages
from llmjudge.core.judging.prompts import build_judge_messages, estimate_tokens
from llmjudge.core.tournaments.estimate import ModelCost
from llmjudge.providers import LLMModel, Provider, configured_latency_s
from llmjudge.sessions.reads import judge_model
from llmjudge.sessions.schemas import PanelIn, SessionIn

__all__ = [
    "DEFAULT_LATENCY_S",
    "cost_per_call",
    "latency",
    "model_cost",
    "panel_models",
]

# Seconds per call assumed for a model that has never been called.
DEFAULT_LATENCY_S = 2.0


async def panel_models(db: AsyncSession, panel: PanelIn) -> list[tuple[LLMModel, Provider]]:
    return [await judge_model(db, m.model_id) for m in panel.members]


def latency(m: LLMModel, p: Provider) -> float:
    if m.observed_latency_s is not None:
        return m.observed_latency_s
    configured = configured_latency_s(p.kind, p.settings)
    return DEFAULT_LATENCY_S if configured is None else configured


async def model_cost(db: AsyncSession, data: SessionIn, m: LLMModel, p: Provider) -> ModelCost:
    avg_chars = await db.scalar(
        select(func.avg(func.length(cast(Thread.content, Text)))).where(
            Thread.pillar_id.in_(data.pillar_ids)
        )
    )
    threads = 1 if data.comparison_mode == "single" else 2  # threads a call shows
    return ModelCost(
        input_per_million=m.input_price_per_million,
        output_per_million=m.output_price_per_million,
        latency_s=latency(m, p),
        tokens_in_per_call=_prompt_tokens(data) + threads * math.ceil(float(avg_chars or 0) / 4),
        tokens_out_per_call=_answer_tokens(data.criteria),
    )


def cost_per_call(cost: ModelCost) -> float:
    return (
        cost.tokens_in_per_call * cost.input_per_million
        + cost.tokens_out_per_call * cost.output_per_million
    ) / 1_000_000


def _prompt_tokens(data: SessionIn) -> int:
    """Tokens of the judge prompt around two empty threads (one, to grade it alone)."""
    if data.comparison_mode == "single":
        graded = build_grading_messages(
            content="",
            fmt=data.verdict_format or VerdictFormat(kind="score"),
            criteria=data.criteria,
            template=data.prompt_template,
            system_prompt=data.system_prompt,
        )
        return sum(estimate_tokens(m["content"]) for m in graded)
    messages = build_judge_messages(
        content_a="",
        content_b="",
        criteria=data.criteria,
        template=data.prompt_template,
        system_prompt=data.system_prompt,
    )
    return sum(estimate_tokens(m["content"]) for m in messages)


def _answer_tokens(criteria: Sequence[str]) -> int:
    """Tokens of a typical verdict: the JSON object with a three-sentence reasoning."""
    scores = {c: 4 for c in criteria}
    answer = {
        "winner": "A",
        "confidence": 0.85,
        "scores": {"A": scores, "B": scores},
        "reasoning": "x" * 300,
    }
    return estimate_tokens(json.dumps(answer))
