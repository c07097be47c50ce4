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

The queries run ``--rounds`` times (every mode of a query back to back, the order
rotated per query and per round), so a slow minute of the shared machine lands on every
mode alike. It prints the run's date (UTC), load average and command, then both goals'
figures: principal / plain p50 (goal <= 1.15x) with its 95% bootstrap interval and the
per-round ratios' range; the access log's share of a call (goal <= 0.5 ms p50) as the
difference of the two p50s, the per-round differences' median and range, and the median
of the per-query paired differences with its 95% bootstrap interval (the goal is called
met only when that whole interval is at or below 0.5 ms). As cross-checks it times the
log's share of a cheap governed call (``get`` of a note, about a millisecond, where a
0.1 ms difference shows), one enqueue (``log.record``) alone, and the client CPU per
record including the writer thread; and it counts the access records against the
governed calls made (every call logged once).
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

import _ab  # noqa: E402
import _bench_common as data  # noqa: E402

from memfabric.adapters import HashEmbedder, open_fabric  # noqa: E402
from memfabric.adapters.postgres import VectorTypes  # noqa: E402
from memfabric.domain.access import AccessRecord  # noqa: E402

USERS = 20
RATIO_GOAL = 1.15
"""Issue 33: recall through a principal within 1.15x plain recall."""
LOG_GOAL_MS = 0.5
"""Issue 33: the access log adds at most 0.5 ms to a call's p50."""
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
    p.add_argument("--queries", type=int, default=200, help="timed queries per mode and round (default 200)")
    p.add_argument("--rounds", type=int, default=4,
                   help="rounds over the same queries, every mode interleaved per query (default 4)")
    p.add_argument("--gets", type=int, default=50, help="notes of the cheap-call figure (default 50)")
    p.add_argument("--get-rounds", type=int, default=10, help="rounds over those notes (default 10)")
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


def timed_rounds(calls: dict[str, Any], warmup: list[str], queries: list[str], registry: Any,
                 rounds: int) -> tuple[dict[str, list[list[float]]], int]:
    """``rounds`` rounds over the same ``queries``, every query run in every mode back to
    back (the order rotated per query and per round; ``principal_nolog`` swaps the log for
    :class:`NullLog`), after the untimed ``warmup`` queries. Returns the latencies (ms) of each
    mode per round, index-aligned (``[mode][round][query]``), and how many queries gave
    the same hits plain and through the principal."""
    real_log = registry.log
    times: dict[str, list[list[float]]] = {m: [] for m in MODES}
    same = 0
    for r in range(-1, rounds):  # round -1: the warm-up
        batch = warmup if r < 0 else queries
        for m in MODES:
            times[m].append([])
        for qi, query in enumerate(batch):
            results = {}
            k = (qi + r) % len(MODES)
            for mode in MODES[k:] + MODES[:k]:  # no position bias
                registry.log = NullLog() if mode == "principal_nolog" else real_log
                t1 = time.perf_counter()
                results[mode] = calls[mode](query)
                times[mode][-1].append((time.perf_counter() - t1) * 1000)
            registry.log = real_log
            same += [h.id for h in results["plain"].hits] == [h.id for h in results["principal"].hits]
    return {m: rs[1:] for m, rs in times.items()}, same


def cheap_calls(fabric: Any, tenant: Any, broad: Any, ids: list[str], rounds: int) -> dict[str, list[float]]:
    """The access log's share of a cheap governed call, where a 0.1 ms difference is not
    lost in noise: ``get`` of each of ``ids`` through the principal with the log and with
    :class:`NullLog`, back to back (order alternating), ``rounds`` times. Returns the
    latencies (ms) per mode, index-aligned."""
    registry = fabric.principals
    real_log = registry.log
    out: dict[str, list[float]] = {"get_principal": [], "get_principal_nolog": []}
    for r in range(rounds):
        for i, note_id in enumerate(ids):
            order = ("get_principal", "get_principal_nolog")
            for mode in order if (i + r) % 2 == 0 else order[::-1]:
                registry.log = NullLog() if mode == "get_principal_nolog" else real_log
                t1 = time.perf_counter()
                broad.get(note_id)
                out[mode].append((time.perf_counter() - t1) * 1000)
    registry.log = real_log
    return out


def record_cpu_us(log: Any, records: int = 2000) -> float:
    """The process CPU time (µs, ``time.process_time``: the caller's and the writer
    thread's Python work, not the server's) per access record: ``records`` records
    enqueued and flushed, divided by ``records``."""
    record = AccessRecord(at=datetime.now(timezone.utc), principal="bench", operation="recall",
                          outcome="served", tenant_id="t", resource_id="", thread_id="",
                          kinds=("fact",), served=10, ids=tuple(f"n{i}" for i in range(10)))
    log.flush()
    t0 = time.process_time()
    for _ in range(records):
        log.record(record)
    log.flush()
    return (time.process_time() - t0) / records * 1e6


def paired(a: list[list[float]], b: list[list[float]]) -> list[float]:
    """The per-call differences ``a - b`` (ms) of two index-aligned modes, every round."""
    return [x - y for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)]


def verdict(low: float, high: float, goal: float) -> str:
    """``met`` when a 95% interval ``[low, high]`` is at or below ``goal``, ``not met``
    when it is above it, else ``undecided``."""
    return "met" if high <= goal else "not met" if low > goal else "undecided"


