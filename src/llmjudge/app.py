"""The FastAPI application: pages, /api, static files, lifespan (database, workers)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from sqlalchemy import text

from llmjudge import __version__
from llmjudge.analysis import api as analysis_api
from llmjudge.auth import api as auth_api
from llmjudge.auth import middleware as auth_middleware
from llmjudge.auth import pages as auth_pages
from llmjudge.auth.service import announce_first_admin
from llmjudge.catalog import api as catalog_api
from llmjudge.catalog import pages as catalog_pages
from llmjudge.demo import api as demo_api
from llmjudge.home import pages
from llmjudge.infra.config import Settings, get_settings
from llmjudge.infra.db.engine import make_sessionmaker, process_engines
from llmjudge.infra.db.migrate import upgrade
from llmjudge.infra.errors import install_handlers
from llmjudge.infra.events.hub import EventHub
from llmjudge.infra.routing import MethodNotAllowed
from llmjudge.infra.web import error_page
from llmjudge.personas import api as personas_api
from llmjudge.personas import gate_api as personas_gate_api
from llmjudge.personas import pages as personas_pages
from llmjudge.providers import api as providers_api
from llmjudge.providers import pages as providers_pages
from llmjudge.providers.llm import LLMService
from llmjudge.providers.service import ensure_builtin_simulator
from llmjudge.references import api as references_api
from llmjudge.references import review_api as references_review_api
from llmjudge.references import review_pages as references_review_pages
from llmjudge.sessions import api as sessions_api
from llmjudge.sessions import pages as sessions_pages
from llmjudge.worker import COMPARISONS, PERSONAS, build_workers, settle_heap


def operation_id(route: APIRoute) -> str:
    """Short, stable operation ids for generated clients: the resource (first path segment
    after /api) and the handler's name without the resource's own words, e.g.
    `create_session` on /api/sessions is `sessions_create`; `thread_leaderboard` on
    /api/sessions/{id}/... is `sessions_thread_leaderboard`. Uniqueness is tested."""
    parts = [p for p in route.path_format.split("/") if p and not p.startswith("{")]
    resource = parts[1] if len(parts) > 1 and parts[0] == "api" else (parts or ["root"])[0]
    resource = resource.replace("-", "_").replace(".", "_")
    own = {resource, resource.removesuffix("s")}
    words = [w for w in route.name.split("_") if w not in own]
    return f"{resource}_{'_'.join(words)}" if words else resource


def create_app(settings: Settings | None = None, *, migrate: bool = True) -> FastAPI:
    settings = settings or get_settings()
    if not settings.database_url:
        raise RuntimeError(
            "create_app needs settings.database_url (the CLI starts the embedded server)"
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with process_engines(settings) as (engine, direct):
            if migrate:
                await upgrade(direct)
            app.state.engine = engine
            app.state.sessionmaker = make_sessionmaker(engine)
            async with app.state.sessionmaker() as db:
                await ensure_builtin_simulator(db=db)
                # `llmjudge serve` prints the link itself once the server listens (last, framed)
                app.state.login_link = await announce_first_admin(
                    db=db,
                    settings=settings,
                    echo=not getattr(app.state, "defer_login_banner", False),
                )
            app.state.llm = LLMService(app.state.sessionmaker, settings)
            app.state.events = EventHub(settings.direct_database_url)
            await app.state.events.start()
            app.state.workers = None
            app.state.pool = None
            app.state.persona_runner = None
            if settings.workers_enabled:
                app.state.workers = build_workers(
                    engine=engine,
                    sessionmaker=app.state.sessionmaker,
                    llm=app.state.llm,
                    hub=app.state.events,
                    settings=settings,
                    direct_engine=direct,
                )
                app.state.pool = app.state.workers.get(COMPARISONS)
                app.state.persona_runner = app.state.workers.get(PERSONAS)
                await app.state.workers.start()
            settle_heap()
            try:
                yield
            finally:
                # Workers drain (and release what they hold) before the model service closes.
                if app.state.workers is not None:
                    await app.state.workers.stop()
                await app.state.events.stop()
                # Last before the engine: whatever else stops first may still make model calls.
                await app.state.llm.aclose()

    app = FastAPI(
        title="llmjudge",
        version=__version__,
        description="Judge LLM outputs with LLMs: tournaments with leaderboards, and judge "
        "personas calibrated against human review.",
        lifespan=lifespan,
        # Served from vendored Swagger UI (pages.py): works offline, under the strict CSP.
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    app.state.settings = settings
    # Domain errors: JSON under /api, the error page (or a flash line) elsewhere; one status.
    install_handlers(app, page_answer=error_page)
    # A wrong method is a 405 listing every method of the path (the routes list fills below).
    app.add_middleware(MethodNotAllowed, routes=app.router.routes)
    # Every request passes the central access policy (auth/policy.py) before any route.
    auth_middleware.install(app, settings)
    app.mount("/static", StaticFiles(directory=settings.static_dir), name="static")

    @app.get("/healthz", tags=["health"])
    async def healthz(request: Request) -> JSONResponse:
        """Liveness and database reachability."""
        try:
            async with request.app.state.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception as e:  # any failure means "not healthy"
            # The reason goes to the log only: its text can name hosts, users and paths.
            logging.getLogger("llmjudge").warning("healthz: database unreachable: %s", e)
            return JSONResponse(
                {"status": "error", "database": "unreachable"},
                status_code=503,
                headers={"Retry-After": "5"},
            )
        return JSONResponse({"status": "ok", "database": "ok", "version": __version__})

    for router in (
        auth_api.router,
        auth_pages.router,
        catalog_api.router,
        demo_api.router,
        providers_api.router,
        analysis_api.router,
        references_review_api.router,
        sessions_api.router,
        sessions_api.threads_router,
        references_api.router,
        references_api.agreement_router,
        # before the personas router: /api/personas/compare is not a persona id
        personas_gate_api.router,
        personas_api.router,
        pages.router,
        catalog_pages.router,
        providers_pages.router,
        references_review_pages.router,
        sessions_pages.router,
        personas_pages.router,
    ):
        app.include_router(router)
    return app
