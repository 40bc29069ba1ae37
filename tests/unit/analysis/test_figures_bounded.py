"""Figure requests are bounded (issue 14): distinct figures asked for at once compute at
most ``max_computing`` at a time, and one key is computed once however many ask."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any

from llmjudge.analysis import cache as figure_cache
from llmjudge.analysis.cache import AnalysisCache


async def test_distinct_figures_wait_for_a_computing_slot(monkeypatch: Any) -> None:
    cache = AnalysisCache(max_computing=2)
    # a running session (a finished one is served from its figures first)
    session: Any = SimpleNamespace(id=1, completed=5, status="running")
    data = SimpleNamespace(version=5)
    monkeypatch.setattr(figure_cache, "_names_only", lambda d: d)  # no real SessionData

    async def load() -> Any:
        return data

    await cache.session(1, 5, load)
    lock = threading.Lock()
    running, peak, calls = 0, 0, 0

    def compute(_data: Any) -> int:
        nonlocal running, peak, calls
        with lock:
            running += 1
            calls += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return 1

    requests = [
        figure_cache.cached_figure(cache, None, session, ("fig", rounds), compute)  # type: ignore[arg-type]
        for rounds in (0, 10, 20, 30, 40, 50)
        for _ in range(3)  # three pollers per key
    ]
    results = await asyncio.gather(*requests)
    assert [r[1] for r in results] == [1] * 18
    assert calls == 6  # one computation per key
    assert peak == 2  # never more than max_computing at once
