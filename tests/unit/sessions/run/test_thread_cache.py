"""The worker's thread cache: bounded in bytes, contents shared by hash, re-imports seen."""

from __future__ import annotations

from typing import Any

import pytest

from llmjudge.core.judging.prompts import thread_body
from llmjudge.sessions.run.judging import ThreadCache, ThreadData


def _t(tid: int, text: str) -> ThreadData:
    return ThreadData(tid, 1, f"t{tid}", text, None)


def test_the_bound_is_in_bytes_not_items() -> None:
    cache = ThreadCache(max_bytes=100_000)
    for tid in range(10):
        cache.put(_t(tid, "x" * 30_000), f"h{tid}")
    assert cache.bytes <= 100_000
    assert len(cache) == 3  # three 30 kB threads fit, a fourth does not
    assert cache.get(9) is not None and cache.get(0) is None
    for tid in range(100, 400):  # small threads: many fit in the same bound
        cache.put(_t(tid, "short"), f"s{tid}")
    assert len(cache) > 250 and cache.bytes <= 100_000


def test_identical_contents_are_held_and_counted_once() -> None:
    cache = ThreadCache(max_bytes=1_000_000)
    text = "y" * 50_000
    cache.put(_t(1, text), "same")
    one = cache.bytes
    cache.put(_t(2, "y" * 50_000), "same")
    assert cache.bytes == one
    a, b = cache.get(1), cache.get(2)
    assert a is not None and b is not None and a.content is b.content
    cache.drop(1)
    assert cache.bytes == one and cache.get(2) is not None
    cache.drop(2)
    assert cache.bytes == 0


class _Rows:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def all(self) -> list[tuple[Any, ...]]:
        return self._rows


class _Conn:
    """Answers the revalidation query with the stored hashes of ``stored``."""

    def __init__(self, stored: dict[int, str]) -> None:
        self.stored = stored
        self.queries = 0

    async def execute(self, stmt: Any) -> _Rows:
        self.queries += 1
        return _Rows(list(self.stored.items()))


async def test_a_reimported_thread_is_dropped_on_revalidation() -> None:
    now = [0.0]
    cache = ThreadCache(revalidate_s=5.0, clock=lambda: now[0])
    cache.put(_t(1, "old text"), "h-old")
    cache.put(_t(2, "kept"), "h2")
    cache.put(_t(3, "deleted"), "h3")
    assert not cache.due()
    now[0] = 5.0
    assert cache.due()
    conn = _Conn({1: "h-new", 2: "h2"})  # 1 re-imported with new content, 3 deleted
    assert await cache.revalidate(conn) == 2  # type: ignore[arg-type]
    assert cache.get(1) is None and cache.get(3) is None
    assert cache.get(2) is not None
    assert not cache.due()


def test_a_thread_body_is_rendered_once_counted_and_renewed_with_its_thread() -> None:
    cache = ThreadCache(max_bytes=1_000_000)
    cache.put(_t(1, "first text </thread_a>"), "h1")
    item = cache.get(1)
    assert item is not None
    before = cache.bytes
    body = cache.body(item)
    assert body == thread_body(item.content, item.title) and "&lt;/thread_a&gt;" in body
    assert cache.body(item) is body  # rendered once
    assert cache.bytes == before + len(body) + 50
    cache.put(_t(1, "re-imported text"), "h2")  # a re-import renders anew
    renewed = cache.get(1)
    assert renewed is not None and "re-imported text" in cache.body(renewed)
    cache.drop(1)
    assert cache.bytes == 0


def test_a_body_counts_against_the_bound_and_an_uncached_thread_is_not_kept() -> None:
    cache = ThreadCache(max_bytes=70_000)
    cache.put(_t(1, "x" * 30_000), "h1")
    cache.put(_t(2, "y" * 30_000), "h2")
    two = cache.get(2)
    assert two is not None
    cache.body(two)  # 30 kB more: the least recently used thread goes
    assert cache.bytes <= 70_000 and cache.get(1) is None and cache.get(2) is not None
    stray = _t(9, "never cached")
    assert "never cached" in cache.body(stray) and cache.get(9) is None
    assert cache.bytes <= 70_000


def test_a_malformed_thread_body_raises_like_the_prompt() -> None:
    cache = ThreadCache()
    bad = ThreadData(3, 1, "t", [{"role": "user"}], None)
    cache.put(bad)
    item = cache.get(3)
    assert item is not None
    with pytest.raises(ValueError, match="thread message 0"):
        cache.body(item)
