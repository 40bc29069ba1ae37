"""An upgrade from the previous release's database keeps its data readable through the API.

``tests/data/upgrade/release-0012.sql`` is a database written by the previous release (git
034582a, Alembic head 0012) through its own API: the demo catalog, a single-judge session
with swapped pairs and human labels, a panel session of three judges, an adaptive session,
reference labels, a persona mid-training and a persona with two annotators' labels.
``release-0012-api.json`` is what that release's read API answered for it
(``tests/data/upgrade/README.md`` says how both were made). Here the dump is loaded into a
database at 0012, migrated to head by this code, and every recorded path is read again:
the answers must be the same, field for field (floats to 1e-9), old field names included.

Allowed differences, each documented:
- a field or export column that is new (old clients ignore it); a deprecated alias
  (``DEPRECATED_ALIASES``, README "Deprecated names") must equal the field it repeats;
- migration 0014's wording (``REWORDED``: the selection split's F1 is "selection F1" in
  stored texts and new messages alike). Persona 2's status is put back into the first
  release's wording ("holdout F1") before the upgrade, as an old persona kept it;
- a value this release changes on purpose, listed in ``CHANGED`` with the reason (a
  message reworded, a figure computed better). Stored data is never in that list.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from llmjudge.app import create_app
from llmjudge.infra.config import Settings
from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.infra.db.engine import make_engine
from llmjudge.infra.db.migrate import current, upgrade
from tests.conftest import ADMIN_TOKEN, drop_database, make_client

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[1] / "data" / "upgrade"
RELEASE = "0012"
DATABASE = "upgrade_from_0012"
RECORDED: dict[str, Any] = json.loads((DATA / "release-0012-api.json").read_text())
META = RECORDED["_meta"]
ADMIN_PATHS = [p for p in RECORDED if not p.startswith("_")]
REVIEWER_PATHS = list(RECORDED["_as_reviewer"])
# Deprecated alias -> the field it repeats (first-release names, kept one release).
DEPRECATED_ALIASES = {"metrics_holdout": "metrics_selection", "holdout": "selection"}
# Migration 0014 and the convergence messages: old wording -> new.
REWORDED = {"held-out F1": "selection F1"}
OLD_F1_WORDING = ("holdout F1", "held-out F1")


@pytest.fixture(scope="module")
async def upgraded_app(
    pg: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[FastAPI]:
    name = DATABASE
    admin = await asyncpg.connect(pg.dsn("postgres"))
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    engine = make_engine(pg.url(name), pool_size=1)
    await upgrade(engine, RELEASE)
    await engine.dispose()
    conn = await asyncpg.connect(pg.dsn(name))
    try:
        await conn.execute((DATA / "release-0012.sql").read_text())
        # The first release's wording, as a persona trained then still reads (issue #28).
        await conn.execute(
            "UPDATE public.personas SET status_reason = replace(status_reason, 'held-out F1',"
            " 'holdout F1') WHERE id = $1",
            META["ids"]["persona_id"] + 1,
        )
    finally:
        await conn.close()
    settings = Settings(
        database_url=pg.url(name),
        data_dir=tmp_path_factory.mktemp("upgrade-data"),
        admin_token=ADMIN_TOKEN,
        workers_enabled=False,  # read only: nothing may be judged again
    )
    app = create_app(settings)  # its start-up migrates to head
    app.state.defer_login_banner = True
    async with app.router.lifespan_context(app):
        yield app
    await drop_database(pg, name)


@pytest.fixture(scope="module")
async def admin(upgraded_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(upgraded_app, ADMIN_TOKEN) as c:
        yield c


@pytest.fixture(scope="module")
async def reviewer(upgraded_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(upgraded_app, META["ids"]["reviewer_token"]) as c:
        yield c


# (JSON path pattern, why): values this release changes on purpose. Matched with
# re.fullmatch against the path a difference is reported at.
CHANGED: list[tuple[str, str]] = [
    (
        r"\.body\.findings\[\d+\]\.message",
        "#27: findings quote the thread's title (a cut title ran into the sentence) and say "
        "'percentage points above <pillar>'s average thread' for '<n> points above the <m>% "
        "average of <pillar>'",
    ),
    (
        r"\.body\.(pillars|coverage\.pillars)\[\d+\]\.(repetition_overlap|meets_overlap_goal|"
        r"win_rate_variance|meets_variance_goal|flags(\[\d+\])?)( \(\d+ items, now \d+\))?",
        "#27: an adaptive session's pairs asked again are not planned repetitions; no "
        "repetition goal applies to them",
    ),
    (
        # every figure refitted with the prior, and the rows that reorder with them
        r"\.body(\.leaderboard)?\.(entries|pillar_aggregates)\[\d+\]\..+"
        r"|\.body(\.leaderboard)?\.(quality|pillar_quality)\..+"
        r"|\.body\.style\..+|\.body\.categories\.categories\[\d+\]\.pillars\[\d+\]\..+"
        r"|\.body\(csv\)\[\d+\]\.(rank|thread_id|thread_external_id|thread_title|pillar_id|"
        r"pillar_name|elo_score|bt_score|bt_ci_low|bt_ci_high|matches_played|wins|losses|ties|"
        r"win_rate|avg_confidence|likert_\w+)",
        "#27 item 7: the Bradley-Terry prior is two drawn games against an average player "
        "(precision 0.5, sd 246 Elo points) instead of 0.01 (sd 1,700 points), so "
        "near-separable results stop diverging; every Bradley-Terry figure (leaderboards, "
        "pillar rankings, style control, categories; not the adaptive design, whose stopping "
        "rule is calibrated on 0.01) moves, and the rows they order move with them",
    ),
]


# (answer's path pattern, JSON path pattern, why): deliberate changes of one kind of answer
# only, so the same field elsewhere (a session's stored token totals) is still compared.
CHANGED_AT: list[tuple[str, str, str]] = [
    (
        r"/api/sessions/\d+/estimate",
        r"\.body\.(input_tokens|cost_usd)",
        "#25 item 2: the built-in judge prompt puts its shared part (criteria, instructions, "
        "answer format) before the two threads for providers' prompt caches, and closes with "
        "a one-line reminder of the answer format: a few more input tokens a comparison",
    ),
    (
        r"/api/sessions/\d+/export\?format=json",
        r"\.body\.provenance\.prompt_template\.sha256",
        "#25 item 2: the built-in judge prompt's text changed (the same reordering); the "
        "digest names the template, which is not stored with the session",
    ),
    (
        r"/api/sessions/\d+/adaptive",
        r"\.body\.ranking\[\d+\]\..+",
        "#27 item 7: the ranking an adaptive session shows is refitted with the ratings' "
        "prior (two drawn games) on the leaderboard's scale; the rows reorder with it",
    ),
]


def _deliberate(where: str, path: str = "") -> bool:
    return any(re.fullmatch(pattern, where) for pattern, _ in CHANGED) or any(
        re.fullmatch(answer, path) and re.fullmatch(pattern, where)
        for answer, pattern, _ in CHANGED_AT
    )


def _csv_rows(text: str) -> list[dict[str, str]] | None:
    """An export's CSV rows by column (after its '# ...' lines), or None if not an export."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if not ln.startswith("#")), len(lines))
    if start == 0 or start == len(lines) or "," not in lines[start]:
        return None
    return list(csv.DictReader(io.StringIO("".join(lines[start:]))))


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """JSON paths where the new answer (to ``path``) differs from the recorded one (floats
    to 1e-9), except new fields and the deliberate changes of ``CHANGED`` and
    ``CHANGED_AT``."""
    return [d for d in _differences(old, new) if not _deliberate(d.split(":")[0], path)]


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"{where}.{k} (missing)" for k in old if k not in new]
        out += [
            f"{where}.{k} (an alias unlike its field)"
            for k in new
            if k not in old and k in DEPRECATED_ALIASES and not _alias(k, old, new)
        ]
        for k in old.keys() & new.keys():
            if k == "exported_at":  # the one value that differs between any two reads
                continue
            out += _differences(old[k], new[k], f"{where}.{k}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{where} ({len(old)} items, now {len(new)})"]
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in _differences(a, b, f"{where}[{i}]")
        ]
    old_rows = _csv_rows(old) if isinstance(old, str) and isinstance(new, str) else None
    new_rows = _csv_rows(new) if old_rows is not None else None
    if old_rows is not None and new_rows is not None:  # an export: old columns kept
        kept = [{k: r.get(k) for k in (old_rows[0] if old_rows else {})} for r in new_rows]
        return _differences(old_rows, kept, f"{where}(csv)")
    if isinstance(old, str) and isinstance(new, str) and "\n" in old:
        strip = [ln for ln in old.splitlines() if not ln.startswith("# exported_at")]
        now = [ln for ln in new.splitlines() if not ln.startswith("# exported_at")]
        return [] if strip == now else [f"{where} (text differs)"]
    if isinstance(old, float) or isinstance(new, float):
        if isinstance(old, int | float) and isinstance(new, int | float):
            return [] if math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-9) else [where]
    return [] if old == new and type(old) is type(new) else [f"{where}: {old!r} -> {new!r}"]


