"""The generic advisory-locked runner with a toy job registered only here: a key runs in
one process at a time, and a stopped runner's keys are free for another one at once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.queue.locks import LockedRunner
from tests.integration.sessions.test_sessions import wait_for


class Toy:
    name = "toy"
    lock_class = 0x746F79

    def __init__(self, keys: Sequence[int], shared: dict[str, Counter[int]], hold_s: float):
        self.keys = list(keys)
        self.shared = shared
        self.hold_s = hold_s

    async def runnable(self) -> Sequence[int]:
        return [k for k in self.keys if k not in self.shared["done"]]

    async def run(self, key: int, stop: asyncio.Event) -> None:
        if key in self.shared["done"]:  # finished elsewhere since the scan
            return
        active = self.shared["active"]
        active[key] += 1
        self.shared["most"][key] = max(self.shared["most"][key], active[key])
        self.shared["runs"][key] += 1
        try:
            await asyncio.wait_for(stop.wait(), self.hold_s)  # stopped early: not done
        except TimeoutError:
            self.shared["done"][key] += 1
        finally:
            active[key] -= 1


@pytest.fixture(scope="module")
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(db_url, pool_size=12)
    yield engine
    await engine.dispose()


def counters() -> dict[str, Counter[int]]:
    return {"active": Counter(), "most": Counter(), "runs": Counter(), "done": Counter()}


async def test_two_runners_never_run_one_key_at_once(engine: AsyncEngine) -> None:
    shared = counters()
    keys = range(1, 7)
    runners = [
        LockedRunner(engine=engine, job=Toy(keys, shared, 0.3), poll_s=0.05) for _ in range(2)
    ]
    for r in runners:
        await r.start()
    try:

        async def all_done() -> bool:
            return set(shared["done"]) == set(keys)

        await wait_for(all_done)
    finally:
        for r in runners:
            await r.stop()
    assert max(shared["most"].values()) == 1  # never two holders of one key
    assert shared["runs"] == Counter(dict.fromkeys(keys, 1))
    assert all(shared["active"][k] == 0 for k in keys)


async def test_a_stopped_runner_frees_its_keys(engine: AsyncEngine) -> None:
    shared = counters()
    first = LockedRunner(engine=engine, job=Toy([9], shared, 60), poll_s=0.05, drain_s=0.1)
    await first.start()

    async def running() -> bool:
        return first.is_running(9)

    await wait_for(running)
    second = LockedRunner(engine=engine, job=Toy([9], shared, 0.2), poll_s=0.05)
    await second.start()
    try:
        await asyncio.sleep(0.3)
        assert not second.is_running(9) and shared["runs"][9] == 1  # locked by the first
        first.stop_key(9)  # the job returns early: not done, so the other takes it
        await first.wait_key(9)
        await first.stop()

        async def done() -> bool:
            return shared["done"][9] == 1

        await wait_for(done)
    finally:
        await second.stop()
    assert shared["runs"][9] == 2 and shared["most"][9] == 1
