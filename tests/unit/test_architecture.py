"""The dependency rule (README, "Architecture"), checked by parsing every module's imports.

Layers, bottom up:

- pure core (``CORE``, listed by name): imports only other core modules and no I/O library;
- infrastructure (``INFRA_PACKAGES``, ``INFRA_MODULES``): imports core and infrastructure, never
  a domain;
- domains (every other package under ``llmjudge``, plus ``ROOT_LEVEL_DOMAIN``): import core,
  infrastructure, their own modules, and another domain only through its public modules
  (``PUBLIC``: service, schemas, models, base, importing, plus what ``EXTRA_PUBLIC``
  declares for it) or its core modules; never its ``api``, ``pages`` or internals (worker,
  gateway, simulator, training, middleware...);
- composition roots (``ROOTS``): import anything; nothing else imports them.

Every import counts: module level, inside functions, under ``if TYPE_CHECKING:``, relative,
and ``importlib.import_module("...")`` with a literal name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "llmjudge"

ROOTS = frozenset({"llmjudge.app", "llmjudge.cli", "llmjudge.worker", "llmjudge.models"})
# Named in the rule before they exist (the worker entry, advisory locks), so they land in place.
NOT_YET = frozenset({"llmjudge.worker", "llmjudge.locks"})

# Pure functions only: no database, network, files or web framework, and no domain state.
CORE = frozenset(
    {
        "llmjudge.judging.prompts",
        "llmjudge.judging.verdicts",
        "llmjudge.judging.panels",
        "llmjudge.judging.formats",
        "llmjudge.sessions.adaptive",
        "llmjudge.sessions.adaptive_sim",
        "llmjudge.personas.splits",
        "llmjudge.personas.similarity",
        "llmjudge.sessions.pairing",
        "llmjudge.sessions.estimate",
        "llmjudge.sessions.converters",
        "llmjudge.analysis.outcomes",
        "llmjudge.analysis.ratings",
        "llmjudge.analysis.leaderboard",
        "llmjudge.analysis.position",
        "llmjudge.analysis.performance",
        "llmjudge.analysis.findings",
        "llmjudge.analysis.quality",
        "llmjudge.analysis.scales",
        "llmjudge.analysis.style",
        "llmjudge.analysis.ties",
        "llmjudge.analysis.rating_report",
        "llmjudge.analysis.style_report",
        "llmjudge.analysis.categories",
        "llmjudge.analysis.agreement",  # numpy only: personas read people's agreement
        "llmjudge.personas.metrics",
        "llmjudge.personas.gate",
        "llmjudge.personas.templates",
        "llmjudge.personas.replies",
        "llmjudge.personas.convergence",
        "llmjudge.personas.keys",
        "llmjudge.auth.policy",
        "llmjudge.references.review_rules",
        "llmjudge.charts",
        "llmjudge.csvsafe",
        "llmjudge.textview",
    }
)

INFRA_PACKAGES = frozenset({"llmjudge.db", "llmjudge.queue", "llmjudge.events", "llmjudge.locks"})
INFRA_MODULES = frozenset(
    {
        "llmjudge",  # the package itself: only the version
        "llmjudge.config",
        "llmjudge.errors",
        "llmjudge.rowfiles",
        "llmjudge.web",
    }
)

# Top-level modules that belong to no package: each is a domain of its own (the home page).
ROOT_LEVEL_DOMAIN = frozenset({"llmjudge.pages"})

# What one domain may import from another (besides its core modules).
PUBLIC = frozenset({"service", "schemas", "models", "base", "importing"})
# A domain whose service is cut into job-named modules declares those here, by name.
# The analysis domain's read services: other domains' pages show their figures.
EXTRA_PUBLIC: dict[str, frozenset[str]] = {
    "analysis": frozenset({"figures", "loading"}),
    # The agreement report, read by the sessions' Results tab.
    "references": frozenset({"agreement_report"}),
}

# Libraries that talk to a database, the network or the web: never in the pure core.
IO_LIBRARIES = frozenset(
    {
        "aiohttp",
        "alembic",
        "asyncpg",
        "fastapi",
        "http",
        "httpx",
        "jinja2",
        "multiprocessing",
        "pgserver",
        "psycopg",
        "psycopg2",
        "requests",
        "socket",
        "sqlalchemy",
        "sqlite3",
        "starlette",
        "subprocess",
        "urllib3",
        "uvicorn",
        "uvloop",
    }
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


KNOWN = frozenset(all_modules())


@dataclass(frozen=True)
class Layer:
    kind: str  # "root", "core", "infra" or "domain"
    domain: str | None = None  # the package a domain (or core) module belongs to


def layer_of(module: str) -> Layer:
    parts = module.split(".")
    domain = parts[1] if len(parts) > 2 else None
    if module in ROOTS:
        return Layer("root")
    if module in CORE:
        return Layer("core", domain)
    if module in INFRA_MODULES or any(
        module == p or module.startswith(p + ".") for p in INFRA_PACKAGES
    ):
        return Layer("infra")
    if module in ROOT_LEVEL_DOMAIN:
        return Layer("domain", parts[1])
    if len(parts) == 2 and module in KNOWN and not (PKG / parts[1]).is_dir():
        raise AssertionError(
            f"{module} is a top-level module no layer claims: add it to ROOTS, CORE, "
            "INFRA_MODULES or ROOT_LEVEL_DOMAIN in tests/unit/test_architecture.py"
        )
    return Layer("domain", parts[1])


_DYNAMIC = frozenset({"import_module", "__import__"})


@dataclass(frozen=True)
class Import:
    target: str
    line: int


def imports_of(source: str, module: str, *, is_package: bool = False) -> list[Import]:
    """Every module ``source`` imports, wherever the statement is (functions, TYPE_CHECKING).

    ``from a.b import c`` counts as importing ``a.b.c`` when that is a module, else ``a.b``.
    Each (target, line) once.
    """
    found: dict[tuple[str, int], Import] = {}
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.name, node.lineno] = Import(alias.name, node.lineno)
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC)
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            # importlib.import_module("llmjudge.x") is an import too, just a quieter one.
            name = node.args[0].value
            found[name, node.lineno] = Import(name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                parent = ".".join([*base, node.module] if node.module else base)
            else:
                parent = node.module or ""
            for alias in node.names:
                child = f"{parent}.{alias.name}"
                target = child if child in KNOWN else parent
                found[target, node.lineno] = Import(target, node.lineno)
    return list(found.values())


def is_public(module: str) -> bool:
    """A domain's public module: ``<domain>.<public name>`` (or inside a public package, such
    as a ``service/`` split in parts), never anything under ``api`` or ``pages``."""
    parts = module.split(".")
    inner = parts[2:]
    public = PUBLIC | EXTRA_PUBLIC.get(parts[1], frozenset())
    return bool(inner) and inner[0] in public and not {"api", "pages"} & set(inner)


def violations_in(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """The rule's violations in one module's source, each as 'module:line -> target: why'."""
    here = layer_of(module)
    out: list[str] = []
    for imp in imports_of(source, module, is_package=is_package):
        top = imp.target.split(".")[0]
        why: str | None = None
        if top != "llmjudge":
            if here.kind == "core" and top in IO_LIBRARIES:
                why = f"pure core imports the I/O library {top}"
        elif here.kind == "root":
            why = None
        else:
            there = layer_of(imp.target)
            if there.kind == "root":
                why = "only composition roots import composition roots"
            elif here.kind == "core" and there.kind != "core":
                why = f"pure core imports {there.kind} (core imports only core)"
            elif here.kind == "infra" and there.kind == "domain":
                why = f"infrastructure imports the {there.domain} domain"
            elif (
                here.kind == "domain"
                and there.kind == "domain"
                and there.domain != here.domain
                and not is_public(imp.target)
            ):
                why = (
                    f"the {here.domain} domain reaches into {there.domain}'s private "
                    f"module (only {', '.join(sorted(PUBLIC))} or core modules are public)"
                )
        if why:
            out.append(f"{module}:{imp.line} -> {imp.target}: {why}")
    return out


def all_violations() -> list[str]:
    out: list[str] = []
    for module, path in all_modules().items():
        out.extend(violations_in(path.read_text(), module, is_package=path.name == "__init__.py"))
    return out


# --- the real tree --------------------------------------------------------------------------


def test_the_tree_follows_the_dependency_rule() -> None:
    found = all_violations()
    assert not found, "dependency rule broken:\n" + "\n".join(found)


def test_every_listed_module_exists() -> None:
    # A renamed core or root module must be renamed here too, or the rule silently stops
    # applying to it.
    missing = sorted((CORE | INFRA_MODULES | ROOT_LEVEL_DOMAIN | ROOTS) - KNOWN - NOT_YET)
    assert not missing, missing


def test_core_modules_do_no_file_io() -> None:
    """Core modules call neither ``open`` nor ``Path.read_*``/``write_*``."""
    calls = []
    for module in sorted(CORE):
        tree = ast.parse(all_modules()[module].read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = (
                f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            )
            if name in {"open", "read_text", "read_bytes", "write_text", "write_bytes"}:
                calls.append(f"{module}:{node.lineno} {name}()")
    assert not calls, calls


def test_every_module_has_a_layer() -> None:
    for module in KNOWN:
        assert layer_of(module).kind in {"root", "core", "infra", "domain"}


# --- the checker itself flags what it must ------------------------------------------------


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        (
            "llmjudge.queue.pool",
            "from llmjudge.sessions.worker import X\n",
            "infrastructure imports the sessions domain",
        ),
        (
            "llmjudge.queue.claims",
            "def f():\n    from llmjudge.sessions import service\n",
            "infrastructure imports the sessions domain",
        ),
        (
            "llmjudge.queue.claims",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from llmjudge.personas.training import TrainingRunner\n",
            "infrastructure imports the personas domain",
        ),
        ("llmjudge.db.engine", "import llmjudge.catalog.models\n", "imports the catalog domain"),
        (
            "llmjudge.sessions.pairing",
            "from sqlalchemy import select\n",
            "pure core imports the I/O library sqlalchemy",
        ),
        (
            "llmjudge.analysis.ratings",
            "from llmjudge.analysis import service\n",
            "pure core imports domain",
        ),
        ("llmjudge.judging.verdicts", "from llmjudge.config import X\n", "pure core imports infra"),
        (
            "llmjudge.sessions.service",
            "from llmjudge.analysis.api import get_cache\n",
            "reaches into analysis's private module",
        ),
        (
            "llmjudge.sessions.service",
            "from llmjudge.providers.simulator import SimulatorParams\n",
            "reaches into providers's private module",
        ),
        (
            "llmjudge.catalog.service",
            "from llmjudge.personas.pages.schemas import X\n",
            "reaches into personas's private module",
        ),
        (
            "llmjudge.catalog.service",
            "from llmjudge import sessions\n",
            "reaches into sessions's private module",
        ),
        (
            "llmjudge.personas.service",
            "from llmjudge import app\n",
            "only composition roots import composition roots",
        ),
        (
            "llmjudge.queue.pool",
            "from ..sessions.worker import X\n",
            "infrastructure imports the sessions domain",
        ),
        (
            "llmjudge.queue.pool",
            "import importlib\nw = importlib.import_module('llmjudge.sessions.worker')\n",
            "infrastructure imports the sessions domain",
        ),
        (
            "llmjudge.events.hub",
            "import llmjudge.personas.training as t\n",
            "infrastructure imports the personas domain",
        ),
    ],
)
def test_checker_flags(module: str, source: str, expected: str) -> None:
    found = violations_in(source, module)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("llmjudge.sessions.service", "from llmjudge.providers import service\n"),
        ("llmjudge.sessions.service", "from llmjudge.catalog.models import Thread\n"),
        ("llmjudge.personas.api", "from llmjudge.sessions.schemas import SessionOut\n"),
        ("llmjudge.sessions.importing", "from llmjudge.judging.verdicts import parse_verdict\n"),
        ("llmjudge.sessions.api", "from llmjudge.sessions.worker import X\n"),
        ("llmjudge.queue.pool", "from llmjudge.events.hub import EventHub\n"),
        ("llmjudge.analysis.ratings", "from llmjudge.analysis.outcomes import Outcome\n"),
        ("llmjudge.app", "from llmjudge.sessions import api, pages\n"),
        ("llmjudge.cli", "from llmjudge.queue import pool\n"),
    ],
)
def test_checker_allows(module: str, source: str) -> None:
    assert violations_in(source, module) == []


def test_from_package_import_submodule_resolves_to_the_submodule() -> None:
    [imp] = imports_of("from llmjudge.sessions import worker\n", "llmjudge.queue.pool")
    assert imp.target == "llmjudge.sessions.worker"
    [imp] = imports_of("from . import hub\n", "llmjudge.events", is_package=True)
    assert imp.target == "llmjudge.events.hub"
