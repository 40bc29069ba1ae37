"""The FastAPI application: pages, /api, static files, lifespan (database, workers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy import text

from llmjudge import __version__, pages
from llmjudge.catalog import api as catalog_api
from llmjudge.catalog import pages as catalog_pages
from llmjudge.config import Settings, get_settings
from llmjudge.db.engine import make_engine, make_sessionmaker
from llmjudge.db.migrate import upgrade
from llmjudge.demo import api as demo_api
from llmjudge.errors import install_handlers


def create_app(settings: Settings | None = None, *, migrate: bool = True) -> FastAPI:
    settings = settings or get_settings()
    if not settings.database_url:
        raise RuntimeError(
            "create_app needs settings.database_url (the CLI starts the embedded server)"
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.database_url or "", pool_size=settings.db_pool_size)
        if migrate:
            await upgrade(engine)
        app.state.engine = engine
        app.state.sessionmaker = make_sessionmaker(engine)
        try:
            yield
        finally:
            await engine.dispose()

    app = FastAPI(
        title="llmjudge",
        version=__version__,
        description="Judge LLM outputs with LLMs: tournaments with leaderboards, and judge "
        "personas calibrated against human review.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_handlers(app)
    app.mount("/static", StaticFiles(directory=settings.static_dir), name="static")

    @app.get("/healthz", tags=["health"])
    async def healthz(request: Request) -> JSONResponse:
        """Liveness and database reachability."""
        try:
            async with request.app.state.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception as e:  # any failure means "not healthy", with the reason
            return JSONResponse({"status": "error", "database": str(e)[:200]}, status_code=503)
        return JSONResponse({"status": "ok", "database": "ok", "version": __version__})

    for router in (catalog_api.router, demo_api.router, pages.router, catalog_pages.router):
        app.include_router(router)
    return app
