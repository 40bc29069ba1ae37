"""Domain errors every service raises; the app maps them to HTTP statuses once.

Also the edge of every JSON route: a body JSON itself forbids (NaN, Infinity, a lone UTF-16
surrogate) is a 422 before any route sees it, and a validation error never echoes what cannot
be encoded or should not be repeated (API keys, passwords).
"""

from __future__ import annotations

import email.message
import html
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError

from llmjudge.core.access import is_api_path
from llmjudge.infra.db.faults import is_connection_problem
from llmjudge.infra.rowfiles import RowError


class NotFound(LookupError):
    """404: the named thing does not exist."""


class Conflict(ValueError):
    """409: the request clashes with the current state (a duplicate name, a wrong status)."""


class Invalid(ValueError):
    """422: the request is well-formed but cannot be carried out as asked."""


class Forbidden(PermissionError):
    """403: the caller may use the route but not do this (auth's refusals subclass it)."""


@contextmanager
def value_errors_as_invalid() -> Iterator[None]:
    """The pure core refuses with ValueError (an option it does not allow, data it cannot
    fit); at a domain's edge that is the request's fault: Invalid (422), same message."""
    try:
        yield
    except ValueError as exc:
        raise Invalid(str(exc)) from exc


# Every domain error's HTTP status, the one table: the API answers with it (install_handlers)
# and so does every page (infra.web.refusal), so one error has one status everywhere.
STATUS: dict[type[Exception], int] = {NotFound: 404, Forbidden: 403, Conflict: 409, Invalid: 422}
DOMAIN_ERRORS: tuple[type[Exception], ...] = tuple(STATUS)


def status_of(exc: Exception) -> int:
    """The table's status for a domain error (or a subclass of one)."""
    return next(STATUS[cls] for cls in type(exc).__mro__ if cls in STATUS)


class ErrorOut(BaseModel):
    """Every error answer except FastAPI's own validation list: one sentence for a person."""

    detail: str


class RowErrorsDetail(BaseModel):
    message: str = Field(
        description="how many problems (and, past 200, that only the first 200 are listed); "
        "nothing was stored"
    )
    errors: list[RowError] = Field(description="the problems, located by line: the first 200")
    total: int = Field(description="how many problems the file has, listed or not")


class RowErrorsOut(BaseModel):
    """422 for an uploaded file with problems (imports): nothing was stored."""

    detail: RowErrorsDetail


# Ids are PostgreSQL integers; a larger one is answered 422 (see data_error below).
ID_MAX = 2_147_483_647
# ASCII digits only: str.isdigit() also passes "٣" (which int() reads as 3) and "²" (which
# int() refuses), and int() refuses more than 4,300 digits; ten digits (after zeros) bound ID_MAX.
_ID_TEXT = re.compile(r"0*[0-9]{1,10}")
_SHOWN_MAX = 20


def bounded_id(text: str, *, name: str = "id") -> int:
    """One id from request text (an item of `?ids=1,2`, a form value), bounded as the schema
    bounds ids (1..ID_MAX); anything else is Invalid (422), naming the value (truncated)."""
    value = text.strip()
    if _ID_TEXT.fullmatch(value) and 1 <= (n := int(value.lstrip("0") or "0")) <= ID_MAX:
        return n
    shown = value if len(value) <= _SHOWN_MAX else f"{value[:_SHOWN_MAX]}... ({len(value)} chars)"
    raise Invalid(f"{name} must be a whole number from 1 to {ID_MAX}, got {shown!r}")


