"""Every request passes here before any route: body size, credentials, role, CSRF, headers.

Plain ASGI middlewares (not BaseHTTPMiddleware), so server-sent event streams and uploads
flow through untouched. `install(app, settings)` wires them, the 403 handler and the bearer
scheme of the OpenAPI description; app.py calls it once.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlencode, urlsplit

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.datastructures import Headers, MutableHeaders

from llmjudge.auth import service

# CurrentPrincipal is re-exported for the auth routes; its home is auth.schemas.
from llmjudge.auth.schemas import CurrentPrincipal as CurrentPrincipal
from llmjudge.auth.schemas import Principal
from llmjudge.auth.security import (
    CSP,
    SECURITY_HEADERS,
    SlidingWindowLimiter,
    same_origin,
    secrets_equal,
)
from llmjudge.core.access import SAFE_METHODS, Role, is_api_path, required_role
from llmjudge.infra.config import Settings
from llmjudge.infra.errors import htmx_error_line

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Multipart framing around an upload of max_upload_bytes.
BODY_MARGIN = 1024 * 1024
ADMIN_TOKEN_USER = "admin-token"
LOGIN_PATHS = ("/login", "/login/one-time")


# --- body size -----------------------------------------------------------------------------


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            detail=f"the request body is larger than the {limit / 1_048_576:.0f} MiB limit "
            "(LLMJUDGE_MAX_UPLOAD_BYTES)",
        )


_CONTENT_LENGTH = re.compile(r"[0-9]+")


class BodyLimitMiddleware:
    """413 before reading when Content-Length is too big, and while reading a chunked body
    as soon as it passes the limit (FastAPI re-raises HTTPExceptions from body parsing)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None:
            # ASCII digits only: isdigit() passes "²" (int() refuses it), and int() refuses
            # more than 4,300 digits; a number longer than the limit's is too large unread.
            digits = length.strip().lstrip("0") or "0"
            if not _CONTENT_LENGTH.fullmatch(length.strip()):
                detail = "bad Content-Length: send the body's size in bytes, digits 0-9 only"
                await JSONResponse({"detail": detail}, 400)(scope, receive, send)
                return
            if len(digits) > len(str(self.max_bytes)) or int(digits) > self.max_bytes:
                exc = BodyTooLarge(self.max_bytes)
                await JSONResponse({"detail": exc.detail}, 413)(scope, receive, send)
                return
        received = 0
        started = False

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, tracking)
        except BodyTooLarge as exc:
            if started:
                raise
            await JSONResponse({"detail": exc.detail}, 413)(scope, receive, send)


# --- security headers ----------------------------------------------------------------------


class SecurityHeadersMiddleware:
    """CSP and friends on every response; a route that sets its own CSP keeps it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", CSP)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)


# --- authentication, authorisation, CSRF ---------------------------------------------------


class _BadCredentials(Exception):
    """An Authorization header that names no live token."""


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive() that hands out an already-read body, then defers to the real one."""
    done = False

    async def replay() -> Message:
        nonlocal done
        if not done:
            done = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _csrf_token_given(scope: Scope, receive: Receive) -> tuple[str | None, Receive]:
    """The CSRF token from the X-CSRF-Token header (htmx) or a `csrf_token` form field
    (plain forms), and a receive() for the route that still yields the whole body."""
    headers = Headers(scope=scope)
    if (given := headers.get("x-csrf-token")) is not None:
        return given, receive
    content_type = headers.get("content-type", "")
    if not content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        return None, receive
    body = await _read_body(receive)
    try:
        async with Request(scope, _replay(body, receive)).form() as form:
            value = form.get("csrf_token")
    except Exception:  # an unparseable form carries no token; the route reports the rest
        value = None
    return (value if isinstance(value, str) else None), _replay(body, receive)


def _login_redirect(request: Request) -> str:
    if request.method in SAFE_METHODS:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    else:
        target = urlsplit(request.headers.get("hx-current-url", "")).path or "/"
    return "/login?" + urlencode({"next": target})


def _unauthenticated(request: Request, *, bad_token: bool = False) -> Response:
    if bad_token or is_api_path(request.url.path):
        challenge = 'Bearer error="invalid_token"' if bad_token else "Bearer"
        detail = (
            "invalid, expired or revoked token"
            if bad_token
            else "not authenticated: send Authorization: Bearer <token>"
        )
        return JSONResponse({"detail": detail}, 401, headers={"WWW-Authenticate": challenge})
    location = _login_redirect(request)
    if request.headers.get("hx-request") == "true":
        # htmx would follow a 303 inside the page; HX-Redirect makes it load the login page.
        return Response(status_code=401, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)


def _forbidden(request: Request, message: str) -> Response:
    if is_api_path(request.url.path):
        return JSONResponse({"detail": message}, 403)
    if request.headers.get("hx-request") == "true":
        return htmx_error_line(message)
    from llmjudge.infra.web import templates

    return templates.TemplateResponse(
        request, "auth/error.html", {"title": "Forbidden", "message": message}, status_code=403
    )


