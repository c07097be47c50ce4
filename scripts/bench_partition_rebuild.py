"""Benchmark the rebuild of one tenant partition against a full rebuild (issue 25's goal:
a per-partition rebuild of one tenant's partition takes at most its share of a full
rebuild).

Starts an embedded PostgreSQL in a scratch directory, loads N notes (default 20,000;
``--tenants`` 100, facts of ``scripts/_bench_common.py``, hash embedder 384,
consolidation off, ``remember_many`` per tenant) into a fabric made with
``partitions=P`` (default 8), ``VACUUM ANALYZE``, then times, alternately ``--repeats``
times each: a full in-place rebuild of every projection
(``ProjectionAdmin.rebuild()``: tables emptied, indexes dropped, bulk load, indexes built
again) and the rebuild of the partition holding ``tenant-000``
(``ProjectionAdmin.rebuild_partition(tenant=...)``: that partition's rows deleted and
copied again with the indexes maintained row by row, the recall rows outside the HNSW
graph as a writer's land). Prints the medians, the
partition's share of the log's events (its events / all events) and the ratio
partition seconds / (share × full seconds): the goal is ≤ 1.

Run (from the repository root)::

    python scripts/bench_partition_rebuild.py
    python scripts/bench_partition_rebuild.py --n 100000 --repeats 3 --out /tmp/prebuild.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as data  # noqa: E402
import psycopg  # noqa: E402

from memfabric.adapters import HashEmbedder, open_fabric  # noqa: E402
from memfabric.adapters.postgres.embedded import EmbeddedPostgres  # noqa: E402
from memfabric.projections.rebuild import ProjectionAdmin  # noqa: E402
from bench_partitions import load  # noqa: E402


def run(n: int, tenants: int, partitions: int, repeats: int) -> dict[str, Any]:
    """Load, then ``repeats`` full and partition rebuilds alternately; returns the
    seconds of each, events replayed by each, and the ratio to the partition's share."""
    tmp = Path(tempfile.mkdtemp(prefix="mfbpr-"))
    tmp.chmod(0o755)
    server = EmbeddedPostgres(tmp / "pg")
    try:
        ds = data.make_dataset(n, n_queries=10)
        with open_fabric(server.dsn, embedder=HashEmbedder(384), consolidate=False, partitions=partitions) as fab:
            load_seconds = load(fab, ds, tenants)
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
            admin = ProjectionAdmin.for_fabric(fab)
            full: list[float] = []
            part: list[float] = []
            full_events = part_events = 0
            part_tenants: list[str] = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                full_events = admin.rebuild().events
                full.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                r = admin.rebuild_partition(tenant="tenant-000")
                part.append(time.perf_counter() - t0)
                part_events, part_tenants = r.events, r.tenants
            assert all(v.ok for v in admin.verify())
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    share = part_events / full_events
    full_s, part_s = statistics.median(full), statistics.median(part)
    return {"n": n, "tenants": tenants, "partitions": partitions, "repeats": repeats,
            "load_seconds": load_seconds, "full_seconds": full, "partition_seconds": part,
            "full_events": full_events, "partition_events": part_events, "partition_tenants": len(part_tenants),
            "share": share, "ratio_to_share": part_s / (share * full_s)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000, help="notes (default 20000)")
    ap.add_argument("--tenants", type=int, default=100, help="tenants the notes are spread over (default 100)")
    ap.add_argument("--partitions", type=int, default=8, help="partitions (default 8)")
    ap.add_argument("--repeats", type=int, default=3, help="full and partition rebuilds timed (default 3 each)")
    ap.add_argument("--out", help="also write the result as JSON to this file")
    args = ap.parse_args()
    r = run(args.n, args.tenants, args.partitions, args.repeats)
    full_s, part_s = statistics.median(r["full_seconds"]), statistics.median(r["partition_seconds"])
    print(f"{args.n} notes, {args.tenants} tenants, {args.partitions} partitions; load {r['load_seconds']:.0f} s")
    print(f"full rebuild      median {full_s:.2f} s of {r['full_seconds']} ({r['full_events']} events)")
    print(f"partition rebuild median {part_s:.2f} s of {r['partition_seconds']} ({r['partition_events']} events,"
          f" {r['partition_tenants']} tenants, share {r['share']:.3f})")
    print(f"partition / (share x full) = {r['ratio_to_share']:.2f} (goal <= 1)")
    if args.out:
        Path(args.out).write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
