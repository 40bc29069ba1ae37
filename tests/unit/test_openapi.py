"""The OpenAPI document as generated clients read it: ids, titles, uploads, error answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmjudge.app import create_app
from llmjudge.infra.config import Settings
from llmjudge.infra.errors import CONFLICTS, ID_MAX


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    settings = Settings(database_url="postgresql+asyncpg://u:p@127.0.0.1:1/none")
    return create_app(settings, migrate=False).openapi()


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(p, m, op) for p, ops in spec["paths"].items() for m, op in ops.items()]


def test_operation_ids_are_short_unique_and_named_by_resource(spec: dict[str, Any]) -> None:
    ids = [op["operationId"] for _, _, op in _operations(spec)]
    assert len(ids) == len(set(ids))
    by_route = {(m, p): op["operationId"] for p, m, op in _operations(spec)}
    assert by_route[("post", "/api/sessions")] == "sessions_create"
    assert by_route[("get", "/api/sessions/{session_id}")] == "sessions_get"
    assert by_route[("get", "/api/sessions/{session_id}/thread-leaderboard")] == (
        "sessions_thread_leaderboard"
    )
    assert by_route[("post", "/api/threads/import")] == "threads_import"
    assert by_route[("get", "/healthz")] == "healthz"
    assert all(len(i) <= 40 for i in ids), max(ids, key=len)


def test_no_two_schemas_share_a_title(spec: dict[str, Any]) -> None:
    titles = [s.get("title", n) for n, s in spec["components"]["schemas"].items()]
    assert len(titles) == len(set(titles))
    assert "PersonaEstimateOut" in titles and "EstimateOut" in titles
    # Keyed by title, not by module path, and every reference follows.
    assert not [k for k in spec["components"]["schemas"] if "__" in k]
    assert "llmjudge__" not in json.dumps(spec)


def test_uploads_are_binary(spec: dict[str, Any]) -> None:
    uploads = 0
    for _, _, op in _operations(spec):
        content = (op.get("requestBody") or {}).get("content", {})
        if "multipart/form-data" not in content:
            continue
        name = content["multipart/form-data"]["schema"]["$ref"].rsplit("/", 1)[-1]
        file = spec["components"]["schemas"][name]["properties"]["file"]
        assert file["format"] == "binary"
        uploads += 1
        errors = op["responses"]["422"]["content"]["application/json"]["schema"]["anyOf"]
        assert {"$ref": "#/components/schemas/RowErrorsOut"} in errors
        assert {"$ref": "#/components/schemas/HTTPValidationError"} in errors
    assert uploads == 4  # threads, judgments, training pairs, reference labels


def test_error_answers_are_declared_with_schemas(spec: dict[str, Any]) -> None:
    ids = {op["operationId"]: op for _, _, op in _operations(spec)}
    assert set(CONFLICTS) <= set(ids), set(CONFLICTS) - set(ids)
    for op_id in CONFLICTS:
        assert "409" in ids[op_id]["responses"]
    error = {"$ref": "#/components/schemas/ErrorOut"}
    for path, _, op in _operations(spec):
        if "{" in path:
            assert op["responses"]["404"]["content"]["application/json"]["schema"] == error
    assert spec["components"]["schemas"]["ErrorOut"]["required"] == ["detail"]
    # every declared error answer says what its body holds (the gate's 409 and 502 did not)
    bare = [
        (method, path, code)
        for path, method, op in _operations(spec)
        for code, answer in op["responses"].items()
        if code[0] in "45" and not answer.get("content")
    ]
    assert bare == []
    row = spec["components"]["schemas"]["RowError"]
    assert set(row["properties"]) == {"line", "field", "message"}


def test_ids_are_bounded_as_the_database_bounds_them(spec: dict[str, Any]) -> None:
    param = next(
        p
        for p in spec["paths"]["/api/sessions/{session_id}"]["get"]["parameters"]
        if p["name"] == "session_id"
    )
    assert param["schema"]["minimum"] == 1 and param["schema"]["maximum"] == ID_MAX
    judge = spec["components"]["schemas"]["SessionIn"]["properties"]["judge_model_id"]
    integer = next(o for o in judge["anyOf"] if o.get("type") == "integer")
    assert integer["maximum"] == ID_MAX
    # Bounds a route already declares stay as they are.
    limit = next(
        p for p in spec["paths"]["/api/sessions"]["get"]["parameters"] if p["name"] == "limit"
    )
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 500)
