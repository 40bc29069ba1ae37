"""Catalog on the embedded PostgreSQL: migrations, imports (all or nothing), pages."""

from __future__ import annotations

import json

import asyncpg
import httpx
from sqlalchemy import func, select, text

from llmjudge.catalog.models import Pillar, Thread
from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.db.migrate import current, upgrade
from tests.conftest import drop_database


async def test_migrations_up_from_empty(pg):
    conn = await asyncpg.connect(pg.dsn("postgres"))
    await conn.execute('CREATE DATABASE "empty_migrate"')
    await conn.close()
    engine = make_engine(pg.url("empty_migrate"), pool_size=1)
    try:
        rev, head = await current(engine)
        assert rev is None and head
        await upgrade(engine)
        rev, head = await current(engine)
        assert rev == head
        async with engine.connect() as c:
            tables = set(
                (
                    await c.execute(
                        text("SELECT tablename FROM pg_tables WHERE schemaname='public'")
                    )
                ).scalars()
            )
        assert {"pillars", "threads", "alembic_version"} <= tables
        await upgrade(engine)  # idempotent
    finally:
        await engine.dispose()
        await drop_database(pg, "empty_migrate")


CSV_OK = (
    "pillar,external_id,title,prompt_key,content,metadata\n"
    'model-a,t1,First,q1,"Hello, world",{"k": 1}\n'
    'model-a,t2,Second,q2,"[{""role"": ""user"", ""content"": ""hi""}, {""role"": ""assistant"", ""content"": ""hello""}]",\n'
    "model-b,t1,Third,q1,plain text,\n"
)


