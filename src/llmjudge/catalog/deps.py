"""Request-bound helpers shared by the catalog API and its pages."""

from __future__ import annotations

import asyncio

from fastapi import UploadFile

from llmjudge.catalog.importing import ParsedFile, parse_thread_file
from llmjudge.infra.config import Settings
from llmjudge.infra.web import spooled_upload


async def parse_upload(upload: UploadFile, settings: Settings) -> ParsedFile:
    """Validate an upload read from its spooled file, never held whole in memory; the
    returned ParsedFile reads it again to store it, within the request."""
    file = spooled_upload(upload, settings)
    # Parsing a large file is CPU work: off the event loop (/healthz keeps answering).
    return await asyncio.to_thread(
        parse_thread_file,
        upload.filename or "",
        file,
        max_rows=settings.max_import_rows,
        max_chars=settings.max_field_chars,
    )
