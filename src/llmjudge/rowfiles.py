"""Reading uploaded row files (CSV, JSONL) with errors a person can act on.

Every import (threads, persona training pairs, judgments) validates a whole file before
storing anything; these readers do the shared part: UTF-8, line numbers, size and row
limits, malformed lines. Each error names the file line (CSV: the header is line 1).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Set
from typing import Any

from pydantic import BaseModel, Field

MAX_ERRORS = 200  # enough to fix a file; more would only flood the page


class RowError(BaseModel):
    """One problem in an uploaded file, located by its line so a person can fix it."""

    line: int = Field(description="1-based line number in the file (CSV: counting the header)")
    field: str
    message: str


def decode_text(data: bytes) -> str:
    """UTF-8 (with or without BOM), or a ValueError saying how to fix the file."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"the file is not UTF-8 text (invalid byte at offset {e.start}); "
            "save it as UTF-8 and upload again"
        ) from None


def jsonl_objects(
    text: str, errors: list[RowError], *, max_rows: int, max_chars: int | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; bad lines become errors."""
    count = 0
    for line_no, line in enumerate(text.splitlines(), start=1):
        if len(errors) >= MAX_ERRORS:
            return
        if not line.strip():
            continue
        count += 1
        if count > max_rows:
            errors.append(
                RowError(line=line_no, field="file", message=f"more than {max_rows:,} rows")
            )
            return
        if max_chars is not None and len(line) > max_chars:
            errors.append(
                RowError(
                    line=line_no,
                    field="row",
                    message=f"the line has {len(line):,} characters; the limit is {max_chars:,}",
                )
            )
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as e:
            errors.append(RowError(line=line_no, field="json", message=f"invalid JSON: {e.msg}"))
            continue
        if not isinstance(raw, dict):
            errors.append(
                RowError(line=line_no, field="json", message="each line must be a JSON object")
            )
            continue
        yield line_no, raw


def csv_records(
    text: str,
    errors: list[RowError],
    *,
    required: Set[str],
    allowed: Set[str],
    max_rows: int,
    max_chars: int,
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, record) for each CSV row after checking the header."""
    csv.field_size_limit(max(max_chars * 4, 131072))
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in reader.fieldnames or []]
    except csv.Error as e:
        errors.append(RowError(line=1, field="file", message=f"CSV error: {e}"))
        return
    missing = set(required) - set(header)
    unknown = set(header) - set(allowed)
    if missing or unknown:
        problems = [
            f"{what} column(s): {', '.join(sorted(names))}"
            for what, names in (("missing", missing), ("unknown", unknown))
            if names
        ]
        errors.append(
            RowError(
                line=1,
                field="header",
                message=f"{'; '.join(problems)}; allowed: {', '.join(sorted(allowed))}",
            )
        )
        return
    reader.fieldnames = header
    try:
        for i, rec in enumerate(reader):
            line = reader.line_num
            if i >= max_rows:
                errors.append(
                    RowError(line=line, field="file", message=f"more than {max_rows:,} rows")
                )
                return
            if None in rec:
                errors.append(RowError(line=line, field="row", message="more fields than columns"))
                continue
            yield line, rec
            if len(errors) >= MAX_ERRORS:
                return
    except csv.Error as e:
        errors.append(RowError(line=reader.line_num, field="file", message=f"CSV error: {e}"))
