"""Domain errors every service raises; the app maps them to HTTP statuses once.

Also the edge of every JSON route: a body JSON itself forbids (NaN, Infinity, a lone UTF-16
surrogate) is a 422 before any route sees it, and a validation error never echoes what cannot
be encoded or should not be repeated (API keys, passwords).
"""

from __future__ import annotations

import email.message
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError

from llmjudge.db.faults import is_connection_problem


class NotFound(LookupError):
    """404: the named thing does not exist."""


class Conflict(ValueError):
    """409: the request clashes with the current state (a duplicate name, a wrong status)."""


class Invalid(ValueError):
    """422: the request is well-formed but cannot be carried out as asked."""


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


RETRY_AFTER_S = 5


def unavailable(exc: Exception) -> JSONResponse:
    """503 while the database is away; its error text is logged, never sent."""
    logging.getLogger("llmjudge").warning("database unavailable: %s", str(exc).splitlines()[0:1])
    return JSONResponse(
        {"detail": "the database is unavailable; retry shortly"},
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def install_handlers(app: FastAPI) -> None:
    # Innermost of the middlewares (auth and body limits run first, see auth.middleware).
    app.add_middleware(StrictJsonMiddleware)

    async def validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"detail": safe_validation_errors(exc.errors())}, status_code=422)

    async def not_found(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    async def conflict(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

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
    app.add_exception_handler(NotFound, not_found)
    app.add_exception_handler(DBAPIError, data_error)
    app.add_exception_handler(Conflict, conflict)
    app.add_exception_handler(Invalid, invalid)
