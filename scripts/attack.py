"""The standing attack run at full size (issue 17): the scenarios of
``tests/reliability/_attacks.py`` (which CI runs in a reduced size) repeated, plus event
tampering, printing attempts, failures, leaks and lost acknowledged writes.

- same-fact racers: 4 processes write the same fact, the same explicit id, or a
  successor of the same note (``--rounds`` rounds of each): one live note, typed errors;
- kill -9 of a writer mid-stream (``--kills`` runs): every acknowledged write readable,
  ``projections verify`` and the audit chain clean;
- kill -9 of each other kind of process mid-operation (issue 28,
  ``tests/reliability/_kills.py``): a ``remember_many`` bulk import (``--kill-bulk``
  cycles), a conversation appender (``--kill-ledger``), the projection runner beside
  ``inline_projections=False`` writers (``--kill-runner``), a blue-green ``projections
  rebuild`` (``--kill-rebuild``) and ``reembed`` (``--kill-reembed``), a random
  0.2..``--kill-seconds`` s after the start; after each kill every acknowledged
  operation readable, the next open (rebuild, migration) works, ``projections verify``
  and ``audit verify`` clean;
- isolation reads (``--reads``, ``tests/reliability/_isolation.py``): readers in every
  scope of 3 tenants read every note through recall/list/get/history/lineage and their
  conversation through search_conversation; ids and content they may not see counted
  as leaks (cross-tenant ones also apart);
- a soak (``tests/reliability/_soak.py``): ``--soak-threads`` threads and
  ``--soak-procs`` processes write, recall and forget for ``--soak-seconds`` s; only the
  documented typed errors (lock timeout, a note forgotten meanwhile) are expected;
- erasure: ``--erase`` notes forgotten, then every column of every table scanned for
  their content (raw bytes too);
- tampering: changed state bytes, edited plain metadata, a deleted, an inserted and a
  renumbered event, and a deleted event after the last checkpoint (a tenant's middle
  one and the log's last), each detected by decoding or by ``audit verify``.

Run (from the repository root)::

    python scripts/attack.py                      # embedded PostgreSQL in a temp dir
    python scripts/attack.py --rounds 5 --kills 5 --erase 200 --out attack.json
    python scripts/attack.py --only kills       # only the kill -9 scenarios (``--only``: see SCENARIOS)

The defaults reach issue 28's sizes: 165 kill -9s (5 writer + 40 bulk + 40 ledger + 30
runner + 25 rebuild + 25 reembed) with over 40,000 acknowledged operations, 16,000
isolation reads, 16 threads + 8 processes for 60 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import _bench_common as common  # noqa: E402

from memfabric.adapters import FabricError, open_fabric  # noqa: E402
from memfabric.adapters.audit import verify_chain  # noqa: E402
from tests.reliability import _attacks, _isolation, _kills, _soak  # noqa: E402

SCENARIOS = {
    "basic": ("same-fact racers", "kill -9 of a writer", "erasure raw dump", "tampering"),
    "kills": tuple(f"kill -9 of {k}" for k in _kills.KINDS),
    "isolation": ("isolation reads",),
    "soak": ("soak",),
}

TAMPERS = {
    "state bytes": "UPDATE memfabric_events SET state = state || '\\x00'::bytea WHERE notification_id = 2",
    "plain metadata": None,  # an in-place edit of the clear JSON, below
    "deleted event": "DELETE FROM memfabric_events WHERE notification_id = 2",
    "inserted event": ("INSERT INTO memfabric_events (notification_id, originator_id, originator_version,"
                       " topic, state) SELECT 0, originator_id, originator_version + 100, topic, state"
                       " FROM memfabric_events WHERE notification_id = 1"),
    "renumbered event": "UPDATE memfabric_events SET originator_version = originator_version + 10"
                        " WHERE notification_id = 1",
    # issue 28 item 3: after the last checkpoint, where a gap may also be a rolled-back write
    "deleted unchecked event": "DELETE FROM memfabric_events WHERE notification_id = (SELECT min(notification_id)"
                               " FROM memfabric_events WHERE notification_id > (SELECT max(position)"
                               " FROM mf_audit_chain))",
    "deleted last event": "DELETE FROM memfabric_events WHERE notification_id = (SELECT max(notification_id)"
                          " FROM memfabric_events)",
}


def tamper_once(dsn: str, name: str) -> bool:
    """Write five notes, checkpoint, write three more, tamper, and report whether it was detected (by
    ``audit verify`` without writing checkpoints, or by reading the notes)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public; CREATE EXTENSION IF NOT EXISTS vector")
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "u", "t")
        made = [notes.remember(kind="fact", content=f"ledger line {i} item{i}", consolidate=False)
                for i in range(5)]
        assert verify_chain(fabric).ok
        for i in range(3):  # unchecked: after the last checkpoint
            notes.remember(kind="fact", content=f"ledger line {i} note{i}", consolidate=False)
        with psycopg.connect(dsn) as conn:
            statement = TAMPERS[name]
            if statement is None:
                row = conn.execute("SELECT state FROM memfabric_events WHERE notification_id = 2").fetchone()
                assert row is not None
                conn.execute("UPDATE memfabric_events SET state = %s WHERE notification_id = 2",
                             (bytes(row[0]).replace(b'"tenant_id":"acme"', b'"tenant_id":"acmf"'),))
            else:
                conn.execute(statement)
        fabric.log.keys._cache.clear()  # noqa: SLF001 - read from the database again
        if not verify_chain(fabric, checkpoint=False).ok:
            return True
        try:
            for n in made:
                notes.get(n.id)
        except FabricError:
            return True
    return False


