"""What the API answers is what its OpenAPI document says (issue 28, item 7): the statuses
it declares, 405 with every allowed method, literal paths before id paths, and the bounds and
types of parameters and bodies enforced as declared."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from llmjudge.infra.errors import ID_MAX
from tests.integration.auth.test_auth import new_user
from tests.integration.sessions.test_sessions import create, seed_threads

IN_PROCESS_WORKERS = False
ERROR_OUT = {"$ref": "#/components/schemas/ErrorOut"}


@pytest.fixture(scope="module")
def spec(app: FastAPI) -> dict[str, Any]:
    return app.openapi()


def _declared(spec: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    return spec["paths"][path][method]["responses"]


async def test_an_unparseable_body_is_a_declared_400(
    client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    r = await client.post(
        "/api/pillars", content=b'{"name": "\xff"}', headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert set(r.json()) == {"detail"}
    declared = _declared(spec, "/api/pillars", "post")["400"]
    assert declared["content"]["application/json"]["schema"] == ERROR_OUT
    with_body = [
        op
        for ops in spec["paths"].values()
        for op in ops.values()
        if isinstance(op, dict) and "requestBody" in op
    ]
    assert len(with_body) > 12
    assert all("400" in op["responses"] for op in with_body)


async def test_405_lists_every_method_of_the_path(client: httpx.AsyncClient) -> None:
    pillar = (await client.post("/api/pillars", json={"name": "allow"})).json()
    r = await client.put(f"/api/pillars/{pillar['id']}", json={})
    assert r.status_code == 405
    assert r.headers["allow"] == "DELETE, GET, PATCH"
    r = await client.put("/api/pillars")
    assert (r.status_code, r.headers["allow"]) == (405, "GET, POST")


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
async def test_a_literal_sub_path_is_not_read_as_an_id(
    client: httpx.AsyncClient, method: str
) -> None:
    r = await client.request(method, "/api/sessions/estimate")
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == "POST"
    r = await client.request(method, "/api/sessions/estimate/adaptive")
    assert (r.status_code, r.headers["allow"]) == (405, "POST")


async def test_a_literal_sub_path_still_answers_its_own_method(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/api/sessions/estimate", json={})
    assert r.status_code == 422  # reached the estimate route: its body is incomplete
    assert {e["loc"][-1] for e in r.json()["detail"]} >= {"session_name"}


@pytest.mark.parametrize(
    "url",
    [
        "/api/threads?pillar_id=0",
        f"/api/threads?pillar_id={ID_MAX + 1}",
        "/api/models?provider_id=0",
        "/api/references?session_id=0",
        "/api/references?thread_id=-1",
        "/api/references/export?session_id=0",
    ],
)
async def test_query_ids_are_bounded_as_declared(client: httpx.AsyncClient, url: str) -> None:
    r = await client.get(url)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][0] == "query"


@pytest.mark.parametrize(
    "url",
    [
        f"/api/threads?offset={ID_MAX + 1}",
        f"/api/sessions?offset={ID_MAX + 1}",
        f"/api/references?offset={ID_MAX + 1}",
        f"/api/personas/1/prompts/diff?a=1&b={ID_MAX + 1}",
        f"/api/personas/1/prompts/diff?a={ID_MAX + 1}&b=1",
    ],
)
async def test_offsets_and_version_numbers_have_a_maximum(
    client: httpx.AsyncClient, spec: dict[str, Any], url: str
) -> None:
    r = await client.get(url)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["type"] == "less_than_equal"
    ok = await client.get("/api/threads?offset=" + str(ID_MAX))
    assert ok.status_code == 200 and ok.json()["items"] == []


def test_every_integer_parameter_declares_its_bounds(spec: dict[str, Any]) -> None:
    unbounded = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            for param in op.get("parameters") or []:
                for s in [param["schema"], *param["schema"].get("anyOf", [])]:
                    if s.get("type") == "integer" and ("minimum" not in s or "maximum" not in s):
                        unbounded.append((method, path, param["name"]))
    assert unbounded == []


async def test_a_number_is_not_a_boolean(client: httpx.AsyncClient) -> None:
    user = await new_user(client, "strict-bool", "reviewer")
    r = await client.patch(f"/api/users/{user['id']}", json={"is_active": 0})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "is_active"]
    r = await client.patch(f"/api/users/{user['id']}", json={"is_active": False})
    assert r.status_code == 200 and r.json()["is_active"] is False
    for body in ({"agrees": 0}, {"agrees": 1}, {"agrees": "true"}):
        r = await client.post("/api/personas/1/decisions/1/feedback", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "agrees"]
    r = await client.post("/api/sessions", json={"session_name": "b", "position_swap": 1})
    assert r.status_code == 422, r.text
    assert ["body", "position_swap"] in [e["loc"] for e in r.json()["detail"]]


def test_booleans_are_still_documented_as_booleans(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    assert schemas["FeedbackIn"]["properties"]["agrees"] == {"title": "Agrees", "type": "boolean"}
    active = schemas["UserPatch"]["properties"]["is_active"]
    assert active["anyOf"] == [{"type": "boolean"}, {"type": "null"}]


async def test_a_token_for_an_unknown_user_is_a_declared_422(
    client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    r = await client.post("/api/tokens", json={"name": "t", "user_id": ID_MAX})
    assert r.status_code == 422, r.text
    assert "no such user" in r.json()["detail"]
    assert "404" not in _declared(spec, "/api/tokens", "post")


async def test_the_adaptive_state_of_a_plain_session_is_a_declared_409(
    client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    pillars = await seed_threads(client, 4, pillars=2, prefix="contract")
    session = await create(client, pillar_ids=pillars, comparison_mode="round_robin")
    r = await client.get(f"/api/sessions/{session['id']}/adaptive")
    assert r.status_code == 409, r.text
    declared = _declared(spec, "/api/sessions/{session_id}/adaptive", "get")["409"]
    assert declared["content"]["application/json"]["schema"] == ERROR_OUT


async def test_a_boolean_is_not_a_count(client: httpx.AsyncClient) -> None:
    body = {"name": "strict-int", "kind": "openai", "max_retries": False}
    r = await client.post("/api/providers", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "max_retries"]
    r = await client.post("/api/providers", json=body | {"max_retries": 0})
    assert r.status_code == 201 and r.json()["max_retries"] == 0


async def test_comparing_an_unknown_persona_is_a_declared_404(
    client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    r = await client.get("/api/personas/compare", params={"ids": str(ID_MAX)})
    assert r.status_code == 404, r.text
    declared = _declared(spec, "/api/personas/compare", "get")["404"]
    assert declared["content"]["application/json"]["schema"] == ERROR_OUT
