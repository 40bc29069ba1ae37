"""Sign-in pages, the account page (password, API tokens) and user administration.

Plain HTML forms (no JavaScript needed); each carries the session's CSRF token in a hidden
`csrf_token` field, rendered by the `csrf_token()` Jinja global registered here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import pass_context
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.auth import service
from llmjudge.auth.deps import link_base
from llmjudge.auth.middleware import CurrentPrincipal
from llmjudge.auth.models import User
from llmjudge.auth.schemas import (
    PasswordChange,
    Principal,
    RowId,
    TokenCreated,
    TokenIn,
    UserIn,
    UserPatch,
)
from llmjudge.auth.security import safe_next
from llmjudge.core import access as policy
from llmjudge.core.access import Role
from llmjudge.infra.config import Settings
from llmjudge.infra.web import PAGE_ERRORS, DbSession, refusal, render, templates

router = APIRouter(include_in_schema=False)

FormText = Annotated[str, Form()]
# What the new-token form offers: a token that lapses unless someone means it to last.
DEFAULT_TOKEN_DAYS = 90


def _principal_of(ctx: Any) -> Principal | None:
    request = ctx.get("request")
    return getattr(request.state, "principal", None) if request is not None else None


@pass_context
def csrf_token(ctx: Any) -> str:
    """The session's CSRF token, for `<input type="hidden" name="csrf_token">` and the meta."""
    principal = _principal_of(ctx)
    return (principal.csrf_token or "") if principal is not None else ""


@pass_context
def current_user(ctx: Any) -> Principal | None:
    return _principal_of(ctx)


@pass_context
def can(ctx: Any, method: str, path: str) -> bool:
    """`{% if can("POST", "/api/sessions") %}`: the central policy, for the signed-in user."""
    principal = _principal_of(ctx)
    return policy.can(principal.role if principal is not None else None, method, path)


def needs(method: str, path: str) -> str:
    """The title of a disabled action: "needs the researcher role"."""
    role = policy.required_role(method, path)
    return f"needs the {role.value} role" if role is not None else ""


templates.env.globals.update(csrf_token=csrf_token, current_user=current_user, can=can, needs=needs)


def _session_response(request: Request, raw: str, target: str) -> Response:
    settings: Settings = request.app.state.settings
    secure = settings.session_cookie_secure
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        settings.session_cookie_name,
        raw,
        max_age=settings.session_hours * 3600,
        path="/",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https" if secure is None else secure,
    )
    return response


async def _sign_in(request: Request, db: DbSession, user: User, target: str) -> Response:
    hours = request.app.state.settings.session_hours
    raw = await service.start_session(db=db, user=user, hours=hours)
    return _session_response(request, raw, target)


# --- sign in / out -------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: Annotated[str | None, Query()] = None):
    target = safe_next(next)
    if getattr(request.state, "principal", None) is not None:
        return RedirectResponse(target, status_code=303)
    return render(request, "auth/login.html", next=target)


@router.post("/login", response_class=HTMLResponse)
async def login_submit(
    request: Request,
    db: DbSession,
    username: Annotated[str, Form(max_length=200)],
    password: Annotated[str, Form(max_length=1024)],
    next: Annotated[str, Form(max_length=2000)] = "/",
):
    target = safe_next(next)
    ip = request.client.host if request.client else "unknown"
    name = username.strip().lower()
    limiter = request.app.state.login_limiter
    keys = (f"ip:{ip}", f"user:{name}")
    now = time.monotonic()
    wait = limiter.retry_after(*keys, now=now)
    if wait:
        response = render(
            request,
            "auth/login.html",
            status_code=429,
            next=target,
            username=username,
            error=f"Too many sign-in attempts. Try again in {wait} s.",
        )
        response.headers["Retry-After"] = str(wait)
        return response
    limiter.record(*keys, now=now)
    user = await service.authenticate(db=db, username=name, password=password)
    if user is None:
        return render(
            request,
            "auth/login.html",
            status_code=401,
            next=target,
            username=username,
            error="Wrong username or password.",
        )
    limiter.forget(*keys, at=now)
    return await _sign_in(request, db, user, target)


@router.get("/login/one-time", response_class=HTMLResponse)
async def one_time_page(request: Request, db: DbSession, token: str = ""):
    """Shows who the link signs in; a click (POST) uses it up. Link previewers that fetch
    URLs (chat apps) therefore cannot burn the link."""
    user = await service.peek_login_link(db=db, token=token) if token else None
    if user is None:
        return render(
            request,
            "auth/error.html",
            status_code=400,
            title="Link not valid",
            message="This sign-in link is invalid, already used or expired. "
            "Ask an admin for a new one.",
        )
    return render(request, "auth/one_time.html", token=token, link_user=user)


@router.post("/login/one-time", response_class=HTMLResponse)
async def one_time_submit(
    request: Request, db: DbSession, token: Annotated[str, Form(max_length=200)]
):
    user = await service.consume_login_link(db=db, token=token)
    if user is None:
        return render(
            request,
            "auth/error.html",
            status_code=400,
            title="Link not valid",
            message="This sign-in link is invalid, already used or expired.",
        )
    target = "/account" if user.password_hash is None else "/"
    return await _sign_in(request, db, user, target)


