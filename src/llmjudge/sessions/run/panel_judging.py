"""Judging one comparison with a panel: every member asked through the gateway (each its
own provider, limits, cache and cost), at once, or in order for a cascade; the verdict is
the panel's aggregate (``judging.panels``), the votes travel in the ``Finish`` and are
stored by the same transaction that applies it (``claims.write_votes``).

A member whose call fails after the gateway's retries, or whose answer does not parse, is
recorded as ``missing``; the aggregate says how many voted. With nobody voting the
comparison is retried like a failed single-judge call (its spend still counts).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from llmjudge.core.judging.formats import VerdictFormat, parse_with_format
from llmjudge.core.judging.panels import CascadePolicy, Vote, aggregate, panel_strength, should_stop
from llmjudge.core.judging.prompts import verdict_json_schema
from llmjudge.core.judging.verdicts import VerdictParseError
from llmjudge.providers import ModelPricing, ProviderError
from llmjudge.sessions.run.claims import Claimed, Finish, MemberVote
from llmjudge.sessions.run.judging import (
    MAX_ATTEMPTS,
    ChatService,
    Publish,
    SessionConfig,
    ThreadCache,
    call_usage,
    prepare_prompt,
    session_topic,
    verdict_fields,
)

__all__ = ["MemberConfig", "PanelConfig", "judge_panel", "panel_config"]


@dataclass(frozen=True, slots=True)
class MemberConfig:
    model_id: int | None
    label: str
    input_price_per_million: float = 0.0
    output_price_per_million: float = 0.0
    weight: float | None = None

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        pricing = ModelPricing(self.input_price_per_million, self.output_price_per_million)
        return pricing.cost(input_tokens, output_tokens)


@dataclass(frozen=True, slots=True)
class PanelConfig:
    rule: str
    members: tuple[MemberConfig, ...]
    policy: CascadePolicy | None = None

    @property
    def weights(self) -> list[float] | None:
        if self.rule not in ("weighted", "calibrated"):
            return None
        return [1.0 if m.weight is None else m.weight for m in self.members]


def panel_config(stored: dict[str, Any], prices: Sequence[tuple[float, float]]) -> PanelConfig:
    """The stored ``judge_sessions.panel`` with each member's prices."""
    members = tuple(
        MemberConfig(m.get("model_id"), m.get("label") or "", p_in, p_out, m.get("weight"))
        for m, (p_in, p_out) in zip(stored["members"], prices, strict=True)
    )
    cascade = stored.get("cascade")
    policy = (
        CascadePolicy(cascade.get("rule", "confidence"), float(cascade.get("threshold", 0.8)))
        if stored["rule"] == "cascade" and cascade
        else (CascadePolicy() if stored["rule"] == "cascade" else None)
    )
    return PanelConfig(stored["rule"], members, policy)


async def _ask(
    llm: ChatService,
    item: Claimed,
    k: int,
    member: MemberConfig,
    messages: list[dict[str, str]],
    criteria: Sequence[str],
    fmt: VerdictFormat,
    context: dict[str, Any],
) -> MemberVote:
    base: dict[str, Any] = {"member": k, "model_id": member.model_id, "judge": member.label}
    if member.model_id is None:
        return MemberVote(**base, status="missing", error="this member's model was deleted")
    try:
        result = await llm.chat(
            model_id=member.model_id,
            messages=messages,
            # As for one judge: structured output only for the built-in JSON verdict.
            json_schema=verdict_json_schema(criteria) if fmt.kind == "json" else None,
            context={**context, "member": k, "call_key": f"{context['call_key']}:{k}"},
            purpose="judge",
            related={"session_id": item.session_id, "comparison_id": item.id, "member": k},
            use_cache=False if item.repetition > 0 or item.attempts > 1 else None,
        )
    except ProviderError as exc:
        return MemberVote(**base, status="missing", error=exc.cause[:2000])
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a bug or an unknown model must not kill the worker
        return MemberVote(**base, status="missing", error=f"{type(exc).__name__}: {exc}"[:2000])
    usage = call_usage(result, member.cost)
    try:
        parsed = parse_with_format(result.text, fmt, criteria)
    except VerdictParseError as exc:
        return MemberVote(**base, **usage, status="missing", error=str(exc)[:2000])
    verdict = parsed.verdict
    return MemberVote(
        **base,
        **usage,
        **verdict_fields(verdict),
        status="voted",
        # An answer the format counts as a tie is a vote, its reason kept.
        error=None if parsed.unparsed is None else f"unparsed, a tie: {parsed.unparsed}"[:2000],
    )


