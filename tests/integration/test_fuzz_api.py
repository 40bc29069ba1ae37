"""Schema-driven fuzzing of every /openapi.json operation with schemathesis, as admin.

Checks per generated request: no 5xx, the body matches the schema documented for its status,
the content type is the documented one, and auth is enforced (schemathesis repeats a
successful request without the token and with a wrong one, and expects 401/403).
Only schema-valid ("positive") inputs are generated, a few per operation, deterministically.

The app runs in schemathesis' own event loop thread (its ASGI client enters the lifespan
there), on this module's database, with in-process workers off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hypothesis_settings
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_schema_conformance,
)

from llmjudge.app import create_app
from llmjudge.infra.config import Settings
from tests.conftest import ADMIN_TOKEN

pytestmark = pytest.mark.slow

EXAMPLES = 6
CHECKS = [
    schemathesis.checks.not_a_server_error,
    response_schema_conformance,
    content_type_conformance,
    ignored_auth,
]
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# Operations that would reach outside the machine: a provider connection test calls the
# provider's base URL, which the fuzzer sets to arbitrary hosts.
EXCLUDED_PATHS = r"^/api/providers/\{[^}]+\}/test$"


class DeferredApp:
    """The ASGI app schemathesis calls: it forwards to the app the fixture builds, since the
    database URL is known only then. (schemathesis' lazy `from_fixture` does not run under
    pytest 9, so the schema is loaded at import from an app that never connects.)"""

    target: FastAPI | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.target is not None, "the fuzz_app fixture sets the target"
        await self.target(scope, receive, send)


APP = DeferredApp()
CONFIG = schemathesis.Config.from_dict(
    {
        "seed": 20261129,
        "generation": {
            "mode": "positive",
            "max-examples": EXAMPLES,
            "deterministic": True,
            "no-shrink": True,
        },
        "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
    }
)
_offline = create_app(Settings(database_url="postgresql+asyncpg://unused@/unused"))
schema = schemathesis.openapi.from_dict(_offline.openapi(), config=CONFIG).exclude(
    path_regex=EXCLUDED_PATHS
)
schema.app = APP


@pytest.fixture(scope="module", autouse=True)
def fuzz_app(settings: Settings) -> Iterator[FastAPI]:
    APP.target = create_app(settings.model_copy(update={"workers_enabled": False}))
    yield APP.target
    # The lifespan runs in schemathesis' event loop thread; end it there.
    shutdown_lifespans()
    APP.target = None


@schema.parametrize()
@hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_api_operations(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=ADMIN, checks=CHECKS)
