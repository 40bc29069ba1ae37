"""The dependency rule (README, "Architecture"), checked by parsing every module's imports.

A module's layer is read from its path, never from a list of names:

- ``llmjudge.core.*``, the pure core: imports only other core modules and no I/O library, and
  does no file I/O;
- ``llmjudge.infra.*``, infrastructure (and the package ``llmjudge`` itself, which only holds
  the version): imports core and infrastructure, never a domain;
- ``llmjudge.<domain>.*`` for every other package: imports core, infrastructure, its own
  modules, and another domain only through that domain's package, ``llmjudge.<domain>``,
  whose ``__all__`` is its public surface;
- the top-level modules (``app``, ``cli``, ``worker``, ``models``) are the composition roots:
  they import anything, and nothing else imports them.

Pages never import ``api`` modules, in their own domain or another. Every import counts:
module level, inside functions, under ``if TYPE_CHECKING:``, relative, and
``importlib.import_module("...")`` with a literal name.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "llmjudge"

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
    domain: str | None = None  # the top-level package of a domain module


def layer_of(module: str) -> Layer:
    parts = module.split(".")
    if len(parts) == 1:
        return Layer("infra")  # the package itself: only the version
    if parts[1] == "core":
        return Layer("core")
    if parts[1] == "infra":
        return Layer("infra")
    if len(parts) == 2 and not (PKG / parts[1]).is_dir():
        return Layer("root")
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


def is_api(module: str) -> bool:
    return "api" in module.split(".")[2:] or module.rsplit(".", 1)[-1].endswith("_api")


def is_page(module: str) -> bool:
    return "pages" in module.split(".")[2:] or module.rsplit(".", 1)[-1].endswith("_pages")


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
                and imp.target != f"llmjudge.{there.domain}"
            ):
                why = (
                    f"the {here.domain} domain reaches into {there.domain}'s module "
                    f"{imp.target} (import from the package llmjudge.{there.domain})"
                )
            elif is_page(module) and is_api(imp.target):
                why = "a page imports an api module (both call the services)"
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


def test_core_modules_do_no_file_io() -> None:
    """Core modules call neither ``open`` nor ``Path.read_*``/``write_*``."""
    calls = []
    for module, path in all_modules().items():
        if layer_of(module).kind != "core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = (
                f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            )
            if name in {"open", "read_text", "read_bytes", "write_text", "write_bytes"}:
                calls.append(f"{module}:{node.lineno} {name}()")
    assert not calls, calls


def test_the_roots_are_the_top_level_modules() -> None:
    roots = {m for m in KNOWN if layer_of(m).kind == "root"}
    assert roots == {"llmjudge.app", "llmjudge.cli", "llmjudge.worker", "llmjudge.models"}


DOMAINS = sorted(
    p.name
    for p in PKG.iterdir()
    if p.is_dir() and (p / "__init__.py").exists() and p.name not in {"core", "infra"}
)


@pytest.mark.parametrize("domain", DOMAINS)
def test_a_domain_package_declares_its_public_surface(domain: str) -> None:
    """``__all__`` lists exactly what the package exports, and every name in it exists."""
    package = importlib.import_module(f"llmjudge.{domain}")
    names = getattr(package, "__all__", None)
    assert isinstance(names, list | tuple), f"llmjudge.{domain} has no __all__"
    missing = [n for n in names if not hasattr(package, n)]
    assert not missing, missing
    assert len(set(names)) == len(names)


# --- the checker itself flags what it must ------------------------------------------------


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        (
            "llmjudge.infra.queue.pool",
            "from llmjudge.sessions.run.judging import X\n",
            "infrastructure imports the sessions domain",
        ),
        (
            "llmjudge.infra.queue.claims",
            "def f():\n    from llmjudge.sessions import service\n",
            "infrastructure imports the sessions domain",
        ),
        (
            "llmjudge.infra.queue.claims",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from llmjudge.personas import X\n",
            "infrastructure imports the personas domain",
        ),
        (
            "llmjudge.infra.db.engine",
            "import llmjudge.catalog.models\n",
            "imports the catalog domain",
        ),
        (
            "llmjudge.core.tournaments.pairing",
            "from sqlalchemy import select\n",
            "pure core imports the I/O library sqlalchemy",
        ),
        (
            "llmjudge.core.ratings.estimators",
            "from llmjudge.analysis import service\n",
            "pure core imports domain",
        ),
        (
            "llmjudge.core.judging.verdicts",
            "from llmjudge.infra.config import X\n",
            "pure core imports infra",
        ),
        (
            "llmjudge.sessions.service",
            "from llmjudge.analysis.api import get_cache\n",
            "reaches into analysis's module llmjudge.analysis.api",
        ),
        (
            "llmjudge.sessions.service",
            "from llmjudge.providers.service import LLMService\n",
            "reaches into providers's module",
        ),
        (
            "llmjudge.catalog.service",
            "from llmjudge.sessions import service\n",
            "reaches into sessions's module llmjudge.sessions.service",
        ),
        (
            "llmjudge.personas.service",
            "from llmjudge import app\n",
            "only composition roots import composition roots",
        ),
        (
            "llmjudge.infra.queue.pool",
            "from ...sessions.run.judging import X\n",
            "infrastructure imports the sessions domain",
        ),
        (
            "llmjudge.infra.queue.pool",
            "import importlib\nw = importlib.import_module('llmjudge.sessions.run.judging')\n",
            "infrastructure imports the sessions domain",
        ),
        (
            "llmjudge.sessions.pages.live",
            "from llmjudge.sessions.api import router\n",
            "a page imports an api module",
        ),
        (
            "llmjudge.references.review_pages",
            "from llmjudge.references.review_api import X\n",
            "a page imports an api module",
        ),
    ],
)
def test_checker_flags(module: str, source: str, expected: str) -> None:
    found = violations_in(source, module)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("llmjudge.sessions.service", "from llmjudge.providers import LLMService\n"),
        ("llmjudge.sessions.service", "from llmjudge.catalog import Thread\n"),
        ("llmjudge.sessions.api", "from llmjudge.sessions.run.judging import X\n"),
        ("llmjudge.sessions.imports.parsing", "from llmjudge.core.judging import verdicts\n"),
        ("llmjudge.infra.queue.pool", "from llmjudge.infra.events.hub import EventHub\n"),
        ("llmjudge.core.ratings.estimators", "from llmjudge.core.analysis import outcomes\n"),
        ("llmjudge.app", "from llmjudge.sessions import api, pages\n"),
        ("llmjudge.cli", "from llmjudge.infra.queue import pool\n"),
    ],
)
def test_checker_allows(module: str, source: str) -> None:
    assert violations_in(source, module) == []


def test_from_package_import_submodule_resolves_to_the_submodule() -> None:
    [imp] = imports_of("from llmjudge.sessions.run import jobs\n", "llmjudge.infra.queue.pool")
    assert imp.target == "llmjudge.sessions.run.jobs"
    [imp] = imports_of("from . import hub\n", "llmjudge.infra.events", is_package=True)
    assert imp.target == "llmjudge.infra.events.hub"


def test_layers_come_from_the_path() -> None:
    assert layer_of("llmjudge.core.anything.new") == Layer("core")
    assert layer_of("llmjudge.infra.anything") == Layer("infra")
    assert layer_of("llmjudge.sessions.run.jobs") == Layer("domain", "sessions")
    assert layer_of("llmjudge.app") == Layer("root")
