"""Shared fixtures: one embedded PostgreSQL per test run, a migrated template database,
and a fresh database per test module (CREATE DATABASE ... TEMPLATE is cheap)."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from hypothesis import settings as hypothesis_settings
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.app import create_app
from llmjudge.infra.config import Settings
from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.db.migrate import upgrade

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
TEMPLATE_DB = "llmjudge_template"
# Accepted as an admin API token by every test app (see the `client` fixture).
ADMIN_TOKEN = "lj_test_admin_token_not_secret"
_db_counter = itertools.count()

# No per-example deadline: the machines are shared, and a slow example under load is not a bug
# (tests that time something assert their own bounds).
hypothesis_settings.register_profile("llmjudge", deadline=None)
hypothesis_settings.load_profile("llmjudge")


@pytest.fixture(scope="session")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    base = Path(os.environ.get("LLMJUDGE_TEST_PGDIR") or tmp_path_factory.mktemp("pg"))
    server = EmbeddedPostgres(base / "pgdata")
    server.start()
    yield server
    server.stop()


async def _admin(pg: EmbeddedPostgres) -> asyncpg.Connection:
    return await asyncpg.connect(pg.dsn("postgres"))


@pytest.fixture(scope="session")
async def template_db(pg: EmbeddedPostgres) -> str:
    conn = await _admin(pg)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
    finally:
        await conn.close()
    engine = make_engine(pg.url(TEMPLATE_DB), pool_size=1)
    await upgrade(engine)
    await engine.dispose()
    return TEMPLATE_DB


async def new_database(pg: EmbeddedPostgres, template: str, prefix: str = "t") -> str:
    name = f"{prefix}_{os.getpid()}_{next(_db_counter)}"
    conn = await _admin(pg)
    try:
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await conn.close()
    return name


async def drop_database(pg: EmbeddedPostgres, name: str) -> None:
    conn = await _admin(pg)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="module")
async def db_url(pg: EmbeddedPostgres, template_db: str) -> AsyncIterator[str]:
    name = await new_database(pg, template_db)
    yield pg.url(name)
    await drop_database(pg, name)


@pytest.fixture(scope="module")
def settings(
    request: pytest.FixtureRequest, db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """A module sets ``IN_PROCESS_WORKERS = False`` to run the app without its worker pool
    and persona runner (its tests play the workers, or start their own)."""
    return Settings(
        database_url=db_url,
        data_dir=tmp_path_factory.mktemp("data"),
        admin_token=ADMIN_TOKEN,
        workers_enabled=getattr(request.module, "IN_PROCESS_WORKERS", True),
    )


@pytest.fixture(scope="module")
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


def make_client(app: FastAPI, token: str | None = None) -> httpx.AsyncClient:
    """A client of the app in this process; with a token, it sends it as a Bearer."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers)


@pytest.fixture(scope="module")
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Acts as admin through LLMJUDGE_ADMIN_TOKEN (Bearer requests need no CSRF token)."""
    async with make_client(app, ADMIN_TOKEN) as c:
        yield c


@pytest.fixture(scope="module")
async def anon_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(app) as c:
        yield c


async def role_token(app: FastAPI, role: str) -> str:
    """An API token of a fresh user with this role."""
    from llmjudge.auth import service as auth
    from llmjudge.auth.schemas import Principal, TokenIn, UserIn
    from llmjudge.core.access import Role

    async with app.state.sessionmaker() as session:
        user = await auth.create_user(
            db=session, user_in=UserIn(username=f"{role}-{next(_db_counter)}", role=Role(role))
        )
        actor = Principal(username="fixture", role=Role.admin, via="admin_token")
        created = await auth.create_token(
            db=session, actor=actor, token_in=TokenIn(name=role, user_id=user.id)
        )
    return created.token


@pytest.fixture(scope="module")
async def reviewer_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(app, await role_token(app, "reviewer")) as c:
        yield c


@pytest.fixture(scope="module")
async def researcher_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(app, await role_token(app, "researcher")) as c:
        yield c


@pytest.fixture
async def db(app: FastAPI) -> AsyncIterator[AsyncSession]:
    async with app.state.sessionmaker() as session:
        yield session


@pytest.fixture(scope="session")
def mtbench_dir() -> Path:
    path = SHARED_DATA / "mtbench"
    if not path.exists():
        # CI lays shared/ beside the clone: there a missing folder is a failure, not a skip.
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"MT-Bench data not found at {path}")
    return path


@pytest.fixture(scope="session")
def llmbar_dir() -> Path:
    path = SHARED_DATA / "llmbar"
    if not path.exists():
        # CI lays shared/ beside the clone: there a missing folder is a failure, not a skip.
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"LLMBar data not found at {path}")
    return path
