"""Applying the results of a session's ended batch jobs (``sessions.run.batches``' loop
runs it): every line read by the session's reader exactly as a live answer is, ended by the
live path's own code (``panel_judging.solo_finish``, or ``panel_finish`` for a panel's votes
joined across its members' jobs: ``batch_results.PanelTally``) and written by the queue's
exactly-once finish (``JudgeComparisons.write``): a job applied again after a crash changes
nothing, and only the calls of finishes that applied are accounted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import text

from llmjudge.judging import JudgeResult, at_batch_price
from llmjudge.providers import BatchClient, BatchLine, RemoteBatch
from llmjudge.sessions.run.batch_results import PanelTally, read_line
from llmjudge.sessions.run.batch_steps import ENDED, BatchLLM, BatchSteps, Hook, chat_request
from llmjudge.sessions.run.batch_store import (
    StoredBatch,
    batch_group,
    load_claims,
    load_requests,
    update_batch,
)
from llmjudge.sessions.run.claims import Claimed, Finish, JudgeVote, token
from llmjudge.sessions.run.jobs import JudgeComparisons, storable_finish
from llmjudge.sessions.run.panel_judging import judge_comparison, judge_members, solo_finish

__all__ = ["ENDED", "BatchApplier", "BatchLLM", "Hook", "chat_request"]


class BatchApplier(BatchSteps):
    """The batch runner's half that applies results (``BatchRunner`` sets these)."""

    kind: JudgeComparisons
    max_attempts: int
    apply_chunk: int

    async def _apply(
        self, job: StoredBatch, client: BatchClient, remote: RemoteBatch | None, reason: str | None
    ) -> None:
        """Apply every result of an ended job (or end an unsent one with ``reason``)."""
        config, panel = await self.kind.session(job.session_id)
        _, info = await self.llm.batch_client(job.model_id)
        member = panel.members[0]
        cost = at_batch_price(member.pricing.cost, info.batch_discount)
        async with self.engine.connect() as conn:
            stored = {r.custom_id: r for r in await load_requests(conn, job.id)}
            claims = await load_claims(conn, job.id)
        done: set[str] = set()
        chunk: list[Finish] = []
        retry: list[Claimed] = []
        fallback = await self._fallback(job.session_id)
        applied = 0

        async def flush() -> None:
            nonlocal chunk, applied
            if chunk:
                await self._write(chunk, account=job)
                applied += len(chunk)
                chunk = []
                await self._stage("applying", job)

        unknown: list[str] = []
        if remote is not None:
            requests = {cid: chat_request(r.request, info.model) for cid, r in stored.items()}
            async for line in client.results(remote, requests.get):
                request = stored.get(line.custom_id or "")
                if request is None or line.custom_id in done:
                    unknown.append(line.error or f"unknown custom_id {line.custom_id!r}")
                    continue
                done.add(request.custom_id)
                item = claims[request.comparison_id]
                if line.retry and fallback:
                    retry.append(item)
                    continue
                chunk.append(self._finish(item, member, line, cost, config.reader))
                if len(chunk) >= self.apply_chunk:
                    await flush()
        why = reason or _missing_reason(remote)
        for custom_id, request in stored.items():
            if custom_id in done:
                continue
            item = claims[request.comparison_id]
            if fallback and reason is None:
                retry.append(item)
            else:
                result: JudgeResult[Any] = JudgeResult(error=why)
                chunk.append(solo_finish(item, member, result, None, self.max_attempts))
        await flush()
        if retry:
            await self._judge_live(job.session_id, retry)
        notes = [reason] if reason else unknown[:5]
        async with self.engine.begin() as conn:
            await update_batch(
                conn,
                job.id,
                state=remote.state if remote is not None else "cancelled",
                error="; ".join(n for n in (job.error, *notes) if n)[:2000] or None,
                stamp=("applied_at",) if job.ended_at else ("applied_at", "ended_at"),
            )

    def _finish(
        self, item: Claimed, member: Any, line: BatchLine, cost: Any, reader: Any
    ) -> Finish:
        if line.result is not None:
            result = read_line(line, cost, reader)
            return storable_finish(solo_finish(item, member, result, None, self.max_attempts))
        if not line.retry and (line.error or "").startswith("malformed"):
            return Finish(**token(item), status="failed", error=(line.error or "")[:2000])
        return solo_finish(item, member, JudgeResult(error=line.error), None, self.max_attempts)

    async def _write(
        self,
        finishes: list[Finish],
        account: StoredBatch | None = None,
        paid: Mapping[int, Sequence[JudgeVote]] | None = None,
    ) -> None:
        """Apply ``finishes`` exactly once; with ``account`` (their job), the provider calls
        of those that applied go to the call accounting (a re-applied one does not): a
        single judge's answer, or each vote in ``paid`` (a panel's, by comparison)."""
        async with self.engine.begin() as conn:
            written = await self.kind.write(conn, finishes)
        self.kind.after_written(finishes, written)
        if account is None:
            return
        for f in finishes:
            if f.id not in written.applied:
                continue
            related = {"session_id": account.session_id, "comparison_id": f.id}
            if paid is not None:
                for v in paid.get(f.id, ()):
                    await self.llm.record_batch_call(
                        model_id=v.model_id,  # type: ignore[arg-type]
                        input_tokens=v.input_tokens,
                        output_tokens=v.output_tokens,
                        cost_usd=v.cost_usd,
                        error=None if v.status == "voted" else v.error,
                        related=related | {"member": v.member},
                    )
            elif f.answer.model_id is not None:
                await self.llm.record_batch_call(
                    model_id=f.answer.model_id,
                    input_tokens=f.answer.input_tokens,
                    output_tokens=f.answer.output_tokens,
                    cost_usd=f.answer.cost_usd,
                    error=f.parse_error or f.error if f.status != "completed" else None,
                    related=related,
                )

    async def _apply_group(self, job: StoredBatch) -> bool:
        """Apply a panel's group of jobs (``job`` and those carrying the same claims) once
        every one of them has ended: each member's lines become its votes, and each
        comparison ends through the live panel's aggregation. Returns whether it applied."""
        config, panel = await self.kind.session(job.session_id)
        async with self.engine.connect() as conn:
            group = await batch_group(conn, job.id)
            if any(j.applied_at is not None for j in group):
                return False  # applied already (a stale list of the session's jobs)
            if any(j.state not in ENDED for j in group):
                return False
            claims = await load_claims(conn, group[0].id)
        fallback = await self._fallback(job.session_id)
        cancelled = await self._cancelled(job.session_id)
        tally = PanelTally(config, panel, self.max_attempts, again=not cancelled)
        unknown: dict[int, list[str]] = {}  # lines no request of the job asked for
        for member_job in group:
            client, info = await self.llm.batch_client(member_job.model_id)
            async with self.engine.connect() as conn:
                stored = {r.custom_id: r for r in await load_requests(conn, member_job.id)}
            done: set[str] = set()
            remote = None
            if member_job.provider_batch_id is not None:
                remote = await client.get(member_job.provider_batch_id)
                requests = {cid: chat_request(r.request, info.model) for cid, r in stored.items()}
                async for line in client.results(remote, requests.get):
                    request = stored.get(line.custom_id or "")
                    if request is None or line.custom_id in done:
                        note = line.error or f"unknown custom_id {line.custom_id!r}"
                        unknown.setdefault(member_job.id, []).append(note)
                        continue
                    done.add(request.custom_id)
                    k = request.member
                    cost = at_batch_price(panel.members[k].pricing.cost, info.batch_discount)
                    tally.line(request, line, cost)
            why = "the session was cancelled" if remote is None else _missing_reason(remote)
            for custom_id, request in stored.items():
                if custom_id not in done:
                    tally.unanswered(request, why, retry=not cancelled)
        items = sorted(claims.values(), key=lambda c: c.queue_position)
        if fallback and not cancelled:
            await self._ask_live(job.session_id, items, tally)
        for start in range(0, len(items), self.apply_chunk):
            chunk = [
                storable_finish(tally.finish(i)) for i in items[start : start + self.apply_chunk]
            ]
            await self._write(chunk, account=job, paid=tally.paid)
            await self._stage("applying", job)
        async with self.engine.begin() as conn:
            for j in group:
                notes = "; ".join(n for n in (j.error, *unknown.get(j.id, [])[:5]) if n)
                await update_batch(conn, j.id, error=notes[:2000] or None, stamp=("applied_at",))
        return True

    async def _ask_live(self, session_id: int, items: list[Claimed], tally: PanelTally) -> None:
        """The members whose requests a job could not answer, asked live at once
        (``batch_fallback`` = live)."""
        config, panel = await self.kind.session(session_id)
        wanting = [i for i in items if tally.retry.get(i.id)]
        await self.kind.prepare(session_id, wanting)
        gate = asyncio.Semaphore(32)

        async def one(item: Claimed) -> None:
            async with gate:
                votes = await judge_members(
                    llm=self.llm,
                    item=item,
                    config=config,
                    threads=self.kind.threads,
                    panel=panel,
                    members=sorted(tally.retry[item.id]),
                    max_attempts=self.max_attempts,
                )
            if isinstance(votes, list):
                tally.asked_live(item.id, votes)

        await asyncio.gather(*(one(i) for i in wanting))

    async def _cancelled(self, session_id: int) -> bool:
        async with self.engine.connect() as conn:
            status = await conn.scalar(
                text("SELECT status FROM judge_sessions WHERE id = :s"), {"s": session_id}
            )
        return status == "cancelled"

    async def _fallback(self, session_id: int) -> bool:
        async with self.engine.connect() as conn:
            options = await conn.scalar(
                text("SELECT options FROM judge_sessions WHERE id = :s"), {"s": session_id}
            )
        return (options or {}).get("batch_fallback") == "live"

    async def _judge_live(self, session_id: int, items: list[Claimed]) -> None:
        """Requests the job could not answer, judged live (``batch_fallback`` = live)."""
        config, panel = await self.kind.session(session_id)
        await self.kind.prepare(session_id, items)
        gate = asyncio.Semaphore(32)

        async def one(item: Claimed) -> Finish:
            async with gate:
                return storable_finish(
                    await judge_comparison(
                        llm=self.llm,
                        item=item,
                        config=config,
                        threads=self.kind.threads,
                        panel=panel,
                        max_attempts=self.max_attempts,
                    )
                )

        finishes = await asyncio.gather(*(one(i) for i in items))
        for start in range(0, len(finishes), self.apply_chunk):
            await self._write(list(finishes[start : start + self.apply_chunk]))


def _missing_reason(remote: RemoteBatch | None) -> str:
    if remote is None:
        return "the batch job was never sent"
    detail = f": {remote.error}" if remote.error else ""
    return f"no result for this request: the batch job ended {remote.state}{detail}"[:2000]
