"""The human pairwise review queue through the API and the page: who gets which pair, N
labels per pair, sample and inconsistent-only queues, canonical storage, roles, bad input."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update

from llmjudge.catalog.models import Thread
from llmjudge.core import review as rules
from llmjudge.references import review
from llmjudge.references.models import ReferenceLabel
from tests.conftest import make_client, role_token

IN_PROCESS_WORKERS = False
N_PAIRS = 10
# Pairs whose two orders disagree (the judge said "A" both times: swapped, that is a flip).
INCONSISTENT = {1, 4, 7}


async def _import_threads(client: httpx.AsyncClient, rows: list[dict[str, Any]]) -> None:
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text


async def make_session(client: httpx.AsyncClient, tag: str) -> tuple[int, list[tuple[int, int]]]:
    """An imported session over N_PAIRS pairs judged in both orders; returns its id and the
    pairs (x, y) as first compared."""
    rows = []
    for i in range(N_PAIRS):
        for side in ("x", "y"):
            rows.append(
                {
                    "pillar": f"{tag}-{side}",
                    "external_id": f"q{i}",
                    "prompt_key": f"{tag}-q{i}",
                    "content": f"answer {side}{i}\nsecond line <b>bold?</b>",
                }
            )
    await _import_threads(client, rows)
    items = (await client.get("/api/threads", params={"q": "", "limit": 500})).json()["items"]
    ids = {(t["pillar_name"], t["external_id"]): t["id"] for t in items}
    pairs = [(ids[f"{tag}-x", f"q{i}"], ids[f"{tag}-y", f"q{i}"]) for i in range(N_PAIRS)]
    lines = []
    for i, (x, y) in enumerate(pairs):
        lines.append({"thread_a": x, "thread_b": y, "verdict": "A"})
        # consistent: the swapped order names x again (B); inconsistent: "A" = y
        lines.append({"thread_a": y, "thread_b": x, "verdict": "A" if i in INCONSISTENT else "B"})
    body = "\n".join(json.dumps(line) for line in lines).encode()
    r = await client.post(
        "/api/sessions/import", files={"file": ("j.jsonl", body)}, data={"session_name": tag}
    )
    assert r.status_code == 201, r.text
    return r.json()["session_id"], pairs


@pytest.fixture(scope="module")
async def second_reviewer(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(app, await role_token(app, "reviewer")) as c:
        yield c


def canon(pair: dict[str, Any]) -> tuple[int, int]:
    return pair["thread_a_id"], pair["thread_b_id"]


async def label(
    c: httpx.AsyncClient, sid: int, pair: dict[str, Any], shown: str, **kw: Any
) -> httpx.Response:
    body = {
        "shown_a": pair["shown_a"]["thread_id"],
        "shown_b": pair["shown_b"]["thread_id"],
        "label": shown,
        **kw,
    }
    return await c.post(f"/api/sessions/{sid}/review", json=body)


async def test_two_reviewers_never_share_a_pair_when_one_label_is_needed(
    client: httpx.AsyncClient, reviewer_client: httpx.AsyncClient, second_reviewer
) -> None:
    sid, pairs = await make_session(client, "rq1")
    seen: list[list[tuple[int, int]]] = [[], []]
    reviewers = (reviewer_client, second_reviewer)
    for _ in range(N_PAIRS):
        got = [(await c.get(f"/api/sessions/{sid}/review/next")).json() for c in reviewers]
        held = [canon(g["pair"]) for g in got if g["pair"] is not None]
        assert len(held) == len(set(held)), f"both reviewers were shown {held}"
        # Asking again is stable: the same pair, still held.
        again = (await reviewer_client.get(f"/api/sessions/{sid}/review/next")).json()
        assert again["pair"] == got[0]["pair"]
        for k, (c, g) in enumerate(zip(reviewers, got, strict=True)):
            if g["pair"] is not None:
                r = await label(c, sid, g["pair"], "A")
                assert r.status_code == 200, r.text
                seen[k].append(canon(g["pair"]))
    both = seen[0] + seen[1]
    assert len(both) == len(set(both)) == N_PAIRS
    assert set(both) == {tuple(sorted(p)) for p in pairs}
    for c in reviewers:
        done = (await c.get(f"/api/sessions/{sid}/review/next")).json()
        assert done["pair"] is None
        assert (done["progress"]["finished"], done["progress"]["total"]) == (N_PAIRS, N_PAIRS)


async def test_two_labels_per_pair_let_both_reviewers_label_each_pair(
    client: httpx.AsyncClient, reviewer_client: httpx.AsyncClient, second_reviewer, app
) -> None:
    sid, pairs = await make_session(client, "rq2")
    r = await client.put(f"/api/sessions/{sid}/review/settings", json={"labels_per_pair": 2})
    assert r.status_code == 200 and r.json()["labels_per_pair"] == 2, r.text
    labelled: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for step in range(2 * N_PAIRS + 2):
        k = step % 2
        c = (reviewer_client, second_reviewer)[k]
        nxt = (await c.get(f"/api/sessions/{sid}/review/next")).json()
        if nxt["pair"] is None:
            continue
        assert canon(nxt["pair"]) not in labelled[k], "a reviewer got a pair twice"
        assert (await label(c, sid, nxt["pair"], "B")).status_code == 200
        labelled[k].append(canon(nxt["pair"]))
    expected = {tuple(sorted(p)) for p in pairs}
    assert set(labelled[0]) == set(labelled[1]) == expected
    progress = (await client.get(f"/api/sessions/{sid}/review/progress")).json()
    assert (progress["finished"], progress["total"]) == (N_PAIRS, N_PAIRS)
    mine = (await reviewer_client.get(f"/api/sessions/{sid}/review/mine")).json()
    assert len(mine) == N_PAIRS and all(m["shown_label"] == "B" for m in mine)
    async with app.state.sessionmaker() as db:
        rows = (
            await db.execute(select(ReferenceLabel).where(ReferenceLabel.session_id == sid))
        ).scalars()
        rows = list(rows)
    assert len(rows) == 2 * N_PAIRS
    assert len({r.annotator for r in rows}) == 2 and all(r.source == "human" for r in rows)


async def test_labels_are_stored_in_canonical_order(
    client: httpx.AsyncClient, reviewer_client: httpx.AsyncClient, app
) -> None:
    sid, _ = await make_session(client, "rq3")
    flips = {False: 0, True: 0}
    for shown_label in ["A", "B", "TIE", "A", "B", "A", "TIE", "B", "A", "BOTH"]:
        pair = (await reviewer_client.get(f"/api/sessions/{sid}/review/next")).json()["pair"]
        left, right = pair["shown_a"]["thread_id"], pair["shown_b"]["thread_id"]
        assert {left, right} == set(canon(pair)) and pair["thread_a_id"] < pair["thread_b_id"]
        flipped = left > right
        flips[flipped] += 1
        kw = {"both_bad": True} if shown_label == "BOTH" else {}
        sent = "TIE" if shown_label == "BOTH" else shown_label
        out = (await label(reviewer_client, sid, pair, sent, note=" why ", **kw)).json()
        stored = out["stored"]
        expected = {"A": "B", "B": "A", "TIE": "TIE"}[sent] if flipped else sent
        assert (stored["thread_a_id"], stored["thread_b_id"]) == canon(pair)
        assert stored["label"] == expected and stored["both_bad"] == (shown_label == "BOTH")
        assert stored["note"] == "why" and stored["session_id"] == sid
        async with app.state.sessionmaker() as db:
            row = (
                await db.execute(
                    select(ReferenceLabel).where(
                        ReferenceLabel.thread_a_id == pair["thread_a_id"],
                        ReferenceLabel.thread_b_id == pair["thread_b_id"],
                    )
                )
            ).scalar_one()
        assert row.label == expected
    assert flips[False] and flips[True], "sides were never randomised"

    # Relabelling replaces the reviewer's label; the caller's view shows it as given.
    mine = (await reviewer_client.get(f"/api/sessions/{sid}/review/mine")).json()
    first = mine[0]
    r = await reviewer_client.post(
        f"/api/sessions/{sid}/review",
        json={"shown_a": first["shown_a"], "shown_b": first["shown_b"], "label": "TIE"},
    )
    assert r.status_code == 200
    again = (await reviewer_client.get(f"/api/sessions/{sid}/review/mine")).json()
    assert len(again) == len(mine)
    assert next(m for m in again if m["thread_a_id"] == first["thread_a_id"])["label"] == "TIE"


async def test_sample_and_inconsistent_only_limit_the_queue(
    client: httpx.AsyncClient, reviewer_client: httpx.AsyncClient
) -> None:
    sid, pairs = await make_session(client, "rq4")
    url = f"/api/sessions/{sid}/review/settings"
    base = (await client.get(url)).json()
    assert (base["pairs_in_session"], base["progress"]["total"]) == (N_PAIRS, N_PAIRS)

    r = await client.put(url, json={"sample_size": 4, "seed": 11})
    assert r.status_code == 200 and r.json()["progress"]["total"] == 4
    got = []
    while (nxt := (await reviewer_client.get(f"/api/sessions/{sid}/review/next")).json())["pair"]:
        got.append(canon(nxt["pair"]))
        await label(reviewer_client, sid, nxt["pair"], "A")
    assert len(got) == 4 == len(set(got))
    # Another seed draws another sample; labels already given still count where they fall.
    r = await client.put(url, json={"sample_size": 4, "seed": 12})
    other = (await reviewer_client.get(f"/api/sessions/{sid}/review/next")).json()
    assert other["pair"] is not None and canon(other["pair"]) not in got

    # (five labels per pair: those the reviewer gave above leave the pairs open to the admin)
    r = await client.put(url, json={"inconsistent_only": True, "labels_per_pair": 5})
    out = r.json()
    assert out["progress"]["total"] == len(INCONSISTENT)
    want = {tuple(sorted(pairs[i])) for i in INCONSISTENT}
    seen = set()
    while (nxt := (await client.get(f"/api/sessions/{sid}/review/next")).json())["pair"]:
        seen.add(canon(nxt["pair"]))
        assert (await label(client, sid, nxt["pair"], "TIE")).status_code == 200
    assert seen == want
    r = await client.put(url, json={"inconsistent_only": True, "sample_size": 2})
    assert r.json()["progress"]["total"] == 2


async def test_skip_moves_on_and_comes_back_last(
    client: httpx.AsyncClient, reviewer_client: httpx.AsyncClient
) -> None:
    sid, _ = await make_session(client, "rq5")
    first = (await reviewer_client.get(f"/api/sessions/{sid}/review/next")).json()["pair"]
    skipped = (await reviewer_client.post(f"/api/sessions/{sid}/review/skip")).json()["pair"]
    assert canon(skipped) != canon(first)
    # Skipping all the way round comes back to the first pair.
    current = skipped
    for _ in range(N_PAIRS - 1):
        current = (
            await reviewer_client.post(
                f"/api/sessions/{sid}/review/skip",
                json={
                    "thread_a_id": current["thread_a_id"],
                    "thread_b_id": current["thread_b_id"],
                },
            )
        ).json()["pair"]
    assert canon(current) == canon(first)


async def test_roles_and_bad_input(
    client: httpx.AsyncClient,
    reviewer_client: httpx.AsyncClient,
    researcher_client: httpx.AsyncClient,
    anon_client: httpx.AsyncClient,
    app,
) -> None:
    sid, pairs = await make_session(client, "rq6")
    other_sid, other_pairs = await make_session(client, "rq6b")
    assert (await anon_client.get(f"/api/sessions/{sid}/review/next")).status_code == 401
    assert (await anon_client.post(f"/api/sessions/{sid}/review", json={})).status_code == 401
    page = await anon_client.get(f"/sessions/{sid}/review")
    assert page.status_code == 303 and page.headers["location"].startswith("/login")
    # reviewers label but do not set the queue up
    r = await reviewer_client.put(f"/api/sessions/{sid}/review/settings", json={})
    assert r.status_code == 403
    assert (await reviewer_client.get(f"/api/sessions/{sid}/review/settings")).status_code == 200
    assert (
        await researcher_client.put(f"/api/sessions/{sid}/review/settings", json={})
    ).status_code == 200

    x, y = pairs[0]
    bad = [
        {"shown_a": x, "shown_b": y, "label": "C"},
        {"shown_a": x, "shown_b": y, "label": "a"},
        {"shown_a": x, "shown_b": x, "label": "A"},
        {"shown_a": x, "shown_b": y, "label": "A", "both_bad": True},
        {"shown_a": x, "shown_b": y, "label": "A", "note": "n" * 5001},
        {"shown_a": x, "shown_b": y, "label": "A", "extra": 1},
        {"shown_a": 0, "shown_b": y, "label": "A"},
        # a pair of another session, and threads of this one never compared with each other
        {"shown_a": other_pairs[0][0], "shown_b": other_pairs[0][1], "label": "A"},
        {"shown_a": pairs[0][0], "shown_b": pairs[1][1], "label": "A"},
    ]
    for body in bad:
        r = await reviewer_client.post(f"/api/sessions/{sid}/review", json=body)
        assert r.status_code == 422, (body, r.status_code, r.text)
    for body in ({"labels_per_pair": 0}, {"labels_per_pair": 21}, {"sample_size": 0}, {"x": 1}):
        r = await client.put(f"/api/sessions/{sid}/review/settings", json=body)
        assert r.status_code == 422, body
    assert (await reviewer_client.get("/api/sessions/999999/review/next")).status_code == 404
    r = await reviewer_client.post("/api/sessions/999999/review", json=bad[-1])
    assert r.status_code == 404
    async with app.state.sessionmaker() as db:
        stored = (
            await db.execute(select(ReferenceLabel).where(ReferenceLabel.session_id == sid))
        ).all()
    assert stored == []


async def test_the_page_is_blind_and_renders_the_pair(
    client: httpx.AsyncClient, reviewer_client: httpx.AsyncClient, app
) -> None:
    sid, pairs = await make_session(client, "rq7")
    r = await reviewer_client.get(f"/sessions/{sid}/review")
    assert r.status_code == 200, r.text
    html = r.text
    assert "0 of 10 pairs finished" in html
    # escaped, line breaks kept by the page's pre-wrap style, prompt key shown once
    assert "&lt;b&gt;bold?&lt;/b&gt;" in html and "<b>bold?</b>" not in html
    assert "second line" in html and html.count("Prompt key") == 1
    # blind: no pillar names, no verdicts
    assert "rq7-x" not in html and "rq7-y" not in html and "winner" not in html.lower()
    assert '<script src="/static/review.js"' in html and "queue settings" not in html.lower()
    # with the prompt's text imported, the text is shown instead of the key
    async with app.state.sessionmaker() as db:
        await db.execute(
            update(Thread)
            .where(Thread.prompt_key.like("rq7-%"))
            .values(prompt="Write a haiku\nabout <tea>")
        )
        await db.commit()
    html = (await reviewer_client.get(f"/sessions/{sid}/review")).text
    assert "Write a haiku\nabout &lt;tea&gt;" in html and "Prompt key" not in html

    # the form labels through htmx and the next pair comes back as a fragment
    pair = (await reviewer_client.get(f"/api/sessions/{sid}/review/next")).json()["pair"]
    r = await reviewer_client.post(
        f"/sessions/{sid}/review/label",
        data={
            "shown_a": pair["shown_a"]["thread_id"],
            "shown_b": pair["shown_b"]["thread_id"],
            "label": "BOTH_BAD",
        },
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 200 and r.text.lstrip().startswith('<section id="pair-review-panel"')
    assert "1 of 10 pairs finished" in r.text
    async with app.state.sessionmaker() as db:
        row = (
            await db.execute(select(ReferenceLabel).where(ReferenceLabel.session_id == sid))
        ).scalar_one()
    assert (row.label, row.both_bad) == ("TIE", True)
    # the previous pair is one key away, with the label shown as given
    r = await reviewer_client.get(
        f"/sessions/{sid}/review", params={"pair": f"{row.thread_a_id}-{row.thread_b_id}"}
    )
    assert 'id="label-both-bad" class="chosen"' in r.text and "Your earlier label" in r.text
    other = await reviewer_client.get(
        f"/sessions/{sid}/review", params={"pair": f"{pairs[0][0]}-{pairs[1][1]}"}
    )
    assert other.status_code == 404
    for bad_pair in ("7-7", "x-1", "1-2-3"):
        r = await reviewer_client.get(f"/sessions/{sid}/review", params={"pair": bad_pair})
        assert r.status_code == 422, bad_pair
    r = await reviewer_client.post(
        f"/sessions/{sid}/review/label",
        data={"shown_a": pair["shown_a"]["thread_id"], "shown_b": 1, "label": "A"},
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 422 and 'id="review-error"' in r.text
    r = await reviewer_client.post(
        f"/sessions/{sid}/review/label",
        data={"shown_a": pairs[0][0], "shown_b": pairs[0][1], "label": "Q"},
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 422
    # researchers see the queue settings and change them through the page
    html = (await client.get(f"/sessions/{sid}/review")).text
    assert 'id="review-settings-form"' in html
    r = await client.post(f"/sessions/{sid}/review/settings", data={"labels_per_pair": "3"})
    assert r.status_code == 303
    assert (await client.get(f"/api/sessions/{sid}/review/settings")).json()["labels_per_pair"] == 3


async def test_reviewers_asking_at_the_same_moment_get_different_pairs(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    sid, _ = await make_session(client, "rq8")
    clients = [make_client(app, await role_token(app, "reviewer")) for _ in range(4)]
    try:
        answers = await asyncio.gather(
            *(c.get(f"/api/sessions/{sid}/review/next") for c in clients)
        )
    finally:
        for c in clients:
            await c.aclose()
    held = [canon(r.json()["pair"]) for r in answers]
    assert len(set(held)) == 4, held
    progress = (await client.get(f"/api/sessions/{sid}/review/progress")).json()
    assert progress["claimed_by_others"] == 4 and progress["finished"] == 0


async def test_a_claim_lapses_and_labels_from_elsewhere_count(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    sid, pairs = await make_session(client, "rq9")
    t0 = 1_000_000.0
    async with app.state.sessionmaker() as db:
        first = await review.next_pair(db=db, session_id=sid, reviewer="ann", now=t0)
        assert first.pair is not None
        held = canon(first.pair.model_dump())
        soon = await review.next_pair(db=db, session_id=sid, reviewer="bob", now=t0 + 60)
        assert soon.pair is not None and canon(soon.pair.model_dump()) != held
        # Bob skips far later: Ann's claim has lapsed, so her pair is open to him again.
        late = t0 + review.CLAIM_S + 1
        cursor = canon(soon.pair.model_dump())
        seen = set()
        for _ in range(N_PAIRS):
            out = await review.skip_pair(
                db=db, session_id=sid, reviewer="bob", pair=cursor, now=late
            )
            assert out.pair is not None
            cursor = canon(out.pair.model_dump())
            seen.add(cursor)
        assert held in seen
        # A human label imported for a pair (no session) finishes it for the queue...
        lo, hi = rules.canonical(*pairs[0])
        db.add(
            ReferenceLabel(
                thread_a_id=lo, thread_b_id=hi, label="A", source="human", annotator="carol"
            )
        )
        # ...and a gold label does not: the queue counts people.
        glo, ghi = rules.canonical(*pairs[1])
        db.add(
            ReferenceLabel(thread_a_id=glo, thread_b_id=ghi, label="B", source="gold", annotator="")
        )
        await db.commit()
        p = await review.progress(db=db, session_id=sid, reviewer="dave", now=late)
        assert p.finished == 1
        for _ in range(N_PAIRS):
            out = await review.skip_pair(db=db, session_id=sid, reviewer="dave", now=late)
            assert out.pair is not None and canon(out.pair.model_dump()) != (lo, hi)
        # Carol herself never gets the pair she labelled, even when it needs more labels.
        await client.put(f"/api/sessions/{sid}/review/settings", json={"labels_per_pair": 3})
        for _ in range(N_PAIRS):
            out = await review.skip_pair(db=db, session_id=sid, reviewer="carol", now=late)
            assert out.pair is not None and canon(out.pair.model_dump()) != (lo, hi)


async def test_a_shared_prompt_is_shown_once_and_an_empty_answer_says_so(
    client: httpx.AsyncClient, reviewer_client: httpx.AsyncClient, app: FastAPI
) -> None:
    question = "Name a prime number\nabove 10."
    rows = [
        {
            "pillar": f"rq10-{side}",
            "external_id": "q0",
            "prompt_key": "rq10-q0",
            "content": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": f"{side}: 11"},
            ],
        }
        for side in ("x", "y")
    ]
    await _import_threads(client, rows)
    items = (await client.get("/api/threads", params={"q": "", "limit": 500})).json()["items"]
    x, y = (next(t["id"] for t in items if t["pillar_name"] == f"rq10-{s}") for s in "xy")
    line = json.dumps({"thread_a": x, "thread_b": y, "verdict": "A"}).encode()
    r = await client.post(
        "/api/sessions/import", files={"file": ("j.jsonl", line)}, data={"session_name": "rq10"}
    )
    sid = r.json()["session_id"]
    async with app.state.sessionmaker() as db:
        await db.execute(update(Thread).where(Thread.id.in_((x, y))).values(prompt=question))
        await db.commit()
    pair = (await reviewer_client.get(f"/api/sessions/{sid}/review/next")).json()["pair"]
    assert pair["prompt"] == question and not pair["prompt_is_key"]
    for side in ("shown_a", "shown_b"):
        assert [m["role"] for m in pair[side]["content"]] == ["assistant"]
        assert not pair[side]["empty"]
    html = (await reviewer_client.get(f"/sessions/{sid}/review")).text
    assert html.count("Name a prime number") == 1 and "x: 11" in html and "y: 11" in html
    async with app.state.sessionmaker() as db:
        await db.execute(
            update(Thread)
            .where(Thread.id == x)
            .values(
                content=[
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": ""},
                ]
            )
        )
        await db.commit()
    pair = (await reviewer_client.get(f"/api/sessions/{sid}/review/next")).json()["pair"]
    sides = {pair[s]["thread_id"]: pair[s]["empty"] for s in ("shown_a", "shown_b")}
    assert sides == {x: True, y: False}
    assert "(empty answer)" in (await reviewer_client.get(f"/sessions/{sid}/review")).text
