"""Judging one comparison: threads in, one ``Finish`` (verdict, retry or failure) out.

One path for every session: a single judge is a panel of one (``solo_panel``). Every
member is asked through the judge-call pipeline (``llmjudge.judging``: each its own
provider, limits, cache and cost), at once, or in order for a cascade; each answer is a
``JudgeVote`` (a single judge's is member 0), stored as a ``comparison_votes`` row by the
transaction that applies the finish (``votes.write_votes``).

No database transaction is open here: the pool loads threads before and writes the
``Finish`` after, in batches. A verdict is never guessed: a single judge's answer that does
not parse is recorded (raw response and parse error) and the comparison goes back to the
queue until ``max_attempts`` is spent, then fails. A panel member whose call fails, or whose
answer does not parse, is ``missing``; the aggregate says how many voted, and with nobody
voting the comparison is retried like a failed single-judge call (its spend still counts).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from llmjudge.core.judging.panels import (
    CascadePolicy,
    Vote,
    aggregate,
    aggregate_scores,
    panel_probability,
    panel_strength,
    should_stop,
)
from llmjudge.core.judging.scores import Score
from llmjudge.core.judging.verdicts import Verdict
from llmjudge.infra.events.hub import DeltaBatcher
from llmjudge.judging import Gateway, JudgeRequest, JudgeResult, judge_call
from llmjudge.providers import ModelPricing
from llmjudge.sessions.run.claims import Claimed, Finish, JudgeVote, token
from llmjudge.sessions.run.judging import (
    MAX_ATTEMPTS,
    ChatService,
    Publish,
    SessionConfig,
    ThreadCache,
    ThreadData,
    WantsStream,
    prepare_prompt,
    session_topic,
    verdict_strength,
)

__all__ = [
    "MemberConfig",
    "PanelConfig",
    "comparison_context",
    "judge_comparison",
    "judge_members",
    "judge_request",
    "member_vote",
    "panel_finish",
    "panel_config",
    "solo_finish",
    "solo_panel",
    "verdict_fields",
]

RAW_RESPONSE_LIMIT = 100_000
_USAGE = ("input_tokens", "output_tokens", "cost_usd", "latency_s", "cache_hit")


@dataclass(frozen=True, slots=True)
class MemberConfig:
    model_id: int | None
    label: str
    pricing: ModelPricing = ModelPricing()  # prompt-cache prices included
    weight: float | None = None


@dataclass(frozen=True, slots=True)
class PanelConfig:
    rule: str  # an aggregation, or "solo": the session's one judge
    members: tuple[MemberConfig, ...]
    policy: CascadePolicy | None = None

    @property
    def solo(self) -> bool:
        return self.rule == "solo"

    @property
    def weights(self) -> list[float] | None:
        if self.rule not in ("weighted", "calibrated"):
            return None
        return [1.0 if m.weight is None else m.weight for m in self.members]


def panel_config(stored: dict[str, Any], prices: Sequence[ModelPricing]) -> PanelConfig:
    """The stored ``judge_sessions.panel`` with each member's prices."""
    members = tuple(
        MemberConfig(m.get("model_id"), m.get("label") or "", pricing, m.get("weight"))
        for m, pricing in zip(stored["members"], prices, strict=True)
    )
    cascade = stored.get("cascade")
    policy = (
        CascadePolicy(cascade.get("rule", "confidence"), float(cascade.get("threshold", 0.8)))
        if stored["rule"] == "cascade" and cascade
        else (CascadePolicy() if stored["rule"] == "cascade" else None)
    )
    return PanelConfig(stored["rule"], members, policy)


def solo_panel(config: SessionConfig) -> PanelConfig:
    """A single-judge session as the panel of one it is."""
    member = MemberConfig(config.judge_model_id, "", config.pricing)
    return PanelConfig("solo", (member,))


