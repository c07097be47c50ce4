"""What governed access costs (issue 33): recall through a principal against plain
recall, and the access log's share, on one embedded PostgreSQL.

Loads N notes (default 100k; hash embedder, consolidation off) over 10 tenants as
``scripts/bench_recall.py`` does; the queried tenant's notes (10%) are spread over 20
users (``tenant-00/user-<k>``) with visibility ``tenant``. Defines a principal whose
profile admits the whole tenant (``tenant-00/*``: the same hits as plain recall, so
the figure is the price of the check alone), one that admits 5 of the 20 users, and
grants the broad one 200 notes. Then recalls paraphrased queries from the tenant-level
scope, interleaved query by query:

- ``plain``: ``fabric.scope("tenant-00").recall(q)``;
- ``principal``: the same through ``as_principal`` (profile read, the rule in the SQL,
  the access record queued);
- ``principal_nolog``: the same with the access log replaced by a no-op (the access
  log's cost is ``principal - principal_nolog``);
- ``narrow``: a principal that may read 5 of the 20 users.

It prints the run's date (UTC), load average and command, then both goals' ratios:
principal / plain p50 (goal <= 1.15x) and the access log's share of a call (goal
<= 0.5 ms p50), the latter two ways: the difference of the two p50s, and the median of
the per-query differences (the same query, back to back: less noise on a loaded
machine), with the client-side cost of one enqueue (``log.record``) measured alone.
``--explain`` also prints ``EXPLAIN ANALYZE`` of the recall statement of one query
without and with the principal's condition.

Run (from the repository root)::

    python scripts/bench_access.py                 # 100k notes
    python scripts/bench_access.py --n 20000 --queries 100 --out /tmp/access.json
    python scripts/bench_access.py --dsn postgresql://... --keep-db access100k   # load once, rerun
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as data  # noqa: E402

from memfabric.adapters import HashEmbedder, open_fabric  # noqa: E402
from memfabric.adapters.postgres import VectorTypes  # noqa: E402
from memfabric.domain.access import AccessRecord  # noqa: E402

USERS = 20
MODES = ("plain", "principal", "principal_nolog", "narrow")


class NullLog:
    """An access log that keeps nothing (to time the log's share)."""

    def record(self, record: AccessRecord) -> None:
        """Drop ``record``."""

    def flush(self, timeout: float = 5.0) -> None:
        """Nothing to flush."""

    def query(self, *, principal: str | None, since: datetime | None, until: datetime | None,
              outcome: str | None, limit: int, with_ids: bool) -> list[AccessRecord]:
        return []

    def close(self) -> None:
        """Nothing to close."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="notes to load (default 100000)")
    p.add_argument("--queries", type=int, default=200, help="timed queries per mode (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed queries per mode first (default 20)")
    p.add_argument("--batch", type=int, default=5000, help="remember_many batch size (default 5000)")
    p.add_argument("--dsn", default=None, help="server DSN (default: embedded PostgreSQL in a temp dir)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--keep-db", default=None, metavar="NAME",
                   help="with --dsn: use database NAME, loading it only when it holds no notes yet, "
                        "and keep it (a rerun skips the load)")
    p.add_argument("--explain", action="store_true",
                   help="print EXPLAIN ANALYZE of one recall statement without and with the principal")
    args = p.parse_args(argv)
    if args.keep_db and not args.dsn:
        p.error("--keep-db needs --dsn (a server that outlives the run)")
    return args


def load(fabric: Any, ds: data.Dataset, batch: int) -> list[tuple[str, str]]:
    """Remember every row; returns the queried tenant's ``(user, note id)`` pairs."""
    rows_of: dict[tuple[int, str | None], list[int]] = {}
    for row, t in enumerate(ds.tenants):
        user = f"user-{row % USERS}" if t == data.QUERY_TENANT else None
        rows_of.setdefault((t, user), []).append(row)
    mine: list[tuple[str, str]] = []
    done, t0 = 0, time.perf_counter()
    for (t, user), rows in sorted(rows_of.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        notes = fabric.scope(data.tenant_name(t), user)
        consent = {"visibility": "tenant"}
        for i in range(0, len(rows), batch):
            chunk = rows[i: i + batch]
            out = notes.remember_many([{"kind": "fact", "content": ds.texts[r], "consent": consent}
                                       for r in chunk])
            if user is not None:
                mine.extend((user, n.id) for n in out)
            done += len(chunk)
            print(f"\rloaded {done}/{len(ds.texts)} notes ({done / (time.perf_counter() - t0):.0f}/s)",
                  end="", flush=True)
    print()
    return mine


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _setup_principals(fabric: Any, mine: list[tuple[str, str]]) -> None:
    tenant = data.tenant_name(data.QUERY_TENANT)
    fabric.principals.define("broad", {"read_kinds": ["fact"], "recall_scope": [f"{tenant}/*"]})
    fabric.principals.define("narrow", {"read_kinds": ["fact"], "recall_scope": [
        f"{tenant}/user-{k}/*" for k in range(5)] + [tenant]})
    for user, note_id in mine[:200]:
        fabric.scope(tenant, user).grant(note_id, "broad")


def loaded(dsn: str) -> int:
    """Notes already in the recall index of ``dsn`` (0 when it has no table yet)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('mf_recall_index')").fetchone()[0] is None:
            return 0
        return int(conn.execute("SELECT count(*) FROM mf_recall_index").fetchone()[0])


def enqueue_us(log: Any, rounds: int = 2000) -> float:
    """Median client-side cost of one ``log.record`` (µs): what a governed call pays
    for its access record on the caller's thread (the writer thread's work is not in it)."""
    record = AccessRecord(at=datetime.now(timezone.utc), principal="bench", operation="recall",
                          outcome="served", tenant_id="t", resource_id="", thread_id="",
                          kinds=("fact",), served=10, ids=tuple(f"n{i}" for i in range(10)))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        log.record(record)
        times.append((time.perf_counter_ns() - t0) / 1000)
    log.flush()
    return statistics.median(times)


def explain(fabric: Any, dsn: str, query: str) -> dict[str, str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the recall statement of ``query`` from the
    queried tenant's scope, plain and through the ``broad`` principal (the statement
    ``Notes.recall`` runs, captured from the store)."""
    from memfabric.domain.access import access_filter  # noqa: PLC0415
    from memfabric.domain.ports import NoteFilter  # noqa: PLC0415
    from memfabric.domain.scope import Scope  # noqa: PLC0415
    from memfabric.projections import recall_index  # noqa: PLC0415

    scope = Scope(tenant_id=data.tenant_name(data.QUERY_TENANT))
    registry = fabric.principals
    profile = registry.get("broad").profile
    emb = HashEmbedder().embed([query])[0]
    out = {}
    for label, filters in (("plain", None),
                           ("principal", NoteFilter(access=access_filter(registry.store, "broad", profile, scope)))):
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            VectorTypes().ensure(conn)
            cur = _ExplainCursor(conn.cursor())
            recall_index.select_candidates(
                cur, scope, embedding=emb, query=query, kinds=list(profile.read_kinds),
                as_of=datetime.now(timezone.utc), limit=40, require_consent=False, filters=filters,
                exact=True)
            out[label] = cur.plan
    return out


class _ExplainCursor:
    """A cursor that runs ``EXPLAIN (ANALYZE, BUFFERS)`` of each statement instead
    (its rows are the plan's lines, kept in :attr:`plan`; the caller sees no rows)."""

    def __init__(self, cur: Any) -> None:
        self._cur = cur
        self.plan = ""

    def execute(self, query: Any, params: Any = None, **_: Any) -> _ExplainCursor:
        from psycopg import sql  # noqa: PLC0415
        stmt = sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + query
        self.plan = "\n".join(r["QUERY PLAN"] for r in self._cur.execute(stmt, params).fetchall())
        return self

    def fetchall(self) -> list[Any]:
        return []


def run(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    ds = data.make_dataset(args.n, n_queries=args.queries + args.warmup)
    with open_fabric(dsn, embedder=HashEmbedder(), consolidate=False) as fabric:
        t0 = time.perf_counter()
        have = loaded(dsn)
        if have not in (0, len(ds.texts)):
            raise SystemExit(f"the database holds {have} notes, not {len(ds.texts)}: use another --keep-db")
        if have == 0:
            _setup_principals(fabric, load(fabric, ds, args.batch))
        load_s = time.perf_counter() - t0
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE mf_recall_index")
        plans = explain(fabric, dsn, ds.queries[0]) if args.explain else {}
        started = datetime.now(timezone.utc)
        tenant = fabric.scope(data.tenant_name(data.QUERY_TENANT))
        registry = fabric.principals
        real_log = registry.log
        broad, narrow = tenant.as_principal("broad"), tenant.as_principal("narrow")
        calls = {"plain": lambda q: tenant.recall(q), "principal": lambda q: broad.recall(q),
                 "narrow": lambda q: narrow.recall(q)}
        times: dict[str, list[float]] = {m: [] for m in MODES}
        paired: list[float] = []
        same = 0
        for qi, query in enumerate(ds.queries):
            timed = qi >= args.warmup
            results = {}
            for mode in MODES[qi % len(MODES):] + MODES[:qi % len(MODES)]:  # no position bias
                registry.log = NullLog() if mode == "principal_nolog" else real_log
                t1 = time.perf_counter()
                results[mode] = calls.get(mode, calls["principal"])(query)
                elapsed = (time.perf_counter() - t1) * 1000
                if timed:
                    times[mode].append(elapsed)
            registry.log = real_log
            if timed:
                paired.append(times["principal"][-1] - times["principal_nolog"][-1])
            same += [h.id for h in results["plain"].hits] == [h.id for h in results["principal"].hits]
        real_log.flush()
        logged = len(fabric.access_log(since=started, limit=100_000))
        enqueue = enqueue_us(real_log)
    stats = {m: {"p50_ms": round(pct(v, 50), 3), "p95_ms": round(pct(v, 95), 3),
                 "mean_ms": round(sum(v) / len(v), 3)} for m, v in times.items()}
    return {
        "n": len(ds.texts), "tenant_rows": ds.tenants.count(data.QUERY_TENANT),
        "queries": len(times["plain"]), "load_s": round(load_s, 1), "modes": stats,
        "ratio_p50": round(stats["principal"]["p50_ms"] / stats["plain"]["p50_ms"], 3),
        "log_p50_ms": round(stats["principal"]["p50_ms"] - stats["principal_nolog"]["p50_ms"], 3),
        "log_paired_p50_ms": round(statistics.median(paired), 3), "enqueue_us": round(enqueue, 1),
        "same_hits": same, "records": logged, "plans": plans,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    header = data.run_header()
    database = (data.kept_database(args.dsn, args.keep_db) if args.keep_db
                else data.scratch_database(args.dsn, "mf-bench-access"))
    with database as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        result = run(args, dsn)
    result.update(header, load_avg_after=[round(x, 2) for x in os.getloadavg()])
    for label, plan in result["plans"].items():
        print(f"--- EXPLAIN ANALYZE, {label}\n{plan}")
    print(f"{header['date']}, load {header['load_avg']} -> {result['load_avg_after']}: {header['command']}")
    print(f"governed recall, {result['n']} notes ({result['tenant_rows']} in the queried tenant), "
          f"{result['queries']} queries (loaded in {result['load_s']} s)")
    print(f"{'mode':<16} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8}")
    for mode, m in result["modes"].items():
        print(f"{mode:<16} {m['p50_ms']:>8.2f} {m['p95_ms']:>8.2f} {m['mean_ms']:>8.2f}")
    print(f"principal / plain p50: {result['ratio_p50']:.3f}x (goal <= 1.15x)")
    print(f"access log: p50 difference {result['log_p50_ms']:+.3f} ms, per-query paired median "
          f"{result['log_paired_p50_ms']:+.3f} ms (goal <= 0.5 ms); one enqueue {result['enqueue_us']:.1f} us")
    print(f"identical hits {result['same_hits']}/{result['queries'] + args.warmup}; "
          f"{result['records']} access records")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
