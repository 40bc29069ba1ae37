"""Batch sessions: their judge calls go to the provider's batch API as stored jobs.

One loop per running batch session (``BatchRunner``, a ``LockedJob``: the process holding
the session's advisory lock runs it). Each turn of the loop advances every open job of the
session one stored step at a time, then claims more comparisons while fewer than the
provider's ``max_in_flight`` jobs run:

    prepared -> uploaded (OpenAI: the JSONL file) -> submitting -> the provider's states
    (validating, in_progress, finalizing; cancelling) -> completed / failed / expired /
    cancelled -> applied (``applied_at``)

A job's steps at the provider (upload, create, poll) are ``batch_steps``', which a
persona's training shares for its judge's labels (``personas.batch_labels``); the claims,
panels and applying are the session's. Nothing lives in memory between steps. A job row, its requests (each ``custom_id`` with the
comparison, claim token and panel member it answers) and the claim of its comparisons are
stored in one transaction before anything is sent; ``submitting`` is stored before the job
is created, so a worker that died after the provider created it finds it again instead of
sending it twice. Results are applied by ``batch_apply`` (read by the session's reader,
ended by the live path's own code, written by the queue's exactly-once finish): a job
applied again after a crash changes nothing.

A panel's comparisons are claimed once into a group of jobs, one per member model (each on
its member's provider; ``custom_id`` ``c<comparison>-a<attempt>-m<member>``), applied when
every job of the group has ended. A request that expired, was cancelled or met a server
error is asked again: its comparison goes back to the queue for a later job (or, with
``batch_fallback`` = ``live``, that request is judged live at once), until its attempts are
spent. A malformed result line fails its one comparison (a panel: that member's vote) with
the reason. Cancelling the session cancels its jobs at the provider; what they answered
before is kept. Jobs and their states are published as ``batch_status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmjudge.infra.events.hub import EventHub
from llmjudge.sessions.run.batch_apply import BatchApplier
from llmjudge.sessions.run.batch_steps import ENDED, BatchLLM, Hook, chat_request
from llmjudge.sessions.run.batch_store import (
    StoredBatch,
    StoredRequest,
    claim_for_batch,
    give_back,
    new_batch,
    open_batches,
    session_batches,
    store_requests,
    update_batch,
)
from llmjudge.sessions.run.claims import Finish
from llmjudge.sessions.run.jobs import JudgeComparisons
from llmjudge.sessions.run.judging import MAX_ATTEMPTS, prepare_prompt, session_topic
from llmjudge.sessions.run.panel_judging import (
    comparison_context,
    judge_request,
)

__all__ = ["LOCK_CLASS", "BatchLLM", "BatchRunner", "Hook", "batch_status"]

log = logging.getLogger(__name__)

LOCK_CLASS = 0x62617463  # "batc": the advisory lock class of a batch session's loop
# Finishes written per transaction while a job's results are applied.
APPLY_CHUNK = 500
# Comparisons per group of a panel's jobs: their member votes are joined in memory.
PANEL_JOB_COMPARISONS = 5_000


class BatchRunner(BatchApplier):
    name = "batches"
    lock_class = LOCK_CLASS

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        llm: BatchLLM,
        hub: EventHub | None = None,
        poll_s: float = 30.0,
        poll_max_s: float = 600.0,
        max_attempts: int = MAX_ATTEMPTS,
        hook: Hook | None = None,
        apply_chunk: int = APPLY_CHUNK,
    ) -> None:
        self.engine = engine
        self.llm = llm
        self.hub = hub
        self.poll_s = poll_s
        self.poll_max_s = poll_max_s
        self.max_attempts = max_attempts
        self.hook = hook
        self.apply_chunk = apply_chunk
        # The live path's configuration, thread cache and exactly-once finish.
        self.kind = JudgeComparisons(engine=engine, llm=llm, hub=hub, max_attempts=max_attempts)

    async def runnable(self) -> Sequence[int]:
        """Running batch sessions, and any session with a job still open (a cancelled
        session's jobs are cancelled and their answers applied)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT s.id FROM judge_sessions s WHERE s.execution = 'batch' AND "
                    "(s.status = 'running' OR EXISTS (SELECT 1 FROM provider_batches b "
                    "WHERE b.session_id = s.id AND b.applied_at IS NULL)) ORDER BY s.id"
                )
            )
            return [r[0] for r in rows.all()]

    async def run(self, key: int, stop: asyncio.Event) -> None:
        """Advance session ``key`` until it needs nothing more, polling with backoff while
        its jobs wait at the provider (a job may take hours)."""
        delay = self.poll_s
        while not stop.is_set():
            moved, more = await self.step(key)
            if not more:
                return
            delay = self.poll_s if moved else min(delay * 2, self.poll_max_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def step(self, session_id: int) -> tuple[bool, bool]:
        """One turn: every open job one step on, then a new job if there is room. Returns
        (whether anything moved, whether the session needs more turns)."""
        async with self.engine.connect() as conn:
            status = await conn.scalar(
                text("SELECT status FROM judge_sessions WHERE id = :s"), {"s": session_id}
            )
            jobs = await open_batches(conn, session_id)
        if status is None:
            return False, False
        moved = False
        for job in jobs:
            moved |= await self._advance(job, cancel=status == "cancelled")
        if status == "running":
            moved |= await self._submit_more(session_id)
        if moved:
            await self._publish(session_id)
        async with self.engine.connect() as conn:
            still_open = bool(await open_batches(conn, session_id))
        return moved, status == "running" or still_open

    # -- one job, one step ------------------------------------------------------------------

    async def _advance(self, job: StoredBatch, *, cancel: bool) -> bool:
        client, _ = await self.llm.batch_client(job.model_id)
        _, panel = await self.kind.session(job.session_id)
        if job.provider_batch_id is None and (cancel or job.state in ENDED):
            # Not at the provider, unless a dead worker created it: then cancel it there.
            found = await self._find(job, client) if job.state == "submitting" else None
            if found is not None:
                await self._record(job, found, submitted=True)
            elif panel.solo:
                await self._apply(job, client, None, "the session was cancelled")
            else:  # ended unsent; applied with the rest of its group
                ending = job.state != "cancelled"
                if ending:
                    async with self.engine.begin() as conn:
                        await update_batch(conn, job.id, state="cancelled", stamp=("ended_at",))
                return await self._apply_group(job) or ending
            return True
        if job.state == "prepared":
            return await self._upload(job, client)
        if job.state in ("uploaded", "submitting"):
            return await self._create(job, client)
        assert job.provider_batch_id is not None
        if cancel and not job.cancel_requested and job.state not in ENDED:
            remote = await client.cancel(job.provider_batch_id)
            await self._record(job, remote, cancel_requested=True)
            return True
        if job.state not in ENDED:
            await self._stage("polling", job)
            remote = await client.get(job.provider_batch_id)
            await self._record(job, remote)
            if not remote.ended:
                return remote.state != job.state
        elif not panel.solo:
            return await self._apply_group(job)
        else:
            remote = await client.get(job.provider_batch_id)
        if not panel.solo:
            await self._apply_group(job)
            return True  # it ended: its group applies once every job of it has ended
        await self._apply(await self._reload(job), client, remote, None)
        return True

    # -- a new job ----------------------------------------------------------------------------

    async def _submit_more(self, session_id: int) -> bool:
        """Claim pending comparisons into new job(s): one per member model of the session's
        judge(s) (a single judge: one), stored with their requests before anything is sent."""
        config, panel = await self.kind.session(session_id)
        asked = [k for k, m in enumerate(panel.members) if m.model_id is not None]
        if not asked or panel.policy is not None:
            return False  # checked at create: a cascade runs live; a deleted judge waits
        by_model: dict[int, list[int]] = {}
        for k in asked:
            by_model.setdefault(panel.members[k].model_id, []).append(k)  # type: ignore[arg-type]
        clients = {m: await self.llm.batch_client(m) for m in by_model}
        async with self.engine.connect() as conn:
            in_flight = Counter(b.provider_id for b in await open_batches(conn, session_id))
        wanted = Counter(info.provider_id for _, info in clients.values())
        # A panel with more members on one provider than its limit sends them together
        # when none of the session's jobs is in flight there, else it would never start.
        if any(
            in_flight[info.provider_id]
            and in_flight[info.provider_id] + wanted[info.provider_id] > client.limits.max_in_flight
            for client, info in clients.values()
        ):
            return False
        n = min(c.limits.max_requests // len(by_model[m]) for m, (c, _) in clients.items())
        if not panel.solo:  # a panel's votes wait in memory while its jobs are joined
            n = min(n, PANEL_JOB_COMPARISONS)
        async with self.engine.begin() as conn:
            jobs = {
                m: await new_batch(
                    conn,
                    session_id=session_id,
                    provider_id=info.provider_id,
                    model_id=info.id,
                    kind=client.kind,
                )
                for m, (client, info) in clients.items()
            }
            lead = min(jobs.values())  # the claims' token names the group's first job
            items = await claim_for_batch(conn, session_id=session_id, batch_id=lead, n=max(n, 1))
            if not items:
                await conn.rollback()
                return False
            await self.kind.prepare(session_id, items)
            requests: dict[int, list[StoredRequest]] = {m: [] for m in jobs}
            size = dict.fromkeys(jobs, 0)
            failed: list[Finish] = []
            for i, item in enumerate(items):
                if i % 500 == 499:
                    await asyncio.sleep(0)  # a job of 50,000 prompts: let others run
                prepared = prepare_prompt(item, config, self.kind.threads, self.max_attempts)
                if isinstance(prepared, Finish):
                    failed.append(prepared)
                    continue
                a, b, messages = prepared
                context = comparison_context(item, a, b, config)
                lines: dict[int, list[tuple[StoredRequest, int]]] = {m: [] for m in jobs}
                for m, members in by_model.items():
                    client, info = clients[m]
                    for k in members:
                        request = judge_request(item, config, panel, messages, context, k)
                        custom_id = f"c{item.id}-a{item.attempts}" + (
                            "" if panel.solo else f"-m{k}"
                        )
                        line = client.entry_bytes(
                            client.entry(custom_id, chat_request(request.to_json(), info.model))
                        )
                        stored = StoredRequest(
                            custom_id, item.id, item.attempts, k, request.to_json()
                        )
                        lines[m].append((stored, line))
                grown = {m: size[m] + sum(b for _, b in lines[m]) for m in jobs}
                if any(requests[m] and grown[m] > clients[m][0].limits.max_bytes for m in jobs):
                    await give_back(conn, items[i:])
                    break
                size = grown
                for m in jobs:
                    requests[m].extend(r for r, _ in lines[m])
            if failed:
                self.kind.after_written(failed, await self.kind.write(conn, failed))
            if not any(requests.values()):
                await conn.execute(
                    text("DELETE FROM provider_batches WHERE id = ANY(:ids)"),
                    {"ids": list(jobs.values())},
                )
                return bool(failed)
            for m, job_id in jobs.items():
                await store_requests(conn, job_id, requests[m], size[m])
        return True

    async def _publish(self, session_id: int) -> None:
        if self.hub is None:
            return
        async with self.engine.connect() as conn:
            jobs = await session_batches(conn, session_id)
        self.hub.publish_nowait(session_topic(session_id), "batch_status", batch_status(jobs))


def batch_status(jobs: Sequence[StoredBatch]) -> dict[str, Any]:
    """``batch_status`` event data: a session's jobs and their states."""
    return {
        "ts": time.time(),
        "batches": [
            {
                "id": j.id,
                "provider_batch_id": j.provider_batch_id,
                "state": "applied" if j.applied_at is not None else j.state,
                "requests": j.requests,
                "succeeded": j.succeeded,
                "errored": j.errored,
            }
            for j in jobs
        ],
    }