def verdict_fields(verdict: Verdict | Score) -> dict[str, Any]:
    """A read verdict's stored fields, in the order the pair was shown (a grade: its
    score, and its per-criterion grades as ``scores_a``)."""
    if isinstance(verdict, Score):
        return {
            "score": verdict.value,
            "scores_a": verdict.criteria or None,
            "reasoning": verdict.reasoning,
        }
    return {
        "winner": verdict.winner,
        "confidence": verdict.confidence,
        "scores_a": verdict.scores_a,
        "scores_b": verdict.scores_b,
        "reasoning": verdict.reasoning,
        "strength": verdict_strength(verdict),
        "prob_a": verdict.prob_a,
    }


def member_vote(result: JudgeResult[Any], k: int, member: MemberConfig) -> JudgeVote:
    """A member's call as its stored vote: ``voted`` when its reply was read (an answer
    the format counts as a tie is a vote, its reason kept), else ``missing``."""
    base: dict[str, Any] = {"member": k, "model_id": member.model_id, "judge": member.label}
    if result.error is not None:
        return JudgeVote(**base, error=result.error)
    usage = {name: getattr(result, name) for name in _USAGE}
    usage["raw_response"] = (result.raw or "")[:RAW_RESPONSE_LIMIT]
    if result.verdict is None:
        return JudgeVote(**base, **usage, error=(result.parse_error or "")[:2000])
    note = None if result.note is None else f"unparsed, a tie: {result.note}"[:2000]
    return JudgeVote(**base, **usage, **verdict_fields(result.verdict), status="voted", error=note)


def _ballot(v: JudgeVote) -> Vote:
    return Vote(v.winner if v.status == "voted" else None, v.confidence, v.scores_a, v.scores_b)  # type: ignore[arg-type]


def _retry_or_fail(item: Claimed, max_attempts: int) -> str:
    return "failed" if item.attempts >= max_attempts else "pending"


@dataclass(slots=True)
class _Judging:
    """One comparison's judging: what every member's call shares."""

    llm: ChatService
    item: Claimed
    config: SessionConfig
    panel: PanelConfig
    messages: list[dict[str, str]]
    context: dict[str, Any]
    publish: Publish | None

    def request(self, k: int) -> JudgeRequest:
        return judge_request(self.item, self.config, self.panel, self.messages, self.context, k)

    async def ask(self, k: int, on_delta: Any = None) -> tuple[JudgeVote, JudgeResult[Any]]:
        member = self.panel.members[k]
        result: JudgeResult[Any]
        if member.model_id is None:
            result = JudgeResult(error="this member's model was deleted")
        else:
            result = await judge_call(
                Gateway(self.llm),
                self.request(k),
                self.config.reader,
                cost=member.pricing.cost,
                on_delta=on_delta,
            )
        vote = member_vote(result, k, member)
        if self.publish is not None and not self.panel.solo:
            # A live lane shows every member's answer as it arrives.
            self.publish(
                session_topic(self.item.session_id),
                "panel_vote",
                {"comparison_id": self.item.id, "worker_id": self.item.worker_id}
                | {
                    name: getattr(vote, name)
                    for name in ("member", "judge", "status", "winner", "confidence", "score")
                }
                | {"cost_usd": vote.cost_usd, "latency_s": vote.latency_s, "error": vote.error},
            )
        return vote, result


def judge_request(
    item: Claimed,
    config: SessionConfig,
    panel: PanelConfig,
    messages: list[dict[str, str]],
    context: dict[str, Any],
    k: int,
) -> JudgeRequest:
    """Member ``k``'s call on ``item`` (live, or a line of a provider batch job)."""
    member = panel.members[k]
    related: dict[str, Any] = {"session_id": item.session_id, "comparison_id": item.id}
    if not panel.solo:
        context = {**context, "member": k, "call_key": f"{context['call_key']}:{k}"}
        related["member"] = k
    return JudgeRequest(
        model_id=member.model_id,  # type: ignore[arg-type]
        messages=messages,
        purpose="judge",
        # Structured output only for the built-in JSON verdict: a published judge
        # answers in its own words, and forcing JSON on it would change what it says.
        json_schema=config.json_schema,
        top_logprobs=config.verdict_format.top_logprobs,
        context=context,
        related=related,
        # Repetitions and retries must be fresh judgements, not the cached first one.
        use_cache=False if item.repetition > 0 or item.attempts > 1 else None,
        cache_prefix=config.cache_prefix,
    )


