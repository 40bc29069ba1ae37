"""A persona's judge labels through the provider's batch API (``execution`` = batch).

The training loop's judging step, when the persona runs in batch: the answers still to
label go into provider batch jobs stored like a session's (``provider_batches`` rows owned
by the persona's iteration, one request per pair, ``custom_id`` ``p<pair>-a<attempt>``,
stored in one transaction before anything is sent), moved through the same stored steps
(``sessions.BatchSteps``: upload, create or find after a crash, poll) and read by the same
reader as a live label, each priced at the judge's batch price. A result becomes the pair's
decision with the live path's own row (``Labelling._decision``), inserted once (one
decision per iteration and pair): a job applied again after a crash inserts nothing and
accounts nothing. The loop holds the persona's advisory lock, so one process runs its jobs.

A request the job could not answer (expired, cancelled, a provider error) goes in a later
job, or is judged live at once with ``batch_fallback`` = live. A job that labels nothing
pauses the persona with its reason (resume sends a new one), so a judge that always fails
stops instead of looping. Pausing leaves the jobs at the provider: a resume applies them
(a resume in live applies those that ended and cancels the others: ``settle``).
A reply that cannot be read, or a result line that is not the JSON it should be, is stored
as unreadable (with the reason), as the live path does after its one retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from llmjudge.infra.errors import Invalid, NotFound
from llmjudge.judging import at_batch_price
from llmjudge.personas.estimate import JUDGE_OUTPUT_TOKENS
from llmjudge.personas.events import Progress, publish
from llmjudge.personas.loop_base import StepFailed, Stopped, _Pair, step_failed
from llmjudge.personas.models import PersonaDecision
from llmjudge.providers import (
    TERMINAL_STATES,
    BudgetExceeded,
    ProviderError,
    Reservation,
    estimate_tokens,
)
from llmjudge.sessions import (
    BatchSteps,
    StoredBatch,
    StoredRequest,
    batch_by_id,
    batch_status,
    chat_request,
    load_requests,
    new_batch,
    persona_batches,
    read_line,
    store_requests,
    update_batch,
)

if TYPE_CHECKING:
    from llmjudge.judging import JudgeResult
    from llmjudge.personas.labelling import Labelling
    from llmjudge.personas.models import Persona, PersonaIteration

__all__ = ["BatchLabels", "PersonaJobs"]

log = logging.getLogger(__name__)

# Decisions inserted per transaction while a job's results are applied.
APPLY_CHUNK = 500


class BatchLabels(BatchSteps):
    """The judging step of one iteration of a persona in batch mode."""

    def __init__(
        self,
        loop: Labelling,
        persona: Persona,
        it: PersonaIteration,
        judge_prompt: str,
        outputs: dict[int, tuple[int, str]],
        carried: Any,
        prefill: dict[int, tuple[bool, str]],
        reader: Any,
    ) -> None:
        self.loop = loop
        self.engine = loop.r.engine
        self.llm = loop.r.llm  # type: ignore[assignment]
        self.hook = loop.r.batch_hook
        self.poll_s: float = loop.r.batch_poll_s
        self.poll_max_s: float = loop.r.batch_poll_max_s
        self.persona, self.it, self.judge_prompt = persona, it, judge_prompt
        self.outputs, self.carried, self.prefill, self.reader = outputs, carried, prefill, reader
        # job id -> its estimate held on the budget (this process's; settled when applied)
        self.reserved: dict[int, Reservation | None] = {}
        self.paid = 0.0  # batch cost accounted by this step so far

    async def run(
        self,
        todo: Sequence[_Pair],
        live: Callable[[_Pair], Awaitable[None]],
        progress: Progress,
    ) -> None:
        """Label the pairs of ``todo`` that have no decision through batch jobs, advancing
        the iteration's open jobs until every pair has its decision and every job is
        applied. ``live`` labels one pair live (``batch_fallback`` = live)."""
        pairs = {p.id: p for p in todo}
        delay = self.poll_s
        while True:
            jobs = await self._open()  # applied before the step ends, even if all decided
            if not jobs:
                decided = await self.decided()
                waiting = [p for pid, p in sorted(pairs.items()) if pid not in decided]
                if not waiting:
                    return
                jobs = [await self._submit(waiting)]
                await self._publish()
            moved = False
            for job in jobs:
                sending = job.state in ("prepared", "uploaded", "submitting")
                remote = await self.advance(job)
                now = await self._reload(job)
                if remote is not None:
                    await self._apply(now, remote, pairs, live, progress)
                moved |= sending or remote is not None or now.state != job.state
            if moved:
                await self._publish()
            delay = self.poll_s if moved else min(delay * 2, self.poll_max_s)
            if self.loop.stop.is_set():
                raise Stopped
            if not moved:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.loop.stop.wait(), delay)

    async def settle(
        self, pairs: Sequence[_Pair], live: Callable[[_Pair], Awaitable[None]], progress: Progress
    ) -> bool:
        """Training switched to live with jobs of this iteration still open: an ended job
        is applied (its labels are paid for), one still at the provider is cancelled there
        and closed unapplied (its pairs are labelled live), one never sent is closed.
        Returns whether any job was open."""
        jobs = await self._open()
        by_id = {p.id: p for p in pairs}
        for job in jobs:
            try:
                client, _ = await self.llm.batch_client(job.model_id)
                if job.state == "submitting":  # a dead worker may have created it
                    found = await self._find(job, client)
                    if found is not None:
                        await self._record(job, found, submitted=True)
                        job = await self._reload(job)
                if job.provider_batch_id is None:
                    await self._close(job, "cancelled", "not sent: training switched to live")
                    continue
                remote = await client.get(job.provider_batch_id)
                if remote.ended:
                    await self._record(job, remote)
                    await self._apply(await self._reload(job), remote, by_id, live, progress, True)
                    continue
                remote = await client.cancel(job.provider_batch_id)
                await self._record(job, remote, cancel_requested=True)
                why = "cancelled: training switched to live, its answers are labelled live"
            except (Invalid, NotFound, ProviderError) as e:
                why = f"left unapplied: training switched to live ({e})"
            await self._close(job, None, why)
        return bool(jobs)

    async def _close(self, job: StoredBatch, state: str | None, note: str) -> None:
        values: dict[str, Any] = {"error": "; ".join(n for n in (job.error, note) if n)[:2000]}
        if state is not None:
            values["state"] = state
        async with self.engine.begin() as conn:
            await update_batch(conn, job.id, **values, stamp=("applied_at",))

    async def _open(self) -> list[StoredBatch]:
        async with self.engine.connect() as conn:
            jobs = await persona_batches(conn, self.loop.pid, open_only=True)
        return [j for j in jobs if j.iteration_id == self.it.id]

    async def decided(self) -> set[int]:
        async with self.engine.connect() as conn:
            rows = await conn.scalars(
                text("SELECT pair_id FROM persona_decisions WHERE iteration_id = :i"),
                {"i": self.it.id},
            )
            return set(rows.all())

    async def _submit(self, todo: Sequence[_Pair]) -> StoredBatch:
        """One job with as many of ``todo`` as the provider's limits take (the rest go in
        the next job once this one is applied), stored with its requests before sending."""
        model_id = self.persona.judge_model_id
        assert model_id is not None
        client, info = await self.llm.batch_client(model_id)
        sent = await self._sent()
        requests: list[StoredRequest] = []
        size = 0
        for i, p in enumerate(todo[: client.limits.max_requests]):
            if i % 500 == 499:
                await asyncio.sleep(0)  # a job of 50,000 prompts: let others run
            request = self.loop._label_request(
                self.persona, self.it, self.judge_prompt, p, self.outputs[p.id][1]
            ).to_json()
            attempt = sent.get(p.id, 0) + 1
            custom_id = f"p{p.id}-a{attempt}"  # unique per sending: a line names its job's
            line = client.entry_bytes(client.entry(custom_id, chat_request(request, info.model)))
            if requests and size + line > client.limits.max_bytes:
                break
            size += line
            requests.append(StoredRequest(custom_id, None, attempt, 0, request, pair_id=p.id))
        # Held against the persona's budget before anything is sent, as a live call's
        # estimate is: a job that would pass the cap is refused (the persona pauses).
        cost = at_batch_price(info.pricing.cost, info.batch_discount)
        estimate = sum(cost(_tokens(r.request), JUDGE_OUTPUT_TOKENS) for r in requests)
        try:
            reservation = self.llm.budgets.reserve(f"persona:{self.loop.pid}", estimate)
        except BudgetExceeded as e:
            raise step_failed("judge", e) from e
        try:
            async with self.engine.begin() as conn:
                job_id = await new_batch(
                    conn,
                    persona=(self.loop.pid, self.it.id),
                    provider_id=info.provider_id,
                    model_id=info.id,
                    kind=client.kind,
                )
                await store_requests(conn, job_id, requests, size)
        except BaseException:
            self.llm.budgets.settle(reservation, 0.0)  # nothing stored, nothing to be sent
            raise
        self.reserved[job_id] = reservation
        async with self.engine.connect() as conn:
            return await batch_by_id(conn, job_id)

    async def _sent(self) -> dict[int, int]:
        """pair id -> how many of this iteration's jobs asked for its label."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT r.pair_id, count(*) FROM provider_batch_requests r "
                    "JOIN provider_batches b ON b.id = r.batch_id "
                    "WHERE b.iteration_id = :i GROUP BY r.pair_id"
                ),
                {"i": self.it.id},
            )
            return {pair_id: n for pair_id, n in rows.all()}

    async def _apply(
        self,
        job: StoredBatch,
        remote: Any,
        pairs: dict[int, _Pair],
        live: Callable[[_Pair], Awaitable[None]],
        progress: Progress,
        settling: bool = False,
    ) -> None:
        """Every result line of an ended job as its pair's decision (each inserted once);
        then the job is marked applied. Raises ``StepFailed`` when it labelled nothing
        (unless ``settling``: its answers are labelled live next)."""
        client, info = await self.llm.batch_client(job.model_id)
        cost = at_batch_price(info.pricing.cost, info.batch_discount)
        async with self.engine.connect() as conn:
            stored = {r.custom_id: r for r in await load_requests(conn, job.id)}
        requests = {cid: chat_request(r.request, info.model) for cid, r in stored.items()}
        done: set[str] = set()
        notes: list[str] = []
        again: list[_Pair] = []
        chunk: list[tuple[dict[str, Any], JudgeResult[Any]]] = []

        async def flush() -> None:
            nonlocal chunk
            if chunk:
                await self._insert(job, chunk, progress)
                chunk = []
                await self._stage("applying", job)

        async for line in client.results(remote, requests.get):
            request = stored.get(line.custom_id or "")
            if request is None or line.custom_id in done:
                notes.append(line.error or f"unknown custom_id {line.custom_id!r}")
                continue
            done.add(request.custom_id)
            p = pairs.get(request.pair_id)  # type: ignore[arg-type]
            if p is None or p.id not in self.outputs:
                continue  # the pair was deleted meanwhile
            output_id, answer = self.outputs[p.id]
            broken = not line.retry and (line.error or "").startswith("malformed")
            if line.result is None and not broken:
                notes.append(line.error or "no result")
                if line.retry:
                    again.append(p)
                continue
            # A broken line is an unreadable reply (as a live one after its retry), with why.
            result = read_line(line, cost, self.reader)
            values = self.loop._decision(
                self.it, p, output_id, answer, result, self.carried, self.prefill
            )
            if broken:
                values["judge_reasoning"] = f"The judge's batch result: {line.error}"[:2000]
            chunk.append((values, result))
            if len(chunk) >= APPLY_CHUNK:
                await flush()
        await flush()
        missing = [r for cid, r in stored.items() if cid not in done]
        if missing:
            detail = f": {remote.error}" if remote.error else ""
            notes.append(f"{len(missing)} request(s) unanswered: the job ended {remote.state}")
            notes[-1] += detail
            again.extend(pairs[r.pair_id] for r in missing if r.pair_id in pairs)  # type: ignore[index]
        if again and self.persona.batch_fallback == "live" and not settling:
            decided = await self.decided()  # labelled live before a crash: not asked again
            again = [p for p in again if p.id not in decided]
            for p in again:  # asked live at once; a failure pauses as a live call's does
                await live(p)
        async with self.engine.begin() as conn:
            await update_batch(
                conn,
                job.id,
                error="; ".join(n for n in (job.error, *notes[:5]) if n)[:2000] or None,
                stamp=("applied_at",),
            )
        self.llm.budgets.settle(self.reserved.pop(job.id, None), self.paid)
        self.paid = 0.0
        if settling:
            return
        # Judged by what is stored, not by this pass: a job re-applied after a crash
        # inserts nothing new, yet labelled what it labelled the first time.
        if stored and not {r.pair_id for r in stored.values()} & await self.decided():
            why = "; ".join(notes[:3]) or f"the job ended {remote.state}"
            raise StepFailed(
                f"the judge's batch job {job.provider_batch_id} labelled nothing ({why}); "
                "resume to send the answers again"
            )

    async def _insert(
        self,
        job: StoredBatch,
        chunk: list[tuple[dict[str, Any], JudgeResult[Any]]],
        progress: Progress,
    ) -> None:
        """Insert the chunk's decisions; account the calls of those inserted (a decision
        stored before a crash is neither stored nor accounted again)."""
        async with self.engine.begin() as conn:
            inserted = set(
                (
                    await conn.scalars(
                        insert(PersonaDecision)
                        .values([v for v, _ in chunk])
                        .on_conflict_do_nothing()
                        .returning(PersonaDecision.pair_id)
                    )
                ).all()
            )
        for values, result in chunk:
            if values["pair_id"] not in inserted:
                continue
            await progress.step(self.it.number)
            if not result.calls:  # a broken line: no reply, no usage to account
                continue
            self.paid += result.cost_usd
            await self.llm.record_batch_call(
                model_id=job.model_id,
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                cost_usd=result.cost_usd,
                error=result.parse_error,
                related={
                    "persona_id": self.loop.pid,
                    "iteration": self.it.number,
                    "pair_id": values["pair_id"],
                },
                purpose="persona_judge",
            )

    async def _publish(self) -> None:
        async with self.engine.connect() as conn:
            jobs = await persona_batches(conn, self.loop.pid)
        await publish(self.loop.r.hub, self.loop.pid, "batch_status", batch_status(jobs))


class PersonaJobs(BatchSteps):
    """A persona's jobs outside its training loop (the persona is being deleted)."""

    def __init__(self, engine: AsyncEngine, llm: Any) -> None:
        self.engine, self.llm, self.hook = engine, llm, None

    async def cancel_open(self, persona_id: int) -> None:
        """Cancel at the provider the persona's jobs still running there (their rows go
        with the persona); one that cannot be cancelled is logged, not an error."""
        async with self.engine.connect() as conn:
            jobs = await persona_batches(conn, persona_id, open_only=True)
        for job in jobs:
            if job.provider_batch_id is None or job.state in TERMINAL_STATES:
                continue
            try:
                client, _ = await self.llm.batch_client(job.model_id)
                await client.cancel(job.provider_batch_id)
            except (Invalid, NotFound, ProviderError) as e:
                log.warning("persona %s: batch job %s not cancelled: %s", persona_id, job.id, e)


def _tokens(request: dict[str, Any]) -> int:
    """A stored label request's prompt tokens, estimated as a live call's are."""
    return estimate_tokens(" ".join(str(m.get("content", "")) for m in request["messages"]))
