"""The web shell's shared helpers: the request-scoped database session, the Jinja2
environment and the HTMX request check."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, UploadFile, status
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.text.view import render_markdown, word_diff_html
from llmjudge.infra.config import Settings, get_settings
from llmjudge.infra.rowfiles import RowError


async def get_db(request: Request) -> AsyncIterator[AsyncSession]:
    """One session per request, from the sessionmaker the app built at start-up."""
    async with request.app.state.sessionmaker() as session:
        yield session


DbSession = Annotated[AsyncSession, Depends(get_db)]

templates = Jinja2Templates(directory=str(get_settings().templates_dir))


def _tojson_pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


templates.env.filters["pretty"] = _tojson_pretty
# Untrusted thread text as sanitised HTML (see llmjudge.core.text.view); Markup so it is not escaped twice.
templates.env.filters["markdown"] = lambda text: Markup(render_markdown(text))
# Escaped word diff: <del> only in the first text, <ins> only in the second.
templates.env.filters["word_diff"] = lambda a, b: Markup(word_diff_html(a or "", b or ""))


def is_htmx(request: Request) -> bool:
    return request.headers.get("HX-Request") == "true"


def render(request: Request, name: str, status_code: int = 200, **context: Any):
    return templates.TemplateResponse(request, name, context, status_code=status_code)


async def read_upload(upload: UploadFile, settings: Settings) -> bytes:
    """Read at most the configured size; a larger file is refused (413) before parsing."""
    limit = settings.max_upload_bytes
    data = await upload.read(limit + 1)
    if len(data) > limit:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            detail=f"the file is larger than the {limit / 1_048_576:.0f} MiB limit "
            "(LLMJUDGE_MAX_UPLOAD_BYTES)",
        )
    return data


class ImportRejected(HTTPException):
    """422 for an uploaded file with problems: every row error, and nothing stored."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail={
                "message": f"{len(errors)} problem(s) found; nothing was imported",
                "errors": [e.model_dump() for e in errors],
            },
        )
