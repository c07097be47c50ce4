"""What visibility that follows the user costs (issue 16), side by side in one run on
one embedded PostgreSQL:

- ``remember`` of a thread-only fact (the scope's lock) against a resource-visible
  fact (the scope's lock plus the ``(tenant, resource)`` group lock, and a neighbour
  lookup over every thread of the user), interleaved so both see the same load;
- ``get`` of a note from its own thread against ``get`` from the user-level scope
  (both resolve the id through the note-scope index first).

Run (from the repository root)::

    python scripts/bench_visibility.py            # 400 writes of each kind, 8 threads
    python scripts/bench_visibility.py --n 1000 --threads 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

from memfabric.adapters import open_fabric
from memfabric.adapters.postgres.embedded import EmbeddedPostgres


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 3)}


def run(dsn: str, n: int, threads: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"remember_thread": [], "remember_resource": [],
                                     "get_own_thread": [], "get_user_level": []}
    ids: list[tuple[str, str]] = []
    with open_fabric(dsn) as fabric:
        user = fabric.scope("acme", "alice")
        for i in range(n):
            notes = fabric.scope("acme", "alice", f"thread-{i % threads}")
            for vis in (("thread", "resource") if i % 2 == 0 else ("resource", "thread")):
                t0 = time.perf_counter()
                m = notes.remember(kind="fact", content=f"Alice's {vis} item {i} is number {i * 7919 % 10007}",
                                   consent={"visibility": vis})
                times[f"remember_{vis}"].append(time.perf_counter() - t0)
                if vis == "resource":
                    ids.append((f"thread-{i % threads}", m.id))
        for thread, nid in ids:
            t0 = time.perf_counter()
            fabric.scope("acme", "alice", thread).get(nid)
            times["get_own_thread"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            user.get(nid)
            times["get_user_level"].append(time.perf_counter() - t0)
    out: dict[str, Any] = {k: _ms(v) for k, v in times.items()}
    out["ratio_remember_resource_to_thread_p50"] = round(
        out["remember_resource"]["p50_ms"] / out["remember_thread"]["p50_ms"], 3)
    out["ratio_get_user_level_to_own_p50"] = round(
        out["get_user_level"]["p50_ms"] / out["get_own_thread"]["p50_ms"], 3)
    out["n"], out["threads"] = n, threads
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400, help="writes of each visibility")
    parser.add_argument("--threads", type=int, default=8, help="threads of the one user")
    parser.add_argument("--dsn", default=None, help="a PostgreSQL DSN (default: a fresh embedded server)")
    args = parser.parse_args()
    if args.dsn:
        print(json.dumps(run(args.dsn, args.n, args.threads), indent=2))
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the server may run as another user when started as root
        server = EmbeddedPostgres(f"{tmp}/pg")
        try:
            print(json.dumps(run(server.dsn, args.n, args.threads), indent=2))
        finally:
            server.close()


if __name__ == "__main__":
    main()
