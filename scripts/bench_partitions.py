"""Benchmark a single write and a single recall on a fabric hash-partitioned by tenant
(``open_fabric(partitions=P)``, default 8) against the plain layout (issue 25).

Starts an embedded PostgreSQL in a scratch directory with two databases, loads the same
N notes (default 100,000; ``--tenants`` 100, facts of ``scripts/_bench_common.py``,
hash embedder, consolidation off, ``remember_many`` per tenant) into each, then times,
interleaved one by one on the same server and thread: a ``remember`` of a new fact into
a random tenant, and a ``recall`` of a paraphrase in a random tenant, after ``--warmup``
untimed ones (default 30 per partition). Prints p50 / p95
(ms) per layout and the partitioned / plain ratios (the issue's goal: within 1.1x).

Run (from the repository root)::

    python scripts/bench_partitions.py                      # 100k notes, 100 tenants, 8 partitions
    python scripts/bench_partitions.py --n 20000 --ops 300 --out /tmp/partitions.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as data  # noqa: E402
import psycopg  # noqa: E402
from psycopg.conninfo import make_conninfo  # noqa: E402

from memfabric.adapters import Fabric, HashEmbedder, open_fabric  # noqa: E402
from memfabric.adapters.postgres.embedded import EmbeddedPostgres  # noqa: E402


def load(fabric: Fabric, ds: data.Dataset, tenants: int) -> float:
    """Every row of ``ds`` into tenant ``i % tenants`` (``remember_many`` of at most 250
    per tenant); returns seconds."""
    t0 = time.perf_counter()
    by_tenant: dict[int, list[dict[str, Any]]] = {}
    for i, text in enumerate(ds.texts):
        by_tenant.setdefault(i % tenants, []).append({"kind": "fact", "content": text})
    for t, items in by_tenant.items():
        notes = fabric.scope(f"tenant-{t:03d}")
        for start in range(0, len(items), 250):
            notes.remember_many(items[start:start + 250])
    return time.perf_counter() - t0


def stats(ms: list[float]) -> dict[str, float | None]:
    return {"p50_ms": data.pct(ms, 50), "p95_ms": data.pct(ms, 95)}


def measure(fabrics: dict[str, Fabric], ds: data.Dataset, tenants: int, ops: int) -> dict[str, Any]:
    """``ops`` writes and ``ops`` recalls per layout, interleaved (same tenants and texts
    for both layouts); returns ms lists by layout and operation."""
    rng = random.Random(7)
    times: dict[str, dict[str, list[float]]] = {k: {"write": [], "recall": []} for k in fabrics}
    for i in range(ops):
        tenant = f"tenant-{rng.randrange(tenants):03d}"
        text = f"{ds.texts[rng.randrange(len(ds.texts))]} (update {i})"
        query = ds.queries[rng.randrange(len(ds.queries))]
        order = list(fabrics.items())
        rng.shuffle(order)
        for name, fab in order:
            notes = fab.scope(tenant)
            t0 = time.perf_counter()
            notes.remember(kind="fact", content=text)
            t1 = time.perf_counter()
            notes.recall(query)
            t2 = time.perf_counter()
            times[name]["write"].append((t1 - t0) * 1000)
            times[name]["recall"].append((t2 - t1) * 1000)
    return times


def run(n: int, tenants: int, partitions: int, ops: int, warmup: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mfbp-"))
    tmp.chmod(0o755)
    server = EmbeddedPostgres(tmp / "pg")
    fabrics: dict[str, Fabric] = {}
    try:
        ds = data.make_dataset(n, n_queries=200)
        loads = {}
        for name, count in (("plain", 1), ("partitioned", partitions)):
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE bench_{name}")
            dsn = make_conninfo(server.dsn, dbname=f"bench_{name}")
            fabrics[name] = open_fabric(dsn, embedder=HashEmbedder(384), consolidate=False, partitions=count)
            loads[name] = load(fabrics[name], ds, tenants)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
        # warm both pools, caches and plans: a recall's prepared statement names the tenant's
        # partition, so the partitioned layout has one per partition and connection, each
        # planned afresh for its first ten runs (psycopg prepares at the fifth, PostgreSQL
        # weighs its generic plan after five custom ones)
        measure(fabrics, ds, tenants, warmup)
        times = measure(fabrics, ds, tenants, ops)
    finally:
        for fab in fabrics.values():
            fab.close()
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    out: dict[str, Any] = {"n": n, "tenants": tenants, "partitions": partitions, "ops": ops, "warmup": warmup,
                           "load_seconds": loads}
    for name, by_op in times.items():
        out[name] = {op: stats(ms) for op, ms in by_op.items()}
    out["ratio_partitioned_over_plain"] = {
        op: {k: out["partitioned"][op][k] / out["plain"][op][k] for k in ("p50_ms", "p95_ms")}
        for op in ("write", "recall")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="notes per layout (default 100000)")
    ap.add_argument("--tenants", type=int, default=100, help="tenants the notes are spread over (default 100)")
    ap.add_argument("--partitions", type=int, default=8, help="partitions of the partitioned layout (default 8)")
    ap.add_argument("--ops", type=int, default=500, help="timed writes and recalls per layout (default 500)")
    ap.add_argument("--warmup", type=int, help="untimed ops first (default 30 per partition)")
    ap.add_argument("--out", help="also write the result as JSON to this file")
    args = ap.parse_args()
    warmup = args.warmup if args.warmup is not None else 30 * args.partitions
    result = run(args.n, args.tenants, args.partitions, args.ops, warmup)
    print(f"{args.n} notes, {args.tenants} tenants, {args.partitions} partitions, {args.ops} ops per layout"
          f" after {warmup} untimed")
    for name in ("plain", "partitioned"):
        r = result[name]
        print(f"{name:12s} write p50 {r['write']['p50_ms']:.2f} ms p95 {r['write']['p95_ms']:.2f} ms;"
              f" recall p50 {r['recall']['p50_ms']:.2f} ms p95 {r['recall']['p95_ms']:.2f} ms;"
              f" load {result['load_seconds'][name]:.0f} s")
    ratio = result["ratio_partitioned_over_plain"]
    print(f"ratio partitioned/plain: write p50 {ratio['write']['p50_ms']:.2f}x p95 {ratio['write']['p95_ms']:.2f}x;"
          f" recall p50 {ratio['recall']['p50_ms']:.2f}x p95 {ratio['recall']['p95_ms']:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
