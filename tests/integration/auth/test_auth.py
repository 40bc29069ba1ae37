"""Users, tokens, sessions, CSRF, login rate limit and one-time links, through the app."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge import cli
from llmjudge.auth import service
from llmjudge.auth.models import ApiToken, LoginLink, User, UserSession
from llmjudge.auth.security import hash_password, hash_token
from llmjudge.infra.config import Settings
from llmjudge.infra.db.engine import make_engine, make_sessionmaker
from tests.conftest import drop_database, make_client, new_database

PASSWORD = "a-long-enough-password"


def browser(app: FastAPI, ip: str = "127.0.0.1", https: bool = False) -> httpx.AsyncClient:
    """A cookie-keeping client without any Authorization header, from a given address."""
    transport = httpx.ASGITransport(app=app, client=(ip, 40000))
    scheme = "https" if https else "http"
    return httpx.AsyncClient(transport=transport, base_url=f"{scheme}://testserver")


async def new_user(client: httpx.AsyncClient, name: str, role: str, password: str | None = None):
    body = {"username": name, "role": role} | ({"password": password} if password else {})
    r = await client.post("/api/users", json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def new_token(client: httpx.AsyncClient, **body) -> str:
    r = await client.post("/api/tokens", json=body)
    assert r.status_code == 201, r.text
    return r.json()["token"]


async def login(c: httpx.AsyncClient, username: str, password: str = PASSWORD) -> httpx.Response:
    return await c.post("/login", data={"username": username, "password": password, "next": "/"})


def csrf_of(html: str) -> str:
    match = re.search(r'<meta name="csrf-token" content="([^"]+)"', html)
    assert match, "no csrf meta tag"
    return match.group(1)


@pytest.fixture(scope="module")
async def bob(client: httpx.AsyncClient) -> dict:
    return await new_user(client, "bob", "researcher", PASSWORD)


@pytest.fixture
async def bob_browser(app: FastAPI, bob: dict) -> AsyncIterator[httpx.AsyncClient]:
    async with browser(app) as c:
        r = await login(c, "bob")
        assert r.status_code == 303, r.text
        yield c


# --- who may call what ---------------------------------------------------------------------


async def test_anonymous_api_gets_401_and_pages_redirect(anon_client: httpx.AsyncClient):
    r = await anon_client.get("/api/pillars")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "Bearer" in r.json()["detail"]
    r = await anon_client.get("/threads?q=x")
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=%2Fthreads%3Fq%3Dx"
    r = await anon_client.get("/threads", headers={"HX-Request": "true"})
    assert r.status_code == 401 and r.headers["hx-redirect"].startswith("/login?next=")
    assert (await anon_client.get("/healthz")).status_code == 200
    assert (await anon_client.get("/login")).status_code == 200


async def test_bad_bearer_is_refused_everywhere_but_public_routes(app: FastAPI):
    async with make_client(app, "lj_not-a-real-token") as c:
        for path in ("/api/pillars", "/threads"):
            r = await c.get(path)
            assert r.status_code == 401
            assert r.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        assert (await c.get("/healthz")).status_code == 200
    async with make_client(app) as c:
        r = await c.get("/api/pillars", headers={"Authorization": "Basic Ym9iOnNlY3JldA=="})
        assert r.status_code == 401


async def test_admin_token_from_settings_is_an_admin(client: httpx.AsyncClient):
    me = (await client.get("/api/me")).json()
    assert me == {"username": "admin-token", "role": "admin", "via": "admin_token", "user_id": None}
    assert (await client.get("/api/users")).status_code == 200


async def test_roles_enforced(
    client: httpx.AsyncClient,
    reviewer_client: httpx.AsyncClient,
    researcher_client: httpx.AsyncClient,
):
    provider = {"name": "p-roles", "kind": "simulator"}
    assert (await reviewer_client.post("/api/providers", json=provider)).status_code == 403
    assert (await researcher_client.post("/api/providers", json=provider)).status_code == 403
    r = await reviewer_client.post("/api/pillars", json={"name": "by-reviewer"})
    assert r.status_code == 403 and "researcher" in r.json()["detail"]
    assert (await researcher_client.post("/api/pillars", json={"name": "p1"})).status_code == 201
    assert (await reviewer_client.get("/api/pillars")).status_code == 200
    assert (await reviewer_client.get("/api/users")).status_code == 403
    assert (await researcher_client.get("/api/users")).status_code == 403
    # Feedback is the reviewer's job: the policy lets the request through to the route
    # (404: there is no such persona here).
    r = await reviewer_client.post(
        "/api/personas/999999/decisions/1/feedback", json={"human_label": "correct"}
    )
    assert r.status_code not in (401, 403)


async def test_token_lifecycle_and_revocation(client: httpx.AsyncClient, app: FastAPI):
    alice = await new_user(client, "alice", "researcher")
    token = await new_token(client, name="alice-ci", user_id=alice["id"])
    async with make_client(app, token) as alice_c:
        me = (await alice_c.get("/api/me")).json()
        assert me["username"] == "alice" and me["role"] == "researcher" and me["via"] == "token"
        assert (await alice_c.post("/api/pillars", json={"name": "alice-p"})).status_code == 201
        listed = (await alice_c.get("/api/tokens")).json()
        assert [t["name"] for t in listed] == ["alice-ci"]
        assert "token" not in listed[0] and token.startswith(listed[0]["prefix"])
        # A researcher cannot mint an admin token, nor act on other people's tokens.
        r = await alice_c.post("/api/tokens", json={"name": "up", "role": "admin"})
        assert r.status_code == 422
        r = await alice_c.post("/api/tokens", json={"name": "x", "user_id": alice["id"] + 999})
        assert r.status_code == 403
        others = (await client.get("/api/tokens", params={"all_users": True})).json()
        foreign = next(t for t in others if t["username"] != "alice")
        assert (await alice_c.delete(f"/api/tokens/{foreign['id']}")).status_code == 404
        assert (await alice_c.get("/api/tokens", params={"all_users": True})).json() == listed
        # A narrower token of her own: reviewer rights only.
        narrow = await new_token(alice_c, name="read-only", role="reviewer")
        async with make_client(app, narrow) as ro:
            assert (await ro.get("/api/pillars")).status_code == 200
            assert (await ro.post("/api/pillars", json={"name": "nope"})).status_code == 403
        # Revoked: refused at once.
        r = await alice_c.delete(f"/api/tokens/{listed[0]['id']}")
        assert r.status_code == 200 and r.json()["revoked_at"] is not None
        r = await alice_c.get("/api/me")
        assert r.status_code == 401 and "invalid_token" in r.headers["www-authenticate"]


async def test_token_role_is_capped_by_its_owner(
    client: httpx.AsyncClient, app: FastAPI, db: AsyncSession
):
    carol = await new_user(client, "carol", "researcher")
    token = await new_token(client, name="carol", user_id=carol["id"])
    async with make_client(app, token) as c:
        assert (await c.post("/api/pillars", json={"name": "carol-1"})).status_code == 201
        r = await client.patch(f"/api/users/{carol['id']}", json={"role": "reviewer"})
        assert r.status_code == 200
        assert (await c.post("/api/pillars", json={"name": "carol-2"})).status_code == 403
        assert (await c.get("/api/me")).json()["role"] == "reviewer"
        await client.patch(f"/api/users/{carol['id']}", json={"is_active": False})
        assert (await c.get("/api/me")).status_code == 401
    # An expired token is refused.
    await client.patch(f"/api/users/{carol['id']}", json={"is_active": True})
    token = await new_token(client, name="soon", user_id=carol["id"], expires_in_days=1)
    await db.execute(
        update(ApiToken)
        .where(ApiToken.token_hash == hash_token(token))
        .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    )
    await db.commit()
    async with make_client(app, token) as c:
        assert (await c.get("/api/me")).status_code == 401


async def test_last_admin_cannot_be_demoted(client: httpx.AsyncClient):
    users = (await client.get("/api/users")).json()
    admins = [u for u in users if u["role"] == "admin" and u["is_active"]]
    assert len(admins) == 1  # the one created at first start
    r = await client.patch(f"/api/users/{admins[0]['id']}", json={"role": "reviewer"})
    assert r.status_code == 409


# --- browser sessions and CSRF -------------------------------------------------------------


async def test_login_sets_a_hardened_cookie_stored_hashed(app: FastAPI, bob: dict, db):
    async with browser(app) as c:
        r = await c.post(
            "/login", data={"username": "BOB", "password": PASSWORD, "next": "/threads"}
        )
        assert r.status_code == 303 and r.headers["location"] == "/threads"
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie and "path=/" in cookie
        assert "secure" not in cookie  # plain http here
        raw = c.cookies["llmjudge_session"]
        stored = (await db.execute(select(UserSession.session_hash))).scalars().all()
        assert hash_token(raw) in stored and raw not in stored
        page = await c.get("/threads")
        assert page.status_code == 200 and "bob · researcher" in page.text
        r = await c.get("/login?next=/pillars")  # signed in already: straight on
        assert r.status_code == 303 and r.headers["location"] == "/pillars"
    async with browser(app, https=True) as c:
        r = await login(c, "bob")
        assert "secure" in r.headers["set-cookie"].lower()


async def test_wrong_password_and_open_redirects_refused(app: FastAPI, bob: dict):
    async with browser(app, ip="10.9.9.1") as c:
        r = await login(c, "bob", "wrong-password!")
        assert r.status_code == 401 and "Wrong username or password" in r.text
        assert "llmjudge_session" not in c.cookies
        r = await c.post(
            "/login",
            data={"username": "bob", "password": PASSWORD, "next": "//evil.example/x"},
        )
        assert r.status_code == 303 and r.headers["location"] == "/"


async def test_csrf_required_for_cookie_writes(bob_browser: httpx.AsyncClient):
    c = bob_browser
    page = await c.get("/account")
    token = csrf_of(page.text)
    assert f'name="csrf_token" value="{token}"' in page.text
    # JSON write with the cookie but without the header: refused.
    r = await c.post("/api/pillars", json={"name": "csrf-1"})
    assert r.status_code == 403 and "CSRF" in r.json()["detail"]
    r = await c.post("/api/pillars", json={"name": "csrf-1"}, headers={"X-CSRF-Token": "nope"})
    assert r.status_code == 403
    r = await c.post("/api/pillars", json={"name": "csrf-1"}, headers={"X-CSRF-Token": token})
    assert r.status_code == 201
    # Plain form posts: the hidden field.
    r = await c.post("/account/tokens", data={"name": "from-form"})
    assert r.status_code == 403 and "CSRF" in r.text
    r = await c.post("/account/tokens", data={"name": "from-form", "csrf_token": token})
    assert r.status_code == 201 and 'id="new-token-value"' in r.text
    # Multipart (the import form without JavaScript): the field is read, the file still
    # reaches the route intact.
    files = {"file": ("t.csv", b"pillar,content\ncsrf-mp,hello\n", "text/csv")}
    r = await c.post("/import", files=files)
    assert r.status_code == 403
    r = await c.post("/import", files=files, data={"csrf_token": token})
    assert r.status_code == 200 and "Imported 1 thread(s)" in r.text
    assert "csrf-mp" in (await c.get("/api/pillars")).text


async def test_bearer_requests_need_no_csrf(researcher_client: httpx.AsyncClient):
    assert "cookie" not in researcher_client.headers
    r = await researcher_client.post("/api/pillars", json={"name": "bearer-no-csrf"})
    assert r.status_code == 201


async def test_cross_site_login_refused(app: FastAPI, bob: dict):
    async with browser(app, ip="10.9.9.2") as c:
        r = await c.post(
            "/login",
            data={"username": "bob", "password": PASSWORD},
            headers={"Origin": "https://evil.example"},
        )
        assert r.status_code == 403 and "llmjudge_session" not in c.cookies
        r = await c.post(
            "/login",
            data={"username": "bob", "password": PASSWORD},
            headers={"Origin": "http://testserver"},
        )
        assert r.status_code == 303


async def test_logout_ends_the_session(bob_browser: httpx.AsyncClient, db: AsyncSession):
    c = bob_browser
    token = csrf_of((await c.get("/")).text)
    raw = c.cookies["llmjudge_session"]
    r = await c.post("/logout", data={"csrf_token": token})
    assert r.status_code == 303 and r.headers["location"] == "/login"
    found = await db.execute(select(UserSession).where(UserSession.session_hash == hash_token(raw)))
    assert found.first() is None
    c.cookies.set("llmjudge_session", raw)  # replaying the old cookie gets nowhere
    assert (await c.get("/account")).status_code == 303


async def test_reviewer_pages(app: FastAPI, client: httpx.AsyncClient):
    await new_user(client, "rita", "reviewer", PASSWORD)
    async with browser(app) as c:
        await login(c, "rita")
        assert (await c.get("/threads")).status_code == 200
        r = await c.get("/settings/users")
        assert r.status_code == 403 and "admin role" in r.text
        token = csrf_of((await c.get("/account")).text)
        r = await c.post("/demo", data={"csrf_token": token})
        assert r.status_code == 403 and "researcher role" in r.text


async def test_password_change_and_admin_pages(app: FastAPI, client: httpx.AsyncClient):
    await new_user(client, "dora", "admin", PASSWORD)
    async with browser(app) as c:
        await login(c, "dora")
        token = csrf_of((await c.get("/settings/users")).text)
        r = await c.post(
            "/settings/users",
            data={"username": "eve", "role": "reviewer", "csrf_token": token},
        )
        assert r.status_code == 201 and "User eve created" in r.text
        eve = next(u for u in (await client.get("/api/users")).json() if u["username"] == "eve")
        r = await c.post(f"/settings/users/{eve['id']}/login-link", data={"csrf_token": token})
        assert r.status_code == 201 and "/login/one-time?token=" in r.text
        r = await c.post(
            "/account/password",
            data={
                "current_password": "wrong-one-here",
                "new_password": "x" * 12,
                "csrf_token": token,
            },
        )
        assert r.status_code == 403  # auth's Forbidden, as the API answers it
        r = await c.post(
            "/account/password",
            data={"current_password": PASSWORD, "new_password": "short", "csrf_token": token},
        )
        assert r.status_code == 422
        r = await c.post(
            "/account/password",
            data={
                "current_password": PASSWORD,
                "new_password": "another-long-password",
                "csrf_token": token,
            },
        )
        assert r.status_code == 200 and "Password saved" in r.text
    async with browser(app) as c:
        assert (await login(c, "dora", "another-long-password")).status_code == 303


# --- rate limit, one-time links, first start, CLI -----------------------------------------


async def test_login_rate_limit(app: FastAPI, client: httpx.AsyncClient):
    await new_user(client, "gus", "reviewer", PASSWORD)
    limit = app.state.settings.login_attempts_per_minute
    async with browser(app, ip="10.0.0.66") as c:
        assert (await login(c, "gus")).status_code == 303  # successes are not counted
        for _ in range(limit):
            assert (await login(c, "gus", "wrong-password!")).status_code == 401
        r = await login(c, "gus")  # even the right password waits now
        assert r.status_code == 429 and 0 < int(r.headers["retry-after"]) <= 60
        assert "Too many sign-in attempts" in r.text
    # The username is limited from any address, and the address for any username.
    async with browser(app, ip="10.0.0.67") as c:
        assert (await login(c, "gus")).status_code == 429
    async with browser(app, ip="10.0.0.66") as c:
        assert (await login(c, "bob")).status_code == 429


async def test_one_time_link_works_once(app: FastAPI, client: httpx.AsyncClient, db):
    fay = await new_user(client, "fay", "researcher")
    r = await client.post(f"/api/users/{fay['id']}/login-link")
    assert r.status_code == 201
    url = urlsplit(r.json()["url"])
    assert url.path == "/login/one-time"
    token = parse_qs(url.query)["token"][0]
    async with browser(app) as c:
        # Looking at the link (or a chat app previewing it) does not use it up.
        for _ in range(2):
            r = await c.get(f"/login/one-time?token={token}")
            assert r.status_code == 200 and "Sign in as fay" in r.text
        r = await c.post("/login/one-time", data={"token": token})
        assert r.status_code == 303 and r.headers["location"] == "/account"
        assert (await c.get("/api/me", headers={"X-CSRF-Token": "x"})).json()["username"] == "fay"
    async with browser(app) as c:
        assert (await c.post("/login/one-time", data={"token": token})).status_code == 400
        assert (await c.get(f"/login/one-time?token={token}")).status_code == 400
        assert "llmjudge_session" not in c.cookies
    # Expired links are refused too.
    r = await client.post(f"/api/users/{fay['id']}/login-link")
    token = parse_qs(urlsplit(r.json()["url"]).query)["token"][0]
    await db.execute(
        update(LoginLink)
        .where(LoginLink.token_hash == hash_token(token))
        .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    )
    await db.commit()
    async with browser(app) as c:
        assert (await c.post("/login/one-time", data={"token": token})).status_code == 400


async def test_first_start_makes_an_admin_with_a_one_time_link(
    db: AsyncSession, settings: Settings, pg, template_db: str
):
    # The app's start made an "admin" without a password (and printed a link for it).
    admin = (await db.execute(select(User).where(User.username == "admin"))).scalar_one()
    assert admin.role == "admin" and admin.password_hash is None
    # On an empty database, step by step.
    name = await new_database(pg, template_db)
    engine = make_engine(pg.url(name), pool_size=1)
    try:
        async with make_sessionmaker(engine)() as fresh:
            url = await service.ensure_first_admin(db=fresh, base="http://127.0.0.1:8000")
            assert url is not None and url.startswith("http://127.0.0.1:8000/login/one-time?token=")
            token = parse_qs(urlsplit(url).query)["token"][0]
            user = await service.consume_login_link(db=fresh, token=token)
            assert user is not None and user.username == "admin" and user.role == "admin"
            assert await service.consume_login_link(db=fresh, token=token) is None
            # Until an admin has a password, each start prints a fresh link for the same user.
            again = await service.ensure_first_admin(db=fresh, base="http://x")
            assert again is not None and again != url
            assert len((await fresh.execute(select(User))).all()) == 1
            await fresh.execute(update(User).values(password_hash=hash_password(PASSWORD)))
            await fresh.commit()
            assert await service.ensure_first_admin(db=fresh, base="http://x") is None
    finally:
        await engine.dispose()
        await drop_database(pg, name)
    local = settings.model_copy(update={"host": "0.0.0.0", "port": 9})
    assert service.base_url(local) == "http://127.0.0.1:9"
    public = settings.model_copy(update={"public_url": "https://judge.example/"})
    assert service.base_url(public) == "https://judge.example"


async def test_cli_token_create(
    app: FastAPI, settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys
):
    monkeypatch.setattr(cli, "get_settings", lambda: settings)
    # The CLI runs its own event loop, as from a shell: give it a thread.
    args = ["token", "create", "--name", "ci", "--role", "researcher"]
    assert await asyncio.to_thread(cli.main, args) == 0
    token = capsys.readouterr().out.strip()
    assert re.fullmatch(r"lj_[A-Za-z0-9_-]{40,}", token)
    async with make_client(app, token) as c:
        me = (await c.get("/api/me")).json()
        assert me["role"] == "researcher" and me["username"] == "admin"
    args = ["token", "create", "--name", "x", "--role", "admin", "--user", "nobody"]
    assert await asyncio.to_thread(cli.main, args) == 2
