"""CSV export that spreadsheets cannot execute (CSV/formula injection, OWASP).

A cell whose text starts with = + - @, a tab or a carriage return is read as a formula by
Excel, LibreOffice and Google Sheets; prefixing a single quote makes it plain text. Numbers
are left alone (a negative score is data, not a formula). Every CSV export uses `write_csv`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["FORMULA_PREFIXES", "provenance_lines", "safe_cell", "write_csv"]

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> str:
    """The cell's text, neutralised: None is empty, numbers as is, formula-like text quoted."""
    if value is None:
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    text = str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def write_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A CSV document (header + one line per row, RFC 4180 quoting) of `columns` of `rows`;
    missing keys are empty cells."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([safe_cell(c) for c in columns])
    writer.writerows([safe_cell(row.get(c)) for c in columns] for row in rows)
    return out.getvalue()


def provenance_lines(provenance: Mapping[str, Any]) -> str:
    """The provenance block of a CSV export: `# key: <JSON value>` lines."""
    intro = (
        "# llmjudge export. Lines starting with # say what produced it; the CSV header "
        "follows (pandas: read_csv(path, comment='#'))."
    )
    lines = [intro] + [
        "# " + key + ": " + json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)
        for key, value in provenance.items()
    ]
    # One line per key: a newline inside a value is already escaped by json.dumps.
    return "\r\n".join(lines) + "\r\n"
