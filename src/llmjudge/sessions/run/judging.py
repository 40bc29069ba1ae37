"""What judging a comparison needs: the session's configuration, the threads (cached by
the pool's workers) and the judge's prompt. The judging itself is ``panel_judging``."""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from llmjudge.catalog import Thread
from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.core.judging.grading import build_grading_messages
from llmjudge.core.judging.prompts import (
    build_judge_messages,
    static_prefix_chars,
    thread_body,
    verdict_json_schema,
)
from llmjudge.core.judging.verdicts import Verdict
from llmjudge.judging import PairwiseReader, ScoreReader
from llmjudge.providers import ChatResult, DeltaCallback, ModelPricing
from llmjudge.sessions.run.claims import Claimed, Finish, token

__all__ = [
    "MAX_ATTEMPTS",
    "Publish",
    "SessionConfig",
    "ThreadCache",
    "ThreadData",
    "WantsStream",
    "prepare_prompt",
    "session_topic",
    "verdict_strength",
]

# Attempts per comparison (parse errors, non-retryable provider errors, provider errors left
# after the gateway's own retries, dead workers) before it fails for good.
MAX_ATTEMPTS = 3

Publish = Callable[[str, str, dict[str, Any]], None]
# (topic, lane) -> whether anyone may follow that lane's token stream (EventHub.wants_stream)
WantsStream = Callable[[str, str], bool]


def session_topic(session_id: int) -> str:
    return f"session:{session_id}"


