"""Fake provider batch APIs on 127.0.0.1, speaking the real request and result shapes and
state machines (test doubles of ``providers.batches``).

``FakeOpenAIBatches``: ``POST /v1/files`` (multipart, ``purpose=batch``), ``POST /v1/batches``,
``GET /v1/batches`` (newest first, ``after``), ``GET /v1/batches/{id}``,
``POST /v1/batches/{id}/cancel``, ``GET /v1/files/{id}/content``; a job moves
``validating`` -> ``in_progress`` -> ``finalizing`` -> ``completed`` one step per poll (or
``expired`` / ``cancelling`` -> ``cancelled``, with the answers made so far).

``FakeAnthropicBatches``: ``POST /v1/messages/batches`` (``requests[{custom_id, params}]``),
``GET /v1/messages/batches`` (``after_id``), ``GET /v1/messages/batches/{id}``,
``POST .../cancel`` and the ``results_url`` JSONL (``succeeded`` / ``errored`` /
``canceled`` / ``expired``); ``in_progress`` -> ``ended`` after ``polls_to_end`` polls.

Their state (files, jobs, results) lives in ``BatchState`` and, given a ``path``, in a JSON
file: a fake stopped and started again on the same port and path is a server that
restarted. Switches (sets of ``custom_id``s that expire, error or come back malformed,
``expire_jobs``) apply when a job ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.servers import fake_tokens

Responder = Callable[[dict[str, Any]], str]
_PERSISTED = ("files", "jobs", "next_id")


@dataclass
class BatchState:
    path: Path | None = None
    api_key: str | None = "test-key"
    responder: Responder | None = None  # request body -> reply text
    polls_per_step: int = 1
    expire_ids: set[str] = field(default_factory=set)  # these requests expire
    error_ids: set[str] = field(default_factory=set)  # these get a 500 (retryable)
    malformed_ids: set[str] = field(default_factory=set)  # their line comes back broken
    expire_jobs: bool = False  # every job expires after half its requests
    files: dict[str, str] = field(default_factory=dict)  # id -> content
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> job (with private keys)
    next_id: int = 1
    calls: list[str] = field(default_factory=list)  # "METHOD path" per request

    def new_id(self, prefix: str) -> str:
        self.next_id += 1
        return f"{prefix}{self.next_id:06d}"

    def save(self) -> None:
        if self.path is not None:
            data = {k: getattr(self, k) for k in _PERSISTED}
            self.path.write_text(json.dumps(data))

    def load(self) -> None:
        if self.path is not None and self.path.exists():
            for k, v in json.loads(self.path.read_text()).items():
                setattr(self, k, v)

    def submitted(self) -> list[str]:
        """Every custom_id sent, once per job it was sent in."""
        return [cid for job in self.jobs.values() for cid in job["_custom_ids"]]


class _FakeBatchServer:
    prefix = "/v1"

    def __init__(self, state: BatchState | None = None) -> None:
        self.state = state or BatchState()
        self.state.load()
        # The real APIs take files of up to 200 MB (OpenAI) and 256 MB (Anthropic), not
        # aiohttp's default 1 MiB body.
        self.app = web.Application(middlewares=[self._gate], client_max_size=256 * 1024 * 1024)
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self.port = 0

    async def start(self, port: int = 0) -> str:
        self._runner = web.AppRunner(self.app, shutdown_timeout=0.2, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{self.port}{self.prefix}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def restart(self) -> None:
        """Stop, forget everything held in memory, start again on the same port from the
        state file (a server that restarted)."""
        port = self.port
        await self.stop()
        fresh = BatchState(path=self.state.path, api_key=self.state.api_key)
        for switch in ("responder", "polls_per_step", "expire_ids", "error_ids"):
            setattr(fresh, switch, getattr(self.state, switch))
        fresh.malformed_ids, fresh.expire_jobs = self.state.malformed_ids, self.state.expire_jobs
        fresh.load()
        self.state = fresh
        await self.start(port)

    @web.middleware
    async def _gate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.state.calls.append(f"{request.method} {request.path}")
        if self.state.api_key is not None and self.key_of(request) != self.state.api_key:
            return web.json_response({"error": {"message": "invalid api key"}}, status=401)
        try:
            return await handler(request)
        finally:
            self.state.save()

    def key_of(self, request: web.Request) -> str | None:
        raise NotImplementedError

    def reply_text(self, body: dict[str, Any]) -> str:
        if self.state.responder is not None:
            return self.state.responder(body)
        return json.dumps({"winner": "A", "confidence": 0.8, "reasoning": "fake"})

    def outcome(self, custom_id: str, n: int, total: int, *, ending: str) -> str:
        """How request number ``n`` of a job ends: ok, expired, error, malformed or
        cancelled (a cancelled or expired job answered its first half only)."""
        if ending in ("cancelled", "expired") and n >= total // 2:
            return ending
        if custom_id in self.state.expire_ids:
            return "expired"
        if custom_id in self.state.error_ids:
            return "error"
        if custom_id in self.state.malformed_ids:
            return "malformed"
        return "ok"


class FakeOpenAIBatches(_FakeBatchServer):
    def __init__(self, state: BatchState | None = None) -> None:
        super().__init__(state)
        r = self.app.router
        r.add_post("/v1/chat/completions", self.chat)  # the start's test call
        r.add_post("/v1/files", self.upload)
        r.add_get("/v1/files/{id}/content", self.content)
        r.add_post("/v1/batches", self.create)
        r.add_get("/v1/batches", self.list)
        r.add_get("/v1/batches/{id}", self.get)
        r.add_post("/v1/batches/{id}/cancel", self.cancel)

    def key_of(self, request: web.Request) -> str | None:
        return request.headers.get("Authorization", "").removeprefix("Bearer ") or None

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response(self.answer("live", body)["response"]["body"])

    async def upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        if form.get("purpose") != "batch" or not hasattr(upload, "file"):
            return web.json_response({"error": {"message": "purpose batch and a file"}}, status=400)
        content = upload.file.read().decode()  # type: ignore[union-attr]
        file_id = self.state.new_id("file-")
        self.state.files[file_id] = content
        return web.json_response(
            {
                "id": file_id,
                "object": "file",
                "bytes": len(content),
                "purpose": "batch",
                "filename": upload.filename,
                "created_at": int(time.time()),
            }  # type: ignore[union-attr]
        )

    async def content(self, request: web.Request) -> web.Response:
        text = self.state.files.get(request.match_info["id"])
        if text is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        return web.Response(text=text, content_type="application/octet-stream")

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        content = self.state.files.get(body.get("input_file_id", ""))
        if content is None:
            return web.json_response({"error": {"message": "input file not found"}}, status=400)
        if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
            return web.json_response({"error": {"message": "bad endpoint or window"}}, status=400)
        lines = [json.loads(line) for line in content.splitlines() if line.strip()]
        batch_id = self.state.new_id("batch_")
        self.state.jobs[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "errors": None,
            "input_file_id": body["input_file_id"],
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": int(time.time()),
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": body.get("metadata") or {},
            "_custom_ids": [line["custom_id"] for line in lines],
            "_polls": 0,
        }
        return self.public(batch_id)

    def public(self, batch_id: str) -> web.Response:
        job = self.state.jobs[batch_id]
        return web.json_response({k: v for k, v in job.items() if not k.startswith("_")})

    async def list(self, request: web.Request) -> web.Response:
        ids = sorted(self.state.jobs, reverse=True)
        after = request.query.get("after")
        if after in ids:
            ids = ids[ids.index(after) + 1 :]
        limit = int(request.query.get("limit", "20"))
        page = ids[:limit]
        data = [
            {k: v for k, v in self.state.jobs[i].items() if not k.startswith("_")} for i in page
        ]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "has_more": len(ids) > limit,
                "first_id": page[0] if page else None,
                "last_id": page[-1] if page else None,
            }
        )

    async def get(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["id"]
        job = self.state.jobs.get(batch_id)
        if job is None:
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        job["_polls"] += 1
        if job["_polls"] >= self.state.polls_per_step:
            job["_polls"] = 0
            self.advance(job)
        return self.public(batch_id)

    def advance(self, job: dict[str, Any]) -> None:
        status = job["status"]
        if status == "validating":
            job["status"] = "in_progress"
        elif status == "in_progress":
            job["status"] = "finalizing"
            if self.state.expire_jobs:
                self.finish(job, "expired")
        elif status == "finalizing":
            self.finish(job, "completed")
        elif status == "cancelling":
            self.finish(job, "cancelled")

    def finish(self, job: dict[str, Any], ending: str) -> None:
        requests = [
            json.loads(line) for line in self.state.files[job["input_file_id"]].splitlines()
        ]
        out, err = [], []
        for n, req in enumerate(requests):
            cid = req["custom_id"]
            kind = self.outcome(cid, n, len(requests), ending=ending)
            if kind == "ok":
                out.append(json.dumps(self.answer(cid, req["body"])))
            elif kind == "malformed":
                out.append(f'{{"id": "batch_req_x", "custom_id": "{cid}", "response": {{"status_')
            elif kind == "error":
                err.append(
                    json.dumps(
                        {
                            "id": "batch_req_e",
                            "custom_id": cid,
                            "response": {
                                "status_code": 500,
                                "request_id": "r",
                                "body": {
                                    "error": {"message": "internal error", "type": "server_error"}
                                },
                            },
                            "error": None,
                        }
                    )
                )
            elif kind == "expired":
                err.append(
                    json.dumps(
                        {
                            "id": "batch_req_e",
                            "custom_id": cid,
                            "response": None,
                            "error": {
                                "code": "batch_expired",
                                "message": "This request could not be "
                                "executed before the completion window expired.",
                            },
                        }
                    )
                )
            # cancelled: no line (the request was never run)
        if out:
            job["output_file_id"] = self.state.new_id("file-")
            self.state.files[job["output_file_id"]] = "\n".join(out) + "\n"
        if err:
            job["error_file_id"] = self.state.new_id("file-")
            self.state.files[job["error_file_id"]] = "\n".join(err) + "\n"
        job["status"] = ending
        job["request_counts"].update(completed=len(out), failed=len(err))

    def answer(self, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        text = self.reply_text(body)
        prompt = sum(fake_tokens(str(m.get("content", ""))) for m in body["messages"])
        completion = {
            "id": "chatcmpl-batch",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": fake_tokens(text),
                "total_tokens": prompt + fake_tokens(text),
            },
        }
        return {
            "id": "batch_req_ok",
            "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": "r", "body": completion},
            "error": None,
        }

    async def cancel(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["id"]
        job = self.state.jobs.get(batch_id)
        if job is None:
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        if job["status"] in ("validating", "in_progress", "finalizing"):
            job["status"] = "cancelling"
        return self.public(batch_id)


class FakeAnthropicBatches(_FakeBatchServer):
    prefix = ""

    def __init__(self, state: BatchState | None = None) -> None:
        super().__init__(state)
        r = self.app.router
        root = "/v1/messages/batches"
        r.add_post("/v1/messages", self.live)  # the start's test call
        r.add_post(root, self.create)
        r.add_get(root, self.list)
        r.add_get(root + "/{id}", self.get)
        r.add_post(root + "/{id}/cancel", self.cancel)
        r.add_get(root + "/{id}/results", self.results)

    def key_of(self, request: web.Request) -> str | None:
        return request.headers.get("x-api-key")

    async def live(self, request: web.Request) -> web.Response:
        return web.json_response(self.message(await request.json()))

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return web.json_response(
                {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "requests: required"},
                },
                status=400,
            )
        for req in requests:
            if "max_tokens" not in req.get("params", {}):
                return web.json_response(
                    {
                        "type": "error",
                        "error": {
                            "type": "invalid_request_error",
                            "message": "max_tokens: required",
                        },
                    },
                    status=400,
                )
        batch_id = self.state.new_id("msgbatch_")
        self.state.jobs[batch_id] = {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "in_progress",
            "request_counts": {
                "processing": len(requests),
                "succeeded": 0,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "ended_at": None,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "expires_at": None,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": None,
            "_requests": requests,
            "_custom_ids": [r["custom_id"] for r in requests],
            "_polls": 0,
        }
        return self.public(batch_id)

    def public(self, batch_id: str) -> web.Response:
        job = self.state.jobs[batch_id]
        return web.json_response({k: v for k, v in job.items() if not k.startswith("_")})

    async def list(self, request: web.Request) -> web.Response:
        ids = sorted(self.state.jobs, reverse=True)
        after = request.query.get("after_id")
        if after in ids:
            ids = ids[ids.index(after) + 1 :]
        limit = int(request.query.get("limit", "20"))
        page = ids[:limit]
        data = [
            {k: v for k, v in self.state.jobs[i].items() if not k.startswith("_")} for i in page
        ]
        return web.json_response(
            {
                "data": data,
                "has_more": len(ids) > limit,
                "first_id": page[0] if page else None,
                "last_id": page[-1] if page else None,
            }
        )

    async def get(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["id"]
        job = self.state.jobs.get(batch_id)
        if job is None:
            return web.json_response(
                {"type": "error", "error": {"type": "not_found_error", "message": "no such batch"}},
                status=404,
            )
        job["_polls"] += 1
        if job["processing_status"] != "ended" and job["_polls"] > 2 * self.state.polls_per_step:
            self.finish(job, request)
        return self.public(batch_id)

    async def cancel(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["id"]
        job = self.state.jobs[batch_id]
        if job["processing_status"] == "in_progress":
            job["processing_status"] = "canceling"
            job["cancel_initiated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return self.public(batch_id)

    def finish(self, job: dict[str, Any], request: web.Request) -> None:
        ending = (
            "cancelled"
            if job["cancel_initiated_at"]
            else ("expired" if self.state.expire_jobs else "ok")
        )
        lines, counts = (
            [],
            {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
        )
        requests = job["_requests"]
        for n, req in enumerate(requests):
            cid = req["custom_id"]
            kind = self.outcome(cid, n, len(requests), ending=ending)
            if kind == "ok":
                result = {"type": "succeeded", "message": self.message(req["params"])}
                counts["succeeded"] += 1
            elif kind == "malformed":
                lines.append(f'{{"custom_id": "{cid}", "result": {{"type": "succ')
                counts["succeeded"] += 1
                continue
            elif kind == "error":
                result = {
                    "type": "errored",
                    "error": {
                        "type": "error",
                        "error": {"type": "api_error", "message": "Internal server error"},
                    },
                }
                counts["errored"] += 1
            elif kind == "cancelled":
                result = {"type": "canceled"}
                counts["canceled"] += 1
            else:
                result = {"type": "expired"}
                counts["expired"] += 1
            lines.append(json.dumps({"custom_id": cid, "result": result}))
        file_id = self.state.new_id("results-")
        self.state.files[file_id] = "\n".join(lines) + "\n"
        job["processing_status"] = "ended"
        job["request_counts"] = counts
        job["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        job["results_url"] = f"{self.base_url}/v1/messages/batches/{job['id']}/results"
        job["_results"] = file_id

    def message(self, params: dict[str, Any]) -> dict[str, Any]:
        text = self.reply_text(params)
        tool = params["tools"][0]["name"] if params.get("tools") else None
        block = (
            {"type": "tool_use", "id": "toolu_b", "name": tool, "input": json.loads(text)}
            if tool
            else {"type": "text", "text": text}
        )
        tokens = fake_tokens(str(params.get("system", ""))) + sum(
            fake_tokens(str(m["content"])) for m in params["messages"]
        )
        return {
            "id": "msg_b",
            "type": "message",
            "role": "assistant",
            "model": params["model"],
            "content": [block],
            "stop_reason": "tool_use" if tool else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": tokens, "output_tokens": fake_tokens(text)},
        }

    async def results(self, request: web.Request) -> web.Response:
        job = self.state.jobs.get(request.match_info["id"])
        if job is None or job["processing_status"] != "ended":
            return web.json_response(
                {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "not ended"},
                },
                status=400,
            )
        return web.Response(
            text=self.state.files[job["_results"]], content_type="application/binary"
        )
