"""The web shell's shared helpers: the request-scoped database session, the Jinja2
environment, the HTMX request check and the pages' answer to a refused action."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import IO, Annotated, Any

from fastapi import Depends, HTTPException, Query, Request, UploadFile, status
from fastapi.responses import Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.text.view import render_markdown, word_diff_html
from llmjudge.infra.config import Settings, get_settings
from llmjudge.infra.errors import DOMAIN_ERRORS, ID_MAX, ErrorOut, htmx_error_line, status_of
from llmjudge.infra.rowfiles import RowError, rejection


async def get_db(request: Request) -> AsyncIterator[AsyncSession]:
    """One database session per request, from the sessionmaker the app built at start-up."""
    async with request.app.state.sessionmaker() as db:
        yield db


DbSession = Annotated[AsyncSession, Depends(get_db)]

# Integer query parameters, bounded where they are read so that what the OpenAPI document
# declares is what a request gets: outside the bounds is a 422, never a quiet empty page.
QueryId = Annotated[int | None, Query(ge=1, le=ID_MAX)]
Offset = Annotated[int, Query(ge=0, le=ID_MAX)]
Number = Annotated[int, Query(ge=1, le=ID_MAX)]

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


def spooled_upload(upload: UploadFile, settings: Settings) -> IO[bytes]:
    """The upload's file as the server spooled it (on disk beyond 1 MiB), rewound, without
    reading it into memory; a file over the configured size is refused (413)."""
    limit = settings.max_upload_bytes
    file = upload.file
    size = upload.size
    if size is None:
        size = file.seek(0, io.SEEK_END)
    if size > limit:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            detail=f"the file is larger than the {limit / 1_048_576:.0f} MiB limit "
            "(LLMJUDGE_MAX_UPLOAD_BYTES)",
        )
    file.seek(0)
    return file


class ImportSlots:
    """At most ``limit`` uploads parsed and stored at once in this process: each holds its
    file's rows in memory while it validates, so parallel uploads are refused, not queued
    (a queue would hold their spooled bodies and sockets just as long)."""

    RETRY_AFTER_S = 5

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        if self.in_use >= self.limit:
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE,
                detail=f"{self.in_use} imports are running, the most this server takes at once "
                f"(LLMJUDGE_MAX_CONCURRENT_IMPORTS={self.limit}); "
                f"try again in {self.RETRY_AFTER_S} s",
                headers={"Retry-After": str(self.RETRY_AFTER_S)},
            )
        self.in_use += 1
        try:
            yield
        finally:
            self.in_use -= 1


def import_slots(app: Any) -> ImportSlots:
    """The app's limiter, made on first use from its settings."""
    slots = getattr(app.state, "import_slots", None)
    if slots is None:
        slots = app.state.import_slots = ImportSlots(app.state.settings.max_concurrent_imports)
    return slots


async def hold_import_slot(request: Request) -> AsyncIterator[None]:
    with import_slots(request.app).hold():
        yield


# Every upload route: ``dependencies=[ImportSlot], responses=... | IMPORT_BUSY``.
ImportSlot = Depends(hold_import_slot)
IMPORT_BUSY: dict[int | str, dict[str, Any]] = {
    503: {
        "model": ErrorOut,
        "description": "As many imports as LLMJUDGE_MAX_CONCURRENT_IMPORTS are running; "
        "try again after `Retry-After` seconds",
    }
}


class ImportRejected(HTTPException):
    """422 for an uploaded file with problems: every row error, and nothing stored."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=rejection(errors, "nothing was imported").detail(),
        )


# --- refused actions -------------------------------------------------------------------------

# What a page catches to answer in place: a form its schema refuses, and every domain error.
PAGE_ERRORS: tuple[type[Exception], ...] = (ValidationError, *DOMAIN_ERRORS)
# The error page's heading, by status.
_TITLES = {403: "Forbidden", 404: "Not found", 409: "Not possible now", 422: "Cannot do that"}


def validation_messages(err: ValidationError) -> list[str]:
    """One line per problem, without echoing the submitted values (they may hold a key)."""
    return [
        f"{'.'.join(str(p) for p in e['loc']) or 'form'}: {e['msg']}"
        for e in err.errors(include_input=False)
    ]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a page refused an action, and the status of errors.py's table it answers with."""

    status: int
    messages: list[str]

    @property
    def message(self) -> str:
        return "; ".join(self.messages)


def refusal(exc: Exception) -> Refusal:
    """A domain error (or a form the schema refuses: 422, as the API's validation list) as the
    page shows it inline."""
    if isinstance(exc, ValidationError):
        return Refusal(422, validation_messages(exc))
    return Refusal(status_of(exc), [str(exc)])


def error_page(request: Request, exc: Exception) -> Response:
    """The answer to a domain error no page answers in place: a line in the flash region for
    an HTMX swap, else the error page; the status is the table's either way."""
    found = refusal(exc)
    if is_htmx(request):
        return htmx_error_line(found.message, found.status)
    title = _TITLES.get(found.status, "Error")
    return render(request, "auth/error.html", found.status, title=title, message=found.message)
