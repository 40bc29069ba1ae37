"""The "Providers & models" settings page. Every form posts to a page route that calls the
same service functions as ``/api/providers`` and ``/api/models``; with HTMX the response is
the refreshed panel (errors shown inline), without it a redirect or the full page."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from llmjudge.infra.errors import Invalid
from llmjudge.infra.web import PAGE_ERRORS, DbSession, is_htmx, refusal, render
from llmjudge.providers import service
from llmjudge.providers.deps import LLM
from llmjudge.providers.schemas import ModelIn, ModelPatch, ProviderIn, ProviderPatch

router = APIRouter(include_in_schema=False)

PAGE = "/settings/providers"
# Form fields that are nullable numbers / strings: an empty box means "none".
_OPTIONAL = {
    "base_url",
    "rpm",
    "tpm",
    "context_window",
    "default_temperature",
    "cached_input_price_per_million",
    "cache_write_price_per_million",
}


def form_values(form: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The submitted fields, with empty optional boxes as None and ``settings`` as JSON."""
    out: dict[str, Any] = {}
    for name in fields:
        if name not in form:
            continue
        value = str(form[name]).strip()
        if name == "settings":
            try:
                out[name] = json.loads(value) if value else {}
            except ValueError as e:
                raise Invalid(f"settings: not valid JSON ({e.msg})") from None
        elif value or name not in _OPTIONAL:
            out[name] = value
        else:
            out[name] = None
    return out


PROVIDER_FIELDS = (
    "name",
    "kind",
    "base_url",
    "api_key",
    "rpm",
    "tpm",
    "max_concurrency",
    "timeout_s",
    "max_retries",
    "settings",
)
MODEL_FIELDS = (
    "provider_id",
    "name",
    "model",
    "input_price_per_million",
    "output_price_per_million",
    "batch_discount",
    "cached_input_price_per_million",
    "cache_write_price_per_million",
    "context_window",
    "default_temperature",
)


async def _panel(
    request: Request, db: DbSession, *, full: bool, status_code: int = 200, **ctx: Any
) -> Response:
    providers = await service.list_providers(db=db)
    models = await service.list_models(db=db)
    template = "providers/settings.html" if full else "providers/_panel.html"
    return render(
        request, template, status_code=status_code, providers=providers, models=models, **ctx
    )


async def _act(request: Request, db: DbSession, action: Callable[[], Any], done: str) -> Response:
    """Run a form action; answer with the panel (HTMX) or redirect / full page (plain)."""
    try:
        await action()
    except PAGE_ERRORS as e:
        found = refusal(e)
        full = not is_htmx(request)  # the panel swaps in place (app.js swaps 4xx too)
        return await _panel(request, db, full=full, status_code=found.status, errors=found.messages)
    if is_htmx(request):
        return await _panel(request, db, full=False, notice=done)
    return RedirectResponse(PAGE, status_code=303)


@router.get(PAGE, response_class=HTMLResponse)
async def settings_page(request: Request, db: DbSession):
    return await _panel(request, db, full=True)


@router.post(PAGE, response_class=HTMLResponse)
async def create_provider(request: Request, db: DbSession, llm: LLM):
    form = await request.form()

    async def action() -> None:
        data = ProviderIn.model_validate(form_values(form, PROVIDER_FIELDS))
        await service.create_provider(db=db, data=data, cipher=llm.cipher, llm=llm)

    return await _act(request, db, action, "Provider added.")


@router.post(PAGE + "/{provider_id}", response_class=HTMLResponse)
async def update_provider(request: Request, provider_id: int, db: DbSession, llm: LLM):
    form = await request.form()

    async def action() -> None:
        values = form_values(form, PROVIDER_FIELDS)
        # An empty key box keeps the stored key; the "remove key" box clears it.
        if not values.get("api_key"):
            values.pop("api_key", None)
        if form.get("clear_api_key"):
            values["api_key"] = None
        patch = ProviderPatch.model_validate(values)
        await service.update_provider(
            db=db, provider_id=provider_id, patch=patch, cipher=llm.cipher, llm=llm
        )

    return await _act(request, db, action, "Provider saved.")


@router.post(PAGE + "/{provider_id}/delete", response_class=HTMLResponse)
async def delete_provider(request: Request, provider_id: int, db: DbSession, llm: LLM):
    async def action() -> None:
        await service.delete_provider(db=db, provider_id=provider_id, llm=llm)

    return await _act(request, db, action, "Provider deleted, with its models.")


@router.post(PAGE + "/{provider_id}/test", response_class=HTMLResponse)
async def test_provider(request: Request, provider_id: int, llm: LLM):
    form = await request.form()
    model = str(form.get("model") or "").strip() or None
    try:
        result = await llm.test_connection(provider_id, model=model)
    except PAGE_ERRORS as e:
        found = refusal(e)
        return render(
            request, "providers/_test_result.html", status_code=found.status, error=found.message
        )
    return render(request, "providers/_test_result.html", result=result)


@router.post("/settings/models", response_class=HTMLResponse)
async def create_model(request: Request, db: DbSession):
    form = await request.form()

    async def action() -> None:
        data = ModelIn.model_validate(form_values(form, MODEL_FIELDS))
        await service.create_model(db=db, data=data)

    return await _act(request, db, action, "Model added.")


@router.post("/settings/models/{model_id}", response_class=HTMLResponse)
async def update_model(request: Request, model_id: int, db: DbSession, llm: LLM):
    form = await request.form()

    async def action() -> None:
        patch = ModelPatch.model_validate(form_values(form, MODEL_FIELDS))
        await service.update_model(db=db, model_id=model_id, patch=patch, llm=llm)

    return await _act(request, db, action, "Model saved.")


@router.post("/settings/models/{model_id}/delete", response_class=HTMLResponse)
async def delete_model(request: Request, model_id: int, db: DbSession, llm: LLM):
    async def action() -> None:
        await service.delete_model(db=db, model_id=model_id, llm=llm)

    return await _act(request, db, action, "Model deleted.")
