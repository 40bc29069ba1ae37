"""Access (issue 14): a first password is set only from the browser session a one-time
link opened, never with an API token (a low-role token of a passwordless admin must not
become admin)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
from fastapi import FastAPI

from tests.conftest import make_client
from tests.integration.auth.test_auth import browser, csrf_of, login, new_token, new_user

IN_PROCESS_WORKERS = False


async def test_a_token_cannot_set_a_first_password(app: FastAPI, client: httpx.AsyncClient) -> None:
    boss = await new_user(client, "boss", "admin")  # no password: invited by link
    weak = await new_token(client, name="ci", role="reviewer", user_id=boss["id"])
    async with make_client(app, weak) as c:
        r = await c.post("/api/me/password", json={"new_password": "taken-over-password"})
        assert r.status_code == 403, r.text
        assert "one-time login link" in r.json()["detail"]
    async with browser(app) as c:  # the password was not set: it cannot sign in
        assert (await login(c, "boss", "taken-over-password")).status_code == 401
    # The link's browser session may set it.
    r = await client.post(f"/api/users/{boss['id']}/login-link")
    token = parse_qs(urlsplit(r.json()["url"]).query)["token"][0]
    async with browser(app) as c:
        assert (await c.post("/login/one-time", data={"token": token})).status_code == 303
        csrf = csrf_of((await c.get("/account")).text)
        r = await c.post(
            "/api/me/password",
            json={"new_password": "the-real-password"},
            headers={"X-CSRF-Token": csrf},
        )
        assert r.status_code == 204, r.text
    async with browser(app) as c:
        assert (await login(c, "boss", "the-real-password")).status_code == 303
    # Once a password is set, a token still needs the current one.
    async with make_client(app, weak) as c:
        r = await c.post("/api/me/password", json={"new_password": "yet-another-password"})
        assert r.status_code == 403
