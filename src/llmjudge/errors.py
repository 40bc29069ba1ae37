"""Domain errors every service raises; the app maps them to HTTP statuses once."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError


class NotFound(LookupError):
    """404: the named thing does not exist."""


class Conflict(ValueError):
    """409: the request clashes with the current state (a duplicate name, a wrong status)."""


class Invalid(ValueError):
    """422: the request is well-formed but cannot be carried out as asked."""


def install_handlers(app: FastAPI) -> None:
    async def not_found(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    async def conflict(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    async def data_error(_: Request, exc: Exception) -> JSONResponse:
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

    app.add_exception_handler(NotFound, not_found)
    app.add_exception_handler(DBAPIError, data_error)
    app.add_exception_handler(Conflict, conflict)
    app.add_exception_handler(Invalid, invalid)