# Operations that can answer 409 (a duplicate name, or the wrong status for the action),
# by operation id (app.operation_id); test_openapi checks every id names an operation.
CONFLICTS: dict[str, str] = {
    "pillars_create": "a pillar with this name exists",
    "pillars_update": "a pillar with this name exists",
    "providers_create": "a provider with this name exists",
    "providers_update": "a provider with this name exists, or the change would rename the "
    "built-in Simulator or change its kind",
    "providers_delete": "the provider is the built-in Simulator",
    "models_create": "a model with this name exists",
    "models_update": "a model with this name exists, or the change would rename, re-point or "
    "move one of the built-in simulated models",
    "models_delete": "the model is one of the built-in simulated models",
    "users_create": "a user with this name exists",
    "users_update": "the change would leave no admin, or the name is taken",
    "sessions_start": "the session is not a draft",
    "sessions_pause": "the session is not running",
    "sessions_resume": "the session is not paused",
    "sessions_cancel": "the session has already finished",
    "sessions_retry_failed": "the session is a draft or cancelled",
    "sessions_estimate": "the session has no plan to estimate",
    "sessions_adaptive_state": "the session is not adaptive",
    "personas_create": "a persona with this name exists",
    "personas_update": "a persona with this name exists, or it is training",
    "personas_clone": "a persona with this name exists",
    "personas_delete": "the persona is training",
    "personas_start_training": "the persona's status does not allow it",
    "personas_pause_training": "the persona is not training",
    "personas_resume_training": "the persona is not paused",
    "personas_upload_pairs": "the persona is training",
    "personas_feedback": "the iteration is not open for review",
    "personas_bulk_feedback": "the iteration is not open for review",
}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Bytes that can start a value standard JSON forbids; only bodies holding one are parsed twice.
_SUSPECT = re.compile(rb"NaN|Infinity|\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SECRET_FIELDS = frozenset({"api_key", "password", "current_password", "new_password", "token"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class _Forbidden(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _Forbidden(name)


def _surrogate_at(value: Any) -> list[str | int] | None:
    """Where (as a loc) the first string or key holding a lone surrogate is, or None."""
    stack: list[tuple[Any, list[str | int]]] = [(value, ["body"])]
    while stack:
        item, loc = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return loc
        elif isinstance(item, dict):
            for key, child in item.items():
                if _SURROGATE.search(key):
                    return loc
                stack.append((child, [*loc, key]))
        elif isinstance(item, list):
            stack.extend((child, [*loc, i]) for i, child in enumerate(item))
    return None


def _printable(loc: list[str | int]) -> list[str | int]:
    return [
        p.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        if isinstance(p, str)
        else p
        for p in loc
    ]


def json_body_problem(body: bytes) -> dict[str, Any] | None:
    """A validation-error entry for a body standard JSON forbids, else None.

    Python's parser accepts ``NaN``, ``Infinity`` and lone ``\\udXXX`` escapes; nothing can
    store or send them back (PostgreSQL and UTF-8 refuse them), so they are refused here.
    Malformed JSON is left to FastAPI, which already answers it with a 422.
    """
    if not _SUSPECT.search(body):
        return None
    try:
        value = json.loads(body, parse_constant=_refuse_constant)
    except _Forbidden as e:
        return {
            "type": "json_invalid",
            "loc": ["body"],
            "msg": f"JSON does not allow {e.args[0]}: send a finite number, or null",
        }
    except (ValueError, RecursionError):
        return None
    loc = _surrogate_at(value)
    if loc is None:
        return None
    return {
        "type": "json_invalid",
        "loc": _printable(loc),
        "msg": "a string holds a lone UTF-16 surrogate (an escape such as \\ud800 without "
        "its pair), which is not a character: send valid Unicode text",
    }


def _is_json(content_type: str | None) -> bool:
    """The same test FastAPI uses to decide a body is JSON (no content type counts)."""
    if not content_type:
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


class StrictJsonMiddleware:
    """Answer 422 for a JSON body holding NaN, Infinity or a lone surrogate; replay the rest."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        content_type = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k == b"content-type"), None
        )
        if not _is_json(content_type):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nothing to answer
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = json_body_problem(body)
        if problem is not None:
            await JSONResponse({"detail": [problem]}, status_code=422)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _encodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, TypeError):  # UnicodeEncodeError is a ValueError
        return False
    return True


def safe_validation_errors(errors: Any) -> list[dict[str, Any]]:
    """FastAPI's error list, minus inputs that are secrets or cannot be encoded as JSON."""
    out: list[dict[str, Any]] = []
    for error in jsonable_encoder(errors):
        loc = error.get("loc") or []
        if any(p in _SECRET_FIELDS for p in loc):
            error.pop("input", None)
            error.pop("ctx", None)
        if not _encodable(error):
            error.pop("input", None)
            error.pop("ctx", None)
            error["loc"] = _printable(list(loc))
            error["msg"] = str(error.get("msg", "")).encode("utf-8", "backslashreplace").decode()
        out.append(error)
    return out


def htmx_error_line(message: str, status_code: int = 403) -> HTMLResponse:
    """An error answer to an htmx swap: one line in the page's `#flash` region (base.html),
    never a whole page inside a table cell. HX-Retarget/HX-Reswap move it there."""
    return HTMLResponse(
        f'<p class="notice error" role="alert">{html.escape(message)}</p>',
        status_code=status_code,
        headers={"HX-Retarget": "#flash", "HX-Reswap": "innerHTML"},
    )


RETRY_AFTER_S = 5


def unavailable(exc: Exception) -> JSONResponse:
    """503 while the database is away; its error text is logged, never sent."""
    logging.getLogger("llmjudge").warning("database unavailable: %s", str(exc).splitlines()[0:1])
    return JSONResponse(
        {"detail": "the database is unavailable; retry shortly"},
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json_error(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _add_422_schema(responses: dict[str, Any], ref: dict[str, str]) -> None:
    media = responses.setdefault(
        "422", _json_error("the request cannot be carried out as asked", ref)
    ).setdefault("content", {"application/json": {"schema": ref}})
    body = media.setdefault("application/json", {"schema": ref})
    schema = body.get("schema") or ref
    options = schema.get("anyOf", [schema])
    if ref not in options:
        options = [*options, ref]
    body["schema"] = options[0] if len(options) == 1 else {"anyOf": options}


def _bound_ids(schema: dict[str, Any], name: str) -> None:
    """An unbounded integer id gets the bounds the database gives it."""
    if name == "id" or name.endswith(("_id", "_ids")):
        targets = [schema, schema.get("items") or {}, *schema.get("anyOf", [])]
        for t in targets:
            if t.get("type") == "integer":
                t.setdefault("minimum", 1)
                t.setdefault("maximum", ID_MAX)


def _name_by_title(spec: dict[str, Any], schemas: dict[str, Any]) -> None:
    """FastAPI keys two models of one class name by module path
    (`llmjudge__sessions__schemas__EstimateOut`); key them by their (unique) titles."""
    renames = {
        key: schema["title"]
        for key, schema in schemas.items()
        if "__" in key and schema.get("title") and schema["title"] not in schemas
    }
    if len(set(renames.values())) != len(renames):
        return  # two share a title: keep FastAPI's keys (test_openapi catches it)
    for old, new in renames.items():
        schemas[new] = schemas.pop(old)
    refs = {f"#/components/schemas/{o}": f"#/components/schemas/{n}" for o, n in renames.items()}
    stack: list[Any] = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref in refs:
                node["$ref"] = refs[ref]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def document_errors(spec: dict[str, Any]) -> dict[str, Any]:
    """What FastAPI cannot see from the handlers, for generated clients (in place):

    - uploads as binary (`format: binary`, which OpenAPI 3.0 generators read as a file);
    - 400 on every operation with a body (FastAPI's answer to one it cannot parse);
    - 404 on every operation with a path parameter (all of them look an id up), 409 where
      `CONFLICTS` says, 422 answers of errors.py (`ErrorOut`) and of imports (`RowErrorsOut`)
      beside FastAPI's validation list;
    - integer ids bounded as the database bounds them.
    """
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    _name_by_title(spec, schemas)
    for model in (ErrorOut, RowErrorsOut):
        found = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(found.pop("$defs", {}))
        schemas[model.__name__] = found
    for name, schema in schemas.items():
        for prop_name, prop in (schema.get("properties") or {}).items():
            if prop.get("contentMediaType") == "application/octet-stream":
                prop["format"] = "binary"
            items = prop.get("items") or {}
            if items.get("contentMediaType") == "application/octet-stream":
                items["format"] = "binary"
            if not name.endswith("Out"):
                _bound_ids(prop, prop_name)
    for operations in spec.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            params = operation.get("parameters") or []
            for param in params:
                # Every integer in a path names a row (an id, an iteration or version number)
                name = "id" if param.get("in") == "path" else param.get("name", "")
                _bound_ids(param.get("schema") or {}, name)
            if any(p.get("in") == "path" for p in params):
                responses.setdefault("404", _json_error("no such item", _ref("ErrorOut")))
            conflict = CONFLICTS.get(operation.get("operationId", ""))
            if conflict:
                responses.setdefault("409", _json_error(conflict, _ref("ErrorOut")))
            content = (operation.get("requestBody") or {}).get("content", {})
            if content:  # a body that cannot be parsed (bytes not UTF-8, a broken form)
                responses.setdefault(
                    "400", _json_error("the body cannot be parsed", _ref("ErrorOut"))
                )
            if "422" in responses or content:
                if content or params:  # FastAPI's own list, even where a route set 422
                    _add_422_schema(responses, _ref("HTTPValidationError"))
                _add_422_schema(responses, _ref("ErrorOut"))
            if "multipart/form-data" in content:
                _add_422_schema(responses, _ref("RowErrorsOut"))
    return spec


def install_openapi(app: FastAPI) -> None:
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_errors(original())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


PageAnswer = Callable[[Request, Exception], Response]


def install_handlers(app: FastAPI, *, page_answer: PageAnswer | None = None) -> None:
    """The JSON answers of /api; ``page_answer`` answers a domain error a page raised (HTML:
    the error page, or a line in the flash region for HTMX), with the same status."""
    install_openapi(app)
    # Innermost of the middlewares (auth and body limits run first, see auth.middleware).
    app.add_middleware(StrictJsonMiddleware)

    async def validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"detail": safe_validation_errors(exc.errors())}, status_code=422)

    async def domain_error(request: Request, exc: Exception) -> Response:
        if page_answer is not None and not is_api_path(request.url.path):
            return page_answer(request, exc)
        return JSONResponse({"detail": str(exc)}, status_code=status_of(exc))

    async def data_error(_: Request, exc: Exception) -> JSONResponse:
        if is_connection_problem(exc):
            return unavailable(exc)
        # SQLSTATE class 22 ("data exception"): the database refused a value the request
        # carried (an id beyond 32 bits, say), so the caller's input is wrong, not the server.
        # Anything else is our bug: a plain 500. Never echo the value itself.
        orig = getattr(exc, "orig", None)
        cause = getattr(orig, "__cause__", None) or orig
        if not str(getattr(cause, "sqlstate", "") or "").startswith("22"):
            logging.getLogger("llmjudge").error("database error", exc_info=exc)
            return JSONResponse({"detail": "internal database error"}, status_code=500)
        return JSONResponse(
            {
                "detail": "a value in the request is out of range or malformed for the database "
                "(ids are whole numbers from 1 to 2147483647)"
            },
            status_code=422,
        )

    async def connection_lost(_: Request, exc: Exception) -> JSONResponse:
        if is_connection_problem(exc):
            return unavailable(exc)
        logging.getLogger("llmjudge").error("unhandled error", exc_info=exc)
        return JSONResponse({"detail": "internal server error"}, status_code=500)

    app.add_exception_handler(RequestValidationError, validation_error)
    # The database away (restarting, a lost connection): a JSON 503 the client may retry.
    for exc_type in (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError):
        app.add_exception_handler(exc_type, connection_lost)
    app.add_exception_handler(DBAPIError, data_error)
    for exc_type in STATUS:
        app.add_exception_handler(exc_type, domain_error)
