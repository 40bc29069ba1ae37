"""A thread file is validated without holding its rows (issue 28, item 2): what validation
keeps grows by a few dozen bytes a row, not by the parsed rows (about 1.5 KiB each before),
and a spooled upload is read as a file, never whole into memory."""

from __future__ import annotations

import io
import tracemalloc

import pytest

from llmjudge.catalog.importing import parse_thread_file

ROWS = 10_000


def _csv() -> bytes:
    lines = ["pillar,external_id,content"]
    lines += [f"p{i % 10},e{i},Answer number {i} is fine." for i in range(ROWS)]
    return ("\n".join(lines) + "\n").encode()


def _peak_mib(source: bytes | io.BytesIO) -> tuple[float, int]:
    tracemalloc.start()
    try:
        parsed = parse_thread_file("t.csv", source, max_rows=ROWS, max_chars=10_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parsed.errors == []
    return peak / 1_048_576, parsed.total


@pytest.mark.parametrize(
    ("spooled", "limit_mib"),
    [
        # a file read line by line: the keys and line numbers (~100 bytes a row), ~1 MiB
        (True, 2.0),
        # bytes (small internal files): their text and lines besides, ~3 MiB
        (False, 5.0),
    ],
)
def test_validating_holds_no_rows(spooled: bool, limit_mib: float) -> None:
    data = _csv()  # 0.35 MiB; the parsed rows (models, dicts, strings) took 10 MiB
    peak, total = _peak_mib(io.BytesIO(data) if spooled else data)
    assert total == ROWS
    assert peak < limit_mib, f"{peak:.1f} MiB to validate {ROWS:,} rows"


def test_rows_are_read_again_in_order_for_storing() -> None:
    parsed = parse_thread_file("t.csv", io.BytesIO(_csv()), max_rows=ROWS, max_chars=10_000)
    rows = parsed.iter_rows()
    assert [(line, row.external_id) for line, row in (next(rows), next(rows))] == [
        (2, "e0"),
        (3, "e1"),
    ]
    assert sum(1 for _ in rows) == ROWS - 2
