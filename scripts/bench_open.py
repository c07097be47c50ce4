"""Opening fabrics beside running writers (issue 24, the schema stamp).

Eight threads write single notes to eight tenants through one fabric; meanwhile six
threads each open and close a fabric twice (12 opens, a pool of one connection each,
``lock_timeout`` 5 s). Two modes alternate, ``--rounds`` times each:

- ``stamp``: as shipped; an open by the code that made the schema runs no DDL
  (``memfabric.adapters.postgres.schema_stamp``);
- ``ddl``: every open runs the whole DDL phase, as before the stamp (the open's
  ``schema_to_make`` forced to return this code's fingerprint).

Printed per round: the time the 12 opens took, the writers' worst single write while
they ran, and every error (a ``LockTimeoutError`` is an open that gave up). With
``--json``, the same as a JSON document with the run header (date, load, command).

    python scripts/bench_open.py [--rounds 2] [--dsn postgresql://...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import run_header, scratch_database  # noqa: E402

import memfabric.adapters.bootstrap as bootstrap  # noqa: E402
from memfabric.adapters import open_fabric  # noqa: E402
from memfabric.adapters.postgres import schema_stamp  # noqa: E402

WRITERS, OPENERS, OPENS_EACH = 8, 6, 2
SHIPPED = bootstrap.schema_to_make


def _always_ddl(conn: Any, read_only: bool, partitions: int, dim: int) -> str | None:
    return None if read_only else schema_stamp.fingerprint(partitions=partitions, dim=dim)


def trial(dsn: str, mode: str) -> dict[str, Any]:
    """One round of ``mode`` (``stamp`` or ``ddl``): the opens' time in seconds, the
    worst write in milliseconds, the writes done and the errors."""
    bootstrap.schema_to_make = SHIPPED if mode == "stamp" else _always_ddl  # type: ignore[assignment]
    stop, worst, errors, writes = threading.Event(), [0.0], [], [0]
    with open_fabric(dsn, lock_timeout=5) as fab:
        def writer(i: int) -> None:
            notes, k = fab.scope(f"tenant-{i}", "u"), 0
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    notes.remember(kind="fact", content=f"writer {i} note {k} in mode {mode}")
                except Exception as exc:  # noqa: BLE001 - counted and printed
                    errors.append(f"write: {type(exc).__name__}")
                worst[0] = max(worst[0], time.perf_counter() - t0)
                k += 1
                writes[0] += 1

        def opener() -> None:
            for _ in range(OPENS_EACH):
                try:
                    with open_fabric(dsn, lock_timeout=5, pool_size=1, max_overflow=0):
                        pass
                except Exception as exc:  # noqa: BLE001 - counted and printed
                    errors.append(f"open: {type(exc).__name__}")

        ws = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
        for w in ws:
            w.start()
        time.sleep(2)  # the writers at full speed first
        t0 = time.perf_counter()
        os_ = [threading.Thread(target=opener) for _ in range(OPENERS)]
        for o in os_:
            o.start()
        for o in os_:
            o.join()
        took = time.perf_counter() - t0
        stop.set()
        for w in ws:
            w.join()
    bootstrap.schema_to_make = SHIPPED  # type: ignore[assignment]
    return {"mode": mode, "opens": OPENERS * OPENS_EACH, "opens_s": round(took, 2),
            "worst_write_ms": round(worst[0] * 1000, 1), "writes": writes[0], "errors": errors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each mode, alternating (default 2)")
    ap.add_argument("--dsn", default=None, help="server to use (default: a throwaway embedded one)")
    ap.add_argument("--json", default=None, help="also write the result here")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {**run_header(), "rounds": []}
    with scratch_database(args.dsn, "mf-bench-open") as dsn:
        with open_fabric(dsn):
            pass  # the schema (and its stamp) exists before the first round
        for _ in range(args.rounds):
            for mode in ("ddl", "stamp"):
                r = trial(dsn, mode)
                out["rounds"].append(r)
                print(f"{mode:>5}: {r['opens']} opens in {r['opens_s']:.1f} s beside {WRITERS} writers, worst write "
                      f"{r['worst_write_ms']:.0f} ms, errors {len(r['errors'])} {sorted(set(r['errors']))}", flush=True)
    out["load_avg_end"] = run_header()["load_avg"]
    print(f"date {out['date']}, load {out['load_avg']} -> {out['load_avg_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