@router.post("/logout")
async def logout(request: Request, principal: CurrentPrincipal, db: DbSession):
    if principal.session_id is not None:
        await service.end_session(db=db, session_id=principal.session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(request.app.state.settings.session_cookie_name, path="/")
    return response


# --- account -------------------------------------------------------------------------------


# What a page of forms shows besides the answer to the form just sent.
PageContext = Callable[[AsyncSession, Principal], Awaitable[dict[str, Any]]]
FormPage = Callable[..., Awaitable[Response]]


def _form_page(name: str, context: PageContext) -> FormPage:
    """The renderer of the page of forms ``name``: its ``context``, then what the caller adds;
    ``refused``: the error of the form just sent, shown with its status."""

    async def page(
        request: Request,
        db: AsyncSession,
        principal: Principal,
        status_code: int = 200,
        refused: Exception | None = None,
        **ctx: Any,
    ) -> Response:
        if refused is not None:
            found = refusal(refused)
            status_code, ctx["error"] = found.status, found.message
        return render(request, name, status_code, **(await context(db, principal)), **ctx)

    return page


async def _account_context(db: AsyncSession, principal: Principal) -> dict[str, Any]:
    return {
        "tokens": await service.list_tokens(db=db, actor=principal),
        "roles": [r for r in Role if principal.role.covers(r)],
        "default_token_role": Role.lowest(principal.role, Role.researcher),
        "default_token_days": DEFAULT_TOKEN_DAYS,
    }


_account = _form_page("auth/account.html", _account_context)


@router.get("/account", response_class=HTMLResponse)
async def account_page(request: Request, principal: CurrentPrincipal, db: DbSession):
    return await _account(request, db, principal)


@router.post("/account/password", response_class=HTMLResponse)
async def account_password(
    request: Request,
    principal: CurrentPrincipal,
    db: DbSession,
    new_password: FormText,
    current_password: FormText = "",
):
    try:
        change = PasswordChange(
            current_password=current_password or None, new_password=new_password
        )
        await service.change_password(db=db, principal=principal, change=change)
    except PAGE_ERRORS as e:
        return await _account(request, db, principal, refused=e)
    return await _account(request, db, principal, notice="Password saved.")


@router.post("/account/tokens", response_class=HTMLResponse)
async def account_create_token(
    request: Request,
    principal: CurrentPrincipal,
    db: DbSession,
    name: FormText,
    role: FormText = "",
    expires_in_days: FormText = "",
):
    try:
        token_in = TokenIn(
            name=name, role=role or None, expires_in_days=expires_in_days.strip() or None
        )
        created: TokenCreated = await service.create_token(
            db=db, actor=principal, token_in=token_in
        )
    except PAGE_ERRORS as e:
        return await _account(request, db, principal, refused=e)
    return await _account(request, db, principal, status_code=201, new_token=created)


@router.post("/account/tokens/{token_id}/revoke")
async def account_revoke_token(
    token_id: RowId,
    principal: CurrentPrincipal,
    db: DbSession,
    back: Annotated[str, Form(max_length=200)] = "/account",
):
    await service.revoke_token(db=db, actor=principal, token_id=token_id)
    return RedirectResponse(safe_next(back, "/account"), status_code=303)


# --- user administration (admin, by policy: /settings/**) ----------------------------------


async def _users_context(db: AsyncSession, principal: Principal) -> dict[str, Any]:
    return {
        "users": await service.list_users(db=db),
        "tokens": await service.list_tokens(db=db, actor=principal, all_users=True),
        "roles": list(Role),
    }


_users = _form_page("auth/users.html", _users_context)


@router.get("/settings/users", response_class=HTMLResponse)
async def users_page(request: Request, principal: CurrentPrincipal, db: DbSession):
    return await _users(request, db, principal)


@router.post("/settings/users", response_class=HTMLResponse)
async def users_create(
    request: Request,
    principal: CurrentPrincipal,
    db: DbSession,
    username: FormText,
    role: FormText = Role.reviewer.value,
    password: FormText = "",
):
    try:
        user = await service.create_user(
            db=db, user_in=UserIn(username=username, role=role, password=password or None)
        )
    except PAGE_ERRORS as e:
        return await _users(request, db, principal, refused=e)
    return await _users(request, db, principal, 201, notice=f"User {user.username} created.")


@router.post("/settings/users/{user_id}", response_class=HTMLResponse)
async def users_update(
    request: Request,
    user_id: RowId,
    principal: CurrentPrincipal,
    db: DbSession,
    role: FormText = "",
    is_active: FormText = "",
):
    try:
        # The select sends "true"/"false"; UserPatch takes only a JSON boolean.
        active = {"true": True, "false": False}.get(is_active)
        patch = UserPatch(role=role or None, is_active=active)
        user = await service.update_user(db=db, user_id=user_id, patch=patch)
    except PAGE_ERRORS as e:
        return await _users(request, db, principal, refused=e)
    return await _users(request, db, principal, notice=f"User {user.username} saved.")


@router.post("/settings/users/{user_id}/login-link", response_class=HTMLResponse)
async def users_login_link(
    request: Request, user_id: RowId, principal: CurrentPrincipal, db: DbSession
):
    try:
        link = await service.create_login_link(db=db, user_id=user_id, base=link_base(request))
    except PAGE_ERRORS as e:
        return await _users(request, db, principal, refused=e)
    return await _users(request, db, principal, 201, login_link=link)
