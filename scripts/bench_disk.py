"""Bytes on disk per note (issue 19, part 3): load N notes (default 20,000; synthetic
facts of ``_bench_common``, consolidation off, hash embedder 384-d), then report per
table ``pg_total_relation_size`` split into heap, TOAST and indexes (each index by
name), the WAL the load wrote (``pg_current_wal_lsn`` before/after) and ``pg_wal`` after
a ``CHECKPOINT``, against the raw row (content bytes + float32 vector).

``--compare`` runs the load twice in one invocation, each on its own fresh embedded
server: ``before`` (the issue-19 cuts undone: sealed payloads never compressed, the
server's WAL defaults) and ``after`` (as shipped: compressed sealed payloads, the
embedded WAL settings of ``adapters/postgres/embedded.py``), and prints both side by side.

Run (from the repository root)::

    python scripts/bench_disk.py                 # 20k notes, embedded PostgreSQL
    python scripts/bench_disk.py --n 5000 --out /tmp/disk.json
    python scripts/bench_disk.py --n 100000 --compare --out /tmp/disk.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as data  # noqa: E402
import psycopg  # noqa: E402

from memfabric.adapters import open_fabric  # noqa: E402

TABLES_SQL = """
SELECT c.relname, pg_total_relation_size(c.oid) AS total, pg_relation_size(c.oid) AS heap,
       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0) AS toast,
       pg_indexes_size(c.oid) AS indexes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY total DESC