def _thread_context(t: ThreadData) -> dict[str, Any]:
    return {"id": t.id, "quality": t.quality, "pillar_id": t.pillar_id}


def comparison_context(
    item: Claimed, a: ThreadData, b: ThreadData | None, config: SessionConfig
) -> dict[str, Any]:
    """What the simulator sees of a comparison (never sent to a real provider); ``b`` is
    None when one thread is graded alone."""
    call_key = f"{item.session_id}:{item.queue_position}:{item.attempts}"
    criteria = list(config.criteria)
    if b is None:
        fmt = config.verdict_format
        return {
            "task": "single",
            "thread": _thread_context(a),
            "criteria": criteria,
            "kind": fmt.kind,
            "scale": list(fmt.score_scale),
            "call_key": call_key,
        }
    return {
        "task": "pairwise",
        "thread_a": _thread_context(a),
        "thread_b": _thread_context(b),
        "criteria": criteria,
        "call_key": call_key,
    }


async def judge_comparison(
    *,
    llm: ChatService,
    item: Claimed,
    config: SessionConfig,
    threads: ThreadCache,
    panel: PanelConfig | None = None,
    publish: Publish | None = None,
    max_attempts: int = MAX_ATTEMPTS,
    stream_interval_s: float = 0.1,
    wants_stream: WantsStream | None = None,
) -> Finish:
    """Judge ``item`` once, by ``panel`` (None: the session's one judge), and say how it
    ended. Raises only ``CancelledError``.

    With ``publish``, a single judge's answer is streamed and its text published in batches
    (``llm_stream``) when ``wants_stream`` says someone follows its lane as the call starts;
    a viewer who arrives mid-answer sees the lane's next one. Nobody follows most lanes,
    and reading an answer as a stream (a JSON chunk per token or so) costs the engine about
    as much CPU as sending the call (``bench/throughput.py``), so those ask for the whole
    answer at once. A followed stream asks again at each batch (the viewer may leave)."""
    panel = panel or solo_panel(config)
    started = datetime.now(UTC)
    base = token(item)
    topic = session_topic(item.session_id)
    if panel.solo and config.judge_model_id is None and item.attempts <= max_attempts:
        return Finish(**base, status="failed", error="the session's judge model was deleted")
    prepared = prepare_prompt(item, config, threads, max_attempts)
    if isinstance(prepared, Finish):
        return prepared
    a, b, messages = prepared
    context = comparison_context(item, a, b, config)
    if publish is not None:
        start = {
            "comparison_id": item.id,
            "worker_id": item.worker_id,
            "thread_a_id": item.thread_a_id,
            "thread_b_id": item.thread_b_id,
            # titles ride along so the live lanes name the threads at once, before the
            # labels fetch answers
            "thread_a_title": a.title or None,
            "thread_b_title": None if b is None else b.title or None,
            "pillar_a_id": item.pillar_a_id,
            "pillar_b_id": item.pillar_b_id,
            "attempt": item.attempts,
        }
        if not panel.solo:
            start["members"] = [m.label for m in panel.members]
        publish(topic, "comparison_start", start)
    judging = _Judging(llm, item, config, panel, messages, context, publish)
    if panel.solo:
        return await _solo(judging, started, max_attempts, stream_interval_s, wants_stream)
    return await _panel(judging, started, max_attempts)


