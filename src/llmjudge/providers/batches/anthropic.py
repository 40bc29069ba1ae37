"""Anthropic's Message Batches API.

``POST /v1/messages/batches`` takes the requests inline (``requests[{custom_id, params}]``,
``params`` being a Messages request body); ``GET /v1/messages/batches/{id}`` reports
``processing_status`` ``in_progress`` -> ``canceling`` -> ``ended``; once ended,
``results_url`` streams JSONL, one ``{custom_id, result}`` per request with ``result.type``
``succeeded`` (``result.message``), ``errored``, ``canceled`` or ``expired``. A job carries
no metadata: one a worker created but died before recording is found by its size among the
jobs created since the worker began creating it (``find``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from typing import Any

from llmjudge.providers.base import ChatRequest
from llmjudge.providers.batches.base import (
    BatchClient,
    BatchLimits,
    BatchLine,
    RemoteBatch,
    epoch,
    malformed,
)

__all__ = ["AnthropicBatches"]

# A job listed up to this long before the stored start of its creation is still a candidate
# (clocks of this machine and the provider's differ a little).
_CLOCK_SLACK_S = 120.0


class AnthropicBatches(BatchClient):
    kind = "anthropic"
    # Published limits: 100,000 requests or 256 MB per batch.
    default_limits = BatchLimits(max_requests=100_000, max_bytes=256 * 1024 * 1024)

    def entry(self, custom_id: str, req: ChatRequest) -> dict[str, Any]:
        return {"custom_id": custom_id, "params": dict(self.chat.build(req, stream=False).body)}

    @property
    def root(self) -> str:
        return f"{self.base_url}/v1/messages/batches"

    async def upload(self, entries: Sequence[Mapping[str, Any]]) -> str | None:
        return None  # requests go inline with the job

    async def create(
        self, input_file_id: str | None, entries: Sequence[Mapping[str, Any]], tag: str
    ) -> RemoteBatch:
        body = {"requests": list(entries)}
        resp = await self.call(
            lambda: self._http.post(self.root, headers=self.headers(), json=body)
        )
        return _remote(self.json_of(resp))

    async def find(
        self,
        *,
        input_file_id: str | None,
        tag: str,
        since: float,
        count: int,
        known: Collection[str],
    ) -> RemoteBatch | None:
        after: str | None = None
        for _ in range(20):
            params = {"limit": "100"} | ({"after_id": after} if after else {})
            resp = await self.call(
                lambda p=params: self._http.get(self.root, headers=self.headers(), params=p)  # type: ignore[misc]
            )
            page = self.json_of(resp)
            for item in page.get("data") or []:
                remote = _remote(item)
                if remote.id in known or remote.total != count:
                    continue
                if remote.created_at is not None and remote.created_at >= since - _CLOCK_SLACK_S:
                    return remote
            if not page.get("has_more") or not page.get("data"):
                return None
            after = page.get("last_id") or page["data"][-1].get("id")
        return None

    async def get(self, batch_id: str) -> RemoteBatch:
        resp = await self.call(
            lambda: self._http.get(f"{self.root}/{batch_id}", headers=self.headers())
        )
        return _remote(self.json_of(resp))

    async def cancel(self, batch_id: str) -> RemoteBatch:
        resp = await self.call(
            lambda: self._http.post(f"{self.root}/{batch_id}/cancel", headers=self.headers())
        )
        return _remote(self.json_of(resp))

    async def results(
        self, batch: RemoteBatch, request_of: Callable[[str], ChatRequest | None]
    ) -> AsyncIterator[BatchLine]:
        url = batch.output_file_id  # the results_url
        if not url:
            return
        async for line in self.lines(url):
            yield self._line(line, request_of)

    def _line(self, line: str, request_of: Callable[[str], ChatRequest | None]) -> BatchLine:
        try:
            data = json.loads(line)
        except ValueError:
            return malformed(line)
        custom_id = data.get("custom_id") if isinstance(data, dict) else None
        if not isinstance(custom_id, str):
            return BatchLine(None, error=f"batch result line without a custom_id: {line[:200]!r}")
        result = data.get("result")
        kind = result.get("type") if isinstance(result, dict) else None
        if not isinstance(result, dict):
            return BatchLine(custom_id, error=f"malformed batch result line: {line[:200]!r}")
        if kind == "succeeded" and isinstance(result.get("message"), dict):
            return self.reply(result["message"], request_of(custom_id), custom_id)
        if kind in ("canceled", "expired"):
            return BatchLine(custom_id, error=f"batch request {kind}", retry=True)
        if kind == "errored":
            inner = (result.get("error") or {}).get("error") or result.get("error") or {}
            kind_ = inner.get("type", "error") if isinstance(inner, dict) else "error"
            message = inner.get("message", "") if isinstance(inner, dict) else str(inner)
            return BatchLine(
                custom_id,
                error=f"batch request errored ({kind_}): {message}"[:2000],
                retry=kind_ in ("api_error", "overloaded_error", "rate_limit_error"),
            )
        return BatchLine(custom_id, error=f"malformed batch result line: {line[:200]!r}")


def _remote(data: Mapping[str, Any]) -> RemoteBatch:
    counts = data.get("request_counts") or {}
    status = str(data.get("processing_status") or "in_progress")
    if status == "ended":
        state = "cancelled" if data.get("cancel_initiated_at") else "completed"
    else:
        state = "cancelling" if status == "canceling" else "in_progress"
    total = sum(
        int(counts.get(k) or 0)
        for k in ("processing", "succeeded", "errored", "canceled", "expired")
    )
    return RemoteBatch(
        id=str(data["id"]),
        state=state,
        total=total,
        succeeded=int(counts.get("succeeded") or 0),
        errored=sum(int(counts.get(k) or 0) for k in ("errored", "canceled", "expired")),
        output_file_id=data.get("results_url"),
        created_at=epoch(data.get("created_at")),
    )
