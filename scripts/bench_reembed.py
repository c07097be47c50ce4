"""Embedder migration throughput (issue 19): load N notes (default 100,000; synthetic
facts of ``_bench_common`` in 10 tenants, consolidation off) with ``hash:256``, then
``Fabric.reembed`` them to ``hash`` (384-d) while a thread keeps recalling, and print
rows/s of the whole migration (passes + blue-green rebuild + switch), the split between
embedding, appending events and the rebuild, and the recall calls served meanwhile.

Run (from the repository root)::

    python scripts/bench_reembed.py                 # 100k notes, embedded PostgreSQL
    python scripts/bench_reembed.py --n 10000 --out /tmp/reembed.json
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as data  # noqa: E402

from memfabric.adapters import open_fabric  # noqa: E402
from memfabric.adapters.embedders import HashEmbedder  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--tenants", type=int, default=10)
    p.add_argument("--batch", type=int, default=256, help="notes per reembed transaction")
    p.add_argument("--dsn", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    ds = data.make_dataset(args.n, n_queries=1)
    with data.scratch_database(args.dsn, "mf_bench_reembed") as dsn:
        t0 = time.perf_counter()
        with open_fabric(dsn, embedder=HashEmbedder(256), consolidate=False) as fab:
            per = (len(ds.texts) + args.tenants - 1) // args.tenants
            for t in range(args.tenants):
                chunk = ds.texts[t * per:(t + 1) * per]
                for start in range(0, len(chunk), 5000):
                    fab.scope(data.tenant_name(t)).remember_many(
                        [{"kind": "fact", "content": x} for x in chunk[start:start + 5000]])
        load_s = time.perf_counter() - t0
        print(f"loaded {args.n} notes in {load_s:.1f}s", flush=True)
        served, failed = [0], [0]
        stop = threading.Event()
        with open_fabric(dsn) as fab:
            notes = fab.scope(data.tenant_name(0))

            def recalls() -> None:
                while not stop.is_set():
                    try:
                        notes.recall(ds.texts[served[0] % 1000][:60], top_k=5)
                        served[0] += 1
                    except Exception:  # noqa: BLE001 - counted and reported
                        failed[0] += 1
                    time.sleep(0.05)

            thread = threading.Thread(target=recalls)
            thread.start()
            try:
                report = fab.reembed(HashEmbedder(384), batch=args.batch)
            finally:
                stop.set()
                thread.join()
    rebuild = report.rebuild
    out = {
        "n": args.n, "load_seconds": load_s, "notes": report.notes, "seconds": report.seconds,
        "rows_per_second": report.rows_per_second, "embed_seconds": report.embed_seconds,
        "rebuild_seconds": rebuild.seconds if rebuild else 0.0,
        "passes_seconds": report.seconds - (rebuild.seconds if rebuild else 0.0),
        "passes": report.passes, "switch_attempts": report.switch_attempts,
        "recalls_served": served[0], "recalls_failed": failed[0],
    }
    print(f"reembed {report.notes} notes hash-v1-256 -> hash-v1-384: {report.seconds:.1f}s, "
          f"{report.rows_per_second:,.0f} rows/s (passes {out['passes_seconds']:.1f}s of which embedding "
          f"{report.embed_seconds:.1f}s; blue-green rebuild {out['rebuild_seconds']:.1f}s); "
          f"recall during it: {served[0]} served, {failed[0]} failed")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
