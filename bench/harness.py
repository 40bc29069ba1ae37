"""What the in-process benches share: an embedded PostgreSQL in a temporary directory,
migrated; the app on it with an HTTP client (httpx's ASGITransport); the demo with the
simulated judge at a chosen latency."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx

from llmjudge.app import create_app
from llmjudge.infra.config import Settings
from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.db.migrate import upgrade


@contextlib.contextmanager
def embedded_postgres(tmp: Path) -> Iterator[EmbeddedPostgres]:
    pg = EmbeddedPostgres(tmp / "pgdata")
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()


async def migrate(pg: EmbeddedPostgres) -> None:
    await pg.ensure_database()
    engine = make_engine(pg.url(), pool_size=1)
    await upgrade(engine)
    await engine.dispose()


@contextlib.asynccontextmanager
async def app_client(
    pg: EmbeddedPostgres, tmp: Path, token: str
) -> AsyncIterator[tuple[object, httpx.AsyncClient]]:
    """The app (started, its workers included) on a migrated database, and an admin client."""
    await migrate(pg)
    app = create_app(Settings(database_url=pg.url(), data_dir=tmp / "data", admin_token=token))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://bench",
            headers={"Authorization": f"Bearer {token}"},
            timeout=600,
        ) as client,
    ):
        (await client.get("/healthz")).raise_for_status()
        yield app, client


async def demo_pillars(client: httpx.AsyncClient, latency_ms: float, jitter_ms: float) -> list[int]:
    """Load the demo and set the simulated judge's latency; the demo's pillar ids."""
    (await client.post("/api/demo")).raise_for_status()
    pillars = [p["id"] for p in (await client.get("/api/pillars")).json()]
    providers = (await client.get("/api/providers")).json()
    sim = next(p for p in providers if p["kind"] == "simulator")
    settings = {"latency_ms_mean": latency_ms, "latency_ms_jitter": jitter_ms}
    r = await client.patch(f"/api/providers/{sim['id']}", json={"settings": settings})
    r.raise_for_status()
    return pillars
