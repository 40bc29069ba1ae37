"""The built-in Simulator and its models cannot be deleted, renamed or moved (409): sessions
without a judge model and persona templates find them by name."""

from __future__ import annotations

from typing import Any

import httpx


async def builtins(client: httpx.AsyncClient) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    sim = next(p for p in (await client.get("/api/providers")).json() if p["name"] == "Simulator")
    models = (await client.get(f"/api/models?provider_id={sim['id']}")).json()
    assert {m["name"] for m in models} >= {"simulated-judge", "simulated-task"}
    return sim, models


async def test_the_builtin_simulator_is_kept(client: httpx.AsyncClient) -> None:
    sim, models = await builtins(client)
    judge = next(m for m in models if m["name"] == "simulated-judge")
    other = (
        await client.post("/api/providers", json={"name": "Other", "kind": "simulator"})
    ).json()

    refusals = [
        await client.delete(f"/api/providers/{sim['id']}"),
        await client.patch(f"/api/providers/{sim['id']}", json={"name": "Renamed"}),
        await client.patch(f"/api/providers/{sim['id']}", json={"kind": "openai"}),
        await client.delete(f"/api/models/{judge['id']}"),
        await client.patch(f"/api/models/{judge['id']}", json={"name": "my-judge"}),
        await client.patch(f"/api/models/{judge['id']}", json={"provider_id": other["id"]}),
        await client.patch(f"/api/models/{judge['id']}", json={"model": "task"}),
    ]
    for r in refusals:
        assert r.status_code == 409, r.text
        assert "is built in" in r.json()["detail"], r.text
    assert "cannot be deleted" in refusals[0].json()["detail"]
    assert "moved to another provider" in refusals[5].json()["detail"]
    # The page's delete buttons use the same service: same refusal, nothing deleted.
    page = await client.post(f"/settings/providers/{sim['id']}/delete")
    assert page.status_code == 409 and "is built in" in page.text
    page = await client.post(f"/settings/models/{judge['id']}/delete")
    assert page.status_code == 409 and "is built in" in page.text
    assert await builtins(client) == (sim, models)

    # What does not break the built-ins stays allowed, and the same changes elsewhere too.
    r = await client.patch(f"/api/providers/{sim['id']}", json={"name": "Simulator", "rpm": 600})
    assert r.status_code == 200 and r.json()["rpm"] == 600
    r = await client.patch(f"/api/models/{judge['id']}", json={"default_temperature": 0.3})
    assert r.status_code == 200
    mine = await client.post(
        "/api/models", json={"provider_id": sim["id"], "name": "my-sim", "model": "judge"}
    )
    assert mine.status_code == 201
    moved = await client.patch(
        f"/api/models/{mine.json()['id']}", json={"provider_id": other["id"]}
    )
    assert moved.status_code == 200
    assert (await client.delete(f"/api/providers/{other['id']}")).status_code == 204
