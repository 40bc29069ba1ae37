"""A domain package's public surface, imported on first use.

Domains import each other through their packages (``from llmjudge.sessions import X``), and
some depend on each other both ways (references reads sessions' comparisons; sessions reads
reference labels). Eager imports in the packages' ``__init__`` would turn such a pair into an
import error that depends on which package a process imports first; a module ``__getattr__``
(PEP 562) loads each name from its module when it is first asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def public(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], Any]]:
    """``__all__`` and the module ``__getattr__`` of ``package``, from {module: names}."""
    where = {name: module for module, names in exports.items() for name in names}
    if len(where) != sum(len(names) for names in exports.values()):
        raise ValueError(f"{package} exports a name twice")

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    return sorted(where), __getattr__
