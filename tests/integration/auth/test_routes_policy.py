"""Route by route: every route of the app, every method, against the central policy.

Walks `app.routes`, so routes added later are covered without editing this file; a route
whose path no policy rule names fails `test_every_route_is_classified` until it is added
to POLICY in auth/policy.py on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from starlette.routing import Mount

from llmjudge.core.access import Role, is_api_path, match_rule, required_role


@dataclass(frozen=True)
class Endpoint:
    method: str
    template: str  # as declared, e.g. /api/pillars/{pillar_id}

    @property
    def path(self) -> str:
        # Any value will do: the policy decides before the route parses anything.
        return re.sub(r"\{[^}]+\}", "1", self.template)

    @property
    def role(self) -> Role | None:
        return required_role(self.method, self.template)


def endpoints(app: FastAPI) -> list[Endpoint]:
    found = set()
    for route in iter_route_contexts(app.routes):
        if isinstance(route.original_route, Mount) or not route.path:
            continue
        for method in route.methods or ():
            found.add(Endpoint(method, route.path))
    return sorted(found, key=lambda e: (e.template, e.method))


def mounts(app: FastAPI) -> list[str]:
    return [r.path for r in app.routes if isinstance(r, Mount)]


def test_the_walk_sees_every_domain(app: FastAPI):
    templates = {e.template for e in endpoints(app)}
    # A sanity check on the walk itself (routers included lazily are expanded too).
    for expected in ("/healthz", "/api/pillars", "/threads/{thread_id}", "/login", "/api/tokens"):
        assert expected in templates
    assert mounts(app) == ["/static"]


def test_every_route_is_classified(app: FastAPI):
    unclassified = sorted({e.template for e in endpoints(app) if match_rule(e.template) is None})
    assert not unclassified, (
        f"routes no policy rule names (add them to POLICY in auth/policy.py): {unclassified}"
    )


async def test_anonymous_gets_401_or_the_login_page(anon_client: httpx.AsyncClient, app):
    problems = []
    for e in endpoints(app):
        r = await anon_client.request(e.method, e.path)
        if e.role is None:
            if r.status_code == 401 or r.headers.get("location", "").startswith("/login"):
                problems.append(f"{e.method} {e.template}: public but answered {r.status_code}")
        elif is_api_path(e.template):
            if r.status_code != 401 or r.headers.get("www-authenticate") != "Bearer":
                problems.append(f"{e.method} {e.template}: {r.status_code}, expected 401")
        elif r.status_code != 303 or not r.headers["location"].startswith("/login?next="):
            problems.append(f"{e.method} {e.template}: {r.status_code}, expected 303 to /login")
    assert not problems, "\n".join(problems)
    r = await anon_client.get("/static/app.js")
    assert r.status_code == 200


@pytest.mark.parametrize("role", [Role.reviewer, Role.researcher])
async def test_lower_roles_get_403(
    role: Role,
    reviewer_client: httpx.AsyncClient,
    researcher_client: httpx.AsyncClient,
    app: FastAPI,
):
    c = reviewer_client if role is Role.reviewer else researcher_client
    denied = [e for e in endpoints(app) if e.role is not None and not role.covers(e.role)]
    assert denied, "expected some routes above this role"
    problems = []
    for e in denied:
        r = await c.request(e.method, e.path)
        if r.status_code != 403:
            problems.append(f"{e.method} {e.template}: {r.status_code}, expected 403")
    assert not problems, "\n".join(problems)


def test_reviewer_routes_in_the_live_app(app: FastAPI):
    """What reviewers may and may not do, over the routes the app really has."""
    eps = endpoints(app)
    provider_writes = [
        e
        for e in eps
        if e.template.startswith("/api/providers") and e.method in ("POST", "PATCH", "DELETE")
    ]
    assert provider_writes and all(e.role is Role.admin for e in provider_writes)
    feedback = [e for e in eps if e.template.endswith("/feedback") and e.method == "POST"]
    assert all(e.role is Role.reviewer for e in feedback)