def _options(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kills", type=int, default=5, help="kill -9 runs of a plain writer")
    for kind, n in (("bulk", 40), ("ledger", 40), ("runner", 30), ("rebuild", 25), ("reembed", 25)):
        p.add_argument(f"--kill-{kind}", type=int, default=n, help=f"kill -9 cycles of {kind} (default {n})")
    p.add_argument("--kill-seconds", type=float, default=2.0, help="longest random delay before a kill")
    p.add_argument("--erase", type=int, default=100)
    p.add_argument("--reads", type=int, default=16_000, help="isolation reads")
    p.add_argument("--soak-seconds", type=float, default=60.0)
    p.add_argument("--soak-threads", type=int, default=16)
    p.add_argument("--soak-procs", type=int, default=8)
    p.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated groups of {sorted(SCENARIOS)}")
    p.add_argument("--dsn", default=None)
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def _put(results: dict[str, dict[str, Any]], name: str, run: Callable[[], dict[str, Any]]) -> None:
    """Run one scenario, keep its figures in ``results[name]`` and print its line (with
    its own duration) at once."""
    started = time.perf_counter()
    results[name] = run()
    _line(name, results[name], time.perf_counter() - started)


def _basic(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    with common.scratch_database(args.dsn, "mf_attack") as dsn:
        _put(results, "same-fact racers", lambda: _attacks.concurrent_same_fact(dsn, rounds=args.rounds))
    with common.scratch_database(args.dsn, "mf_attack") as dsn, tempfile.TemporaryDirectory() as tmp:
        _put(results, "kill -9 of a writer",
             lambda: {**_attacks.kill_writer(dsn, tmp, runs=args.kills), "kills": args.kills})
    with common.scratch_database(args.dsn, "mf_attack") as dsn:
        _put(results, "erasure raw dump", lambda: _attacks.erasure_dump(dsn, notes_n=args.erase))
    with common.scratch_database(args.dsn, "mf_attack") as dsn:
        def tampering() -> dict[str, Any]:
            missed = [name for name in TAMPERS if not tamper_once(dsn, name)]
            return {"attempts": len(TAMPERS), "failures": len(missed), "leaks": 0, "lost": 0}
        _put(results, "tampering", tampering)


def _kill_kinds(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    with common.scratch_database(args.dsn, "mf_attack") as dsn, tempfile.TemporaryDirectory() as tmp:
        for kind in _kills.KINDS:
            _put(results, f"kill -9 of {kind}", lambda kind=kind: _kills.kill_kind(
                dsn, tmp, kind, getattr(args, f"kill_{kind}"), seconds=args.kill_seconds))


def _isolation_reads(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    with common.scratch_database(args.dsn, "mf_attack") as dsn:
        _put(results, "isolation reads", lambda: _isolation.isolation_reads(dsn, reads=args.reads))


def _soak_run(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    with common.scratch_database(args.dsn, "mf_attack") as dsn:
        _put(results, "soak", lambda: _soak.soak(dsn, seconds=args.soak_seconds, threads=args.soak_threads,
                                                 procs=args.soak_procs))


def _line(name: str, r: dict[str, Any], seconds: float | None = None) -> None:
    """One scenario's line (and its errors, if any), flushed at once."""
    extra = "".join(f"  {k} {r[k]}" for k in ("kills", "cross_tenant", "typed") if k in r)
    print(f"{name:22s} attempts {r['attempts']:6d}  failures {r['failures']}  leaks {r['leaks']}"
          f"  lost {r['lost']}{extra}" + (f"  ({seconds:.0f} s)" if seconds is not None else ""), flush=True)
    if r.get("errors"):
        print(f"{'':22s} errors: {r['errors']}", flush=True)


def _total(results: dict[str, dict[str, Any]]) -> dict[str, int]:
    keys = ("attempts", "failures", "leaks", "lost", "kills")
    return {k: sum(int(r.get(k, 0)) for r in results.values()) for k in keys}


def main(argv: list[str] | None = None) -> int:
    args = _options(argv)
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = set(groups) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"--only: unknown {sorted(unknown)}; known: {sorted(SCENARIOS)}")
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    runs = {"basic": _basic, "kills": _kill_kinds, "isolation": _isolation_reads, "soak": _soak_run}
    for group in SCENARIOS:
        if group in groups:
            runs[group](args, results)
    seconds = time.perf_counter() - started
    total = _total(results)
    _line("total", total, seconds)
    if args.out:
        Path(args.out).write_text(json.dumps({"scenarios": results, "total": total, "seconds": round(seconds)},
                                             indent=2))
    return 0 if total["failures"] == total["leaks"] == total["lost"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
