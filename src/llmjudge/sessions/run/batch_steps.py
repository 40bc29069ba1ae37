"""The steps of one provider batch job, whoever owns it (a session: ``batches``; a persona's
training iteration: ``personas.batch_labels``): upload, create (finding a job a dead worker
created before recording it), poll, each stored before the next. Owners differ only in how
they choose requests and apply results."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmjudge.judging import JudgeRequest
from llmjudge.providers import BatchClient, ChatRequest, RemoteBatch
from llmjudge.sessions.run.batch_store import (
    StoredBatch,
    batch_by_id,
    load_requests,
    update_batch,
)
from llmjudge.sessions.run.jobs import JudgeLLM

__all__ = ["ENDED", "BatchLLM", "BatchSteps", "Hook", "batch_tag", "chat_request"]

ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
# (stage, job id) -> awaited at each stage: before_upload, after_create, polling, applying.
Hook = Callable[[str, int], Awaitable[None]]


class BatchLLM(JudgeLLM, Protocol):
    async def batch_client(self, model_id: int) -> tuple[BatchClient, Any]: ...

    async def record_batch_call(
        self,
        *,
        model_id: int,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float,
        error: str | None,
        related: Mapping[str, Any],
        purpose: str = "judge",
    ) -> None: ...


class BatchSteps:
    """One job's steps at the provider; the owner's runner sets these attributes."""

    engine: AsyncEngine
    llm: BatchLLM
    hook: Hook | None

    async def advance(self, job: StoredBatch) -> RemoteBatch | None:
        """Move an unapplied job one stored step on (upload, create, poll); the provider's
        job once it has ended (its results can be applied), else None."""
        client, _ = await self.llm.batch_client(job.model_id)
        if job.state == "prepared":
            await self._upload(job, client)
            return None
        if job.state in ("uploaded", "submitting"):
            await self._create(job, client)
            return None
        assert job.provider_batch_id is not None
        if job.state in ENDED:
            return await client.get(job.provider_batch_id)
        await self._stage("polling", job)
        remote = await client.get(job.provider_batch_id)
        await self._record(job, remote)
        return remote if remote.ended else None

    async def _reload(self, job: StoredBatch) -> StoredBatch:
        async with self.engine.connect() as conn:
            return await batch_by_id(conn, job.id)

    async def _stage(self, stage: str, job: StoredBatch) -> None:
        if self.hook is not None:
            await self.hook(stage, job.id)

    async def _upload(self, job: StoredBatch, client: BatchClient) -> bool:
        entries = await self._entries(job, client)
        await self._stage("before_upload", job)
        file_id = await client.upload(entries)
        async with self.engine.begin() as conn:
            await update_batch(conn, job.id, state="uploaded", input_file_id=file_id)
        return True

    async def _create(self, job: StoredBatch, client: BatchClient) -> bool:
        if job.state == "submitting":  # a worker may have died after creating it
            found = await self._find(job, client)
            if found is not None:
                await self._record(job, found, submitted=True)
                return True
        async with self.engine.begin() as conn:
            await update_batch(conn, job.id, state="submitting", stamp=("submitting_at",))
        entries = [] if job.input_file_id else await self._entries(job, client)
        remote = await client.create(job.input_file_id, entries, batch_tag(job))
        await self._stage("after_create", job)
        await self._record(job, remote, submitted=True)
        return True

    async def _find(self, job: StoredBatch, client: BatchClient) -> RemoteBatch | None:
        """The provider's job for ``job``, created by a worker that died before recording it."""
        assert job.submitting_at is not None
        async with self.engine.connect() as conn:
            known = await conn.execute(
                text(
                    "SELECT provider_batch_id FROM provider_batches WHERE provider_id = :p "
                    "AND provider_batch_id IS NOT NULL"
                ),
                {"p": job.provider_id},
            )
            ids = {r[0] for r in known.all()}
        return await client.find(
            input_file_id=job.input_file_id,
            tag=batch_tag(job),
            since=job.submitting_at.timestamp(),
            count=job.requests,
            known=ids,
        )

    async def _entries(self, job: StoredBatch, client: BatchClient) -> list[dict[str, Any]]:
        _, info = await self.llm.batch_client(job.model_id)
        async with self.engine.connect() as conn:
            stored = await load_requests(conn, job.id)
        return [client.entry(r.custom_id, chat_request(r.request, info.model)) for r in stored]

    async def _record(
        self,
        job: StoredBatch,
        remote: RemoteBatch,
        *,
        submitted: bool = False,
        cancel_requested: bool | None = None,
    ) -> None:
        values: dict[str, Any] = {
            "state": remote.state,
            "succeeded": remote.succeeded,
            "errored": remote.errored,
            "output_file_id": remote.output_file_id,
            "error_file_id": remote.error_file_id,
            "error": remote.error,
        }
        stamps = ["polled_at"]
        if submitted:
            values["provider_batch_id"] = remote.id
            stamps.append("submitted_at")
        if remote.ended:
            stamps.append("ended_at")
        if cancel_requested is not None:
            values["cancel_requested"] = cancel_requested
        async with self.engine.begin() as conn:
            await update_batch(conn, job.id, **values, stamp=tuple(stamps))


def batch_tag(job: StoredBatch) -> str:
    """The job's name at the provider (how ``find`` recognises it after a crash)."""
    owner = job.session_id if job.session_id is not None else f"persona{job.persona_id}"
    return f"llmjudge-{owner}-{job.id}"


def chat_request(stored: dict[str, Any], model: str) -> ChatRequest:
    """A stored ``JudgeRequest`` as the provider request a batch line carries."""
    request = JudgeRequest.from_json(stored)
    return ChatRequest(
        model=model,
        messages=request.messages,
        temperature=request.temperature,
        max_tokens=request.max_tokens,
        json_schema=request.json_schema,
        schema_name=request.schema_name,
    )
