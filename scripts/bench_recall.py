"""Benchmark recall latency per mode: hybrid (one SQL statement fusing the HNSW vector
list and the full-text list) against vector-only and lexical-only recall.

Loads N notes (default 100k; hash embedder, consolidation off) spread over 10 tenants
with ``remember_many`` in batches, then recalls paraphrased queries of tenant 0's notes
(10% of the rows) in the three modes, interleaved query by query, and prints p50 / p95
/ mean latency per mode, the hybrid / vector ratios and hit@10 (the paraphrased note is
among the top 10).

The data are the synthetic facts of ``scripts/_bench_common.py`` (people, jobs, cities,
pets, deadlines; queries are paraphrases), deterministic for a given ``--n``.

Run (from the repository root)::

    python scripts/bench_recall.py                       # 100k notes, embedded PostgreSQL
    python scripts/bench_recall.py --n 20000 --queries 100 --out /tmp/recall.json
    python scripts/bench_recall.py --dsn postgresql://...   # a database is created, then dropped

``--out FILE`` writes ``{"n", "tenant_rows", "queries", "top_k", "load_s",
"modes": {"<mode>": {"p50_ms", "p95_ms", "mean_ms", "hit@10"}}, "ratio_p50",
"ratio_p95", "ratio_mean"}`` (ratios are hybrid / vector).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as data  # noqa: E402

from memfabric.adapters import HashEmbedder, open_fabric  # noqa: E402

MODES = ("hybrid", "vector", "lexical", "hybrid+links")
"""``hybrid+links``: hybrid with 1-hop link expansion (issue 15); the other modes
recall with ``expand_links=False``."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="notes to load (default 100000)")
    p.add_argument("--queries", type=int, default=200, help="timed queries per mode (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed queries per mode first (default 20)")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--batch", type=int, default=5000, help="remember_many batch size (default 5000)")
    p.add_argument("--dsn", default=None, help="server DSN (default: embedded PostgreSQL in a temp dir)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--links", type=int, default=3,
                   help="edges per note of every tenant written into mf_link_graph (default 3)")
    return p.parse_args(argv)


def load(fabric: Any, ds: data.Dataset, batch: int) -> dict[int, str]:
    """Remember every row in its tenant; returns row -> note id."""
    per_tenant: dict[int, list[int]] = {}
    for row, t in enumerate(ds.tenants):
        per_tenant.setdefault(t, []).append(row)
    ids: dict[int, str] = {}
    done = 0
    t0 = time.perf_counter()
    for t, rows in sorted(per_tenant.items()):
        notes = fabric.scope(data.tenant_name(t))
        for i in range(0, len(rows), batch):
            chunk = rows[i : i + batch]
            out = notes.remember_many([{"kind": "fact", "content": ds.texts[r]} for r in chunk])
            ids.update((r, n.id) for r, n in zip(chunk, out, strict=True))
            done += len(chunk)
            rate = done / (time.perf_counter() - t0)
            print(f"\rloaded {done}/{len(ds.texts)} notes ({rate:.0f}/s)", end="", flush=True)
    print()
    return ids


def add_links(conn: Any, k: int) -> None:
    """``k`` edges per note to other notes of its tenant (each note to the next ``k`` in
    aggregate-id order), written straight into the ``mf_link_graph`` projection: the
    benchmark times the read side only, and linking 100k notes through ``link`` would
    take longer than the benchmark itself."""
    conn.execute(
        "INSERT INTO mf_link_graph (from_aggregate_id, to_aggregate_id, from_note_id, to_note_id,"
        " tenant_id, resource_id, thread_id, relation, weight)"
        " SELECT a.aggregate_id, b.aggregate_id, a.note_id, b.note_id, a.tenant_id, a.resource_id,"
        " a.thread_id, 'related', 0.5 FROM (SELECT aggregate_id, note_id, tenant_id, resource_id, thread_id,"
        " row_number() OVER (PARTITION BY tenant_id ORDER BY aggregate_id) AS n,"
        " count(*) OVER (PARTITION BY tenant_id) AS m FROM mf_recall_index) a"
        " JOIN LATERAL generate_series(1, %s) s(j) ON true"
        " JOIN (SELECT aggregate_id, note_id, tenant_id,"
        " row_number() OVER (PARTITION BY tenant_id ORDER BY aggregate_id) AS n FROM mf_recall_index) b"
        " ON b.tenant_id = a.tenant_id AND b.n = (a.n + s.j - 1) %% a.m + 1"
        " ON CONFLICT DO NOTHING", (k,))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def run(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    ds = data.make_dataset(args.n, n_queries=args.queries + args.warmup)
    with open_fabric(dsn, embedder=HashEmbedder(), consolidate=False) as fabric:
        t0 = time.perf_counter()
        ids = load(fabric, ds, args.batch)
        load_s = time.perf_counter() - t0
        with psycopg.connect(dsn, autocommit=True) as conn:
            if args.links:
                add_links(conn, args.links)
            conn.execute("VACUUM ANALYZE mf_recall_index")
            conn.execute("VACUUM ANALYZE mf_link_graph")
        notes = fabric.scope(data.tenant_name(data.QUERY_TENANT))
        times: dict[str, list[float]] = {m: [] for m in MODES}
        hits: dict[str, int] = {m: 0 for m in MODES}
        for qi, (query, src) in enumerate(zip(ds.queries, ds.query_src, strict=True)):
            timed = qi >= args.warmup
            for mode in MODES:
                t1 = time.perf_counter()
                res = notes.recall(query, top_k=args.top_k, mode=mode.split("+")[0],
                                   expand_links=mode.endswith("+links"))
                elapsed = (time.perf_counter() - t1) * 1000
                if timed:
                    times[mode].append(elapsed)
                    hits[mode] += ids[src] in {h.id for h in res.hits}
    n_q = len(times["hybrid"])
    modes = {
        m: {"p50_ms": round(pct(v, 50), 3), "p95_ms": round(pct(v, 95), 3),
            "mean_ms": round(sum(v) / len(v), 3), "hit@10": round(hits[m] / n_q, 4)}
        for m, v in times.items()
    }
    return {
        "n": len(ds.texts),
        "tenant_rows": ds.tenants.count(data.QUERY_TENANT),
        "queries": n_q,
        "top_k": args.top_k,
        "load_s": round(load_s, 1),
        "modes": modes,
        "ratio_p50": round(modes["hybrid"]["p50_ms"] / modes["vector"]["p50_ms"], 3),
        "ratio_p95": round(modes["hybrid"]["p95_ms"] / modes["vector"]["p95_ms"], 3),
        "ratio_mean": round(modes["hybrid"]["mean_ms"] / modes["vector"]["mean_ms"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with data.scratch_database(args.dsn, "mf-bench-recall") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        result = run(args, dsn)
    print(f"recall latency, {result['n']} notes ({result['tenant_rows']} in the queried tenant), "
          f"{result['queries']} queries, top_k={result['top_k']} (load {result['load_s']}s)")
    print(f"{'mode':<8} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8} {'hit@10':>7}")
    for mode, m in result["modes"].items():
        print(f"{mode:<8} {m['p50_ms']:>8.2f} {m['p95_ms']:>8.2f} {m['mean_ms']:>8.2f} {m['hit@10']:>7.3f}")
    print(f"hybrid+links / hybrid: p50 {result['modes']['hybrid+links']['p50_ms'] / result['modes']['hybrid']['p50_ms']:.2f}x")
    print(f"hybrid / vector: p50 {result['ratio_p50']:.2f}x, p95 {result['ratio_p95']:.2f}x, "
          f"mean {result['ratio_mean']:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
