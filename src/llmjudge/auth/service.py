"""Users, tokens, sessions and login links in the database."""

from __future__ import annotations

import asyncio
import secrets
import sys
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from sqlalchemy import ColumnElement, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.auth.models import ApiToken, LoginLink, User, UserSession
from llmjudge.auth.schemas import (
    LoginLinkOut,
    PasswordChange,
    Principal,
    TokenCreated,
    TokenIn,
    TokenOut,
    UserIn,
    UserOut,
    UserPatch,
)
from llmjudge.auth.security import (
    hash_password,
    hash_token,
    new_api_token,
    new_secret,
    token_prefix,
    verify_password,
)
from llmjudge.core.access import Role
from llmjudge.infra import errors
from llmjudge.infra.config import Settings
from llmjudge.infra.db.rows import columns, get_or_not_found
from llmjudge.infra.errors import Conflict, Invalid, NotFound
from llmjudge.infra.events.hub import CHANNEL, credentials_changed_payload

LOGIN_LINK_HOURS = 24
# Writing last_used_at on every call would turn each read into a write.
TOKEN_TOUCH_INTERVAL = timedelta(minutes=5)


class Forbidden(errors.Forbidden):
    """403: the principal may call the route but not do this (e.g. act for another user)."""


async def _announce_credentials_changed(db: AsyncSession) -> None:
    """Open event streams re-check their credentials at once (events.sse), not at their next
    periodic re-check: NOTIFY in this transaction, sent to every web process on commit."""
    await db.execute(select(func.pg_notify(CHANNEL, credentials_changed_payload())))


def _now() -> datetime:
    return datetime.now(UTC)


def base_url(settings: Settings) -> str:
    """Where people reach this server, for links printed on the console."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.port}"


def _user_out(user: User) -> UserOut:
    return UserOut.model_validate(columns(user) | {"has_password": user.password_hash is not None})


def _token_out(token: ApiToken, username: str) -> TokenOut:
    return TokenOut.model_validate(columns(token) | {"username": username})


# --- resolving credentials (called by the middleware on every request) -------------------


async def resolve_token(*, db: AsyncSession, token: str) -> Principal | None:
    """The principal of a live API token; its role is capped by its owner's current role."""
    row = (
        await db.execute(
            select(ApiToken, User.username, User.role)
            .join(User, User.id == ApiToken.user_id)
            .where(
                ApiToken.token_hash == hash_token(token),
                ApiToken.revoked_at.is_(None),
                (ApiToken.expires_at.is_(None)) | (ApiToken.expires_at > _now()),
                User.is_active,
            )
        )
    ).one_or_none()
    if row is None:
        return None
    api_token, username, user_role = row
    now = _now()
    if api_token.last_used_at is None or api_token.last_used_at < now - TOKEN_TOUCH_INTERVAL:
        await db.execute(
            update(ApiToken).where(ApiToken.id == api_token.id).values(last_used_at=now)
        )
        await db.commit()
    return Principal(
        username=username,
        role=Role.lowest(Role(api_token.role), Role(user_role)),
        via="token",
        user_id=api_token.user_id,
    )


async def resolve_session(*, db: AsyncSession, session_token: str) -> Principal | None:
    row = (
        await db.execute(
            select(UserSession.id, UserSession.csrf_token, User.id, User.username, User.role)
            .join(User, User.id == UserSession.user_id)
            .where(
                UserSession.session_hash == hash_token(session_token),
                UserSession.expires_at > _now(),
                User.is_active,
            )
        )
    ).one_or_none()
    if row is None:
        return None
    session_id, csrf, user_id, username, role = row
    return Principal(
        username=username,
        role=Role(role),
        via="session",
        user_id=user_id,
        session_id=session_id,
        csrf_token=csrf,
    )


# --- browser sessions ----------------------------------------------------------------------


async def authenticate(*, db: AsyncSession, username: str, password: str) -> User | None:
    """The active user with this name and password, or None (same cost either way)."""
    user = (
        await db.execute(select(User).where(User.username == username.strip().lower()))
    ).scalar_one_or_none()
    hashed = user.password_hash if user is not None else None
    ok = await asyncio.to_thread(verify_password, hashed, password)
    return user if ok and user is not None and user.is_active else None


