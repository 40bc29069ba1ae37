"""Judging one comparison: threads in, one ``Finish`` (verdict, retry or failure) out.

No database transaction is open here: the pool loads threads before and writes the
``Finish`` after, in batches. A verdict is never guessed: an answer that does not parse is
recorded (raw response and parse error) and the comparison goes back to the queue until
``max_attempts`` is spent, then fails.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from llmjudge.catalog.models import Thread
from llmjudge.events.hub import DeltaBatcher
from llmjudge.judging.prompts import build_judge_messages, verdict_json_schema
from llmjudge.judging.verdicts import VerdictParseError, parse_verdict
from llmjudge.providers.base import ChatResult, DeltaCallback, ProviderError
from llmjudge.sessions.claims import Claimed, Finish

__all__ = [
    "MAX_ATTEMPTS",
    "Publish",
    "SessionConfig",
    "ThreadCache",
    "ThreadData",
    "judge_comparison",
    "session_topic",
]

# Attempts per comparison (parse errors, non-retryable provider errors, provider errors left
# after the gateway's own retries, dead workers) before it fails for good.
MAX_ATTEMPTS = 3
RAW_RESPONSE_LIMIT = 100_000

Publish = Callable[[str, str, dict[str, Any]], None]


def session_topic(session_id: int) -> str:
    return f"session:{session_id}"


class ChatService(Protocol):
    async def chat(
        self,
        *,
        model_id: int,
        messages: list[dict[str, str]],
        json_schema: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        purpose: str,
        related: Mapping[str, Any] | None = None,
        on_delta: DeltaCallback = None,
        use_cache: bool | None = None,
    ) -> ChatResult: ...


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """What a worker needs to know about a session (immutable once created)."""

    id: int
    criteria: tuple[str, ...]
    prompt_template: str | None
    judge_model_id: int | None
    input_price_per_million: float = 0.0
    output_price_per_million: float = 0.0

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (
            input_tokens * self.input_price_per_million
            + output_tokens * self.output_price_per_million
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class ThreadData:
    id: int
    pillar_id: int
    title: str
    content: Any  # a string, or a list of {"role", "content"} messages
    quality: float | None  # metadata "quality": the simulator's latent truth, if given


def _quality(meta: Mapping[str, Any] | None) -> float | None:
    value = (meta or {}).get("quality")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


class ThreadCache:
    """Thread contents by id, least recently used evicted; shared by a pool's workers."""

    def __init__(self, max_items: int = 20_000) -> None:
        self.max_items = max_items
        self._items: OrderedDict[int, ThreadData] = OrderedDict()

    def get(self, thread_id: int) -> ThreadData | None:
        item = self._items.get(thread_id)
        if item is not None:
            self._items.move_to_end(thread_id)
        return item

    def put(self, item: ThreadData) -> None:
        self._items[item.id] = item
        self._items.move_to_end(item.id)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)

    async def load(self, conn: AsyncConnection, ids: Iterable[int]) -> None:
        """Fetch the missing ones of ``ids`` in one query (deleted threads stay missing)."""
        missing = sorted({i for i in ids if self.get(i) is None})
        if not missing:
            return
        rows = await conn.execute(
            select(Thread.id, Thread.pillar_id, Thread.title, Thread.content, Thread.meta).where(
                Thread.id.in_(missing)
            )
        )
        for tid, pillar_id, title, content, meta in rows.all():
            self.put(ThreadData(tid, pillar_id, title or "", content, _quality(meta)))

    def __len__(self) -> int:
        return len(self._items)


def _thread_context(t: ThreadData) -> dict[str, Any]:
    return {"id": t.id, "quality": t.quality, "pillar_id": t.pillar_id}


def _retry_or_fail(item: Claimed, max_attempts: int) -> str:
    return "failed" if item.attempts >= max_attempts else "pending"