class ChatService(Protocol):
    async def chat(
        self,
        *,
        model_id: int,
        messages: list[dict[str, str]],
        json_schema: Mapping[str, Any] | None = None,
        top_logprobs: int | None = None,
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
    pricing: ModelPricing = ModelPricing()  # its judge's prices (prompt cache included)
    system_prompt: str | None = None  # None: the built-in one; "": none
    verdict_format: VerdictFormat = VerdictFormat()
    # how its judges' replies are read (a score format grades single threads: mode
    # single), and the structured output asked of them (the built-in JSON verdict only: a
    # published judge answers in its own words, and forcing JSON on it would change what
    # it says): made once per session, not per comparison
    reader: PairwiseReader | ScoreReader = field(init=False, compare=False, repr=False)
    json_schema: Mapping[str, Any] | None = field(init=False, compare=False, repr=False)
    # characters at the start of every judge prompt of the session that are the same for
    # every comparison (the prompt cache's share): computed once per session
    cache_prefix: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        grades = self.verdict_format.grades
        kind = ScoreReader if grades else PairwiseReader
        object.__setattr__(self, "reader", kind(self.verdict_format, self.criteria))
        schema = verdict_json_schema(self.criteria) if self.verdict_format.kind == "json" else None
        object.__setattr__(self, "json_schema", schema)
        prefix = 0
        if not grades:  # a grading prompt marks no shared part (yet)
            try:
                prefix = static_prefix_chars(
                    self.criteria, self.prompt_template, self.system_prompt
                )
            except ValueError:  # a template that cannot be used: each comparison says so
                prefix = 0
        object.__setattr__(self, "cache_prefix", prefix)


@dataclass(frozen=True, slots=True)
class ThreadData:
    id: int
    pillar_id: int
    title: str
    content: Any  # a string, or a list of {"role", "content"} messages
    quality: float | None  # metadata "quality": the simulator's latent truth, if given
    prompt: str | None = None  # the text of the prompt the thread answers
    reference: str | None = None  # metadata "reference": a reference answer to its prompt


def _quality(meta: Mapping[str, Any] | None) -> float | None:
    value = (meta or {}).get("quality")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _reference(meta: Mapping[str, Any] | None) -> str | None:
    value = (meta or {}).get("reference")
    return value if isinstance(value, str) and value.strip() else None


def _size(value: Any) -> int:
    """Bytes a thread's content holds, roughly: its characters plus a little per object."""
    if isinstance(value, str):
        return len(value) + 50
    if isinstance(value, dict):
        return 100 + sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 60 + sum(_size(v) for v in value)
    return 30


class ThreadCache:
    """Thread contents by id, least recently used evicted beyond ``max_bytes``; shared by a
    pool's workers.

    Contents are held once per content hash (threads with the same text share it) and
    counted in bytes, not items: 20,000 long conversations used to be held as readily as
    20,000 one-liners. A thread re-imported under the same id gets a new hash: ``revalidate``
    (run by the pool every ``revalidate_s``, one small query) drops every entry whose stored
    hash changed, so a re-import is judged with its new text.
    """

    def __init__(
        self,
        max_bytes: int = 256 * 1024 * 1024,
        *,
        revalidate_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self.revalidate_s = revalidate_s
        self.bytes = 0
        self._clock = clock
        self._checked = clock()
        self._items: OrderedDict[int, tuple[str, ThreadData]] = OrderedDict()
        self._contents: dict[str, list[Any]] = {}  # hash -> [content, bytes, threads using it]
        self._bodies: dict[int, tuple[ThreadData, str]] = {}  # id -> (item, its prompt body)

    def get(self, thread_id: int) -> ThreadData | None:
        entry = self._items.get(thread_id)
        if entry is None:
            return None
        self._items.move_to_end(thread_id)
        return entry[1]

    def put(self, item: ThreadData, content_hash: str | None = None) -> None:
        """Cache ``item``; without its stored hash it shares its content with no other."""
        content_hash = content_hash or f"thread:{item.id}"
        self.drop(item.id)
        shared = self._contents.get(content_hash)
        if shared is None:
            shared = self._contents[content_hash] = [item.content, _size(item.content), 0]
            self.bytes += shared[1]
        shared[2] += 1
        data = dataclasses.replace(item, content=shared[0])
        self._items[item.id] = (content_hash, data)
        self._evict()

    def body(self, item: ThreadData) -> str:
        """``item`` as the judge prompt shows it (``prompts.thread_body``), rendered once per
        cached thread: a thread is judged many times. Raises ``ValueError`` for a malformed
        stored thread, as the rendering does."""
        memo = self._bodies.get(item.id)
        if memo is not None and memo[0] is item:
            return memo[1]
        body = thread_body(item.content, item.title or None)
        if self._items.get(item.id, ("", None))[1] is item:  # only for what is cached
            self._bodies[item.id] = (item, body)
            self.bytes += len(body) + 50
            self._evict()
        return body

    def _evict(self) -> None:
        """Drop the oldest threads while over the byte bound (the newest always stays)."""
        while self.bytes > self.max_bytes and len(self._items) > 1:
            self.drop(next(iter(self._items)))

    def drop(self, thread_id: int) -> None:
        entry = self._items.pop(thread_id, None)
        if entry is None:
            return
        memo = self._bodies.pop(thread_id, None)
        if memo is not None:
            self.bytes -= len(memo[1]) + 50
        shared = self._contents[entry[0]]
        shared[2] -= 1
        if shared[2] == 0:
            del self._contents[entry[0]]
            self.bytes -= shared[1]

    async def load(self, conn: AsyncConnection, ids: Iterable[int]) -> None:
        """Fetch the missing ones of ``ids`` in one query (deleted threads stay missing)."""
        missing = sorted({i for i in ids if self.get(i) is None})
        if not missing:
            return
        rows = await conn.execute(
            select(
                Thread.id,
                Thread.pillar_id,
                Thread.title,
                Thread.content,
                Thread.meta,
                Thread.prompt,
                Thread.content_hash,
            ).where(Thread.id.in_(missing))
        )
        for tid, pillar_id, title, content, meta, prompt, digest in rows.all():
            item = ThreadData(
                tid, pillar_id, title or "", content, _quality(meta), prompt, _reference(meta)
            )
            self.put(item, digest)

    def due(self) -> bool:
        return bool(self._items) and self._clock() - self._checked >= self.revalidate_s

    async def revalidate(self, conn: AsyncConnection) -> int:
        """Drop the entries whose thread was re-imported (new hash) or deleted; how many."""
        self._checked = self._clock()
        cached = {tid: digest for tid, (digest, _) in self._items.items()}
        if not cached:
            return 0
        rows = await conn.execute(
            select(Thread.id, Thread.content_hash).where(Thread.id.in_(list(cached)))
        )
        current = {tid: digest for tid, digest in rows.all()}
        stale = [tid for tid, digest in cached.items() if current.get(tid) != digest]
        for tid in stale:
            self.drop(tid)
        return len(stale)

    def __len__(self) -> int:
        return len(self._items)


def prepare_prompt(
    item: Claimed, config: SessionConfig, threads: ThreadCache, max_attempts: int
) -> tuple[ThreadData, ThreadData | None, list[dict[str, str]]] | Finish:
    """The threads of ``item`` (the second None: one thread graded alone) and the judge's
    messages (each thread's body rendered once per cache entry), or the ``Finish`` that
    fails the comparison without a call: abandoned by too many workers, a deleted thread,
    or a prompt that cannot be built."""
    base = token(item)
    a = threads.get(item.thread_a_id)
    b = None if item.thread_b_id is None else threads.get(item.thread_b_id)
    if item.attempts > max_attempts:
        return Finish(**base, status="failed", error=f"abandoned by {max_attempts} workers")
    if a is None or (b is None and item.thread_b_id is not None):
        return Finish(**base, status="failed", error="a thread of this comparison was deleted")
    if b is None:
        try:
            messages = build_grading_messages(
                content=a.content,
                fmt=config.verdict_format,
                criteria=config.criteria,
                template=config.prompt_template,
                title=a.title or None,
                prompt=a.prompt,
                reference=a.reference,
                system_prompt=config.system_prompt,
                body=threads.body(a),
            )
        except ValueError as exc:  # a malformed stored thread
            return Finish(**base, status="failed", error=f"cannot build the judge prompt: {exc}")
        return a, None, messages
    try:
        messages = build_judge_messages(
            content_a=a.content,
            content_b=b.content,
            criteria=config.criteria,
            template=config.prompt_template,
            title_a=a.title or None,
            title_b=b.title or None,
            # Threads of one prompt key share one prompt text; A's is as good as B's.
            prompt=a.prompt if a.prompt is not None else b.prompt,
            system_prompt=config.system_prompt,
            bodies=(threads.body(a), threads.body(b)),
            reference=a.reference if a.reference is not None else b.reference,
        )
    except ValueError as exc:  # a malformed stored thread
        return Finish(**base, status="failed", error=f"cannot build the judge prompt: {exc}")
    return a, b, messages


def verdict_strength(verdict: Verdict) -> int | None:
    """2 for "much better", 1 for "better"; None for a tie or a format without strengths
    (the built-in JSON verdict says only who won)."""
    if verdict.winner == "TIE" or verdict.strength is None:
        return None
    return 2 if verdict.strength == "strong" else 1