def _as_vote(v: MemberVote) -> Vote:
    return Vote(v.winner if v.status == "voted" else None, v.confidence, v.scores_a, v.scores_b)  # type: ignore[arg-type]


async def judge_panel(
    *,
    llm: ChatService,
    item: Claimed,
    config: SessionConfig,
    panel: PanelConfig,
    threads: ThreadCache,
    publish: Publish | None = None,
    max_attempts: int = MAX_ATTEMPTS,
) -> Finish:
    """Ask the panel about ``item`` and say how it ended. Raises only ``CancelledError``."""
    criteria = config.criteria
    started = datetime.now(UTC)
    base = {"id": item.id, "worker_id": item.worker_id, "attempts": item.attempts}
    prepared = prepare_prompt(item, config, threads, max_attempts)
    if isinstance(prepared, Finish):
        return prepared
    a, b, messages = prepared
    topic = session_topic(item.session_id)
    context = {
        "task": "pairwise",
        "thread_a": {"id": a.id, "quality": a.quality, "pillar_id": a.pillar_id},
        "thread_b": {"id": b.id, "quality": b.quality, "pillar_id": b.pillar_id},
        "criteria": list(criteria),
        "call_key": f"{item.session_id}:{item.queue_position}:{item.attempts}",
    }
    if publish is not None:
        publish(
            topic,
            "comparison_start",
            {
                "comparison_id": item.id,
                "worker_id": item.worker_id,
                "thread_a_id": item.thread_a_id,
                "thread_b_id": item.thread_b_id,
                "pillar_a_id": item.pillar_a_id,
                "pillar_b_id": item.pillar_b_id,
                "attempt": item.attempts,
                "members": [m.label for m in panel.members],
            },
        )

    def announce(v: MemberVote) -> None:
        # A live lane shows every member's answer as it arrives.
        if publish is not None:
            publish(
                topic,
                "panel_vote",
                {
                    "comparison_id": item.id,
                    "worker_id": item.worker_id,
                    "member": v.member,
                    "judge": v.judge,
                    "status": v.status,
                    "winner": v.winner,
                    "confidence": v.confidence,
                    "cost_usd": v.cost_usd,
                    "latency_s": v.latency_s,
                    "error": v.error,
                },
            )

    async def ask(k: int) -> MemberVote:
        v = await _ask(
            llm, item, k, panel.members[k], messages, criteria, config.verdict_format, context
        )
        announce(v)
        return v

    t0 = time.perf_counter()
    votes: list[MemberVote]
    if panel.policy is None:
        votes = list(await asyncio.gather(*(ask(k) for k in range(len(panel.members)))))
        asked = len(votes)
    else:
        votes = []
        for k in range(len(panel.members)):
            votes.append(await ask(k))
            if should_stop([_as_vote(v) for v in votes], panel.policy):
                break
        asked = len(votes)
        votes += [
            MemberVote(member=k, model_id=m.model_id, judge=m.label, status="skipped")
            for k, m in enumerate(panel.members)
            if k >= asked
        ]
    wall = time.perf_counter() - t0
    agg = aggregate(
        panel.rule, [_as_vote(v) for v in votes], weights=panel.weights, policy=panel.policy
    )
    usage = {
        "input_tokens": sum(v.input_tokens for v in votes),
        "output_tokens": sum(v.output_tokens for v in votes),
        "cost_usd": sum(v.cost_usd for v in votes),
        "latency_s": wall,
        "cache_hit": all(v.cache_hit for v in votes if v.status == "voted"),
        "started_at": started,
    }
    if agg.winner is None:
        errors = "; ".join(f"{v.judge or v.member}: {v.error}" for v in votes if v.error)
        status = "failed" if item.attempts >= max_attempts else "pending"
        return Finish(
            **base,
            **usage,
            status=status,
            error=f"no member of the panel voted ({errors})"[:2000],
            votes=tuple(votes) if status == "failed" else (),
            votes_cast=0,
            votes_asked=asked,
        )
    return Finish(
        **base,
        **usage,
        status="completed",
        winner=agg.winner,
        confidence=agg.confidence,
        scores_a=agg.scores_a or None,
        scores_b=agg.scores_b or None,
        reasoning=f"panel ({panel.rule}): {agg.voted} of {len(panel.members)} members voted",
        strength=panel_strength(
            agg.winner, [(v.winner, v.strength) for v in votes if v.status == "voted"]
        ),
        votes=tuple(votes),
        votes_cast=agg.voted,
        votes_asked=asked,
    )