def _alias(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A deprecated alias the old answer had not, answering what its field answers."""
    field = DEPRECATED_ALIASES.get(key)
    return field is not None and field in old and field in new and new[key] == new[field]


def reworded(value: Any) -> Any:
    """A recorded answer in migration 0014's wording."""
    if isinstance(value, str):
        for old, new in REWORDED.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {k: reworded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [reworded(v) for v in value]
    return value


async def read(c: httpx.AsyncClient, path: str) -> dict[str, Any]:
    r = await c.get(path)
    is_json = r.headers.get("content-type", "").startswith("application/json")
    return {
        "status": r.status_code,
        "content_type": r.headers.get("content-type", "").split(";")[0],
        "body": r.json() if is_json and r.content else r.text,
    }


async def test_the_database_is_at_head_after_the_upgrade(upgraded_app: FastAPI) -> None:
    engine = make_engine(upgraded_app.state.settings.database_url, pool_size=1)
    try:
        rev, head = await current(engine)
    finally:
        await engine.dispose()
    assert rev == head


def _old(recorded: dict[str, Any]) -> dict[str, Any]:
    return reworded({**recorded, "content_type": recorded["content_type"].split(";")[0]})


@pytest.mark.parametrize("path", ADMIN_PATHS)
async def test_every_recorded_answer_reads_back_the_same(
    admin: httpx.AsyncClient, path: str
) -> None:
    found = differences(_old(RECORDED[path]), await read(admin, path), path)
    assert not found, f"{path}:\n" + "\n".join(found[:40])


@pytest.mark.parametrize("path", REVIEWER_PATHS)
async def test_a_reviewer_reads_back_the_same(reviewer: httpx.AsyncClient, path: str) -> None:
    found = differences(_old(RECORDED["_as_reviewer"][path]), await read(reviewer, path), path)
    assert not found, f"{path}:\n" + "\n".join(found[:40])


async def test_the_fixture_holds_what_it_promises() -> None:
    """The dump is not trivially small: results, panel votes and a persona's decisions."""
    ids = META["ids"]
    single = RECORDED[f"/api/sessions/{ids['single_session_id']}"]["body"]
    panel = RECORDED[f"/api/sessions/{ids['panel_session_id']}/panel"]["body"]
    assert single["status"] == "completed" and single["completed"] >= 50
    assert RECORDED[f"/api/sessions/{ids['panel_session_id']}"]["body"]["completed"] >= 50
    assert panel  # a panel report with members
    iterations = RECORDED[f"/api/personas/{ids['persona_id']}/iterations"]["body"]
    assert len(iterations) >= 2


PERSONAS = (META["ids"]["persona_id"], META["ids"]["persona_id"] + 1)


@pytest.mark.parametrize("persona", PERSONAS)
async def test_old_field_names_answer_the_same_values(
    admin: httpx.AsyncClient, persona: int
) -> None:
    """First-release clients read `metrics_holdout` and `/metrics[].holdout`: the values
    the recorded answers hold under the new names."""
    recorded = RECORDED[f"/api/personas/{persona}/iterations"]["body"]
    iterations = (await admin.get(f"/api/personas/{persona}/iterations")).json()
    assert [it["metrics_holdout"] for it in iterations] == [
        it["metrics_selection"] for it in iterations
    ]
    assert not differences(
        [it["metrics_selection"] for it in recorded], [it["metrics_holdout"] for it in iterations]
    )
    assert any(it["metrics_holdout"] for it in iterations)
    recorded_rows = RECORDED[f"/api/personas/{persona}/metrics"]["body"]
    rows = (await admin.get(f"/api/personas/{persona}/metrics")).json()
    assert not differences([r["selection"] for r in recorded_rows], [r["holdout"] for r in rows])
    assert any(r["holdout"] for r in rows)
    summaries = (await admin.get("/api/personas/summaries")).json()
    [summary] = [s for s in summaries if s["id"] == persona]
    assert summary["holdout"] == summary["selection"] is not None


@pytest.mark.parametrize("persona", PERSONAS)
async def test_split_holdout_reads_the_selection_split(
    admin: httpx.AsyncClient, persona: int
) -> None:
    recorded = RECORDED[f"/api/personas/{persona}/training-pairs?split=selection"]
    found = differences(
        _old(recorded), await read(admin, f"/api/personas/{persona}/training-pairs?split=holdout")
    )
    assert not found, "\n".join(found[:40])
    assert recorded["body"]  # the selection split is not empty
    url = f"/api/personas/{persona}/iterations/1/decisions"
    held = (await admin.get(url, params={"split": "holdout"})).json()
    selection = (await admin.get(url, params={"split": "selection"})).json()
    assert held == selection and held and {d["split"] for d in held} == {"selection"}


async def test_no_stored_text_says_holdout_f1(
    pg: EmbeddedPostgres, upgraded_app: FastAPI, admin: httpx.AsyncClient
) -> None:
    conn = await asyncpg.connect(pg.dsn(DATABASE))
    try:
        texts = [
            r[0]
            for r in await conn.fetch(
                "SELECT status_reason FROM personas UNION ALL SELECT note FROM persona_iterations"
                " UNION ALL SELECT convergence->>'message' FROM persona_iterations"
            )
            if r[0]
        ]
    finally:
        await conn.close()
    assert texts and not [t for t in texts if any(w in t for w in OLD_F1_WORDING)]
    assert sum("selection F1" in t for t in texts) >= 5  # all the fixture's, reworded
    persona = (await admin.get(f"/api/personas/{PERSONAS[1]}")).json()
    assert "selection F1 0.222" in persona["status_reason"]