async def start_session(*, db: AsyncSession, user: User, hours: int) -> str:
    """Create a session for `user` and return the cookie value (only its hash is kept)."""
    raw = new_secret()
    now = _now()
    # Expired sessions and links are cleared here, where it costs nobody a request.
    await db.execute(delete(UserSession).where(UserSession.expires_at <= now))
    await db.execute(
        delete(LoginLink).where((LoginLink.expires_at <= now) | LoginLink.used_at.isnot(None))
    )
    db.add(
        UserSession(
            user_id=user.id,
            session_hash=hash_token(raw),
            csrf_token=new_secret(),
            expires_at=now + timedelta(hours=hours),
        )
    )
    await db.execute(update(User).where(User.id == user.id).values(last_login_at=now))
    await db.commit()
    return raw


async def end_session(*, db: AsyncSession, session_id: int) -> None:
    await db.execute(delete(UserSession).where(UserSession.id == session_id))
    await _announce_credentials_changed(db)
    await db.commit()


# --- users ---------------------------------------------------------------------------------


async def _get_user(db: AsyncSession, user_id: int) -> User:
    user = await get_or_not_found(db, User, user_id, "user")
    return user


async def list_users(*, db: AsyncSession) -> list[UserOut]:
    users = (await db.execute(select(User).order_by(User.id))).scalars()
    return [_user_out(u) for u in users]


async def create_user(*, db: AsyncSession, user_in: UserIn) -> UserOut:
    hashed = await asyncio.to_thread(hash_password, user_in.password) if user_in.password else None
    user = User(username=user_in.username, role=user_in.role.value, password_hash=hashed)
    db.add(user)
    try:
        await db.commit()
    except IntegrityError as e:
        await db.rollback()
        raise Conflict(f"a user named {user_in.username!r} already exists") from e
    await db.refresh(user)
    return _user_out(user)


async def _other_active_admins(db: AsyncSession, user_id: int) -> int:
    return (
        await db.execute(
            select(func.count())
            .select_from(User)
            .where(User.role == Role.admin.value, User.is_active, User.id != user_id)
        )
    ).scalar_one()


async def update_user(*, db: AsyncSession, user_id: int, patch: UserPatch) -> UserOut:
    """Change a user's role, active flag or password; the last active admin stays one."""
    user = await _get_user(db, user_id)
    demoted = patch.role is not None and patch.role is not Role.admin
    deactivated = patch.is_active is False
    if user.role == Role.admin.value and user.is_active and (demoted or deactivated):
        if await _other_active_admins(db, user.id) == 0:
            raise Conflict("this is the last active admin; make another admin first")
    if patch.role is not None:
        user.role = patch.role.value
    if patch.is_active is not None:
        user.is_active = patch.is_active
    if patch.password is not None:
        user.password_hash = await asyncio.to_thread(hash_password, patch.password)
    if patch.password is not None or deactivated:
        # A reset password or a disabled account ends every browser session of that user.
        await db.execute(delete(UserSession).where(UserSession.user_id == user.id))
    if patch.password is not None or deactivated or patch.role is not None:
        await _announce_credentials_changed(db)  # a lower role may lose a stream's route too
    await db.commit()
    return _user_out(user)


async def change_password(
    *, db: AsyncSession, principal: Principal, change: PasswordChange
) -> None:
    """A user sets their own password; other sessions of theirs end."""
    if principal.user_id is None:
        raise Invalid("the LLMJUDGE_ADMIN_TOKEN principal has no password")
    user = await _get_user(db, principal.user_id)
    if user.password_hash is None and principal.via != "session":
        # A first password proves nothing but possession of whatever made the request: only
        # a browser session (which for a passwordless user a one-time link created) may set
        # it, never an API token, which may be a low-role token of the same user.
        raise Forbidden(
            "set a first password in the browser session opened by your one-time login link, "
            "not with an API token"
        )
    if user.password_hash is not None and not await asyncio.to_thread(
        verify_password, user.password_hash, change.current_password or ""
    ):
        raise Forbidden("the current password is wrong")
    user.password_hash = await asyncio.to_thread(hash_password, change.new_password)
    others = UserSession.user_id == user.id
    if principal.session_id is not None:
        others &= UserSession.id != principal.session_id
    await db.execute(delete(UserSession).where(others))
    await _announce_credentials_changed(db)
    await db.commit()


