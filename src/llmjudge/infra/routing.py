"""405 answers that tell the truth: every method the path supports, and literal paths first.

Starlette answers a wrong method with the `Allow` of the first route whose path matched, so a
path served by several routes (GET and DELETE on one id) lists one method. And a literal
segment loses to a parameter registered beside it: `GET /api/sessions/estimate` (only POST
exists) matches `GET /api/sessions/{session_id}` and fails as an invalid id (422). Ids are
whole numbers, so a literal segment is never an id: the path template with the most literal
segments is the one the request names, and only its methods are allowed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cached_property

from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute, compile_path, get_route_path
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = tuple[re.Pattern[str], int, frozenset[str]]


def _literal_segments(path: str) -> int:
    return sum(1 for part in path.split("/") if part and not part.startswith("{"))


def endpoints(routes: Sequence[BaseRoute]) -> list[Endpoint]:
    """(path pattern, literal segments, methods) of every route with methods, included
    routers flattened (FastAPI wraps them; a mount such as /static has no methods)."""
    out: list[Endpoint] = []
    for context in iter_route_contexts(routes):
        if context.path and context.methods:
            pattern, _, _ = compile_path(context.path)
            out.append((pattern, _literal_segments(context.path), frozenset(context.methods)))
    return out


def allowed_methods(found: Iterable[Endpoint], path: str) -> tuple[bool, set[str]]:
    """(whether any route's path matches, the methods of the most literal matching paths)."""
    best = -1
    methods: set[str] = set()
    for pattern, rank, route_methods in found:
        if not pattern.match(path):
            continue
        if rank > best:
            best, methods = rank, set()
        if rank == best:
            methods |= route_methods
    return best >= 0, methods


class MethodNotAllowed:
    """Answer 405, with every allowed method in `Allow`, before a route that merely shares
    the path pattern answers instead; anything else passes through unchanged."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes  # the app's list: routers are included after this is built

    @cached_property
    def endpoints(self) -> list[Endpoint]:
        return endpoints(self.routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            matched, methods = allowed_methods(self.endpoints, get_route_path(scope))
            if matched and scope["method"] not in methods:
                allow = ", ".join(sorted(methods))
                response = JSONResponse(
                    {"detail": "Method Not Allowed"}, status_code=405, headers={"Allow": allow}
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