def figures(times: dict[str, list[list[float]]], gets: dict[str, list[float]]) -> dict[str, Any]:
    """Both goals' figures from the timed rounds: each mode's p50 / p95 / mean (ms); the
    principal / plain p50 ratio with its 95% bootstrap interval and per-round spread; the
    access log's share (principal - principal_nolog) as the difference of the p50s, the
    per-round p50 differences' median and spread, and the median paired difference with
    its 95% bootstrap interval; the same paired figure for a cheap ``get``."""
    flat = {m: [x for r in rs for x in r] for m, rs in times.items()}
    stats = {m: {"p50_ms": round(_ab.quantile(v, 0.5), 3), "p95_ms": round(_ab.quantile(v, 0.95), 3),
                 "mean_ms": round(sum(v) / len(v), 3)} for m, v in flat.items()}
    ratio, r_low, r_high = _ab.ratio_ci(flat["principal"], flat["plain"])
    log_pair, l_low, l_high = _ab.median_ci(paired(times["principal"], times["principal_nolog"]))
    get_pair, g_low, g_high = _ab.median_ci([x - y for x, y in zip(gets["get_principal"],
                                                                    gets["get_principal_nolog"], strict=True)])
    rounds = list(zip(times["plain"], times["principal"], times["principal_nolog"], strict=True))
    return {
        "modes": stats, "queries": len(flat["plain"]), "rounds": len(rounds),
        "ratio_p50": round(ratio, 3), "ratio_ci95": [round(r_low, 3), round(r_high, 3)],
        "ratio_rounds": _ab.spread([statistics.median(p) / statistics.median(q) for q, p, _ in rounds]),
        "log_p50_ms": round(stats["principal"]["p50_ms"] - stats["principal_nolog"]["p50_ms"], 3),
        "log_rounds_ms": _ab.spread([statistics.median(p) - statistics.median(n) for _, p, n in rounds]),
        "log_paired_p50_ms": round(log_pair, 3), "log_paired_ci95_ms": [round(l_low, 3), round(l_high, 3)],
        "get_p50_ms": {m: round(_ab.quantile(v, 0.5), 3) for m, v in gets.items()},
        "get_log_paired_p50_ms": round(get_pair, 4), "get_log_paired_ci95_ms": [round(g_low, 4), round(g_high, 4)],
        "log_verdict": verdict(l_low, l_high, LOG_GOAL_MS),
        "get_log_verdict": verdict(g_low, g_high, LOG_GOAL_MS),
        "ratio_verdict": verdict(r_low, r_high, RATIO_GOAL),
    }


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
        broad, narrow = tenant.as_principal("broad"), tenant.as_principal("narrow")
        calls = {"plain": tenant.recall, "principal": broad.recall, "principal_nolog": broad.recall,
                 "narrow": narrow.recall}
        queries = ds.queries[args.warmup:]
        times, same = timed_rounds(calls, ds.queries[:args.warmup], queries, registry, args.rounds)
        ids = [h.id for q in queries[:10] for h in tenant.recall(q).hits][:args.gets]
        gets = cheap_calls(fabric, tenant, broad, ids, args.get_rounds)
        registry.log.flush()
        logged = len(fabric.access_log(since=started, limit=100_000))
        expected = (args.rounds * len(queries) + args.warmup) * 2 + args.get_rounds * len(ids)  # principal, narrow
        enqueue = enqueue_us(registry.log)
        cpu = record_cpu_us(registry.log)
    return {"n": len(ds.texts), "tenant_rows": ds.tenants.count(data.QUERY_TENANT), "load_s": round(load_s, 1),
            **figures(times, gets), "enqueue_us": round(enqueue, 1), "record_cpu_us": round(cpu, 1),
            "same_hits": same, "records": logged, "records_expected": expected, "plans": plans}


def report(result: dict[str, Any]) -> None:
    """Both goals' figures, a line each (after the header lines of :func:`main`)."""
    print(f"{'mode':<16} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8}")
    for mode, m in result["modes"].items():
        print(f"{mode:<16} {m['p50_ms']:>8.2f} {m['p95_ms']:>8.2f} {m['mean_ms']:>8.2f}")
    rr, lr = result["ratio_rounds"], result["log_rounds_ms"]
    print(f"principal / plain p50: {result['ratio_p50']:.3f}x (95% CI {result['ratio_ci95'][0]:.3f}-"
          f"{result['ratio_ci95'][1]:.3f}; per round {rr['median']:.3f}x, range {rr['min']:.3f}-{rr['max']:.3f}; "
          f"goal <= {RATIO_GOAL}x: {result['ratio_verdict']})")
    print(f"access log, recall: p50 difference {result['log_p50_ms']:+.3f} ms; per round median "
          f"{lr['median']:+.3f} ms, range {lr['min']:+.3f} to {lr['max']:+.3f}; paired per-query median "
          f"{result['log_paired_p50_ms']:+.3f} ms (95% CI {result['log_paired_ci95_ms'][0]:+.3f} to "
          f"{result['log_paired_ci95_ms'][1]:+.3f}); goal <= {LOG_GOAL_MS} ms: {result['log_verdict']}")
    g = result["get_p50_ms"]
    print(f"access log, get: p50 {g['get_principal']:.3f} / {g['get_principal_nolog']:.3f} ms with / without; "
          f"paired median {result['get_log_paired_p50_ms']:+.4f} ms (95% CI "
          f"{result['get_log_paired_ci95_ms'][0]:+.4f} to {result['get_log_paired_ci95_ms'][1]:+.4f}); "
          f"goal <= {LOG_GOAL_MS} ms: {result['get_log_verdict']}")
    print(f"one enqueue {result['enqueue_us']:.1f} us on the caller's thread; {result['record_cpu_us']:.1f} us of "
          f"client CPU per record, writer thread included")
    print(f"identical hits {result['same_hits']}; {result['records']} access records for "
          f"{result['records_expected']} governed calls (every call logged once: "
          f"{result['records'] == result['records_expected']})")


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
          f"{result['queries']} timed queries per mode in {result['rounds']} rounds (loaded in {result['load_s']} s)")
    report(result)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
