"""Auth request and response models, and the principal a request acts as (``CurrentPrincipal``
is how any domain's route asks for it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Path, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from llmjudge.auth.security import PASSWORD_MAX, PASSWORD_MIN
from llmjudge.core.access import Role

Via = Literal["session", "token", "admin_token"]


@dataclass(frozen=True)
class Principal:
    """Who a request acts as. `user_id` is None only for LLMJUDGE_ADMIN_TOKEN."""

    username: str
    role: Role
    via: Via
    user_id: int | None = None
    session_id: int | None = None
    csrf_token: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role is Role.admin


def current_principal(request: Request) -> Principal:
    """The principal the middleware resolved (routes behind the policy always have one)."""
    principal = getattr(request.state, "principal", None)
    if principal is None:
        raise HTTPException(401, "not authenticated", headers={"WWW-Authenticate": "Bearer"})
    return principal


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]


Password = Annotated[str, Field(min_length=PASSWORD_MIN, max_length=PASSWORD_MAX)]
# Row ids are PostgreSQL integers: bounding them answers 422, not a database error.
ID_MAX = 2**31 - 1
RowId = Annotated[int, Path(ge=1, le=ID_MAX)]

USERNAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$"


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: str = Field(pattern=USERNAME_PATTERN, description="letters, digits, _ . @ -")
    role: Role = Role.reviewer
    password: Password | None = Field(
        default=None, description="omit it and hand the user a one-time login link instead"
    )

    @field_validator("username")
    @classmethod
    def lower(cls, v: str) -> str:
        return v.lower()


class UserPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Role | None = None
    is_active: StrictBool | None = None
    password: Password | None = None


class UserOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    username: str
    role: Role
    is_active: bool
    has_password: bool
    created_at: datetime
    last_login_at: datetime | None


class PasswordChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    current_password: str | None = Field(
        default=None, max_length=PASSWORD_MAX, description="required once a password is set"
    )
    new_password: Password


class MeOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    username: str
    role: Role
    via: Via
    user_id: int | None


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100)
    role: Role | None = Field(default=None, description="default: your own role; never above it")
    expires_in_days: int | None = Field(default=None, ge=1, le=3650)
    user_id: int | None = Field(
        default=None,
        ge=1,
        le=ID_MAX,
        description="admins only: the owner (default: you, or the first admin)",
    )


class TokenOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    user_id: int
    username: str
    name: str
    prefix: str = Field(description="the first characters of the token, to tell tokens apart")
    role: Role
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None = Field(description="updated at most every 5 minutes")
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="shown once: store it now, only its hash is kept")


class LoginLinkOut(BaseModel):
    url: str = Field(description="valid once, until expires_at")
    expires_at: datetime
