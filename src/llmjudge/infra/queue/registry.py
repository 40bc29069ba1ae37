"""The kinds of work a process runs, by name: each one a runner (a ``WorkerPool`` of a
``WorkKind``, a ``LockedRunner`` job, a job on a ``periodic.Periodic`` loop) that starts,
wakes and stops.

The composition roots (``app.py``, ``llmjudge.worker``) register one runner per kind;
``start()`` starts them in that order and ``stop()`` drains them in reverse.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

__all__ = ["Runner", "Workers"]


class Runner(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def wake(self) -> None: ...


class Workers:
    def __init__(self) -> None:
        self._runners: dict[str, Runner] = {}

    def register(self, name: str, runner: Runner) -> None:
        if name in self._runners:
            raise ValueError(f"a kind of work named {name!r} is registered already")
        self._runners[name] = runner

    def get(self, name: str) -> Runner | None:
        return self._runners.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._runners)

    async def start(self) -> None:
        for runner in self._runners.values():
            await runner.start()

    async def stop(self) -> None:
        # Reverse order: the last registered may feed on the first (none does today).
        for runner in reversed(self._runners.values()):
            await runner.stop()
