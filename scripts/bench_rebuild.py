"""Benchmark the recall-index rebuild against the physical limit of the same work.

Loads N notes (default 100k; hash embedder, consolidation off, projections not inline
so the load is quick) into a fresh database, then measures, in the same run:

- ``rebuild``: ``ProjectionAdmin.rebuild("recall_index")`` in place: replay the log from
  zero (server-side cursor, decrypt, apply events to aggregates), COPY BINARY the rows,
  build the indexes (HNSW + GIN + btrees), record the position;
- ``copy_plus_index``: a raw COPY BINARY of the very same rows (fetched beforehand, not
  timed) into a table of the same definition, plus the same index build.

and prints both, the rebuild's events/s and the ratio (goal: at most 2). Both sides use
the same ``maintenance_work_mem`` (default 1GB, so the HNSW graph fits in memory).

Run::

    python scripts/bench_rebuild.py                    # 100k notes, embedded PostgreSQL
    python scripts/bench_rebuild.py --n 20000 --out rebuild.json
    python scripts/bench_rebuild.py --dsn postgresql://... # a database is created, then dropped

``--out FILE`` writes ``{"n", "events", "rebuild_s", "rebuild_events_per_s",
"rebuild_load_s", "rebuild_index_s", "copy_s", "index_s", "copy_plus_index_s", "ratio"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from psycopg.rows import tuple_row
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from memfabric.adapters import HashEmbedder, open_fabric
from memfabric.projections import recall_index
from memfabric.adapters.cli.progress import RichReporter
from memfabric.projections.rebuild import ProjectionAdmin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import scratch_database  # noqa: E402

console = Console()

SUBJECTS = ("coffee", "city", "job", "pet", "hobby", "team", "book", "car", "diet", "music")
CITIES = ("Lisbon", "Osaka", "Denver", "Krakow", "Montreal", "Lyon", "Hanoi", "Porto", "Seoul", "Accra")


def note_text(i: int) -> str:
    """A deterministic, varied sentence for note ``i``."""
    return (
        f"Person {i} likes {SUBJECTS[i % 10]} number {i % 97}, lives near {CITIES[(i // 10) % 10]}"
        f" and mentioned item {i * 7919 % 100003} on day {i % 365}."
    )


def load(fabric: Any, n: int, batch: int) -> None:
    """Remember ``n`` notes across 10 tenants x 10 threads in ``batch``-sized bulk writes."""
    service = fabric.service
    with Progress(TextColumn("[bold]load"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console) as progress:
        task = progress.add_task("load", total=n)
        i = 0
        while i < n:
            k = min(batch, n - i)
            scope = fabric.scope(f"tenant-{(i // batch) % 10}", "user", f"thread-{(i // (batch * 10)) % 10}").scope
            items = [service.validate_remember({"kind": "fact", "content": note_text(j), "tags": ["bench"]})
                     for j in range(i, i + k)]
            service.remember_many(scope, items, consolidate=False)
            i += k
            progress.advance(task, k)


def raw_copy_plus_index(fabric: Any, dim: int, maintenance_work_mem: str) -> tuple[float, float, int]:
    """COPY the recall index's current rows into a same-definition table, then build the
    same indexes; returns (copy seconds, index seconds, rows)."""
    proj = recall_index.RecallIndexProjection(dim)
    cols = ", ".join(recall_index.COLUMNS)
    with fabric.store.connection() as conn:
        rows = conn.cursor(row_factory=tuple_row, binary=True).execute(
            f"SELECT {cols} FROM {recall_index.TABLE}"  # noqa: S608 - constant names
        ).fetchall()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {recall_index.TABLE}_raw")
            proj.create(cur, table_suffix="_raw")
        with conn.transaction(), conn.cursor() as cur:
            t0 = time.perf_counter()
            n = recall_index.copy_rows(cur, rows, recall_index.TABLE + "_raw")
            t1 = time.perf_counter()
            cur.execute("SELECT set_config('maintenance_work_mem', %s, true)", (maintenance_work_mem,))
            proj.create_indexes(cur, table_suffix="_raw")
            t2 = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(f"DROP TABLE {recall_index.TABLE}_raw")
    return t1 - t0, t2 - t1, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="notes to load (default 100000)")
    ap.add_argument("--dim", type=int, default=384, help="hash embedder dimension (default 384)")
    ap.add_argument("--batch", type=int, default=1000, help="notes per bulk write while loading")
    ap.add_argument("--dsn", help="server to use (a scratch database is created and dropped); "
                    "default: an embedded PostgreSQL in a temporary directory")
    ap.add_argument("--maintenance-work-mem", default="1GB", help="for both index builds (default 1GB)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    args = ap.parse_args(argv)

    with scratch_database(args.dsn, "mf-bench-rebuild") as dsn, \
            open_fabric(dsn, embedder=HashEmbedder(args.dim), consolidate=False,
                        inline_projections=False, await_projections=False) as fabric:
        # writes skip the projections (nothing waits for a runner): the rebuild builds them
        t0 = time.perf_counter()
        load(fabric, args.n, args.batch)
        console.print(f"loaded {args.n:,} notes in {time.perf_counter() - t0:.1f}s")
        admin = ProjectionAdmin.for_fabric(fabric)
        with RichReporter(console) as reporter:
            report = admin.rebuild("recall_index", reporter=reporter,
                                   maintenance_work_mem=args.maintenance_work_mem)
        copy_s, index_s, rows = raw_copy_plus_index(fabric, args.dim, args.maintenance_work_mem)

    raw = copy_s + index_s
    out = {
        "n": args.n,
        "events": report.events,
        "rows": rows,
        "rebuild_s": round(report.seconds, 3),
        "rebuild_events_per_s": round(report.events_per_second, 1),
        "rebuild_load_s": round(report.load_seconds, 3),
        "rebuild_index_s": round(report.index_seconds, 3),
        "copy_s": round(copy_s, 3),
        "index_s": round(index_s, 3),
        "copy_plus_index_s": round(raw, 3),
        "ratio": round(report.seconds / raw, 3) if raw > 0 else None,
    }
    table = Table(title=f"recall-index rebuild, {args.n:,} notes ({report.events:,} events)")
    table.add_column("measure")
    table.add_column("seconds", justify="right")
    table.add_column("events/s", justify="right")
    table.add_row("rebuild (replay + COPY)", f"{report.load_seconds:.2f}",
                  f"{report.events / report.load_seconds:,.0f}" if report.load_seconds else "-")
    table.add_row("rebuild (indexes)", f"{report.index_seconds:.2f}", "")
    table.add_row("rebuild total", f"{report.seconds:.2f}", f"{report.events_per_second:,.0f}")
    table.add_row("raw COPY", f"{copy_s:.2f}", f"{rows / copy_s:,.0f}" if copy_s else "-")
    table.add_row("raw index build", f"{index_s:.2f}", "")
    table.add_row("raw COPY + index", f"{raw:.2f}", f"{report.events / raw:,.0f}" if raw else "-")
    console.print(table)
    verdict = "within" if out["ratio"] is not None and out["ratio"] <= 2.0 else "OVER"
    console.print(f"ratio rebuild / (COPY + index) = {out['ratio']} ({verdict} the 2x goal)")
    print(json.dumps(out))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