async def judge_comparison(
    *,
    llm: ChatService,
    item: Claimed,
    config: SessionConfig,
    threads: ThreadCache,
    publish: Publish | None = None,
    max_attempts: int = MAX_ATTEMPTS,
    stream_interval_s: float = 0.1,
) -> Finish:
    """Judge ``item`` once and say how it ended. Raises only ``CancelledError``."""
    started = datetime.now(UTC)
    base = {"id": item.id, "worker_id": item.worker_id, "attempts": item.attempts}
    topic = session_topic(item.session_id)
    a, b = threads.get(item.thread_a_id), threads.get(item.thread_b_id)
    if item.attempts > max_attempts:
        return Finish(**base, status="failed", error=f"abandoned by {max_attempts} workers")
    if config.judge_model_id is None:
        return Finish(**base, status="failed", error="the session's judge model was deleted")
    if a is None or b is None:
        return Finish(**base, status="failed", error="a thread of this comparison was deleted")
    try:
        messages = build_judge_messages(
            content_a=a.content,
            content_b=b.content,
            criteria=config.criteria,
            template=config.prompt_template,
            title_a=a.title or None,
            title_b=b.title or None,
        )
    except ValueError as exc:  # a malformed stored thread
        return Finish(**base, status="failed", error=f"cannot build the judge prompt: {exc}")

    if publish is not None:
        publish(
            topic,
            "comparison_start",
            {
                "comparison_id": item.id,
                "worker_id": item.worker_id,
                "thread_a_id": item.thread_a_id,
                "thread_b_id": item.thread_b_id,
                # titles ride along so the live lanes name the threads at once, before the
                # labels fetch answers
                "thread_a_title": a.title or None,
                "thread_b_title": b.title or None,
                "pillar_a_id": item.pillar_a_id,
                "pillar_b_id": item.pillar_b_id,
                "attempt": item.attempts,
            },
        )
    batcher: DeltaBatcher | None = None
    if publish is not None:
        stream = {"comparison_id": item.id, "worker_id": item.worker_id}
        batcher = DeltaBatcher(
            lambda text: publish(topic, "llm_stream", {**stream, "text": text}),
            interval_s=stream_interval_s,
        )
    try:
        result = await llm.chat(
            model_id=config.judge_model_id,
            messages=messages,
            json_schema=verdict_json_schema(config.criteria),
            context={
                "task": "pairwise",
                "thread_a": _thread_context(a),
                "thread_b": _thread_context(b),
                "criteria": list(config.criteria),
                "call_key": f"{item.session_id}:{item.queue_position}:{item.attempts}",
            },
            purpose="judge",
            related={"session_id": item.session_id, "comparison_id": item.id},
            on_delta=batcher.add if batcher is not None else None,
            # Repetitions and retries must be fresh judgements, not the cached first one.
            use_cache=False if item.repetition > 0 or item.attempts > 1 else None,
        )
    except ProviderError as exc:
        status = _retry_or_fail(item, max_attempts)
        return Finish(**base, status=status, started_at=started, error=exc.cause[:2000])
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a bug or an unknown model must not kill the worker
        status = _retry_or_fail(item, max_attempts)
        error = f"{type(exc).__name__}: {exc}"[:2000]
        return Finish(**base, status=status, started_at=started, error=error)
    finally:
        if batcher is not None:
            await batcher.flush()

    usage = {
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "cost_usd": 0.0
        if result.cached
        else config.cost(result.input_tokens, result.output_tokens),
        "latency_s": result.latency_s,
        "cache_hit": result.cached,
        "started_at": started,
        "raw_response": result.text[:RAW_RESPONSE_LIMIT],
    }
    try:
        verdict = parse_verdict(result.text, config.criteria)
    except VerdictParseError as exc:
        status = _retry_or_fail(item, max_attempts)
        return Finish(**base, **usage, status=status, parse_error=str(exc)[:2000])
    return Finish(
        **base,
        **usage,
        status="completed",
        winner=verdict.winner,
        confidence=verdict.confidence,
        scores_a=verdict.scores_a,
        scores_b=verdict.scores_b,
        reasoning=verdict.reasoning,
    )
