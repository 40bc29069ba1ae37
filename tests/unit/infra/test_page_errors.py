"""One status per domain error: errors.py's table answers the API, the pages (their own inline
answers, through ``refusal``) and the page-error handler (HTMX flash line or error page)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel, ValidationError

import llmjudge.auth.pages  # noqa: F401  (registers the templates' globals: csrf_token, can...)
from llmjudge.auth.service import Forbidden as AuthForbidden
from llmjudge.infra.errors import STATUS, Conflict, Forbidden, Invalid, NotFound, install_handlers
from llmjudge.infra.web import PAGE_ERRORS, error_page, refusal

ERRORS = {"not-found": NotFound, "forbidden": Forbidden, "conflict": Conflict, "invalid": Invalid}


def _app() -> FastAPI:
    app = FastAPI()
    install_handlers(app, page_answer=error_page)

    async def fail(kind: str) -> None:
        raise ERRORS[kind](f"refused: {kind}")

    app.get("/api/fail/{kind}")(fail)
    app.get("/fail/{kind}")(fail)
    return app


def test_the_table_covers_every_domain_error_and_the_pages_catch_them_all() -> None:
    assert set(STATUS) == set(ERRORS.values())
    assert set(STATUS.values()) == {403, 404, 409, 422}
    assert all(cls in PAGE_ERRORS for cls in STATUS) and ValidationError in PAGE_ERRORS


@pytest.mark.parametrize("kind", sorted(ERRORS))
async def test_api_page_and_htmx_answer_one_error_with_one_status(kind: str) -> None:
    status = STATUS[ERRORS[kind]]
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        api = await client.get(f"/api/fail/{kind}")
        page = await client.get(f"/fail/{kind}")
        swap = await client.get(f"/fail/{kind}", headers={"HX-Request": "true"})
    assert api.status_code == page.status_code == swap.status_code == status
    assert api.json() == {"detail": f"refused: {kind}"}
    assert page.headers["content-type"].startswith("text/html")
    assert 'id="error-message"' in page.text and f"refused: {kind}" in page.text
    assert swap.headers["HX-Retarget"] == "#flash" and f"refused: {kind}" in swap.text
    assert "<html" not in swap.text  # one line, never a page inside the swapped element
    # A page answering in place (its form again, the message inline) uses the same status.
    assert refusal(ERRORS[kind](f"refused: {kind}")).status == status


def test_a_subclass_answers_as_its_base_and_a_refused_form_as_the_apis_validation() -> None:
    assert refusal(AuthForbidden("wrong password")).status == STATUS[Forbidden] == 403

    class Form(BaseModel):
        n: int
        api_key: str

    with pytest.raises(ValidationError) as caught:
        Form.model_validate({"n": "seven", "api_key": 3})
    found = refusal(caught.value)
    assert found.status == 422  # FastAPI answers a body its schema refuses with 422 too
    assert found.messages[0].startswith("n: ") and len(found.messages) == 2
    assert "seven" not in found.message  # the submitted values are never echoed
