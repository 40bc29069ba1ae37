"""OpenAI's Batch API (and any OpenAI-compatible server offering ``/v1/batches``: vLLM).

A job is a JSONL file of ``/v1/chat/completions`` request lines, each with its
``custom_id``, uploaded with ``POST /files`` (``purpose=batch``) and started with
``POST /batches`` (``completion_window`` 24h). ``GET /batches/{id}`` reports ``validating``
-> ``in_progress`` -> ``finalizing`` -> ``completed`` (or ``failed``, ``expired``,
``cancelling``, ``cancelled``); the answers are in ``output_file_id``, the requests that
failed or expired in ``error_file_id``, both JSONL fetched from ``GET /files/{id}/content``.
The job carries ``metadata.llmjudge_batch`` (our row's tag) and its input file, so a job
created by a worker that died before recording it is found again (``find``).
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
    malformed,
)

__all__ = ["OpenAIBatches"]

ENDPOINT = "/v1/chat/completions"
# Request codes of error-file lines that asking again may cure.
_RETRY_CODES = frozenset(
    {"batch_expired", "batch_cancelled", "server_error", "rate_limit_exceeded"}
)


class OpenAIBatches(BatchClient):
    kind = "openai"
    # Published limits: 50,000 requests and 200 MB per batch file.
    default_limits = BatchLimits(max_requests=50_000, max_bytes=200 * 1024 * 1024)

    def entry(self, custom_id: str, req: ChatRequest) -> dict[str, Any]:
        body = dict(self.chat.build(req, stream=False).body)
        return {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}

    async def upload(self, entries: Sequence[Mapping[str, Any]]) -> str | None:
        content = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries).encode()
        resp = await self.call(
            lambda: self._http.post(
                f"{self.base_url}/files",
                headers=self.headers(),
                data={"purpose": "batch"},
                files={"file": ("llmjudge-batch.jsonl", content, "application/jsonl")},
            )
        )
        return str(self.json_of(resp)["id"])

    async def create(
        self, input_file_id: str | None, entries: Sequence[Mapping[str, Any]], tag: str
    ) -> RemoteBatch:
        body = {
            "input_file_id": input_file_id,
            "endpoint": ENDPOINT,
            "completion_window": "24h",
            "metadata": {"llmjudge_batch": tag},
        }
        resp = await self.call(
            lambda: self._http.post(f"{self.base_url}/batches", headers=self.headers(), json=body)
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
        for _ in range(20):  # the newest 2,000 jobs: a lost one is minutes old
            params = {"limit": "100"} | ({"after": after} if after else {})
            resp = await self.call(
                lambda p=params: self._http.get(  # type: ignore[misc]
                    f"{self.base_url}/batches", headers=self.headers(), params=p
                )
            )
            page = self.json_of(resp)
            for item in page.get("data") or []:
                meta = item.get("metadata") or {}
                if item.get("id") in known:
                    continue
                if meta.get("llmjudge_batch") == tag or (
                    input_file_id is not None and item.get("input_file_id") == input_file_id
                ):
                    return _remote(item)
            if not page.get("has_more") or not page.get("data"):
                return None
            after = page.get("last_id") or page["data"][-1].get("id")
        return None

    async def get(self, batch_id: str) -> RemoteBatch:
        resp = await self.call(
            lambda: self._http.get(f"{self.base_url}/batches/{batch_id}", headers=self.headers())
        )
        return _remote(self.json_of(resp))

    async def cancel(self, batch_id: str) -> RemoteBatch:
        resp = await self.call(
            lambda: self._http.post(
                f"{self.base_url}/batches/{batch_id}/cancel", headers=self.headers()
            )
        )
        return _remote(self.json_of(resp))

    async def results(
        self, batch: RemoteBatch, request_of: Callable[[str], ChatRequest | None]
    ) -> AsyncIterator[BatchLine]:
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            async for line in self.lines(f"{self.base_url}/files/{file_id}/content"):
                yield self._line(line, request_of)

    def _line(self, line: str, request_of: Callable[[str], ChatRequest | None]) -> BatchLine:
        try:
            data = json.loads(line)
            custom_id = data.get("custom_id")
        except (ValueError, AttributeError):
            return malformed(line)
        if not isinstance(custom_id, str):
            return BatchLine(None, error=f"batch result line without a custom_id: {line[:200]!r}")
        error = data.get("error")
        if error:
            code = str(error.get("code") or "") if isinstance(error, dict) else ""
            message = error.get("message") if isinstance(error, dict) else str(error)
            return BatchLine(
                custom_id,
                error=f"batch request {code or 'error'}: {message}"[:2000],
                retry=code in _RETRY_CODES,
            )
        response = data.get("response")
        if not isinstance(response, dict) or not isinstance(response.get("body"), dict):
            return BatchLine(custom_id, error=f"malformed batch result line: {line[:200]!r}")
        status = int(response.get("status_code") or 0)
        if status >= 400:
            inner = response["body"].get("error") or {}
            message = inner.get("message", "") if isinstance(inner, dict) else str(inner)
            return BatchLine(
                custom_id,
                error=f"batch request failed ({status}): {message}"[:2000],
                retry=status == 429 or status >= 500,
            )
        return self.reply(response["body"], request_of(custom_id), custom_id)


def _remote(data: Mapping[str, Any]) -> RemoteBatch:
    counts = data.get("request_counts") or {}
    errors = (data.get("errors") or {}).get("data") or []
    error = "; ".join(str(e.get("message", e)) for e in errors if isinstance(e, dict)) or None
    return RemoteBatch(
        id=str(data["id"]),
        state=str(data.get("status") or "validating"),
        total=int(counts.get("total") or 0),
        succeeded=int(counts.get("completed") or 0),
        errored=int(counts.get("failed") or 0),
        input_file_id=data.get("input_file_id"),
        output_file_id=data.get("output_file_id"),
        error_file_id=data.get("error_file_id"),
        created_at=data.get("created_at"),
        error=error,
    )
