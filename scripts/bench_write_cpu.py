"""CPU budget per write (issue 24): 8 writer processes on 8 tenants, memfabric and a
raw single-row pgvector insert, on one embedded server with ``pg_stat_statements``.

Each writer opens its client, writes 20 warm-up rows, says ``ready``, and on ``go``
writes for ``--seconds``; process start-up and opening are outside the timed window.
Accounted over that window: each writer's user+sys CPU (``os.times``) and per thread
(``/proc/self/task``, by Python thread name), its context switches, every server
process's CPU from ``/proc/<pid>/stat`` by kind (backends, walwriter, checkpointer,
autovacuum, ...), ``pg_stat_statements`` (execution + planning time, plans, WAL) and
``pg_stat_wal``. Prints one block per system; figures per write are totals divided by
the writes acknowledged. ``--perf SYSTEM`` also records ``perf record -g`` of that
system's writers and backends into ``/tmp/bench-write-cpu-SYSTEM.data``.

Run with the interpreter of the checkout to measure (the children use it too)::

    flock /tmp/memfabric-bench.lock .venv/bin/python scripts/bench_write_cpu.py --seconds 8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HZ = os.sysconf("SC_CLK_TCK")
PG_KINDS = ("walwriter", "checkpointer", "background writer", "autovacuum launcher", "autovacuum worker",
            "logical replication launcher", "io worker", "walsummarizer", "archiver")


def stat_cpu(path: str) -> float:
    """utime + stime (s) of ``/proc/<path>/stat``; 0.0 when it is gone."""
    try:
        with open(f"/proc/{path}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / HZ
    except OSError:
        return 0.0


def switches(path: str) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of ``/proc/<path>/status``."""
    out = {}
    with open(f"/proc/{path}/status") as fh:
        for line in fh:
            if "ctxt_switches" in line:
                key, value = line.split(":")
                out[key] = int(value)
    return out["voluntary_ctxt_switches"], out["nonvoluntary_ctxt_switches"]


def server_processes(postmaster: int) -> dict[int, str]:
    """pid -> kind of the postmaster and its children."""
    res = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            if int(pid) != postmaster and ppid != postmaster:
                continue
            with open(f"/proc/{pid}/cmdline") as fh:
                cmd = fh.read().replace("\0", " ").strip()
        except OSError:
            continue
        kind = next((k for k in PG_KINDS if k in cmd), None)
        res[int(pid)] = kind or ("backend" if cmd.startswith("postgres: ") else "postmaster")
    return res


def child(system: str, dsn: str, w: int, seconds: float) -> None:
    """One writer: JSON of its writes, CPU, per-thread CPU and context switches."""
    from memfabric.adapters.embedders import HashEmbedder
    emb = HashEmbedder(dim=384)
    tenant = f"tenant-{w:02d}"
    if system == "memfabric":
        from memfabric.adapters import open_fabric
        fab = open_fabric(dsn, embedder=emb, consolidate=False)
        notes = fab.scope(tenant)

        def write(text: str) -> None:
            notes.remember(kind="fact", content=text)
        close = fab.close
    else:
        import psycopg
        from pgvector.psycopg import register_vector
        conn = psycopg.connect(dsn, autocommit=True)
        register_vector(conn)
        ids = iter(range(w * 10**9, 10**12))

        def write(text: str) -> None:
            conn.execute("INSERT INTO conc_raw VALUES (%s, %s, %s)", (next(ids), tenant, emb.embed([text])[0]),
                         prepare=True)
        close = conn.close
    for i in range(20):
        write(f"warm-up {w} {i} alpha beta gamma")
    print("ready", flush=True)
    sys.stdin.readline()
    tasks = os.listdir("/proc/self/task")
    cpu0 = {t: stat_cpu(f"self/task/{t}") for t in tasks}
    sw0 = [switches(f"self/task/{t}") for t in tasks]
    t0, n, end = os.times(), 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        write(f"Person {w}-{n} works as a nurse in Lisbon and likes dumplings number {n * 7}")
        n += 1
    t1 = os.times()
    tasks = os.listdir("/proc/self/task")
    sw1 = [switches(f"self/task/{t}") for t in tasks]
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    threads: dict[str, float] = {}
    for t in tasks:
        name = names.get(t, "other")
        threads[name] = threads.get(name, 0.0) + stat_cpu(f"self/task/{t}") - cpu0.get(t, 0.0)
    print(json.dumps({"writes": n, "user": t1.user - t0.user, "sys": t1.system - t0.system, "threads": threads,
                      "switches": [sum(s[i] for s in sw1) - sum(s[i] for s in sw0) for i in (0, 1)]}), flush=True)
    sys.stdin.readline()  # the coordinator reads the server's CPU before the backends exit
    close()


