"""How long the review queue takes to hand out a pair and to store a label, by session size.

An embedded PostgreSQL in a temporary directory; a session of P pairs judged in both orders
(2P comparisons, a quarter of the pairs inconsistent) and human labels by three annotators
on a third of the pairs, inserted with SQL. Per size: ``next`` (GET .../review/next: the
session's pairs grouped, the labels on them, the claim) and ``label`` (POST .../review),
each the median of repeated calls by one reviewer, beside the baseline of one
``SELECT count(*)`` over the session's comparisons in the same run (reading them once).

    .venv/bin/python bench/review_queue.py [--pairs 1000 10000 100000] [--calls 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from harness import embedded_postgres, migrate
from sqlalchemy import text

from llmjudge.infra.db.engine import make_engine, make_sessionmaker
from llmjudge.references import review
from llmjudge.references.review_schemas import ReviewLabelIn

SETUP = """
INSERT INTO pillars (name) VALUES ('bench-x-{p}'), ('bench-y-{p}');
INSERT INTO threads (pillar_id, external_id, content, content_hash)
SELECT pl.id, 'q' || g, to_jsonb('answer ' || g), md5(pl.name || g)
FROM generate_series(1, {p}) g, pillars pl WHERE pl.name IN ('bench-x-{p}', 'bench-y-{p}');
INSERT INTO judge_sessions (name, comparison_mode, pillar_ids, status)
VALUES ('bench {p}', 'imported', '{{}}', 'completed');
"""

COMPARISONS = """
WITH s AS (SELECT max(id) AS id FROM judge_sessions),
x AS (SELECT t.id, t.external_id FROM threads t JOIN pillars p ON p.id = t.pillar_id
      WHERE p.name = 'bench-x-{p}'),
y AS (SELECT t.id, t.external_id, t.pillar_id FROM threads t JOIN pillars p ON p.id = t.pillar_id
      WHERE p.name = 'bench-y-{p}'),
pairs AS (SELECT row_number() OVER () AS n, x.id AS a, y.id AS b, y.pillar_id AS pb
          FROM x JOIN y USING (external_id))
INSERT INTO comparisons (session_id, queue_position, thread_a_id, thread_b_id, pillar_a_id,
                         pillar_b_id, swap_group, is_swap, status, winner)
SELECT s.id, 2 * n + k, CASE k WHEN 0 THEN a ELSE b END, CASE k WHEN 0 THEN b ELSE a END,
       pb - 1, pb, n, k = 1, 'completed',
       CASE WHEN k = 0 THEN 'A' WHEN n % 4 = 0 THEN 'A' ELSE 'B' END
FROM pairs, s, generate_series(0, 1) k;
"""

LABELS = """
INSERT INTO reference_labels (thread_a_id, thread_b_id, label, source, annotator)
SELECT DISTINCT least(c.thread_a_id, c.thread_b_id), greatest(c.thread_a_id, c.thread_b_id),
       'A', 'human', 'annotator-' || k
FROM comparisons c, generate_series(1, 3) k
WHERE c.session_id = (SELECT max(id) FROM judge_sessions) AND c.swap_group % 3 = 0;
"""


async def measure(url: str, pairs: int, calls: int) -> tuple[float, float, float]:
    engine = make_engine(url, pool_size=2)
    maker = make_sessionmaker(engine)
    async with engine.begin() as conn:
        for statement in SETUP.format(p=pairs).split(";"):
            if statement.strip():
                await conn.execute(text(statement))
        await conn.execute(text(COMPARISONS.format(p=pairs)))
        await conn.execute(text(LABELS))
        sid = (await conn.execute(text("SELECT max(id) FROM judge_sessions"))).scalar_one()
        await conn.execute(text("ANALYZE"))
    base, nexts, labels = [], [], []
    for _ in range(calls):
        async with engine.connect() as conn:
            t = time.perf_counter()
            q = "SELECT count(*) FROM comparisons WHERE session_id = :s"
            await conn.execute(text(q), {"s": sid})
            base.append(time.perf_counter() - t)
        async with maker() as db:
            t = time.perf_counter()
            out = await review.next_pair(db=db, session_id=sid, reviewer="bench")
            nexts.append(time.perf_counter() - t)
        assert out.pair is not None
        async with maker() as db:
            data = ReviewLabelIn(
                shown_a=out.pair.shown_a.thread_id, shown_b=out.pair.shown_b.thread_id, label="A"
            )
            t = time.perf_counter()
            await review.label_pair(db=db, session_id=sid, reviewer="bench", data=data)
            labels.append(time.perf_counter() - t)
    await engine.dispose()
    ms = 1000.0
    return (
        statistics.median(base) * ms,
        statistics.median(nexts) * ms,
        statistics.median(labels) * ms,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bench-review-") as name,
        embedded_postgres(Path(name)) as pg,
    ):

        async def run() -> None:
            await migrate(pg)
            print(
                f"{'pairs':>8} {'comparisons':>12} {'count(*) ms':>12} {'next ms':>9} "
                f"{'label ms':>9} {'next/count':>11}"
            )
            for p in args.pairs:
                b, n, lab = await measure(pg.url(), p, args.calls)
                print(f"{p:>8} {2 * p:>12} {b:>12.1f} {n:>9.1f} {lab:>9.1f} {n / b:>11.1f}")

        asyncio.run(run())


if __name__ == "__main__":
    main()
