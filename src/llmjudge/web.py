"""The web shell's shared helpers: the request-scoped database session, the Jinja2
environment and the HTMX request check."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.templating import Jinja2Templates
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.config import get_settings


async def get_db(request: Request) -> AsyncIterator[AsyncSession]:
    """One session per request, from the sessionmaker the app built at start-up."""
    async with request.app.state.sessionmaker() as session:
        yield session


DbSession = Annotated[AsyncSession, Depends(get_db)]

templates = Jinja2Templates(directory=str(get_settings().templates_dir))


def _tojson_pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


templates.env.filters["pretty"] = _tojson_pretty


def is_htmx(request: Request) -> bool:
    return request.headers.get("HX-Request") == "true"


def render(request: Request, name: str, status_code: int = 200, **context: Any):
    return templates.TemplateResponse(request, name, context, status_code=status_code)
