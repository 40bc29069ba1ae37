"""Load the shipped demo data set (MT-Bench subset) through the normal import path."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import ImportResult, parse_thread_file, store_import

DEMO_FILE = Path(__file__).with_name("mtbench_demo.jsonl")


async def load_demo(*, db: AsyncSession) -> ImportResult:
    parsed = parse_thread_file(
        DEMO_FILE.name, DEMO_FILE.read_bytes(), max_rows=10_000, max_chars=1_000_000
    )
    assert not parsed.errors, parsed.errors  # shipped data; a failure here is our bug
    return await store_import(db=db, parsed=parsed)
