"""The standing attack run at full size (issue 17): the scenarios of
``tests/reliability/_attacks.py`` (which CI runs in a reduced size) repeated, plus event
tampering, printing attempts, failures, leaks and lost acknowledged writes.

- same-fact racers: 4 processes write the same fact, the same explicit id, or a
  successor of the same note (``--rounds`` rounds of each): one live note, typed errors;
- kill -9 of a writer mid-stream (``--kills`` runs): every acknowledged write readable,
  ``projections verify`` and the audit chain clean;
- erasure: ``--erase`` notes forgotten, then every column of every table scanned for
  their content (raw bytes too);
- tampering: changed state bytes, edited plain metadata, a deleted, an inserted and a
  renumbered event, and a deleted event after the last checkpoint (a tenant's middle
  one and the log's last), each detected by decoding or by ``audit verify``.

Run (from the repository root)::

    python scripts/attack.py                      # embedded PostgreSQL in a temp dir
    python scripts/attack.py --rounds 5 --kills 5 --erase 200 --out attack.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import _bench_common as common  # noqa: E402

from memfabric.adapters import FabricError, open_fabric  # noqa: E402
from memfabric.adapters.audit import verify_chain  # noqa: E402
from tests.reliability import _attacks  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--erase", type=int, default=100)
    p.add_argument("--dsn", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    results: dict[str, dict[str, int]] = {}
    started = time.perf_counter()
    with common.scratch_database(args.dsn, "mf_attack") as dsn:
        results["same-fact racers"] = _attacks.concurrent_same_fact(dsn, rounds=args.rounds)
    with common.scratch_database(args.dsn, "mf_attack") as dsn, tempfile.TemporaryDirectory() as tmp:
        results["kill -9 of a writer"] = _attacks.kill_writer(dsn, tmp, runs=args.kills)
    with common.scratch_database(args.dsn, "mf_attack") as dsn:
        results["erasure raw dump"] = _attacks.erasure_dump(dsn, notes_n=args.erase)
    with common.scratch_database(args.dsn, "mf_attack") as dsn:
        missed = [name for name in TAMPERS if not tamper_once(dsn, name)]
        results["tampering"] = {"attempts": len(TAMPERS), "failures": len(missed), "leaks": 0, "lost": 0}
    total = {k: sum(r[k] for r in results.values()) for k in ("attempts", "failures", "leaks", "lost")}
    for name, r in results.items():
        print(f"{name:22s} attempts {r['attempts']:5d}  failures {r['failures']}  leaks {r['leaks']}  lost {r['lost']}")
    print(f"{'total':22s} attempts {total['attempts']:5d}  failures {total['failures']}  leaks {total['leaks']}"
          f"  lost {total['lost']}  ({time.perf_counter() - started:.0f} s)")
    if args.out:
        Path(args.out).write_text(json.dumps({"scenarios": results, "total": total}, indent=2))
    return 0 if total["failures"] == total["leaks"] == total["lost"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
