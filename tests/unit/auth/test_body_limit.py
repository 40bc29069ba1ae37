"""BodyLimitMiddleware reads Content-Length as ASCII digits, whatever a client sends."""

from __future__ import annotations

from typing import Any

import pytest

from llmjudge.auth.middleware import BodyLimitMiddleware


async def answer(content_length: str) -> tuple[int, list[dict[str, Any]]]:
    """The status the middleware answers for a POST with this Content-Length (200: passed on)."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/pillars",
        # Headers reach ASGI as bytes; Starlette decodes them as latin-1.
        "headers": [(b"content-length", content_length.encode("latin-1"))],
    }
    await BodyLimitMiddleware(app, max_bytes=1000)(scope, receive, send)
    return sent[0]["status"], sent


@pytest.mark.parametrize(
    ("content_length", "status"),
    [
        ("0", 200),
        ("1000", 200),
        ("0001000", 200),
        ("1001", 413),
        ("9" * 5000, 413),  # int() refuses more than 4,300 digits: was a 500
        ("0" * 5000 + "7", 200),
        ("\u00b2", 400),  # isdigit() passes SUPERSCRIPT TWO, int() raises: was a 500
        ("\u00b9\u00b3", 400),
        ("-1", 400),
        ("", 400),
        ("12 34", 400),
    ],
)
async def test_content_length_is_read_as_ascii_digits(content_length: str, status: int) -> None:
    got, sent = await answer(content_length)
    assert got == status
    if status == 400:
        assert b"digits 0-9" in sent[1]["body"]
