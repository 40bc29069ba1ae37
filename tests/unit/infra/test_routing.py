"""405 routing: the most literal matching path decides which methods are allowed."""

from __future__ import annotations

from fastapi import APIRouter

from llmjudge.infra.routing import allowed_methods, endpoints


def _router() -> APIRouter:
    router = APIRouter(prefix="/api/sessions")

    async def handler() -> None:
        return None

    router.add_api_route("/estimate", handler, methods=["POST"])
    router.add_api_route("/{session_id}", handler, methods=["GET"])
    router.add_api_route("/{session_id}", handler, methods=["DELETE"])
    return router


def test_a_literal_segment_wins_over_a_parameter() -> None:
    found = endpoints(_router().routes)
    assert allowed_methods(found, "/api/sessions/estimate") == (True, {"POST"})


def test_every_route_of_the_path_adds_its_methods() -> None:
    found = endpoints(_router().routes)
    assert allowed_methods(found, "/api/sessions/7") == (True, {"GET", "DELETE"})


def test_an_unknown_path_is_left_to_the_router() -> None:
    found = endpoints(_router().routes)
    assert allowed_methods(found, "/api/sessions/7/nothing") == (False, set())
