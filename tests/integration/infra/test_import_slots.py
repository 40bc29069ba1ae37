"""Parallel uploads are limited per process (issue 28, item 2): beyond
LLMJUDGE_MAX_CONCURRENT_IMPORTS running imports, an upload is answered 503 with Retry-After
and a message that names the setting; every upload route holds a slot and declares the 503."""

from __future__ import annotations

import asyncio
import threading
import typing
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, UploadFile
from fastapi.routing import APIRoute, iter_route_contexts

from llmjudge.catalog import deps
from llmjudge.infra.web import hold_import_slot, import_slots

CSV = b"pillar,content\nslots,hello\n"


async def test_a_third_parallel_upload_is_refused_until_one_ends(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert app.state.settings.max_concurrent_imports == 2  # the default
    release = threading.Event()
    entered: list[int] = []
    real_parse = deps.parse_thread_file

    def slow_parse(*args: Any, **kwargs: Any) -> Any:
        entered.append(1)
        release.wait(30)  # holds its slot until the test lets it go
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(deps, "parse_thread_file", slow_parse)

    def upload() -> Any:
        return client.post("/api/threads/import", files={"file": ("t.csv", CSV, "text/csv")})

    running = [asyncio.create_task(upload()) for _ in range(2)]
    try:
        for _ in range(300):
            if len(entered) == 2:
                break
            await asyncio.sleep(0.05)
        assert len(entered) == 2 and import_slots(app).in_use == 2
        busy = await upload()
        page = await client.post("/import", files={"file": ("t.csv", CSV, "text/csv")})
    finally:
        release.set()
        done = await asyncio.gather(*running)
    assert [r.status_code for r in done] == [200, 200], [r.text for r in done]
    assert busy.status_code == 503
    assert busy.headers["retry-after"] == "5"
    assert "LLMJUDGE_MAX_CONCURRENT_IMPORTS=2" in busy.json()["detail"]
    assert page.status_code == 503
    assert import_slots(app).in_use == 0
    again = await upload()  # the slots were given back
    assert again.status_code == 200, again.text


def _upload_routes(app: FastAPI) -> list[tuple[str, APIRoute]]:
    """(full path, route) of every route taking a file, routers included lazily expanded."""
    found = []
    for ctx in iter_route_contexts(app.routes):
        route = ctx.original_route
        if isinstance(route, APIRoute) and any(
            UploadFile in typing.get_args(hint) or hint is UploadFile
            for hint in typing.get_type_hints(route.endpoint, include_extras=True).values()
        ):
            found.append((ctx.path_format or route.path_format, route))
    return found


def test_every_upload_route_holds_a_slot_and_declares_the_503(app: FastAPI) -> None:
    routes = _upload_routes(app)
    assert len(routes) >= 6  # threads, judgments, labels, persona pairs; API and pages
    paths = app.openapi()["paths"]
    for path, route in routes:
        calls = [d.call for d in route.dependant.dependencies]
        assert hold_import_slot in calls, path
        if route.include_in_schema:
            for method in route.methods:
                op = paths[path][method.lower()]
                assert "503" in op["responses"], (path, method)