async def _first_active_admin(db: AsyncSession) -> User | None:
    return (
        await db.execute(
            select(User)
            .where(User.role == Role.admin.value, User.is_active)
            .order_by(User.id)
            .limit(1)
        )
    ).scalar_one_or_none()


# --- API tokens ----------------------------------------------------------------------------


async def create_token(*, db: AsyncSession, actor: Principal, token_in: TokenIn) -> TokenCreated:
    """A new token for the actor (admins: for anyone), never above the actor's or owner's role."""
    if token_in.user_id is not None and token_in.user_id != actor.user_id:
        if not actor.is_admin:
            raise Forbidden("only admins create tokens for other users")
        # A missing owner is a wrong body, not a missing resource: 422, as for other bodies
        # that name an id (the URL, which 404 is about, names no user here).
        found = await db.get(User, token_in.user_id)
        if found is None:
            raise Invalid(f"user_id {token_in.user_id}: no such user; give an existing user's id")
        owner = found
    elif actor.user_id is not None:
        owner = await _get_user(db, actor.user_id)
    else:
        owner = await _first_active_admin(db)
        if owner is None:
            raise Invalid("no active admin user to own the token; give user_id")
    ceiling = Role.lowest(actor.role, Role(owner.role))
    role = token_in.role or ceiling
    if not ceiling.covers(role):
        raise Invalid(f"a token's role cannot be above {ceiling.value} here")
    if not owner.is_active:
        raise Invalid(f"user {owner.username!r} is deactivated")
    raw = new_api_token()
    expires = (
        _now() + timedelta(days=token_in.expires_in_days) if token_in.expires_in_days else None
    )
    token = ApiToken(
        user_id=owner.id,
        name=token_in.name,
        prefix=token_prefix(raw),
        token_hash=hash_token(raw),
        role=role.value,
        expires_at=expires,
    )
    db.add(token)
    await db.commit()
    await db.refresh(token)
    return TokenCreated(**_token_out(token, owner.username).model_dump(), token=raw)


async def list_tokens(
    *, db: AsyncSession, actor: Principal, all_users: bool = False
) -> list[TokenOut]:
    """The actor's tokens; admins may ask for everyone's."""
    query = select(ApiToken, User.username).join(User, User.id == ApiToken.user_id)
    if not (all_users and actor.is_admin):
        query = query.where(ApiToken.user_id == actor.user_id)
    rows = await db.execute(query.order_by(ApiToken.id))
    return [_token_out(t, name) for t, name in rows]


async def revoke_token(*, db: AsyncSession, actor: Principal, token_id: int) -> TokenOut:
    """Revoke at once (idempotent). Someone else's token is 'not found' unless you are admin."""
    row = (
        await db.execute(
            select(ApiToken, User.username)
            .join(User, User.id == ApiToken.user_id)
            .where(ApiToken.id == token_id)
        )
    ).one_or_none()
    if row is None or not (actor.is_admin or row[0].user_id == actor.user_id):
        raise NotFound(f"token {token_id} not found")
    token, username = row
    if token.revoked_at is None:
        token.revoked_at = _now()
        await _announce_credentials_changed(db)
        await db.commit()
    return _token_out(token, username)


# --- one-time login links ------------------------------------------------------------------