"""
INDEX_SQL = """
SELECT i.relname, t.relname, pg_relation_size(i.oid) FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = 'public' ORDER BY 3 DESC
"""


def measure(dsn: str, n: int) -> dict[str, object]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
        tables = [dict(zip(("table", "total", "heap", "toast", "indexes"), r, strict=True))
                  for r in conn.execute(TABLES_SQL).fetchall()]
        indexes = [{"index": r[0], "table": r[1], "bytes": r[2]} for r in conn.execute(INDEX_SQL).fetchall()]
        raw = conn.execute("SELECT coalesce(sum(octet_length(content)), 0), count(*),"
                           " coalesce(sum(vector_dims(embedding)), 0) * 4 FROM mf_recall_index").fetchone()
        wal_dir = conn.execute("SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()").fetchone()
        db = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        avg_state = conn.execute("SELECT avg(octet_length(state)) FROM memfabric_events"
                                 " WHERE topic LIKE '%Remembered'").fetchone()
    content, rows, vectors = (int(x) for x in raw)  # type: ignore[union-attr]
    total = sum(int(t["total"]) for t in tables)
    return {
        "n": n, "notes_indexed": rows, "raw_bytes_per_note": (content + vectors) / max(n, 1),
        "content_bytes_per_note": content / max(n, 1), "vector_bytes_per_note": vectors / max(n, 1),
        "tables_bytes_per_note": total / max(n, 1), "database_bytes": int(db[0]),  # type: ignore[index]
        "pg_wal_after_checkpoint_bytes": int(wal_dir[0]),  # type: ignore[index]
        "avg_remembered_state_bytes": float(avg_state[0] or 0),  # type: ignore[index]
        "tables": tables, "indexes": indexes,
    }


def load_and_measure(args: argparse.Namespace, ds: data.Dataset, variant: str) -> dict[str, object]:
    """Load ``ds`` into a scratch database and measure it; ``variant`` ``before`` undoes
    the issue-19 cuts (see module doc), ``after``/``current`` keeps them."""
    from memfabric.adapters import crypto

    saving = crypto.COMPRESS_MIN_SAVING
    if variant == "before":
        crypto.COMPRESS_MIN_SAVING = 1 << 30  # never compress
    try:
        with data.scratch_database(args.dsn, "mf_bench_disk") as dsn:
            with psycopg.connect(dsn, autocommit=True) as conn:
                if variant == "before":
                    for name in ("max_wal_size", "min_wal_size", "wal_compression"):
                        conn.execute(f"ALTER SYSTEM RESET {name}")
                if args.wal_compression:
                    conn.execute(f"ALTER SYSTEM SET wal_compression = '{args.wal_compression}'")
                if args.max_wal_size:
                    conn.execute(f"ALTER SYSTEM SET max_wal_size = '{args.max_wal_size}'")
                    conn.execute("ALTER SYSTEM SET min_wal_size = '32MB'")
                conn.execute("SELECT pg_reload_conf()")
            time.sleep(1.0)  # the reload is asynchronous: read the settings in a new session after it
            with psycopg.connect(dsn, autocommit=True) as conn:
                settings = dict(conn.execute("SELECT name, setting FROM pg_settings WHERE name IN"
                                             " ('wal_compression', 'max_wal_size', 'min_wal_size',"
                                             " 'full_page_writes', 'shared_buffers')").fetchall())
                lsn0 = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
            t0 = time.perf_counter()
            with open_fabric(dsn, consolidate=False) as fab:
                notes = fab.scope("tenant-0")
                for start in range(0, len(ds.texts), 5000):
                    notes.remember_many([{"kind": "fact", "content": t} for t in ds.texts[start:start + 5000]])
            load_s = time.perf_counter() - t0
            with psycopg.connect(dsn, autocommit=True) as conn:
                wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn0,)).fetchone()[0]  # type: ignore[index]
            out = measure(dsn, args.n)
    finally:
        crypto.COMPRESS_MIN_SAVING = saving
    out["variant"] = variant
    out["load_seconds"] = load_s
    out["settings"] = settings
    out["wal_written_by_load_bytes"] = int(wal)
    out["wal_bytes_per_note"] = int(wal) / args.n
    out["total_with_wal_bytes_per_note"] = (
        float(out["tables_bytes_per_note"]) + int(out["pg_wal_after_checkpoint_bytes"]) / args.n)  # type: ignore[arg-type]
    return out


def report(out: dict[str, object], n: int) -> None:
    print(f"[{out['variant']}] settings:", out["settings"])
    print(f"[{out['variant']}] {n} notes, load {out['load_seconds']:.1f}s; raw row {out['raw_bytes_per_note']:.0f} B/note "
          f"(content {out['content_bytes_per_note']:.0f} + vector {out['vector_bytes_per_note']:.0f}); "
          f"tables+indexes {out['tables_bytes_per_note']:.0f} B/note "
          f"({out['tables_bytes_per_note'] / out['raw_bytes_per_note']:.1f}x raw); "  # type: ignore[operator]
          f"WAL written {out['wal_bytes_per_note']:.0f} B/note; pg_wal after CHECKPOINT "
          f"{out['pg_wal_after_checkpoint_bytes'] / 2**20:.0f} MiB; tables + pg_wal "  # type: ignore[operator]
          f"{out['total_with_wal_bytes_per_note']:.0f} B/note; avg Remembered state "
          f"{out['avg_remembered_state_bytes']:.0f} B")
    print(f"{'table':32s} {'total B/note':>12s} {'heap':>8s} {'toast':>8s} {'indexes':>8s}")
    for t in out["tables"]:  # type: ignore[attr-defined]
        if t["total"] > 64 * 1024:
            print(f"{t['table']:32s} {t['total'] / n:12.0f} {t['heap'] / n:8.0f} {t['toast'] / n:8.0f}"
                  f" {t['indexes'] / n:8.0f}")
    print(f"{'index':40s} {'B/note':>8s}")
    for i in out["indexes"]:  # type: ignore[attr-defined]
        if i["bytes"] > 64 * 1024:
            print(f"{i['index']:40s} {i['bytes'] / n:8.0f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--dsn", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--compare", action="store_true", help="measure before (cuts undone) and after, in one run")
    p.add_argument("--wal-compression", default=None, metavar="METHOD",
                   help="ALTER SYSTEM SET wal_compression (lz4, zstd, pglz) before the load (superuser)")
    p.add_argument("--max-wal-size", default=None, metavar="SIZE",
                   help="ALTER SYSTEM SET max_wal_size and min_wal_size (e.g. 256MB) before the load")
    args = p.parse_args(argv)
    ds = data.make_dataset(args.n, n_queries=1)
    variants = ["before", "after"] if args.compare else ["current"]
    results = []
    for variant in variants:
        out = load_and_measure(args, ds, variant)
        report(out, args.n)
        results.append(out)
    if args.compare:
        b, a = results
        print(f"before -> after: tables+indexes {b['tables_bytes_per_note']:.0f} -> {a['tables_bytes_per_note']:.0f}"
              f" B/note; with pg_wal after CHECKPOINT {b['total_with_wal_bytes_per_note']:.0f} -> "
              f"{a['total_with_wal_bytes_per_note']:.0f} B/note; raw {a['raw_bytes_per_note']:.0f} B/note")
    if args.out:
        Path(args.out).write_text(json.dumps(results if args.compare else results[0], indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
