"""Domain errors every service raises; the app maps them to HTTP statuses once."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


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

    app.add_exception_handler(NotFound, not_found)
    app.add_exception_handler(Conflict, conflict)
    app.add_exception_handler(Invalid, invalid)