async def create_login_link(
    *, db: AsyncSession, user_id: int, base: str, hours: int = LOGIN_LINK_HOURS
) -> LoginLinkOut:
    user = await _get_user(db, user_id)
    if not user.is_active:
        raise Invalid(f"user {user.username!r} is deactivated")
    raw = new_secret()
    expires = _now() + timedelta(hours=hours)
    db.add(LoginLink(user_id=user.id, token_hash=hash_token(raw), expires_at=expires))
    await db.commit()
    return LoginLinkOut(
        url=f"{base}/login/one-time?{urlencode({'token': raw})}", expires_at=expires
    )


def _live_link(raw: str) -> ColumnElement[bool]:
    return (
        (LoginLink.token_hash == hash_token(raw))
        & LoginLink.used_at.is_(None)
        & (LoginLink.expires_at > _now())
    )


async def peek_login_link(*, db: AsyncSession, token: str) -> User | None:
    """The user a live link would sign in, without using the link up."""
    return (
        await db.execute(
            select(User)
            .join(LoginLink, LoginLink.user_id == User.id)
            .where(_live_link(token), User.is_active)
        )
    ).scalar_one_or_none()


async def consume_login_link(*, db: AsyncSession, token: str) -> User | None:
    """Use a link up (one UPDATE, so two concurrent clicks cannot both succeed)."""
    user_id = (
        await db.execute(
            update(LoginLink)
            .where(_live_link(token))
            .values(used_at=_now())
            .returning(LoginLink.user_id)
        )
    ).scalar_one_or_none()
    await db.commit()
    if user_id is None:
        return None
    user = await db.get(User, user_id)
    return user if user is not None and user.is_active else None


async def ensure_first_admin(*, db: AsyncSession, base: str) -> str | None:
    """While no active admin has a password, make sure one exists and return a fresh
    one-time login link for it (printed on the console at each start, like Jupyter)."""
    with_password = (
        await db.execute(
            select(func.count())
            .select_from(User)
            .where(User.role == Role.admin.value, User.is_active, User.password_hash.isnot(None))
        )
    ).scalar_one()
    if with_password:
        return None
    admin = await _first_active_admin(db)
    if admin is None:
        taken = (await db.execute(select(User.id).where(User.username == "admin"))).first()
        name = "admin" if taken is None else f"admin-{secrets.token_hex(2)}"
        admin = User(username=name, role=Role.admin.value)
        db.add(admin)
        await db.commit()
        await db.refresh(admin)
    link = await create_login_link(db=db, user_id=admin.id, base=base)
    return link.url


def login_banner(url: str) -> str:
    """The first admin's sign-in link in a frame, so it stands out of the server's log."""
    lines = [
        "No admin has a password yet. Sign in once with this link",
        f"(valid once, for {LOGIN_LINK_HOURS} h):",
        "",
        url,
    ]
    width = max(len(line) for line in lines)
    rule = "+" + "-" * (width + 2) + "+"
    body = [f"| {line.ljust(width)} |" for line in lines]
    return "\n".join(["", rule, *body, rule, ""])


async def announce_first_admin(
    *, db: AsyncSession, settings: Settings, echo: bool = True
) -> str | None:
    """At start: the first admin's one-time login link, if needed, printed on the console
    (``echo``) or returned for the caller to print later (the CLI prints it last)."""
    url = await ensure_first_admin(db=db, base=base_url(settings))
    if url is not None and echo:
        print(login_banner(url), file=sys.stderr, flush=True)
    return url


async def create_token_for(
    *, db: AsyncSession, name: str, role: Role, username: str | None = None
) -> TokenCreated:
    """A token for `username` (default: the first active admin), as the CLI makes them:
    whoever can reach the database is trusted like an admin."""
    if username is None:
        owner = await _first_active_admin(db)
        if owner is None:
            raise NotFound("no active admin user; start `llmjudge serve` once or give --user")
    else:
        owner = (
            await db.execute(select(User).where(User.username == username.strip().lower()))
        ).scalar_one_or_none()
        if owner is None:
            raise NotFound(f"no user named {username!r}")
    actor = Principal(username="cli", role=Role.admin, via="admin_token")
    return await create_token(
        db=db, actor=actor, token_in=TokenIn(name=name, role=role, user_id=owner.id)
    )
