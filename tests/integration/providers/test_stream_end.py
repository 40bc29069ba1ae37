"""What follows a stream's final event (issue 14, throughput): a stream is read to its end
after ``[DONE]`` / ``message_stop`` (so its keep-alive connection is reused), but never for
longer than ``DRAIN_AFTER_END_S``, and nothing after the final event changes the answer."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from aiohttp import web

from llmjudge.providers.base import ChatRequest, ProviderConfig
from llmjudge.providers.clients import DRAIN_AFTER_END_S
from llmjudge.providers.registry import make_client

ANSWER = '{"winner": "A", "confidence": 0.9}'


def openai_events(text: str) -> list[bytes]:
    chunks = [text[i : i + 8] for i in range(0, len(text), 8)]
    out = [
        {"model": "m", "choices": [{"index": 0, "delta": {"content": c}, "finish_reason": None}]}
        for c in chunks
    ]
    out.append({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out.append({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    return [f"data: {json.dumps(e)}\n\n".encode() for e in out] + [b"data: [DONE]\n\n"]


def anthropic_events(text: str) -> list[bytes]:
    def ev(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    usage = {"input_tokens": 7, "output_tokens": 0}
    out = [ev("message_start", {"message": {"model": "m", "usage": usage}})]
    out += [
        ev("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": c}})
        for c in (text[i : i + 8] for i in range(0, len(text), 8))
    ]
    out.append(ev("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": usage}))
    return [*out, ev("message_stop", {})]


class Server:
    """Streams the answer, then does ``after``: ``end`` (a normal end), ``late_end`` (the
    same, a moment later), ``hold`` (keeps the response open), ``junk`` (more lines, then
    the end) or ``drop`` (closes the socket)."""

    def __init__(self, after: str) -> None:
        self.after = after
        self.peers: list[Any] = []
        self.runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.peers.append(
            request.transport.get_extra_info("peername") if request.transport else None
        )
        anthropic = request.path.endswith("/messages")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        events = anthropic_events(ANSWER) if anthropic else openai_events(ANSWER)
        await resp.write(b"".join(events))
        if self.after == "hold":
            await asyncio.sleep(30)
        elif self.after == "junk":
            await resp.write(b'data: {"choices": [{"delta": {"content": "LATE"}}]}\n\n')
            await resp.write(b"data: not json at all\n\n")
        elif self.after == "late_end":  # the end of the body comes a moment later
            await asyncio.sleep(0.05)
        elif self.after == "drop":
            assert request.transport is not None
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_post("/v1/messages", self.handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


async def streamed(kind: str, base_url: str, calls: int = 1) -> list[tuple[str, float]]:
    url = base_url if kind == "anthropic" else f"{base_url}/v1"  # Anthropic's paths hold /v1
    cfg = ProviderConfig(id=1, name="t", kind=kind, base_url=url, api_key="k", timeout_s=10)
    client = make_client(cfg)
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    out = []
    try:
        for _ in range(calls):
            start = time.monotonic()
            result = await client.chat(
                ChatRequest("m", [{"role": "user", "content": "x"}]), on_delta
            )
            out.append((result.text, time.monotonic() - start))
    finally:
        await client.aclose()
    assert "LATE" not in "".join(deltas)
    return out


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("after", ["end", "late_end", "hold", "junk", "drop"])
async def test_what_follows_the_final_event_never_changes_the_answer(kind: str, after: str) -> None:
    async with Server(after) as url:
        [(text, seconds)] = await streamed(kind, url)
    assert text == ANSWER
    # held open: closed after the bound, not at the read timeout (10 s)
    assert seconds < DRAIN_AFTER_END_S + 2


async def test_a_stream_that_ends_normally_keeps_its_connection() -> None:
    """Three calls in a row reach the server on one connection, even when the body's end
    comes after the final event (left unread, it closed the connection)."""
    server = Server("late_end")
    async with server as url:
        results = await streamed("openai", url, calls=3)
    assert [t for t, _ in results] == [ANSWER] * 3
    assert len(set(server.peers)) == 1
