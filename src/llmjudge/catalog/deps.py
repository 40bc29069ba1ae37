"""Request-bound helpers shared by the catalog API and its pages."""

from __future__ import annotations

import asyncio

from fastapi import UploadFile

from llmjudge.catalog.importing import ParsedFile, parse_thread_file
from llmjudge.infra.config import Settings
from llmjudge.infra.web import read_upload


async def parse_upload(upload: UploadFile, settings: Settings) -> ParsedFile:
    data = await read_upload(upload, settings)
    # Parsing a large file is CPU work: off the event loop (/healthz keeps answering).
    return await asyncio.to_thread(
        parse_thread_file,
        upload.filename or "",
        data,
        max_rows=settings.max_import_rows,
        max_chars=settings.max_field_chars,
    )
