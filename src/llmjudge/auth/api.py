"""Auth JSON API: who am I, my password, API tokens, users (admin), login links (admin).

Access is decided by the central policy (policy.py) before these run; the service adds the
per-object rules (non-admins see and revoke only their own tokens).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from llmjudge.auth import service
from llmjudge.auth.deps import link_base
from llmjudge.auth.middleware import CurrentPrincipal
from llmjudge.auth.schemas import (
    LoginLinkOut,
    MeOut,
    PasswordChange,
    RowId,
    TokenCreated,
    TokenIn,
    TokenOut,
    UserIn,
    UserOut,
    UserPatch,
)
from llmjudge.infra.web import DbSession

router = APIRouter(prefix="/api", tags=["auth"])


@router.get("/me", response_model=MeOut)
async def get_me(principal: CurrentPrincipal) -> MeOut:
    """The user (and role) this request acts as."""
    return MeOut.model_validate(principal)


@router.post("/me/password", status_code=status.HTTP_204_NO_CONTENT)
async def change_my_password(change: PasswordChange, principal: CurrentPrincipal, db: DbSession):
    """Set your password (give `current_password` once one is set). Your other browser
    sessions end."""
    await service.change_password(db=db, principal=principal, change=change)


@router.get("/tokens", response_model=list[TokenOut])
async def list_tokens(
    principal: CurrentPrincipal, db: DbSession, all_users: bool = False
) -> list[TokenOut]:
    """Your API tokens (never the secrets); admins may ask for everyone's with `all_users`."""
    return await service.list_tokens(db=db, actor=principal, all_users=all_users)


@router.post("/tokens", response_model=TokenCreated, status_code=status.HTTP_201_CREATED)
async def create_token(
    token_in: TokenIn, principal: CurrentPrincipal, db: DbSession
) -> TokenCreated:
    """Create a personal API token. The `token` field is shown only in this response; send
    it as `Authorization: Bearer <token>`. Its role is at most yours (default: yours)."""
    return await service.create_token(db=db, actor=principal, token_in=token_in)


@router.delete("/tokens/{token_id}", response_model=TokenOut)
async def revoke_token(token_id: RowId, principal: CurrentPrincipal, db: DbSession) -> TokenOut:
    """Revoke a token at once (yours; admins: anyone's). Revoking twice is harmless."""
    return await service.revoke_token(db=db, actor=principal, token_id=token_id)


@router.get("/users", response_model=list[UserOut])
async def list_users(db: DbSession) -> list[UserOut]:
    """All users (admin)."""
    return await service.list_users(db=db)


@router.post("/users", response_model=UserOut, status_code=status.HTTP_201_CREATED)
async def create_user(user_in: UserIn, db: DbSession) -> UserOut:
    """Create a user (admin). Without a password, hand them a one-time login link."""
    return await service.create_user(db=db, user_in=user_in)


@router.patch("/users/{user_id}", response_model=UserOut)
async def update_user(user_id: RowId, patch: UserPatch, db: DbSession) -> UserOut:
    """Change a user's role, deactivate or reactivate them, or reset their password (admin).
    Deactivating or resetting ends their browser sessions; the last active admin stays."""
    return await service.update_user(db=db, user_id=user_id, patch=patch)


@router.post(
    "/users/{user_id}/login-link",
    response_model=LoginLinkOut,
    status_code=status.HTTP_201_CREATED,
)
async def create_login_link(user_id: RowId, request: Request, db: DbSession) -> LoginLinkOut:
    """A one-time login link for a user (admin): valid once, for 24 hours. Useful to invite
    someone, or to recover a lost password."""
    return await service.create_login_link(db=db, user_id=user_id, base=link_base(request))