async def _solo(
    judging: _Judging,
    started: datetime,
    max_attempts: int,
    stream_interval_s: float,
    wants_stream: WantsStream | None,
) -> Finish:
    """A single judge's finish: its vote is the comparison row's answer (and becomes its
    member-0 vote row from there, ``votes.store_solo_votes``)."""
    item, publish = judging.item, judging.publish
    batcher: DeltaBatcher | None = None
    topic = session_topic(item.session_id)

    def followed() -> bool:
        return wants_stream is None or wants_stream(topic, item.worker_id)

    if publish is not None and followed():
        stream = {"comparison_id": item.id, "worker_id": item.worker_id}

        def publish_text(text: str) -> None:
            if followed():
                publish(topic, "llm_stream", {**stream, "text": text})

        batcher = DeltaBatcher(publish_text, interval_s=stream_interval_s)
    try:
        vote, result = await judging.ask(0, batcher.add if batcher is not None else None)
    finally:
        if batcher is not None:
            await batcher.flush()
    return solo_finish(item, judging.panel.members[0], result, started, max_attempts, vote)


def solo_finish(
    item: Claimed,
    member: MemberConfig,
    result: JudgeResult[Verdict],
    started: datetime | None,
    max_attempts: int,
    vote: JudgeVote | None = None,
) -> Finish:
    """How a single judge's call ends its comparison, however it was sent (live, or a
    batch job's result read later); ``vote``: the result as its vote, if made already."""
    base = token(item)
    vote = vote or member_vote(result, 0, member)
    if result.error is not None:
        status = _retry_or_fail(item, max_attempts)
        return Finish(**base, status=status, started_at=started, error=result.error)
    if result.verdict is None:
        status = _retry_or_fail(item, max_attempts)
        return Finish(
            **base, status=status, started_at=started, answer=vote, parse_error=vote.error
        )
    # The verdict is in the order the pair was shown (item.thread_a first): the comparison
    # row stores it that way and readers map swaps back. An unreadable answer the format
    # counts as a tie keeps its reason in parse_error, so it is never mistaken for a read.
    return Finish(
        **base,
        status="completed",
        started_at=started,
        answer=vote,
        parse_error=None if result.note is None else result.note[:2000],
    )


async def _panel(judging: _Judging, started: datetime, max_attempts: int) -> Finish:
    """A panel asked live: every member at once, or in order for a cascade."""
    panel = judging.panel
    t0 = time.perf_counter()
    votes: list[JudgeVote]
    if panel.policy is None:
        asked_all = await asyncio.gather(*(judging.ask(k) for k in range(len(panel.members))))
        votes = [v for v, _ in asked_all]
    else:
        votes = []
        for k in range(len(panel.members)):
            votes.append((await judging.ask(k))[0])
            if should_stop([_ballot(v) for v in votes], panel.policy):
                break
    asked = len(votes)
    votes += [
        JudgeVote(member=k, model_id=m.model_id, judge=m.label, status="skipped")
        for k, m in enumerate(panel.members)
        if k >= asked
    ]
    wall = time.perf_counter() - t0
    return panel_finish(
        judging.item, judging.config, panel, votes, asked, started, wall, max_attempts
    )


async def judge_members(
    *,
    llm: ChatService,
    item: Claimed,
    config: SessionConfig,
    threads: ThreadCache,
    panel: PanelConfig,
    members: Sequence[int],
    max_attempts: int = MAX_ATTEMPTS,
) -> list[JudgeVote] | Finish:
    """Members ``members`` of ``panel`` asked live on ``item`` (a batch job's requests it
    could not answer), or the ``Finish`` that fails it without a call."""
    prepared = prepare_prompt(item, config, threads, max_attempts)
    if isinstance(prepared, Finish):
        return prepared
    a, b, messages = prepared
    context = comparison_context(item, a, b, config)
    judging = _Judging(llm, item, config, panel, messages, context, None)
    return [v for v, _ in await asyncio.gather(*(judging.ask(k) for k in members))]