def run(system: str, dsn: str, postmaster: int, a: argparse.Namespace) -> None:
    """One system's timed window and its printed budget."""
    import psycopg
    procs = [subprocess.Popen([sys.executable, __file__, "--child", system, dsn, str(w), "--seconds", str(a.seconds)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for w in range(a.writers)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')")
    kinds = server_processes(postmaster)
    before = {p: stat_cpu(str(p)) for p in kinds}
    perf = None
    if a.perf == system:
        perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "999", "-g", "-o",
                                 f"/tmp/bench-write-cpu-{system}.data", "-p",
                                 ",".join(map(str, [*kinds, *(p.pid for p in procs)]))],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [json.loads(p.stdout.readline()) for p in procs if p.stdout is not None]
    kinds = server_processes(postmaster)
    server: dict[str, float] = {}
    for pid, kind in kinds.items():
        server[kind] = server.get(kind, 0.0) + stat_cpu(str(pid)) - before.get(pid, 0.0)
    if perf is not None:
        perf.send_signal(2)
        perf.wait()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("bye\n")
        p.stdin.flush()
        p.wait()
    writes = sum(o["writes"] for o in outs)
    ms = 1000 / max(writes, 1)
    client = sum(o["user"] + o["sys"] for o in outs)
    threads: dict[str, float] = {}
    for o in outs:
        for k, v in o["threads"].items():
            threads[k] = threads.get(k, 0.0) + v
    print(f"\n=== {system}: {writes} writes in {a.seconds:g} s = {writes / a.seconds:.1f}/s, "
          f"load {os.getloadavg()[0]:.1f}, {time.strftime('%H:%M:%S', time.gmtime())} UTC")
    print(f"client CPU {client * ms:.3f} ms/write; by thread: "
          + ", ".join(f"{k} {v * ms:.3f}" for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v > 0))
    print("client context switches per write (voluntary, involuntary): "
          f"{sum(o['switches'][0] for o in outs) * ms / 1000:.2f}, {sum(o['switches'][1] for o in outs) * ms / 1000:.2f}")
    print(f"server backends: {sum(1 for k in kinds.values() if k == 'backend')}")
    for kind, v in sorted(server.items(), key=lambda kv: -kv[1]):
        if v > 0:
            print(f"  server {kind:28s} {v * ms:.3f} ms/write")
    print(f"total {(client + sum(server.values())) * ms:.3f} ms of CPU per write")
    with psycopg.connect(dsn, autocommit=True) as c:
        wal = c.execute("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").fetchone()
        rows = c.execute(
            "SELECT calls, total_exec_time, total_plan_time, plans, wal_bytes,"
            " left(regexp_replace(query, '\\s+', ' ', 'g'), 90) FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 1"
            " ORDER BY total_exec_time + total_plan_time DESC LIMIT 10").fetchall()
    print(f"WAL per write: {wal[0] * ms / 1000:.1f} records, {wal[1] * ms / 1000:.2f} full-page images, "
          f"{int(wal[2]) * ms / 1000:.0f} bytes")
    for calls, ex, plan, plans, walb, q in rows:
        print(f"  {(ex + plan) * ms / 1000:.3f} ms/write (plan {plan * ms / 1000:.3f}, {plans} plans, {calls} calls,"
              f" {int(walb) // max(calls, 1)} WAL B/call) {q}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--systems", default="memfabric,raw", help="comma-separated: memfabric, raw")
    ap.add_argument("--perf", help="record perf of this system's processes")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1], int(a.child[2]), a.seconds)
    import psycopg
    from psycopg.conninfo import make_conninfo

    from memfabric.adapters.postgres.embedded import EmbeddedPostgres
    tmp = tempfile.mkdtemp(prefix="bench-write-cpu-")
    os.chmod(tmp, 0o755)
    pgdata = os.path.join(tmp, "pg")
    EmbeddedPostgres(pgdata).close()  # made, then restarted with pg_stat_statements
    with open(os.path.join(pgdata, "postgresql.conf"), "a") as conf:
        conf.write("\nshared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track_planning = on\n")
    server = EmbeddedPostgres(pgdata)
    try:
        with open(os.path.join(pgdata, "postmaster.pid")) as fh:
            postmaster = int(fh.readline())
        for system in a.systems.split(","):
            db = f"cpu_{system}"
            with psycopg.connect(server.dsn, autocommit=True) as c:
                c.execute(f"CREATE DATABASE {db}")
            dsn = make_conninfo(server.dsn, dbname=db)
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                c.execute("CREATE EXTENSION IF NOT EXISTS vector")
                if system == "raw":
                    c.execute("CREATE TABLE conc_raw (id bigint PRIMARY KEY, tenant text, embedding vector(384))")
                    c.execute("CREATE INDEX ON conc_raw USING hnsw (embedding vector_cosine_ops)")
            run(system, dsn, postmaster, a)
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
