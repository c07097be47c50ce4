"""A/B of the write path between two checkouts of memfabric on one embedded server
(issue 24): each round runs, for each interpreter in turn (alternating, so both see the
same machine load), 200 single ``remember`` calls, then 8 threads on 8 tenants and 8
threads on one scope (consolidation on) for ``--seconds`` each, on a fresh database,
and prints one JSON line per run: ``single_per_s``, ``single_p50_ms``,
``threads8_per_s``, ``one_scope8_per_s``.

Run (each interpreter from a venv with that checkout installed, e.g. a git worktree of
the old commit)::

    python scripts/bench_write_ab.py --python base=/path/old/.venv/bin/python \\
        --python main=.venv/bin/python --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CHILD = "--child"


def child(dsn: str, label: str, seconds: float) -> None:
    """One run in this interpreter's memfabric; prints its JSON line."""
    from memfabric.adapters import open_fabric
    out: dict[str, object] = {"label": label}
    with open_fabric(dsn, consolidate=True) as fab:
        notes = fab.scope("solo", "u", "t")
        for i in range(20):
            notes.remember(kind="fact", content=f"warm {i} zz{i}")
        lat = []
        t0 = time.perf_counter()
        for i in range(200):
            s = time.perf_counter()
            notes.remember(kind="fact", content=f"The service number {i} runs in region zone-{i % 13} "
                                                f"with owner team-{i * 31} {label}")
            lat.append(time.perf_counter() - s)
        out["single_per_s"] = 200 / (time.perf_counter() - t0)
        out["single_p50_ms"] = statistics.median(lat) * 1000
        for key, scope_of, text_of in (
                ("threads8_per_s", lambda k: fab.scope(f"tenant{k}", "u", "t"),
                 lambda k, i: f"writer {k} item {i} about widget{i} from {label}"),
                ("one_scope8_per_s", lambda k: fab.scope("one", "u", "t"),
                 lambda k, i: f"shared fact {(i + k * 5) % 40} about gadget{(i + k * 5) % 40}")):
            counts = [0] * 8
            stop = time.perf_counter() + seconds

            def write(k: int, scope_of=scope_of, text_of=text_of, counts=counts, stop=stop) -> None:
                sc, i = scope_of(k), 0
                while time.perf_counter() < stop:
                    sc.remember(kind="fact", content=text_of(k, i))
                    i += 1
                counts[k] = i
            threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out[key] = sum(counts) / seconds
    print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", default=[], metavar="LABEL=PATH",
                    help="an interpreter with a memfabric checkout installed (give two or more)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument(CHILD, nargs=2, metavar=("DSN", "LABEL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.seconds)
        return
    import psycopg
    from psycopg.conninfo import make_conninfo

    from memfabric.adapters.postgres.embedded import EmbeddedPostgres
    runs = [p.split("=", 1) for p in a.python] or [["this", sys.executable]]
    tmp = tempfile.mkdtemp(prefix="memfabric-ab-")
    os.chmod(tmp, 0o755)
    server = EmbeddedPostgres(os.path.join(tmp, "pg"))
    try:
        for r in range(a.rounds):
            for label, python in runs:
                db = f"ab_{label}_{r}"
                with psycopg.connect(server.dsn, autocommit=True) as conn:
                    conn.execute(f"DROP DATABASE IF EXISTS {db}")
                    conn.execute(f"CREATE DATABASE {db}")
                out = subprocess.run([python, __file__, CHILD, make_conninfo(server.dsn, dbname=db), label,
                                      "--seconds", str(a.seconds)], capture_output=True, text=True, cwd=tmp)
                print(out.stdout.strip() or out.stderr[-2000:], flush=True)
        print(json.dumps({"load": os.getloadavg()}))
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
