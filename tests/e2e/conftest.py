"""Browser end-to-end fixtures: a live `llmjudge serve` and Debian's headless chromium.

- `live_server` (module scope): the real CLI (`python -m llmjudge.cli serve`) in a
  subprocess, as in production, on a fresh database cloned from the migrated template and
  a free port on 127.0.0.1. Yields a `LiveServer` (base URL, admin token, log file).
- `browser` (session scope): chromium at /usr/bin/chromium driven by Playwright's *async*
  API. The async API runs in the session-wide event loop of pytest-asyncio (the sync API
  refuses to run inside a running loop). Playwright's own browser downloads are not used.
- `page` (function scope): a fresh browser context and page, signed in as an admin with the
  cookies that `login()` obtained once per live server (`storage_state`). On a failed test,
  a screenshot, the page HTML and a log (browser errors, server log tail) are saved to
  `test-artifacts/<test name>.png|.html|.log` at the repository root.
- API calls from a test: `page.request.post(path, headers=live_server.api_headers)` (admin
  bearer token: no CSRF token needed).
- `js_errors`: that page's uncaught errors, console errors (CSP violations...) and failed
  asset loads (scripts, styles, images), for tests to assert empty.

Without /usr/bin/chromium the tests are skipped, or fail when the CI variable is set.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.async_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Response,
    async_playwright,
)

from llmjudge.infra.db.embedded import EmbeddedPostgres
from tests.conftest import REPO, drop_database, new_database

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # we run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "test-artifacts"
ADMIN_TOKEN = "e2e-admin-token-not-secret"
E2E_USER, E2E_PASSWORD = "e2e-admin", "e2e-password-not-secret"
STARTUP_TIMEOUT_S = 60.0
TIMEOUT_MS = 10_000  # default for every Playwright action and `expect`


@dataclass(frozen=True)
class LiveServer:
    url: str  # http://127.0.0.1:PORT, no trailing slash
    admin_token: str
    log_path: Path

    @property
    def api_headers(self) -> dict[str, str]:
        """For API calls from tests (`page.request.post(url, headers=server.api_headers)`):
        a bearer token needs no CSRF token, unlike the browser's session cookie."""
        return {"Authorization": f"Bearer {self.admin_token}"}

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


async def api(page: Page, server: LiveServer, method: str, path: str, **kw: Any) -> Any:
    """An API call as the admin from a test's page; asserts it succeeded; its JSON."""
    response = await page.request.fetch(path, method=method, headers=server.api_headers, **kw)
    assert response.ok, f"{method} {path}: {response.status} {await response.text()}"
    return await response.json()


