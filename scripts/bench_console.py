"""p95 render time of the console's scope, note and log pages at N notes (issue 35's
goal: ≤ 300 ms at 100k notes).

Loads N facts (default 100,000) into a fresh database — 10 tenants × 20 users × 5
threads, with a supersession (explicit subject) and a forget in one thread in ten — then
renders each page ``--runs`` times through Starlette's TestClient (in process: the
HTTP framing, routing, SQL and template rendering are measured, not a network):

- ``scopes``: ``/`` (tenants), ``/?tenant=T`` (users), ``/?tenant=T&resource=U`` (threads)
  and a thread's first page of notes, in turn; then each level on its own
  (``scopes_tenants``, ``scopes_users``, ``scopes_threads``, ``scopes_notes``);
- ``search``: a recall within a thread (``?q=``), shown as explain bars;
- ``note``: ``/notes/<id>`` of random notes (a third of them superseded, with a chain);
- ``log``: ``/log?after=P`` at random positions (50 decoded events with their integrity).

Run (from the repository root)::

    python scripts/bench_console.py                 # 100k notes on a throwaway embedded server
    python scripts/bench_console.py --n 20000 --runs 50
    python scripts/bench_console.py --dsn postgresql://...   # an existing, empty database
    python scripts/bench_console.py --data-dir /tmp/bench-console   # keep the data: a rerun only measures

The notes are written with the recall index deferred and then rebuilt in bulk (as
``memfabric projections rebuild`` does), which loads 100k notes in minutes rather than
the better part of an hour on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlette.testclient import TestClient  # noqa: E402

from memfabric.adapters import open_fabric  # noqa: E402
from memfabric.adapters.console import ConsoleSettings, build_app  # noqa: E402
from memfabric.adapters.postgres.embedded import EmbeddedPostgres  # noqa: E402
from memfabric.projections.rebuild import ProjectionAdmin  # noqa: E402

WORDS = ("coffee tea bike train Lisbon Porto Berlin piano chess budget invoice roadmap garden "
         "sushi pasta climbing yoga novel podcast python rust release audit holiday dentist").split()


def load(fabric: Any, n: int, seed: int = 7) -> dict[str, Any]:
    """Write ``n`` facts; returns sample note ids (with scopes) and the load rate."""
    rng = random.Random(seed)
    per_thread = max(1, n // 1000)
    sample: list[tuple[str, str, str, str]] = []
    t0 = time.perf_counter()
    written = 0
    for t in range(10):
        for u in range(20):
            for h in range(5):
                if written >= n:
                    break
                scope = (f"tenant-{t:02d}", f"user-{u:02d}", f"thread-{h}")
                notes = fabric.scope(*scope)
                k = min(per_thread, n - written)
                items = [{"kind": "fact", "content": f"{scope[1]} note {i}: " + " ".join(rng.sample(WORDS, 5))
                                                     + f" #{rng.randrange(10**6)}"} for i in range(k)]
                made = notes.remember_many(items, consolidate=False)
                written += k
                if made:
                    sample.append((*scope, made[0].id))
                if made and (u * 5 + h) % 10 == 0:  # one thread in ten: a supersession and a forget
                    first = notes.remember(kind="fact", content=f"{scope[1]} lives in Lisbon", subject="home")
                    second = notes.remember(kind="fact", content=f"{scope[1]} lives in Porto", subject="home")
                    notes.forget(id=made[-1].id)
                    sample += [(*scope, first.id), (*scope, second.id)]
    return {"sample": sample, "load_seconds": time.perf_counter() - t0, "notes": written}


def timed(client: TestClient, paths: list[str]) -> list[float]:
    out = []
    for path in paths:
        t0 = time.perf_counter()
        res = client.get(path)
        out.append(time.perf_counter() - t0)
        if res.status_code != 200:
            raise RuntimeError(f"{path}: {res.status_code} {res.text[:300]}")
    return out


def ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 1),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1),
            "max_ms": round(ordered[-1] * 1000, 1)}


def prepare(dsn: str, n: int) -> dict[str, Any]:
    """Load ``n`` notes unless the database already holds them (a kept ``--data-dir``):
    written with the recall index deferred, then rebuilt in bulk (COPY, index after
    load), as ``memfabric projections rebuild`` does. Returns the load figures and the
    sample of note ids."""
    with open_fabric(dsn) as fabric, fabric.log.datastore.get_connection() as conn:
        row = conn.execute("SELECT count(*) AS c FROM mf_note_scope").fetchone()
    if row and int(row["c"]) >= n:
        return {"sample": _sample(dsn), "load_seconds": 0.0, "notes": int(row["c"]), "reused": True}
    with open_fabric(dsn, inline_projections=False, await_projections=False) as fabric:
        loaded = load(fabric, n)
        t0 = time.perf_counter()
        ProjectionAdmin.for_fabric(fabric).rebuild("all")
        loaded["rebuild_seconds"] = round(time.perf_counter() - t0, 1)
    return loaded


def _sample(dsn: str, k: int = 600) -> list[tuple[str, str, str, str]]:
    """Note ids of a kept database: the notes with a subject (their supersession chains)
    and as many plain ones."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "(SELECT tenant_id, resource_id, thread_id, note_id FROM mf_recall_index WHERE subject IS NOT NULL"
            " LIMIT %s) UNION ALL (SELECT tenant_id, resource_id, thread_id, note_id FROM mf_recall_index"
            " WHERE subject IS NULL LIMIT %s)", (k, k // 2)).fetchall()
    return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]


def run(dsn: str, n: int, runs: int) -> dict[str, Any]:
    rng = random.Random(11)
    loaded = prepare(dsn, n)
    sample = loaded.pop("sample")
    with open_fabric(dsn) as fabric:
        with fabric.log.datastore.get_connection() as conn:
            head = int(conn.execute("SELECT max(notification_id) AS m FROM memfabric_events").fetchone()["m"])
        client = TestClient(build_app(fabric, ConsoleSettings()), base_url="http://127.0.0.1")
        client.get("/")  # warm up: the first tombstone scan reads every Forgotten event once
        t0 = time.perf_counter()
        client.get("/log")
        first = time.perf_counter() - t0

        def scope_path(level: int) -> str:
            t, r, h, _ = rng.choice(sample)
            return ["/", f"/?tenant={t}", f"/?tenant={t}&resource={r}",
                    f"/?tenant={t}&resource={r}&thread={h}"][level]

        paths = {
            "scopes": [scope_path(i % 4) for i in range(runs)],
            "scopes_tenants": [scope_path(0) for _ in range(runs)],
            "scopes_users": [scope_path(1) for _ in range(runs)],
            "scopes_threads": [scope_path(2) for _ in range(runs)],
            "scopes_notes": [scope_path(3) for _ in range(runs)],
            "search": [f"/?tenant={t}&resource={r}&thread={h}&q={rng.choice(WORDS)}+{rng.choice(WORDS)}"
                       for t, r, h, _ in (rng.choice(sample) for _ in range(runs))],
            "note": [f"/notes/{nid}?tenant={t}&resource={r}&thread={h}"
                     for t, r, h, nid in (rng.choice(sample) for _ in range(runs))],
            "log": [f"/log?after={rng.randrange(max(1, head - 60))}" for _ in range(runs)],
        }
        out: dict[str, Any] = {name: ms(timed(client, p)) for name, p in paths.items()}
    out.update(loaded)
    out["events"] = head
    out["first_log_ms"] = round(first * 1000, 1)
    out["runs"] = runs
    out["goal_p95_ms"] = 300
    out["load_seconds"] = round(out["load_seconds"], 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="notes to load (default 100000)")
    parser.add_argument("--runs", type=int, default=60, help="renders of each page kind")
    parser.add_argument("--dsn", default=None, help="an empty PostgreSQL database (default: a fresh embedded server)")
    parser.add_argument("--data-dir", default=None,
                        help="keep the embedded server's data here; a second run reuses the loaded notes")
    args = parser.parse_args()
    if args.dsn:
        print(json.dumps(run(args.dsn, args.n, args.runs), indent=2))
        return
    if args.data_dir:
        server = EmbeddedPostgres(args.data_dir)
        try:
            print(json.dumps(run(server.dsn, args.n, args.runs), indent=2))
        finally:
            server.close()
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the server may run as another user when started as root
        server = EmbeddedPostgres(f"{tmp}/pg")
        try:
            print(json.dumps(run(server.dsn, args.n, args.runs), indent=2))
        finally:
            server.close()


if __name__ == "__main__":
    main()
