"""Reading uploaded row files (CSV, JSONL) with errors a person can act on.

Every import (threads, persona training pairs, judgments) validates a whole file before
storing anything; these readers do the shared part: UTF-8, line numbers, size and row
limits, malformed lines. Each error names the file line (CSV: the header is line 1).
They read on past the first problems so that every one is counted; ``rejection`` lists the
first ``MAX_ERRORS`` and says the total.

What PostgreSQL (or UTF-8) cannot store is refused here, per line, naming the field: NUL
characters, lone UTF-16 surrogates, JSON nested deeper than ``MAX_JSON_DEPTH``, integers
too long to convert, duplicate JSON keys or CSV columns, unterminated CSV quotes. JSONL lines
end at ``\n`` only: U+2028 and friends are ordinary characters inside a JSON string.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import json
import re
from collections.abc import Iterable, Iterator, Sequence, Set
from dataclasses import dataclass
from typing import IO, Annotated, Any, Literal

from fastapi import File, UploadFile
from pydantic import BaseModel, Field

MAX_ERRORS = 200  # listed: enough to fix a file; more would only flood the page
# Deeper than any real conversation or metadata; bounds the cost of every later walk.
MAX_JSON_DEPTH = 64
# NUL: PostgreSQL text and jsonb refuse it. Lone surrogates: not characters; UTF-8 refuses.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def unstorable_text(value: str) -> str | None:
    """Why ``value`` cannot be stored as PostgreSQL text, or None."""
    m = _UNSTORABLE.search(value)
    if m is None:
        return None
    if m.group() == "\x00":
        return "holds a NUL character (\\u0000), which the database cannot store"
    return "holds a lone UTF-16 surrogate, which is not a character"


def storable_text(value: str) -> str:
    """``value`` with NUL and lone surrogates replaced by U+FFFD (for text we must keep,
    such as a model's answer, rather than refuse)."""
    return _UNSTORABLE.sub("\ufffd", value)


def unstorable_value(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> tuple[str, str] | None:
    """(dotted path, reason) of the first part of a JSON value that cannot be stored, or None.

    Iterative, so a deep value costs no recursion; strings and keys are both checked."""
    stack: list[tuple[Any, tuple[str, ...], int]] = [(value, (), 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth > max_depth:
            return ".".join(path) or "row", f"nested deeper than {max_depth} levels"
        if isinstance(item, str):
            reason = unstorable_text(item)
            if reason is not None:
                return ".".join(path) or "row", reason
        elif isinstance(item, dict):
            for key, child in item.items():
                reason = unstorable_text(key)
                if reason is not None:
                    return ".".join((*path, _printable(key))), f"a key {reason}"
                stack.append((child, (*path, key), depth + 1))
        elif isinstance(item, list):
            stack.extend((child, (*path, str(i)), depth + 1) for i, child in enumerate(item))
    return None


def _printable(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode("utf-8", "backslashreplace")


def parse_json_line(line: str) -> Any:
    """``json.loads`` for one uploaded value; ValueError with a message a person can act on."""
    try:
        return json.loads(line, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as e:
        raise ValueError(f"duplicate key {_printable(e.args[0])!r}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON: {e.msg}") from None
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise ValueError(f"invalid JSON: {str(e).split(';')[0]}") from None


class RowError(BaseModel):
    """One problem in an uploaded file, located by its line so a person can fix it."""

    line: int = Field(description="1-based line number in the file (CSV: counting the header)")
    field: str
    message: str


@dataclass(frozen=True)
class Rejection:
    """What a refused upload answers (API and page alike): how many problems it has, the
    first ``MAX_ERRORS`` of them, and a message saying when that list is cut."""

    message: str
    errors: list[RowError]
    total: int

    def detail(self) -> dict[str, Any]:
        """The 422 answer's ``detail`` (``RowErrorsDetail``)."""
        return {
            "message": self.message,
            "errors": [e.model_dump() for e in self.errors],
            "total": self.total,
        }


def rejection(errors: Sequence[RowError], outcome: str = "nothing was stored") -> Rejection:
    """The rejection of an upload with ``errors`` (all of them: the readers count every
    problem, and only this cuts the list); ``outcome`` says what happened to the file."""
    total = len(errors)
    if total > MAX_ERRORS:
        message = f"{total:,} problems; the first {MAX_ERRORS} are listed; {outcome}"
    else:
        message = f"{total:,} problem(s) found; {outcome}"
    return Rejection(message=message, errors=list(errors[:MAX_ERRORS]), total=total)


# An import route's file field, and its 422 (infra.web.ImportRejected) in the OpenAPI
# document: every import reads and answers a row file the same way.
RowFile = Annotated[UploadFile, File(description="CSV or JSONL")]
ROW_ERRORS: dict[int | str, dict[str, Any]] = {
    422: {"description": "Row errors: `detail.errors` is a list of {line, field, message}"}
}


def compared_with_itself(line: int, thread_id: int) -> RowError:
    """The error of a row that pairs a thread with itself (judgments and reference labels)."""
    return RowError(
        line=line, field="thread_b", message=f"thread {thread_id} is compared with itself"
    )


def decode_text(data: bytes) -> str:
    """UTF-8 (with or without BOM), or a ValueError saying how to fix the file."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"the file is not UTF-8 text (invalid byte at offset {e.start}); "
            "save it as UTF-8 and upload again"
        ) from None


FileKind = Literal["csv", "jsonl"]
_SUFFIXES: dict[FileKind, tuple[str, ...]] = {
    "jsonl": (".jsonl", ".ndjson", ".json"),
    "csv": (".csv", ".txt"),
}


def file_kind(
    filename: str | None, errors: list[RowError], kinds: tuple[FileKind, ...] = ("csv", "jsonl")
) -> FileKind | None:
    """The kind from the file name's suffix (without a name, the first of ``kinds``); None
    with a line-1 file error when it is none of them."""
    kind: FileKind | None = kinds[0]
    if filename is not None:
        name = filename.lower()
        kind = next((k for k in kinds if name.endswith(_SUFFIXES[k])), None)
    if kind is None:
        wanted = " or ".join(f".{k}" for k in kinds)
        errors.append(
            RowError(line=1, field="file", message=f"unsupported file type: upload {wanted}")
        )
    return kind


def read_upload(
    filename: str | None,
    data: bytes,
    errors: list[RowError],
    kinds: tuple[FileKind, ...] = ("csv", "jsonl"),
) -> tuple[FileKind, str] | None:
    """(kind, text) of an upload: the kind by :func:`file_kind`, the text decoded by
    :func:`decode_text`. None when it cannot be read, with the reason added to ``errors``
    as a line-1 file error."""
    kind = file_kind(filename, errors, kinds)
    if kind is None:
        return None
    try:
        return kind, decode_text(data)
    except ValueError as e:
        errors.append(RowError(line=1, field="file", message=str(e)))
        return None


_CHUNK = 1 << 20


def check_utf8(file: IO[bytes]) -> str | None:
    """Why a binary file is not UTF-8 text (:func:`decode_text`'s message), or None; reads
    it in 1 MiB chunks, so a large file costs no memory, and rewinds it."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    file.seek(0)
    try:
        while True:
            chunk = file.read(_CHUNK)
            held = len(decoder.getstate()[0])  # bytes of a character cut by the last chunk
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                return (
                    f"the file is not UTF-8 text (invalid byte at offset {offset - held + e.start}); "
                    "save it as UTF-8 and upload again"
                )
            if not chunk:
                return None
            offset += len(chunk)
    finally:
        file.seek(0)


@contextlib.contextmanager
def text_lines(file: IO[bytes], kind: FileKind) -> Iterator[Iterable[str]]:
    """The lines of a UTF-8 (BOM or not) binary file, read as they are used: JSONL lines
    end at ``\n`` only; CSV lines as the csv module wants them (``newline=""``). The file
    stays open (it is read twice: validation, then storing)."""
    file.seek(0)
    wrapper = io.TextIOWrapper(
        file,  # type: ignore[arg-type]
        encoding="utf-8-sig",
        newline="\n" if kind == "jsonl" else "",
    )
    # One read per MiB, not per 8 KiB: each read of a file on disk lets go of the GIL and the
    # parsing thread takes it straight back, thousands of times a second, which starves the
    # event loop (a large upload stalled /healthz for seconds). A BufferedReader in between
    # would not help: its read1 of an empty buffer reads just what TextIOWrapper asks for.
    wrapper._CHUNK_SIZE = _CHUNK  # type: ignore[attr-defined]
    try:
        yield wrapper
    finally:
        wrapper.detach()  # closing the wrapper would close the upload


def jsonl_objects(
    text: str | Iterable[str],
    errors: list[RowError],
    *,
    max_rows: int,
    max_chars: int | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line of a text or of lines read as
    they come (:func:`text_lines`); bad lines become errors."""
    count = 0
    # split("\n"), not splitlines(): U+2028, U+0085 and friends may sit inside a string.
    lines = text.split("\n") if isinstance(text, str) else text
    for line_no, line in enumerate(lines, start=1):
        line = line.removesuffix("\n").removesuffix("\r")
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
            raw = parse_json_line(line)
        except ValueError as e:
            errors.append(RowError(line=line_no, field="json", message=str(e)))
            continue
        if not isinstance(raw, dict):
            errors.append(
                RowError(line=line_no, field="json", message="each line must be a JSON object")
            )
            continue
        problem = unstorable_value(raw)
        if problem is not None:
            errors.append(RowError(line=line_no, field=problem[0], message=problem[1]))
            continue
        yield line_no, raw


def csv_records(
    text: str | Iterable[str],
    errors: list[RowError],
    *,
    required: Set[str],
    allowed: Set[str],
    max_rows: int,
    max_chars: int,
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, record) for each CSV row after checking the header."""
    csv.field_size_limit(max(max_chars * 4, 131072))
    # strict: an unterminated quote is an error, not a cell swallowing the rest of the file.
    lines = io.StringIO(text, newline="") if isinstance(text, str) else text
    reader = csv.DictReader(lines, strict=True)
    try:
        header = [h.strip() for h in reader.fieldnames or []]
    except csv.Error as e:
        errors.append(RowError(line=1, field="file", message=f"CSV error: {e}"))
        return
    twice = sorted({h for h in header if header.count(h) > 1})
    if twice:
        errors.append(
            RowError(line=1, field="header", message=f"duplicate column(s): {', '.join(twice)}")
        )
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
    last_end = reader.line_num  # the record that fails starts on the line after this
    try:
        for i, rec in enumerate(reader):
            line = last_end + 1
            last_end = reader.line_num
            if i >= max_rows:
                errors.append(
                    RowError(line=line, field="file", message=f"more than {max_rows:,} rows")
                )
                return
            if None in rec:
                errors.append(RowError(line=line, field="row", message="more fields than columns"))
                continue
            bad = next(
                ((k, r) for k, v in rec.items() if v and (r := unstorable_text(v)) is not None),
                None,
            )
            if bad is not None:
                errors.append(RowError(line=line, field=bad[0], message=f"{bad[0]} {bad[1]}"))
                continue
            yield line, rec
    except csv.Error as e:
        hint = "; a quoted cell is never closed" if "unexpected end" in str(e) else ""
        errors.append(RowError(line=last_end + 1, field="file", message=f"CSV error: {e}{hint}"))


def file_rows(
    filename: str | None,
    data: bytes | IO[bytes],
    errors: list[RowError],
    *,
    required: Set[str],
    allowed: Set[str],
    max_rows: int,
    max_chars: int,
    jsonl_max_chars: int | None = None,
    kinds: tuple[FileKind, ...] = ("csv", "jsonl"),
) -> tuple[FileKind, Iterator[tuple[int, dict[str, Any]]]] | None:
    """The kind of an upload of one of ``kinds`` and its (line number, row) pairs: JSONL
    objects (lines up to ``jsonl_max_chars``) or CSV records, whose cells are strings for the
    caller to convert. None when the file cannot be read, the reason added to ``errors``.

    ``data`` is the file's bytes or a binary file (a spooled upload): a file is read line
    by line as the rows are used, so only the current row is held, and may be read again
    by calling this again."""
    if isinstance(data, bytes):
        upload = read_upload(filename, data, errors, kinds)
        if upload is None:
            return None
        kind, text = upload
        return kind, _rows(
            kind, text, errors, required, allowed, max_rows, max_chars, jsonl_max_chars
        )
    kind = file_kind(filename, errors, kinds)
    if kind is None:
        return None
    problem = check_utf8(data)
    if problem is not None:
        errors.append(RowError(line=1, field="file", message=problem))
        return None

    def streamed() -> Iterator[tuple[int, dict[str, Any]]]:
        with text_lines(data, kind) as lines:
            yield from _rows(
                kind, lines, errors, required, allowed, max_rows, max_chars, jsonl_max_chars
            )

    return kind, streamed()


def _rows(
    kind: FileKind,
    text: str | Iterable[str],
    errors: list[RowError],
    required: Set[str],
    allowed: Set[str],
    max_rows: int,
    max_chars: int,
    jsonl_max_chars: int | None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    if kind == "jsonl":
        return jsonl_objects(text, errors, max_rows=max_rows, max_chars=jsonl_max_chars)
    return csv_records(
        text, errors, required=required, allowed=allowed, max_rows=max_rows, max_chars=max_chars
    )
