"""Benchmark recall through a local streaming replica against recall on the primary
(issue 25), at equal load: the same queries, one thread, interleaved query by query.

Starts an embedded primary in a scratch directory, loads N notes (default 20,000, 10
tenants, hash embedder, consolidation off, ``remember_many``), makes a hot standby with
``memfabric.adapters.postgres.standby.create_standby`` (pg_basebackup -R) and prints recall p50 /
p95 (ms) on the primary (``open_fabric(dsn)``) and via the replica
(``open_fabric(dsn, replicas=[standby])``), then the same for write-then-recall pairs
(read-your-writes: the replica read waits for the write's LSN), and the replica / primary
ratios. Same machine, so no throughput gain is expected: this measures the routing cost.

Run (from the repository root)::

    python scripts/bench_replica.py               # 20k notes, 300 queries, 200 pairs
    python scripts/bench_replica.py --n 5000 --queries 100 --pairs 50 --out /tmp/replica.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as data  # noqa: E402

from memfabric.adapters import HashEmbedder, open_fabric  # noqa: E402
from memfabric.adapters.postgres import standby  # noqa: E402
from memfabric.adapters.postgres.embedded import EmbeddedPostgres  # noqa: E402


def load(dsn: str, n: int) -> data.Dataset:
    """N synthetic facts over 10 tenants (``remember_many`` in batches of 250)."""
    ds = data.make_dataset(n, n_queries=max(n // 20, 10))
    with open_fabric(dsn, embedder=HashEmbedder(384), consolidate=False) as fabric:
        for start in range(0, n, 250):
            rows = range(start, min(n, start + 250))
            by_tenant: dict[int, list[dict[str, Any]]] = {}
            for i in rows:
                by_tenant.setdefault(ds.tenants[i], []).append({"kind": "fact", "content": ds.texts[i]})
            for t, items in by_tenant.items():
                fabric.scope(data.tenant_name(t)).remember_many(items)
    return ds


def stats(ms: list[float]) -> dict[str, float | None]:
    return {"p50_ms": data.pct(ms, 50), "p95_ms": data.pct(ms, 95), "mean_ms": sum(ms) / len(ms) if ms else None}


def run(n: int, queries: int, pairs: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mfbr-"))
    tmp.chmod(0o755)
    server = EmbeddedPostgres(tmp / "pg")
    try:
        started = time.perf_counter()
        ds = load(server.dsn, n)
        load_s = time.perf_counter() - started
        replica = standby.create_standby(tmp / "r", 55433, server.dsn)
        try:
            return measure(server.dsn, replica, ds, n, queries, pairs, load_s)
        finally:
            standby.remove_standby(tmp / "r")
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


def measure(dsn: str, replica: str, ds: data.Dataset, n: int, queries: int, pairs: int,
            load_s: float) -> dict[str, Any]:
    qs = [ds.queries[i % len(ds.queries)] for i in range(queries)]
    tenant = data.tenant_name(data.QUERY_TENANT)
    opts = {"embedder": HashEmbedder(384), "consolidate": False}
    with open_fabric(dsn, **opts) as primary, open_fabric(dsn, replicas=[replica], **opts) as routed:
        p, r = primary.scope(tenant), routed.scope(tenant)
        for q in qs[:20]:  # warm both
            p.recall(q)
            r.recall(q)
        t_p: list[float] = []
        t_r: list[float] = []
        served: dict[str, int] = {}
        for q in qs:
            for notes, out in ((p, t_p), (r, t_r)):
                t0 = time.perf_counter()
                res = notes.recall(q)
                out.append((time.perf_counter() - t0) * 1000)
                if notes is r:
                    key = str(res.served_by).split(":")[0]
                    served[key] = served.get(key, 0) + 1
        w_p: list[float] = []
        w_r: list[float] = []
        misses = 0
        for i in range(pairs):
            for notes, out, tag in ((p, w_p, "p"), (r, w_r, "r")):
                t0 = time.perf_counter()
                note = notes.remember(kind="fact", content=f"bench pair {tag}{i} zq{tag}{i}x")
                res = notes.recall(f"zq{tag}{i}x", mode="lexical", top_k=3)
                out.append((time.perf_counter() - t0) * 1000)
                misses += note.id not in [h.id for h in res.hits]
        fallbacks = routed.store.router.fallbacks if routed.store.router else None
    rp, rr = stats(t_p), stats(t_r)
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "n": n, "tenants": data.N_TENANTS, "queries": queries,
        "pairs": pairs, "load_s": round(load_s, 1), "cpus": os.cpu_count(),
        "recall": {"primary": rp, "replica": rr, "served_by": served},
        "ratio_p50": (rr["p50_ms"] or 0) / (rp["p50_ms"] or 1),
        "write_then_recall": {"primary": stats(w_p), "replica": stats(w_r), "misses": misses,
                              "fallbacks": fallbacks},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    res = run(args.n, args.queries, args.pairs)
    for label, block in (("recall", res["recall"]), ("write+recall", res["write_then_recall"])):
        for where in ("primary", "replica"):
            s = block[where]
            print(f"{label:13s} {where:8s} p50 {s['p50_ms']:.2f} ms  p95 {s['p95_ms']:.2f} ms")
    print(f"recall p50 replica/primary: {res['ratio_p50']:.2f}; served_by {res['recall']['served_by']}; "
          f"write+recall misses {res['write_then_recall']['misses']}, fallbacks {res['write_then_recall']['fallbacks']}")
    if args.out:
        args.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
