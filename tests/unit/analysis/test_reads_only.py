"""Analysis reads only: no module of `llmjudge.analysis` writes to the database or reaches
for the sessions domain's writers. Parsed, not imported, so a new module is covered the
moment it exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import llmjudge.analysis

ANALYSIS = Path(llmjudge.analysis.__file__).parent
# Methods that change rows (ORM unit of work, raw COPY in), and Core DML called by name
# (`update(...)`, not `dict.update`).
WRITING_METHODS = frozenset(
    {
        "add",
        "add_all",
        "flush",
        "commit",
        "merge",
        "delete",
        "copy_to_table",
        "copy_records_to_table",
    }
)
WRITING_FUNCTIONS = frozenset({"insert", "update", "delete"})
WRITERS = ("llmjudge.sessions.plans", "llmjudge.sessions.imports.storing")
# The stored figures (a cache of what analysis computed, in its own table that nothing else
# reads) are analysis's one write: those two modules write that table and nothing else.
CACHE_MODULES = ("stored.py", "storing.py")
MODULES = sorted(p for p in ANALYSIS.glob("*.py") if p.name not in CACHE_MODULES)


def writes(source: str) -> list[str]:
    """Names of the writing calls and writer imports in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in WRITING_METHODS:
                found.append(f"{f.attr}()")
            elif isinstance(f, ast.Name) and f.id in WRITING_FUNCTIONS:
                found.append(f"{f.id}()")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(WRITERS) or (
                node.module == "sqlalchemy"
                and {a.name for a in node.names} & {"insert", "update", "delete"}
            ):
                found.append(f"from {node.module}")
    return found


def test_the_rule_catches_writes() -> None:
    assert writes("async def f(db):\n    db.add(x)\n    await db.commit()") == [
        "add()",
        "commit()",
    ]
    assert writes("from llmjudge.sessions.plans import insert_plan") == [
        "from llmjudge.sessions.plans"
    ]
    assert writes("from sqlalchemy import select, update") == ["from sqlalchemy"]
    assert writes("update(Comparison).values(x=1)") == ["update()"]
    assert writes("from sqlalchemy import select\nselect(x).where(y)\nsizes.update(z)") == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_analysis_module_reads_only(path: Path) -> None:
    assert writes(path.read_text()) == [], path.name


def test_every_analysis_module_is_checked() -> None:
    names = {p.name for p in MODULES}
    assert {"loading.py", "figures.py", "exports.py", "api.py"} <= names
    assert "service.py" not in names  # the old mixed module (it wrote imports) is gone


@pytest.mark.parametrize("name", CACHE_MODULES)
def test_the_figure_cache_writes_only_its_own_table(name: str) -> None:
    source = (ANALYSIS / name).read_text()
    assert not any(w.startswith("from ") for w in writes(source)), name
    tables = set(re.findall(r"(?:insert|update|delete)\((\w+)", source))
    assert tables <= {"StoredFigure"}, tables
