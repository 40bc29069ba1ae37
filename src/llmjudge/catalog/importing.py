"""Parse and validate a thread file (CSV or JSONL) without touching the database.

All or nothing: the caller stores rows only when `errors` is empty.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from llmjudge.catalog.schemas import RowError, ThreadIn
from llmjudge.infra.rowfiles import file_rows, parse_json_line, unstorable_value

CSV_COLUMNS = {"pillar", "external_id", "title", "prompt_key", "prompt", "content", "metadata"}
# Metadata is for labels and small scores, not documents: a thread's content is bounded
# separately (max_field_chars).
MAX_METADATA_CHARS = 100_000


@dataclass
class ParsedFile:
    rows: list[ThreadIn] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # file line of each row, for messages
    errors: list[RowError] = field(default_factory=list)


def content_hash(content: Any) -> str:
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _validate(raw: dict[str, Any], line: int, out: ParsedFile, max_chars: int) -> None:
    meta = raw.get("metadata")
    if meta is not None:
        size = len(json.dumps(meta, ensure_ascii=False, default=str))
        if size > MAX_METADATA_CHARS:
            out.errors.append(
                RowError(
                    line=line,
                    field="metadata",
                    message=f"metadata has {size:,} characters as JSON; "
                    f"the limit is {MAX_METADATA_CHARS:,}",
                )
            )
            return
    try:
        row = ThreadIn.model_validate(raw)
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "row"
            out.errors.append(RowError(line=line, field=loc, message=err["msg"]))
        return
    size = len(row.prompt or "") + (
        len(row.content)
        if isinstance(row.content, str)
        else sum(len(m.content) for m in row.content)
    )
    if size > max_chars:
        out.errors.append(
            RowError(
                line=line,
                field="content",
                message=f"content has {size:,} characters; the limit is {max_chars:,}",
            )
        )
        return
    out.rows.append(row)
    out.lines.append(line)


def _csv_row(rec: dict[str, str], line: int, out: ParsedFile) -> dict[str, Any] | None:
    """A CSV record as the row a JSONL line gives, or None with its error added to ``out``."""
    raw: dict[str, Any] = {k: v for k, v in rec.items() if v not in (None, "")}
    if "content" not in raw:
        # A CSV cell cannot tell "the model said nothing" from "nothing was filled in":
        # an empty cell is an empty answer only on a row that names its prompt.
        if "prompt" not in raw:
            out.errors.append(
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
            out.errors.append(RowError(line=line, field="metadata", message=f"not JSON: {e}"))
            return None
    problem = unstorable_value(raw)
    if problem is not None:
        out.errors.append(RowError(line=line, field=problem[0], message=problem[1]))
        return None
    return raw


def _jsonl_row(raw: dict[str, Any]) -> dict[str, Any]:
    if "messages" in raw and "content" not in raw:
        raw["content"] = raw.pop("messages")
    return raw


def parse_thread_file(filename: str, data: bytes, *, max_rows: int, max_chars: int) -> ParsedFile:
    out = ParsedFile()
    rows = file_rows(
        filename,
        data,
        out.errors,
        required={"pillar", "content"},
        allowed=CSV_COLUMNS,
        max_rows=max_rows,
        max_chars=max_chars,
    )
    if rows is None:
        return out
    kind, records = rows
    for line, rec in records:
        raw = _csv_row(rec, line, out) if kind == "csv" else _jsonl_row(rec)
        if raw is not None:
            _validate(raw, line, out, max_chars)
    if not out.rows and not out.errors:
        out.errors.append(RowError(line=1, field="file", message="the file has no rows"))
    # Without an external_id the content identifies the thread, so re-imports update it.
    seen: dict[tuple[str, str], int] = {}
    for row, line in zip(out.rows, out.lines, strict=True):
        if row.external_id is None:
            row.external_id = content_hash(_plain(row.content))[:16]
        key = (row.pillar, row.external_id)
        if key in seen:
            out.errors.append(
                RowError(
                    line=line,
                    field="external_id",
                    message=f"duplicate external_id {row.external_id!r} in pillar {row.pillar!r} "
                    f"(first seen on line {seen[key]})",
                )
            )
        else:
            seen[key] = line
    _check_shared_prompts(out)
    return out


def _check_shared_prompts(out: ParsedFile) -> None:
    """Threads with one prompt key answer one prompt: their prompt texts must agree."""
    first: dict[str, tuple[str, int]] = {}
    for row, line in zip(out.rows, out.lines, strict=True):
        if row.prompt is None or row.prompt_key is None:
            continue
        seen = first.setdefault(row.prompt_key, (row.prompt, line))
        if seen[0] != row.prompt:
            out.errors.append(
                RowError(
                    line=line,
                    field="prompt",
                    message=f"prompt_key {row.prompt_key!r} has another prompt text on line "
                    f"{seen[1]}; threads with one prompt key must share one prompt",
                )
            )


def _plain(content: Any) -> Any:
    return content if isinstance(content, str) else [m.model_dump() for m in content]


def stored_content(row: ThreadIn) -> Any:
    return _plain(row.content)
