"""Request-bound helpers shared by the auth API and its pages."""

from __future__ import annotations

from fastapi import Request


def link_base(request: Request) -> str:
    """Base URL for login links: LLMJUDGE_PUBLIC_URL, else the URL this request came to."""
    settings = request.app.state.settings
    return settings.public_url.rstrip("/") if settings.public_url else str(request.base_url)[:-1]
