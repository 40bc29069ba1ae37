"""Users, their API tokens, browser sessions and one-time login links.

Every secret is stored as its SHA-256 (see security.py); the plain value is shown once.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, CheckConstraint, DateTime, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from llmjudge.infra.db.base import Base, created_at_column, owned_by

ROLES = ("reviewer", "researcher", "admin")
_ROLE_CHECK = f"role IN {ROLES!r}"


class User(Base):
    __tablename__ = "users"
    __table_args__ = (CheckConstraint(_ROLE_CHECK, name="role"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    # Stored lower-case: names are compared case-insensitively.
    username: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    password_hash: Mapped[str | None] = mapped_column(Text)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    created_at: Mapped[datetime] = created_at_column()
    last_login_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ApiToken(Base):
    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint(_ROLE_CHECK, name="role"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = owned_by("users", index=True)
    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # Capped by the owner's role each time the token is used.
    role: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = created_at_column()
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class UserSession(Base):
    __tablename__ = "user_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = owned_by("users", index=True)
    session_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The synchroniser token: useless without the session cookie, so kept in clear.
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = created_at_column()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class LoginLink(Base):
    __tablename__ = "login_links"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = owned_by("users", index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = created_at_column()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