def panel_finish(
    item: Claimed,
    config: SessionConfig,
    panel: PanelConfig,
    votes: list[JudgeVote],
    asked: int,
    started: datetime | None,
    wall: float | None,
    max_attempts: int,
) -> Finish:
    """A panel's finish from its members' votes (asked live, or read from batch jobs): the
    comparison row stores the aggregate and the total spend."""
    base = token(item)
    if config.verdict_format.grades:
        return _graded(item, panel, base, started, max_attempts, votes, asked, wall)
    agg = aggregate(
        panel.rule, [_ballot(v) for v in votes], weights=panel.weights, policy=panel.policy
    )
    spend = _spend(votes, wall)
    if agg.winner is None:
        return _unanswered(item, base, started, max_attempts, votes, asked, spend, "voted")
    answer = JudgeVote(
        **spend,
        status="voted",
        winner=agg.winner,
        confidence=agg.confidence,
        scores_a=agg.scores_a or None,
        scores_b=agg.scores_b or None,
        reasoning=f"panel ({panel.rule}): {agg.voted} of {len(panel.members)} members voted",
        strength=panel_strength(
            agg.winner, [(v.winner, v.strength) for v in votes if v.status == "voted"]
        ),
        prob_a=panel_probability([v.prob_a for v in votes if v.status == "voted"]),
    )
    return Finish(
        **base,
        status="completed",
        started_at=started,
        answer=answer,
        votes=tuple(votes),
        votes_cast=agg.voted,
        votes_asked=asked,
    )


def _unanswered(
    item: Claimed,
    base: dict[str, Any],
    started: datetime | None,
    max_attempts: int,
    votes: list[JudgeVote],
    asked: int,
    spend: dict[str, Any],
    verb: str,
) -> Finish:
    """No member answered: asked again while attempts remain, else failed with every
    member's error (the votes are kept only then, as a retry asks them all again)."""
    errors = "; ".join(f"{v.judge or v.member}: {v.error}" for v in votes if v.error)
    status = _retry_or_fail(item, max_attempts)
    return Finish(
        **base,
        status=status,  # type: ignore[arg-type]
        started_at=started,
        answer=JudgeVote(**spend),
        error=f"no member of the panel {verb} ({errors})"[:2000],
        votes=tuple(votes) if status == "failed" else (),
        votes_cast=0,
        votes_asked=asked,
    )


def _spend(votes: Sequence[JudgeVote], wall: float | None) -> dict[str, Any]:
    return {
        "input_tokens": sum(v.input_tokens for v in votes),
        "output_tokens": sum(v.output_tokens for v in votes),
        "cost_usd": sum(v.cost_usd for v in votes),
        "latency_s": wall,
        "cache_hit": all(v.cache_hit for v in votes if v.status == "voted"),
    }


def _graded(
    item: Claimed,
    panel: PanelConfig,
    base: dict[str, Any],
    started: datetime | None,
    max_attempts: int,
    votes: list[JudgeVote],
    asked: int,
    wall: float | None,
) -> Finish:
    """A panel of graders' finish: the mean or median of its members' grades."""
    graded = [v.status == "voted" for v in votes]
    agg = aggregate_scores(
        panel.rule,
        [v.score if ok else None for v, ok in zip(votes, graded, strict=True)],
        [v.scores_a if ok else None for v, ok in zip(votes, graded, strict=True)],
    )
    spend = _spend(votes, wall)
    if agg.score is None:
        return _unanswered(item, base, started, max_attempts, votes, asked, spend, "graded")
    answer = JudgeVote(
        **spend,
        status="voted",
        score=agg.score,
        scores_a=agg.criteria or None,
        reasoning=f"panel ({panel.rule}): {agg.voted} of {len(panel.members)} members graded",
    )
    return Finish(
        **base,
        status="completed",
        started_at=started,
        answer=answer,
        votes=tuple(votes),
        votes_cast=agg.voted,
        votes_asked=asked,
    )
