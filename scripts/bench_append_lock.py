"""Measure writers of different tenants appending at once (issue 17 defect 11; since
issue 24 each tenant has its own append lock instead of eventsourcing's events-table
lock, docs/write-path.md). Runs W writer processes
(default 8), each on its own scope, for S seconds (default 10) against one embedded
PostgreSQL, and prints writes/s, p50/p95 latency and errors.

Run (from the repository root)::

    python scripts/bench_append_lock.py              # 8 writers, 10 s
    python scripts/bench_append_lock.py --writers 4 --seconds 5
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time

from memfabric.adapters import open_fabric
from memfabric.adapters.postgres.embedded import EmbeddedPostgres


def writer(dsn: str, n: int, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    lat: list[float] = []
    errors = 0
    with open_fabric(dsn) as fabric:
        notes = fabric.scope(f"tenant-{n}", "user", "thread")
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                notes.remember(kind="fact", content=f"writer {n} fact {i} about item {i * 7919 % 1000}",
                               consolidate=False)
            except Exception:  # noqa: BLE001 - counted
                errors += 1
            lat.append(time.monotonic() - t0)
            i += 1
    out.put((lat, errors))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10.0)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="mf-lock-")
    os.chmod(tmp, 0o755)
    server = EmbeddedPostgres(os.path.join(tmp, "pg"))
    try:
        with open_fabric(server.dsn):
            pass  # schema once, before the writers start
        q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
        procs = [mp.Process(target=writer, args=(server.dsn, n, args.seconds, q)) for n in range(args.writers)]
        for proc in procs:
            proc.start()
        results = [q.get() for _ in procs]
        for proc in procs:
            proc.join()
    finally:
        server.close()
    lat = sorted(x for r in results for x in r[0])
    errors = sum(r[1] for r in results)
    q95 = lat[int(0.95 * (len(lat) - 1))] if lat else 0.0
    print(f"writers={args.writers} seconds={args.seconds:g} writes={len(lat)} "
          f"writes/s={len(lat) / args.seconds:.0f} p50={statistics.median(lat) * 1000:.1f} ms "
          f"p95={q95 * 1000:.1f} ms errors={errors}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