async def test_import_csv_then_reimport_updates(client: httpx.AsyncClient, db):
    r = await client.post("/api/threads/import", files={"file": ("t.csv", CSV_OK, "text/csv")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body == {
        "created": 3,
        "updated": 0,
        "pillars_created": ["model-a", "model-b"],
        "total": 3,
    }
    t2 = (await db.execute(select(Thread).where(Thread.external_id == "t2"))).scalar_one()
    assert t2.content == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    r = await client.post(
        "/api/threads/import",
        files={"file": ("t.csv", CSV_OK.replace("Hello, world", "Changed"), "text/csv")},
    )
    assert r.json()["created"] == 0 and r.json()["updated"] == 3
    assert await db.scalar(select(func.count()).select_from(Thread)) == 3
    r = await client.get("/api/pillars")
    counts = {p["name"]: p["thread_count"] for p in r.json()}
    assert counts == {"model-a": 2, "model-b": 1}


async def test_import_jsonl_with_messages(client: httpx.AsyncClient):
    lines = [
        {"pillar": "jsonl-p", "external_id": "j1", "content": [{"role": "user", "content": "q"}]},
        {"pillar": "jsonl-p", "messages": [{"role": "user", "content": "q2"}], "prompt_key": "k"},
    ]
    data = "\n".join(json.dumps(x) for x in lines) + "\n"
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", data)})
    assert r.status_code == 200, r.text
    assert r.json()["created"] == 2
    page = (await client.get("/api/threads", params={"q": "j1"})).json()
    assert page["total"] == 1
    tid = page["items"][0]["id"]
    one = (await client.get(f"/api/threads/{tid}")).json()
    assert one["content"] == [{"role": "user", "content": "q"}]


async def test_one_bad_row_stores_nothing(client: httpx.AsyncClient, db):
    before = await db.scalar(select(func.count()).select_from(Thread))
    pillars_before = await db.scalar(select(func.count()).select_from(Pillar))
    lines = [
        json.dumps({"pillar": "never", "external_id": f"x{i}", "content": f"c{i}"})
        for i in range(5)
    ]
    # An empty answer ("") is a result to judge; a thread with no content at all is not.
    lines.insert(3, json.dumps({"pillar": "never", "external_id": "bad", "content": []}))
    r = await client.post("/api/threads/import", files={"file": ("bad.jsonl", "\n".join(lines))})
    assert r.status_code == 422
    errors = r.json()["detail"]["errors"]
    assert errors == [
        {
            "line": 4,
            "field": "content",
            "message": "Value error, content must have at least one message",
        }
    ]
    assert await db.scalar(select(func.count()).select_from(Thread)) == before
    assert await db.scalar(select(func.count()).select_from(Pillar)) == pillars_before


async def test_csv_errors_name_lines_and_fields(client: httpx.AsyncClient):
    bad = "pillar,content,metadata\np,ok,\n,missing pillar,\np,x,{not json}\n"
    r = await client.post("/api/threads/import", files={"file": ("b.csv", bad)})
    assert r.status_code == 422
    errs = {(e["line"], e["field"]) for e in r.json()["detail"]["errors"]}
    assert errs == {(3, "pillar"), (4, "metadata")}


async def test_wrong_encoding_and_type_rejected(client: httpx.AsyncClient):
    r = await client.post(
        "/api/threads/import",
        files={"file": ("l.csv", "pillar,content\np,caf\xe9\n".encode("latin-1"))},
    )
    assert r.status_code == 422
    assert "not UTF-8" in r.json()["detail"]["errors"][0]["message"]
    r = await client.post("/api/threads/import", files={"file": ("x.xlsx", b"PK\x03\x04")})
    assert r.status_code == 422 and "unsupported file type" in r.text


async def test_upload_size_limit(client: httpx.AsyncClient, app):
    limit = app.state.settings.max_upload_bytes
    app.state.settings.max_upload_bytes = 100
    try:
        r = await client.post(
            "/api/threads/import", files={"file": ("big.csv", "pillar,content\n" + "p,x\n" * 100)}
        )
    finally:
        app.state.settings.max_upload_bytes = limit
    assert r.status_code == 413 and "limit" in r.json()["detail"]


async def test_pillar_crud(client: httpx.AsyncClient):
    r = await client.post("/api/pillars", json={"name": "crud", "description": "d"})
    assert r.status_code == 201
    pid = r.json()["id"]
    assert (await client.post("/api/pillars", json={"name": "crud"})).status_code == 409
    assert (await client.post("/api/pillars", json={"name": "  "})).status_code == 422
    r = await client.patch(f"/api/pillars/{pid}", json={"description": "new"})
    assert r.json()["description"] == "new"
    assert (await client.delete(f"/api/pillars/{pid}")).status_code == 204
    assert (await client.get(f"/api/pillars/{pid}")).status_code == 404


XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


async def test_xss_in_content_is_escaped(client: httpx.AsyncClient):
    rec = {
        "pillar": "xss<b>",
        "external_id": "xss",
        "title": XSS,
        "content": [{"role": "user", "content": XSS}],
    }
    r = await client.post("/api/threads/import", files={"file": ("x.jsonl", json.dumps(rec))})
    assert r.status_code == 200
    tid = (await client.get("/api/threads", params={"q": "xss"})).json()["items"][0]["id"]
    for url in (f"/threads/{tid}", "/threads", "/pillars", "/"):
        html = (await client.get(url)).text
        assert "<script>alert" not in html and "<img src=x" not in html, url
    html = (await client.get(f"/threads/{tid}")).text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    assert "xss&lt;b&gt;" in html


async def test_pages_render(client: httpx.AsyncClient):
    for url in ("/", "/pillars", "/threads", "/import", "/docs", "/openapi.json"):
        r = await client.get(url)
        assert r.status_code == 200, url
    r = await client.get("/healthz")
    assert r.json()["status"] == "ok"


async def test_import_page_shows_row_errors(client: httpx.AsyncClient):
    r = await client.post(
        "/import", files={"file": ("b.csv", "pillar,content\n,x\n")}, headers={"HX-Request": "true"}
    )
    assert r.status_code == 422
    assert "nothing was imported" in r.text and '<td class="num">2</td>' in r.text


async def test_demo_loads_and_is_idempotent(client: httpx.AsyncClient):
    r = await client.post("/api/demo")
    assert r.status_code == 200 and r.json()["total"] == 60
    r = await client.post("/api/demo")
    assert r.json()["created"] == 0
    pillars = {p["name"]: p["thread_count"] for p in (await client.get("/api/pillars")).json()}
    assert pillars["gpt-4"] == 10 and pillars["llama-13b"] == 10