async def demo_with_fast_judge(page: Page, server: LiveServer) -> tuple[list[int], int]:
    """The demo loaded, the simulated judge at 2 ms a call; the demo's pillar ids and the
    simulator's provider id."""
    await api(page, server, "POST", "/api/demo")
    pillars = [p["id"] for p in await api(page, server, "GET", "/api/pillars")]
    providers = await api(page, server, "GET", "/api/providers")
    sim = next(p for p in providers if p["kind"] == "simulator")
    await api(
        page,
        server,
        "PATCH",
        f"/api/providers/{sim['id']}",
        data={"settings": {"latency_ms_mean": 2, "latency_ms_jitter": 1}},
    )
    return pillars, sim["id"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _wait_healthy(server: LiveServer, proc: asyncio.subprocess.Process) -> None:
    deadline = asyncio.get_running_loop().time() + STARTUP_TIMEOUT_S
    async with httpx.AsyncClient(timeout=2) as client:
        while asyncio.get_running_loop().time() < deadline:
            if proc.returncode is not None:
                log = await asyncio.to_thread(server.log_tail)
                raise RuntimeError(f"llmjudge serve exited with {proc.returncode}:\n{log}")
            try:
                if (await client.get(f"{server.url}/healthz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    log = await asyncio.to_thread(server.log_tail)
    raise RuntimeError(f"llmjudge serve not healthy after {STARTUP_TIMEOUT_S:.0f} s:\n{log}")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 15)
    except TimeoutError:
        proc.kill()
        await proc.wait()


@pytest.fixture(scope="module")
async def live_server(
    pg: EmbeddedPostgres, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LiveServer]:
    name = await new_database(pg, template_db, prefix="e2e")
    tmp = tmp_path_factory.mktemp("live")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMJUDGE_")}
    env.update(
        LLMJUDGE_DATABASE_URL=pg.url(name),
        LLMJUDGE_DATA_DIR=str(tmp / "data"),
        LLMJUDGE_ADMIN_TOKEN=ADMIN_TOKEN,
    )
    server = LiveServer(f"http://127.0.0.1:{port}", ADMIN_TOKEN, tmp / "serve.log")
    # A log file, not a pipe: a pipe nobody reads would fill up and block the server.
    log = await asyncio.to_thread(server.log_path.open, "wb")
    try:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "llmjudge.cli", "serve", "--host", "127.0.0.1"),
            *("--port", str(port)),
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()  # the child holds its own descriptor
    try:
        await _wait_healthy(server, proc)
        yield server
    finally:
        await _stop(proc)
        await drop_database(pg, name)


@pytest.fixture(scope="session")
def chromium() -> Path:
    if not CHROMIUM.exists():
        reason = (
            f"{CHROMIUM} not found: install Debian's chromium package (apt-get install chromium)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {reason}", pytrace=False)
        pytest.skip(reason)
    return CHROMIUM


@pytest.fixture(scope="session")
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Keep each phase's report on the item so fixtures can tell whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _artifact_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1]).strip("_")


def _clear_artifacts(stem: Path) -> None:
    """Drop a previous run's failure files for this test, so none outlive their cause."""
    for suffix in (".png", ".html", ".log"):
        Path(f"{stem}{suffix}").unlink(missing_ok=True)


def _save_text(stem: Path, html: str, notes: str, server: LiveServer) -> None:
    Path(f"{stem}.html").write_text(html)
    Path(f"{stem}.log").write_text(notes + server.log_tail())


async def login(page: Page, server: LiveServer) -> None:
    """LOGIN HOOK: make `page`'s browser context a signed-in admin session on `server`.

    The one place that knows how the app signs users in; adapt it when that changes. Today:
    without a /login page (no auth) it does nothing; with one, it creates the e2e admin user
    through the API with LLMJUDGE_ADMIN_TOKEN (409 when it exists already) and signs in
    through the real login form. The `storage_state` fixture runs it once per live server:
    the login rate limit counts every attempt.
    """
    probe = await page.request.get(f"{server.url}/login", max_redirects=0)
    if probe.status == 404:
        return
    created = await page.request.post(
        f"{server.url}/api/users",
        headers=server.api_headers,
        data={"username": E2E_USER, "role": "admin", "password": E2E_PASSWORD},
    )
    assert created.status in (201, 409), await created.text()
    await page.goto(f"{server.url}/login")
    await page.fill("#login-form input[name=username]", E2E_USER)
    await page.fill("#login-form input[name=password]", E2E_PASSWORD)
    await page.click("#login-form button[type=submit]")
    await page.wait_for_url(lambda url: urlsplit(url).path != "/login")


@pytest.fixture(scope="module")
async def storage_state(browser: Browser, live_server: LiveServer) -> dict[str, Any]:
    """Cookies of a signed-in session, copied into each test's fresh browser context."""
    context = await browser.new_context(base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        await login(await context.new_page(), live_server)
        return dict(await context.storage_state())
    finally:
        await context.close()


ASSET_TYPES = {"script", "stylesheet", "image", "font", "media"}


def _record_console(message: ConsoleMessage, errors: list[str]) -> None:
    # "Failed to load resource" repeats an HTTP status: broken assets are caught by
    # _record_response, and a 4xx answer to an HTMX request may be the expected one (422).
    if message.type == "error" and not message.text.startswith("Failed to load resource"):
        errors.append(f"console.error: {message.text} ({message.location.get('url', '')})")


def _record_response(response: Response, errors: list[str]) -> None:
    # Chromium probes /favicon.ico on its own; that 404 is not the page's doing.
    if (
        response.status >= 400
        and response.request.resource_type in ASSET_TYPES
        and not response.url.endswith("/favicon.ico")
    ):
        errors.append(f"asset {response.status}: {response.url}")


@pytest.fixture
def js_errors() -> list[str]:
    return []


@pytest.fixture
async def page(
    browser: Browser,
    live_server: LiveServer,
    storage_state: dict[str, Any],
    js_errors: list[str],
    request: pytest.FixtureRequest,
) -> AsyncIterator[Page]:
    context: BrowserContext = await browser.new_context(
        base_url=live_server.url,
        viewport={"width": 1280, "height": 800},
        storage_state=storage_state,  # type: ignore[arg-type]
    )
    context.set_default_timeout(TIMEOUT_MS)
    pw_page = await context.new_page()
    pw_page.on("pageerror", lambda e: js_errors.append(f"pageerror: {e}"))
    pw_page.on("console", lambda m: _record_console(m, js_errors))
    pw_page.on("response", lambda r: _record_response(r, js_errors))
    stem = ARTIFACTS / _artifact_name(request.node.nodeid)
    await asyncio.to_thread(_clear_artifacts, stem)
    try:
        yield pw_page
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            await asyncio.to_thread(ARTIFACTS.mkdir, exist_ok=True)
            try:
                await pw_page.screenshot(path=f"{stem}.png", full_page=True)
                html = await pw_page.content()
                notes = "\n".join(js_errors) + "\n--- server log ---\n"
                await asyncio.to_thread(_save_text, stem, html, notes, live_server)
            except Exception as e:  # the page may be gone; the test's own error matters more
                print(f"could not save e2e artifacts for {request.node.nodeid}: {e}")
        await context.close()