class AuthMiddleware:
    """Resolve the principal (bearer token, LLMJUDGE_ADMIN_TOKEN or session cookie), then
    apply `required_role` and, for cookie-authenticated writes, the CSRF check."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def _principal(self, request: Request) -> Principal | None:
        authorization = request.headers.get("authorization")
        sessionmaker = request.app.state.sessionmaker
        if authorization is not None:
            scheme, _, credential = authorization.partition(" ")
            credential = credential.strip()
            if scheme.lower() != "bearer" or not credential:
                raise _BadCredentials
            admin = self.settings.admin_token
            if admin is not None and secrets_equal(credential, admin.get_secret_value()):
                return Principal(username=ADMIN_TOKEN_USER, role=Role.admin, via="admin_token")
            async with sessionmaker() as db:
                principal = await service.resolve_token(db=db, token=credential)
            if principal is None:
                raise _BadCredentials
            return principal
        cookie = request.cookies.get(self.settings.session_cookie_name)
        if not cookie:
            return None
        async with sessionmaker() as db:
            return await service.resolve_session(db=db, session_token=cookie)

    def _trusted_origin(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        public = self.settings.public_url
        if public and origin and origin.rstrip("/") == public.rstrip("/"):
            return True
        return same_origin(origin, request.headers.get("host"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # The app serves no websockets; refuse rather than leave one unauthenticated.
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        method, path = scope["method"], scope["path"]
        needed = required_role(method, path)
        state = scope.setdefault("state", {})
        state["principal"] = None
        if needed is None:
            if path in LOGIN_PATHS:
                if method not in SAFE_METHODS and not self._trusted_origin(request):
                    # Login CSRF: another site must not sign a browser into its account.
                    await _forbidden(request, "cross-site login refused")(scope, receive, send)
                    return
                try:
                    state["principal"] = await self._principal(request)
                except _BadCredentials:
                    pass
            await self.app(scope, receive, send)
            return
        try:
            principal = await self._principal(request)
        except _BadCredentials:
            await _unauthenticated(request, bad_token=True)(scope, receive, send)
            return
        if principal is None:
            await _unauthenticated(request)(scope, receive, send)
            return
        state["principal"] = principal
        if not principal.role.covers(needed):
            message = f"this needs the {needed.value} role; you are {principal.role.value}"
            await _forbidden(request, message)(scope, receive, send)
            return
        if principal.via == "session" and method not in SAFE_METHODS:
            given, receive = await _csrf_token_given(scope, receive)
            if not secrets_equal(given, principal.csrf_token):
                message = "missing or wrong CSRF token: reload the page and try again"
                await _forbidden(request, message)(scope, receive, send)
                return
        await self.app(scope, receive, send)


# --- wiring --------------------------------------------------------------------------------


# The shape of errors.ErrorOut, which errors.document_errors registers first.
ERROR_SCHEMA = {
    "title": "ErrorOut",
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
_ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_REF}}}


def _document_operation(operation: dict[str, Any], role: Role | None) -> None:
    """Security requirement, role note and the error answers the middleware gives."""
    responses = operation.setdefault("responses", {})
    # errors.py answers Invalid with 422 {"detail": "..."}; FastAPI documents only its own
    # validation errors ({"detail": [...]}) under 422, so describe both.
    validation = responses.get("422", {}).get("content", {}).get("application/json")
    if validation is not None and "anyOf" not in validation["schema"]:
        validation["schema"] = {"anyOf": [validation["schema"], _ERROR_REF]}
    if role is None:
        operation["security"] = []
        return
    operation["security"] = [{"bearerAuth": []}]
    note = f"Requires the **{role.value}** role."
    operation["description"] = (operation.get("description", "") + "\n\n" + note).strip()
    responses.setdefault("401", _error("missing, invalid or revoked token"))
    responses.setdefault("403", _error(f"needs the {role.value} role"))
    if "requestBody" in operation:
        responses.setdefault("413", _error("request body too large"))


def _openapi_with_bearer(app: FastAPI) -> Callable[[], dict[str, Any]]:
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None and "securitySchemes" in app.openapi_schema.get(
            "components", {}
        ):
            return app.openapi_schema
        schema = original()
        components = schema.setdefault("components", {})
        components["securitySchemes"] = {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": "a personal API token (lj_...) or LLMJUDGE_ADMIN_TOKEN",
            }
        }
        components.setdefault("schemas", {}).setdefault("ErrorOut", ERROR_SCHEMA)
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                _document_operation(operation, required_role(method, path))
        app.openapi_schema = schema
        return schema

    return openapi


def install(app: FastAPI, settings: Settings) -> None:
    """Add the middlewares (outermost first: headers, body limit, auth), the 403 handler
    for service-level refusals, the login rate limiter and the OpenAPI bearer scheme."""
    # add_middleware prepends: the last added runs first.
    app.add_middleware(AuthMiddleware, settings=settings)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_upload_bytes + BODY_MARGIN)
    app.add_middleware(SecurityHeadersMiddleware)
    app.state.login_limiter = SlidingWindowLimiter(limit=settings.login_attempts_per_minute)
    checker = AuthMiddleware(app, settings)

    async def still_allowed(request: Request) -> bool:
        """Whether the request's credentials still grant its route (a long stream re-asks:
        a token revoked or a user deactivated since it opened ends it)."""
        try:
            principal = await checker._principal(request)
        except _BadCredentials:
            return False
        needed = required_role(request.method, request.url.path)
        return principal is not None and (needed is None or principal.role.covers(needed))

    # Read by events.sse (infrastructure, which cannot import auth).
    app.state.principal_still_allowed = still_allowed

    async def forbidden(request: Request, exc: Exception) -> Response:
        if request.headers.get("hx-request") == "true" and not is_api_path(request.url.path):
            return htmx_error_line(str(exc))
        return JSONResponse({"detail": str(exc)}, status_code=403)

    app.add_exception_handler(service.Forbidden, forbidden)
    app.openapi = _openapi_with_bearer(app)  # type: ignore[method-assign]
