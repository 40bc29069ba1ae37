"""An integrator's path: generate a Python client from the live server's /openapi.json with
`openapi-python-client` (no warning), then drive a whole flow with that client only:
provider, model, thread upload, session, leaderboard, export.

Lives beside the browser tests for their `live_server` (the real CLI in a subprocess); it
needs no browser.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import LiveServer

pytestmark = pytest.mark.slow

GENERATOR = Path(sys.executable).with_name("openapi-python-client")


def _generate(spec: dict[str, Any], where: Path) -> Any:
    """The generated package `llmjudge_api`, imported; fails on any generator warning."""
    spec_path = where / "openapi.json"
    spec_path.write_text(json.dumps(spec))
    package = where / "llmjudge_api"
    env = os.environ | {"PATH": f"{GENERATOR.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run(
        [GENERATOR, "generate", "--path", spec_path, "--meta", "none", "--output-path", package],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    assert "warning" not in said.lower(), said
    assert "unable to parse" not in said.lower(), said
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module("llmjudge_api")
    finally:
        sys.path.remove(str(where))


@pytest.fixture(scope="module")
def api(live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not GENERATOR.exists() and shutil.which("openapi-python-client") is None:
        pytest.fail("openapi-python-client is a dev dependency: pip install -e '.[dev]'")
    spec = httpx.get(f"{live_server.url}/openapi.json", timeout=30).json()
    return _generate(spec, tmp_path_factory.mktemp("client"))


def _call(module: str, **kwargs: Any) -> Any:
    """sync_detailed of one generated operation; asserts a 2xx and returns the response."""
    op = importlib.import_module(f"llmjudge_api.api.{module}")
    response = op.sync_detailed(**kwargs)
    assert 200 <= int(response.status_code) < 300, (module, response.status_code, response.content)
    return response


def test_spec_is_client_ready(live_server: LiveServer) -> None:
    spec = httpx.get(f"{live_server.url}/openapi.json", timeout=30).json()
    ids = [op["operationId"] for ops in spec["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    assert {"sessions_create", "sessions_thread_leaderboard", "threads_import"} <= set(ids)
    titles = [s.get("title", name) for name, s in spec["components"]["schemas"].items()]
    assert len(titles) == len(set(titles)), sorted(t for t in titles if titles.count(t) > 1)
    body = spec["paths"]["/api/threads/import"]["post"]["requestBody"]["content"]
    file_ref = body["multipart/form-data"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert spec["components"]["schemas"][file_ref]["properties"]["file"]["format"] == "binary"
    session_get = spec["paths"]["/api/sessions/{session_id}"]["get"]["responses"]
    assert session_get["404"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"
    }
    assert "409" in spec["paths"]["/api/sessions/{session_id}/pause"]["post"]["responses"]


def test_whole_flow_with_the_generated_client(live_server: LiveServer, api: Any) -> None:
    models = importlib.import_module("llmjudge_api.models")
    types = importlib.import_module("llmjudge_api.types")
    client = api.AuthenticatedClient(base_url=live_server.url, token=live_server.admin_token)

    provider = _call(
        "providers.providers_create",
        client=client,
        body=models.ProviderIn.from_dict(
            {
                "name": "Generated-client simulator",
                "kind": "simulator",
                "settings": {"latency_ms_mean": 1, "latency_ms_jitter": 1},
            }
        ),
    ).parsed
    assert isinstance(provider, models.ProviderOut) and provider.simulated is True
    model = _call(
        "providers.models_create",
        client=client,
        body=models.ModelIn(provider_id=provider.id, name="gen-judge", model="sim-judge"),
    ).parsed
    assert model.provider_id == provider.id

    rows = [
        {
            "pillar": f"gen-{i % 2}",
            "external_id": f"gen-{i}",
            "title": f"answer {i}",
            "content": f"Answer number {i}.",
            "metadata": {"quality": i / 3},
        }
        for i in range(8)
    ]
    upload = types.File(
        payload=io.BytesIO("\n".join(json.dumps(r) for r in rows).encode()),
        file_name="threads.jsonl",
        mime_type="application/jsonl",
    )
    imported = _call(
        "catalog.threads_import", client=client, body=models.BodyThreadsImport(file=upload)
    ).parsed
    assert isinstance(imported, models.ImportResult)
    pillars = _call("catalog.pillars_list", client=client).parsed
    pillar_ids = [p.id for p in pillars if p.name.startswith("gen-")]
    assert len(pillar_ids) == 2

    created = _call(
        "sessions.sessions_create",
        client=client,
        body=models.SessionIn.from_dict(
            {
                "session_name": "generated client",
                "pillar_ids": pillar_ids,
                "comparison_mode": "free_for_all",
                "judge_model_id": model.id,
                "position_swap": False,
                "seed": 7,
                "auto_start": True,
            }
        ),
    ).parsed
    assert isinstance(created, models.SessionOut)
    deadline = time.monotonic() + 60
    while True:
        session = _call("sessions.sessions_get", client=client, session_id=created.id).parsed
        if session.status.value in ("completed", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert session.status.value == "completed", session
    assert session.total > 0

    board = _call(
        "analysis.sessions_thread_leaderboard", client=client, session_id=created.id
    ).parsed
    assert board.outcome_count == session.total
    assert sorted(e.rank for e in board.entries)[0] == 1 and len(board.entries) == 8

    exported = _call(
        "analysis.sessions_export",
        client=client,
        session_id=created.id,
        format_=importlib.import_module(
            "llmjudge_api.models.sessions_export_format"
        ).SessionsExportFormat.JSON,
    )
    document = json.loads(exported.content)
    provenance = document["provenance"]
    assert provenance["simulated"] is True and provenance["seed"] == 7
    assert provenance["judges"] == [
        {
            "model_id": model.id,
            "name": "gen-judge",
            "model": "sim-judge",
            "provider": "Generated-client simulator",
            "provider_kind": "simulator",
            "simulated": True,
        }
    ]
    assert document["session"]["id"] == created.id
    assert len(document["comparisons"]) == session.total

    missing = importlib.import_module("llmjudge_api.api.sessions.sessions_get").sync_detailed(
        client=client, session_id=2_000_000_000
    )
    assert int(missing.status_code) == 404 and isinstance(missing.parsed, models.ErrorOut)
