"""Parse and validate a thread file (CSV or JSONL) without touching the database.

All or nothing: the caller stores rows only when `errors` is empty. Two passes over the
file, so memory does not grow with it: validation keeps only what the file-wide checks need
(a 64-bit hash and a line number per row, one prompt per prompt key, the pillar names);
storing reads the rows again (``ParsedFile.iter_rows``), in batches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from pydantic import ValidationError

from llmjudge.catalog.schemas import RowError, ThreadIn
from llmjudge.infra.rowfiles import MAX_ERRORS, file_rows, parse_json_line, unstorable_value

CSV_COLUMNS = {"pillar", "external_id", "title", "prompt_key", "prompt", "content", "metadata"}
# Metadata is for labels and small scores, not documents: a thread's content is bounded
# separately (max_field_chars).
MAX_METADATA_CHARS = 100_000


@dataclass
class ParsedFile:
    """What validation learnt of a file; its rows are read again by :meth:`iter_rows`."""

    errors: list[RowError] = field(default_factory=list)
    total: int = 0  # valid rows
    pillars: set[str] = field(default_factory=set)
    # hash of (pillar, external_id) -> file line: duplicates, and the threads it replaces
    keys: dict[int, int] = field(default_factory=dict)
    # prompt_key -> (its prompt text, file lines of rows that give it; at most MAX_ERRORS)
    prompts: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    filename: str = ""
    data: bytes | IO[bytes] = b""
    max_rows: int = 0
    max_chars: int = 0

    def iter_rows(self) -> Iterator[tuple[int, ThreadIn]]:
        """(file line, row) of every valid row, read again from the file."""
        yield from _valid_rows(self.filename, self.data, [], self.max_rows, self.max_chars)

    @property
    def rows(self) -> list[ThreadIn]:
        return [row for _, row in self.iter_rows()]

    @property
    def lines(self) -> list[int]:
        return [line for line, _ in self.iter_rows()]


def row_key(pillar: str, external_id: str) -> int:
    """A 64-bit key of a thread's identity in an import (8 bytes instead of two strings)."""
    digest = hashlib.blake2b(f"{pillar}\x00{external_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def content_hash(content: Any) -> str:
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _validate(
    raw: dict[str, Any], line: int, errors: list[RowError], max_chars: int
) -> ThreadIn | None:
    meta = raw.get("metadata")
    if meta is not None:
        size = len(json.dumps(meta, ensure_ascii=False, default=str))
        if size > MAX_METADATA_CHARS:
            errors.append(
                RowError(
                    line=line,
                    field="metadata",
                    message=f"metadata has {size:,} characters as JSON; "
                    f"the limit is {MAX_METADATA_CHARS:,}",
                )
            )
            return None
    try:
        row = ThreadIn.model_validate(raw)
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "row"
            errors.append(RowError(line=line, field=loc, message=err["msg"]))
        return None
    size = len(row.prompt or "") + (
        len(row.content)
        if isinstance(row.content, str)
        else sum(len(m.content) for m in row.content)
    )
    if size > max_chars:
        errors.append(
            RowError(
                line=line,
                field="content",
                message=f"content has {size:,} characters; the limit is {max_chars:,}",
            )
        )
        return None
    return row


def _csv_row(rec: dict[str, str], line: int, errors: list[RowError]) -> dict[str, Any] | None:
    """A CSV record as the row a JSONL line gives, or None with its error added to ``out``."""
    raw: dict[str, Any] = {k: v for k, v in rec.items() if v not in (None, "")}
    if "content" not in raw:
        # A CSV cell cannot tell "the model said nothing" from "nothing was filled in":
        # an empty cell is an empty answer only on a row that names its prompt.
        if "prompt" not in raw:
            errors.append(
                RowError(
                    line=line,
                    field="content",
                    message="content must not be empty (an empty answer needs its prompt "
                    "in the prompt column)",
                )
            )
            return None
        raw["content"] = ""
    content = raw["content"]
    # A cell holding a JSON list is a conversation; anything else is plain text.
    if content.lstrip().startswith("["):
        try:
            raw["content"] = parse_json_line(content)
        except ValueError:
            pass
    if "metadata" in raw:
        try:
            raw["metadata"] = parse_json_line(raw["metadata"])
        except ValueError as e:
            errors.append(RowError(line=line, field="metadata", message=f"not JSON: {e}"))
            return None
    problem = unstorable_value(raw)
    if problem is not None:
        errors.append(RowError(line=line, field=problem[0], message=problem[1]))
        return None
    return raw


def _jsonl_row(raw: dict[str, Any]) -> dict[str, Any]:
    if "messages" in raw and "content" not in raw:
        raw["content"] = raw.pop("messages")
    return raw


def _valid_rows(
    filename: str, data: bytes | IO[bytes], errors: list[RowError], max_rows: int, max_chars: int
) -> Iterator[tuple[int, ThreadIn]]:
    """(line, row) of each valid row, its external_id filled in; the others become errors."""
    rows = file_rows(
        filename,
        data,
        errors,
        required={"pillar", "content"},
        allowed=CSV_COLUMNS,
        max_rows=max_rows,
        max_chars=max_chars,
    )
    if rows is None:
        return
    kind, records = rows
    for line, rec in records:
        raw = _csv_row(rec, line, errors) if kind == "csv" else _jsonl_row(rec)
        if raw is None:
            continue
        row = _validate(raw, line, errors, max_chars)
        if row is None:
            continue
        # Without an external_id the content identifies the thread, so re-imports update it.
        if row.external_id is None:
            row.external_id = content_hash(_plain(row.content))[:16]
        yield line, row


def parse_thread_file(
    filename: str, data: bytes | IO[bytes], *, max_rows: int, max_chars: int
) -> ParsedFile:
    """Validate a whole file (its bytes or a binary file, such as a spooled upload, that
    stays open until the rows are stored), keeping only what the file-wide checks need."""
    out = ParsedFile(filename=filename, data=data, max_rows=max_rows, max_chars=max_chars)
    for line, row in _valid_rows(filename, data, out.errors, max_rows, max_chars):
        out.total += 1
        out.pillars.add(row.pillar)
        key = row_key(row.pillar, row.external_id or "")
        first = out.keys.setdefault(key, line)
        if first != line:
            out.errors.append(
                RowError(
                    line=line,
                    field="external_id",
                    message=f"duplicate external_id {row.external_id!r} in pillar {row.pillar!r} "
                    f"(first seen on line {first})",
                )
            )
        if row.prompt is not None and row.prompt_key is not None:
            _check_shared_prompt(out, row.prompt_key, row.prompt, line)
    if not out.total and not out.errors:
        out.errors.append(RowError(line=1, field="file", message="the file has no rows"))
    out.errors.sort(key=lambda e: e.line)
    return out


def _check_shared_prompt(out: ParsedFile, key: str, prompt: str, line: int) -> None:
    """Threads with one prompt key answer one prompt: their prompt texts must agree."""
    seen = out.prompts.setdefault(key, (prompt, []))
    if seen[0] != prompt:
        first = seen[1][0] if seen[1] else line
        out.errors.append(
            RowError(
                line=line,
                field="prompt",
                message=f"prompt_key {key!r} has another prompt text on line "
                f"{first}; threads with one prompt key must share one prompt",
            )
        )
    elif len(seen[1]) < MAX_ERRORS:
        seen[1].append(line)


def _plain(content: Any) -> Any:
    return content if isinstance(content, str) else [m.model_dump() for m in content]


def stored_content(row: ThreadIn) -> Any:
    return _plain(row.content)
