"""Issue 31: the cost of ``known_at``: recall p50 with ``known_at`` vs plain recall, the
disk the note versions take per note, and single-write latency with and without the
note-versions projection.

One tenant gets ``--n`` notes (default 100,000) through ``remember_many``
(consolidation off): ``0.8 n`` first, then ``0.2 n`` that each supersede one of them
(``supersedes=``), so 20% of the notes are superseded. Then ``--queries`` recalls
(top 10, hybrid) run plain, with ``known_at`` (half at the instant between the two
loads, half now) and with ``known_at`` forced onto the exact scan of every version (the
path before the live HNSW one: ``exact_search_max`` raised for that call), order rotated
per query, and the p50s are compared. Write latency (:func:`write_ab`):
``--write-rounds`` ABAB rounds of ``--writes`` single ``remember`` calls into another
tenant, with the projection applied and taken out of the engine's list (same process,
same database); it reports the ratio of the pooled p50s with its 95% bootstrap interval
and the per-round ratios' median and spread, and calls the 1.1x goal met only when the
whole interval is at or below 1.1. ``--writes-only`` skips the load and the recalls;
``--strip-indexes`` (scratch database) then drops the versions' GIN and scope btree and
measures again, to show what those indexes cost a write.

Before the recalls the recall index's unindexed tail is put into the HNSW graph (as the
background indexer does within seconds of a write), so plain recall is measured as it
runs in steady state. ``--keep-db NAME`` (with ``--dsn``) loads database ``NAME`` once
and reuses it in later runs (the instant between the loads is kept in a table of it).

    .venv/bin/python scripts/bench_known_at.py --n 10000
    .venv/bin/python scripts/bench_known_at.py --n 100000 --json out.json
    .venv/bin/python scripts/bench_known_at.py --dsn postgresql://... --keep-db known100k
    .venv/bin/python scripts/bench_known_at.py --writes-only --strip-indexes

Prints one JSON object (``--json FILE`` also writes it), then the goals' ratios with
the run's date, load average and command.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from datetime import datetime, timezone
from typing import Any

import psycopg

sys.path.insert(0, os.path.dirname(__file__))
import _ab  # noqa: E402
from _bench_common import kept_database, run_header, scratch_database  # noqa: E402

WRITE_GOAL = 1.1
"""Issue 31: a write with the note versions within 1.1x one without them."""

COMMON = ("deploy cache region owner budget ticket queue build server office printer vault "
          "standup window rollout pager latency schema index backup").split()
"""``--vocab 0``: every note and query uses only these 20 words (each in ~15% of the
notes: the full-text list dominates both recalls)."""

WORDS: list[str] = list(COMMON)


def vocabulary(n: int, seed: int) -> list[str]:
    """``n`` pronounceable made-up words (``--vocab``), else :data:`COMMON`."""
    if n <= 0:
        return list(COMMON)
    rng = random.Random(seed)
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(3)))
    return sorted(out)


def text(rng: random.Random, i: int) -> str:
    a, b, c = rng.sample(WORDS, 3)
    return f"note {i}: the {a} of the {b} team uses {c} {rng.randint(0, 999)}"


def load(fab: Any, n: int, seed: int) -> tuple[datetime, list[str]]:
    """``0.8 n`` notes, the instant after them, then ``0.2 n`` superseding notes."""
    rng = random.Random(seed)
    notes = fab.scope("bench", "u", "t")
    base = int(n * 0.8)
    ids: list[str] = []
    for start in range(0, base, 1000):
        batch = [{"kind": "fact", "content": text(rng, i)} for i in range(start, min(base, start + 1000))]
        ids += [m.id for m in notes.remember_many(batch, consolidate=False, chunk_size=250)]
    middle = datetime.now(timezone.utc)
    old = rng.sample(ids, n - base)
    for start in range(0, len(old), 1000):
        batch = [{"kind": "fact", "content": text(rng, base + start + k), "supersedes": sid}
                 for k, sid in enumerate(old[start:start + 1000])]
        notes.remember_many(batch, consolidate=False, chunk_size=250)
    return middle, ids


def loaded(dsn: str) -> datetime | None:
    """The instant between the two loads of a database this script loaded before
    (``--keep-db``), else ``None``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('bench_known_at_meta')").fetchone()[0] is None:
            return None
        row = conn.execute("SELECT middle FROM bench_known_at_meta").fetchone()
    return row[0] if row else None


def keep_middle(dsn: str, middle: datetime) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_known_at_meta (middle timestamptz NOT NULL)")
        conn.execute("INSERT INTO bench_known_at_meta VALUES (%s)", (middle,))


def index_tail(fab: Any) -> int:
    """Put the recall index's unindexed tail into the HNSW graph now (what the
    background indexer does); returns the rows indexed."""
    total = 0
    while (n := fab.store.tail.run_once(["bench"])) > 0:
        total += n
    return total


def recall_p50(fab: Any, middle: datetime, queries: int, seed: int) -> dict[str, float]:
    """p50 of plain and ``known_at`` recalls, alternating per query (half at the instant
    between the loads, half now; ``as_of`` defaults to ``known_at``); also each half's
    own ratio."""
    rng = random.Random(seed + 1)
    notes = fab.scope("bench", "u", "t")
    store = fab.store
    modes = ("plain", "known", "known_exact")
    lat: dict[str, list[float]] = {m: [] for m in (*modes, "known_middle", "known_now")}
    same = 0
    for q in range(queries):
        query = " ".join(rng.sample(WORDS, 2))
        half = "known_middle" if q % 2 == 0 else "known_now"
        at = middle if q % 2 == 0 else datetime.now(timezone.utc)
        hits = {}
        for label in modes[q % 3:] + modes[:q % 3]:  # order rotated: no position bias
            default = store.exact_search_max
            if label == "known_exact":  # the scan of every version (before the live HNSW path)
                store.exact_search_max = 10**9
            t0 = time.perf_counter()
            res = notes.recall(query, **({} if label == "plain" else {"known_at": at}))
            lat[label].append((time.perf_counter() - t0) * 1000)
            store.exact_search_max = default
            hits[label] = [h.id for h in res.hits]
        lat[half].append(lat["known"][-1])
        same += hits["known"] == hits["known_exact"]
    p = {k: statistics.median(v) for k, v in lat.items()}
    return {"recall_p50_ms": p["plain"], "known_at_recall_p50_ms": p["known"], "ratio": p["known"] / p["plain"],
            "known_at_exact_p50_ms": p["known_exact"], "ratio_exact": p["known_exact"] / p["plain"],
            "known_at_middle_p50_ms": p["known_middle"], "known_at_now_p50_ms": p["known_now"],
            "same_hits_as_exact": same}


def wal_lsn(dsn: str) -> int:
    """The server's current WAL position (bytes; ``pg_current_wal_lsn``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def write_ab(fab: Any, dsn: str, writes: int, rounds: int, *, label: str = "with",
             warmup: int = 20) -> dict[str, Any]:
    """Single-write latency with the note-versions projection (``label``) against
    without it: ``rounds`` rounds, each ``writes`` single ``remember`` calls of each
    variant, the variants alternating (ABAB..., the first variant swapped every round),
    all in one process on one database, each variant into a tenant of its own. Returns both pooled p50s (ms), their ratio
    with its 95% bootstrap interval (:func:`_ab.ratio_ci`), the per-round ratios'
    median and spread (:func:`_ab.spread`) and the verdict against :data:`WRITE_GOAL`:
    ``met`` when the interval's upper end is at or below it, ``not met`` when its lower
    end is above it, else ``undecided``."""
    full = list(fab.engine.projections)
    without = [p for p in full if p.name != "note_versions"]
    variants = {"without": without, label: full}
    lat: dict[str, list[float]] = {k: [] for k in variants}
    per_round: list[float] = []
    # one tenant per variant: the engine tracks each projection per tenant, so writes made
    # without the projection in a tenant it then writes to would leave it a gap that the
    # next write with it catches up by replaying them (a cost no real write pays)
    handles = {name: fab.scope(f"writes-{name}", "u", "t") for name in variants}
    counter = iter(range(10**9))

    def one(name: str) -> float:
        i = next(counter)
        t0 = time.perf_counter()
        handles[name].remember(kind="fact", content=f"write {i} about widget{i} in zone {i % 17}",
                               consolidate=False)
        return (time.perf_counter() - t0) * 1000

    for name in variants:
        fab.engine.projections = variants[name]
        for _ in range(warmup):
            one(name)
    cpu = dict.fromkeys(variants, 0.0)
    wal = dict.fromkeys(variants, 0)
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(variants)[::-1]
        this: dict[str, list[float]] = {}
        for name in order:
            fab.engine.projections = variants[name]
            c0, w0 = time.process_time(), wal_lsn(dsn)
            this[name] = [one(name) for _ in range(writes)]
            cpu[name] += time.process_time() - c0
            wal[name] += wal_lsn(dsn) - w0
            lat[name] += this[name]
        per_round.append(statistics.median(this[label]) / statistics.median(this["without"]))
    fab.engine.projections = full
    ratio, low, high = _ab.ratio_ci(lat[label], lat["without"])
    verdict = "met" if high <= WRITE_GOAL else "not met" if low > WRITE_GOAL else "undecided"
    return {f"write_p50_ms_{label}": statistics.median(lat[label]),
            f"write_p50_ms_without_{label}": statistics.median(lat["without"]),
            f"write_ratio_{label}": ratio, f"write_ratio_ci95_{label}": [low, high],
            f"write_ratio_rounds_{label}": _ab.spread(per_round), f"write_verdict_{label}": verdict,
            f"write_client_cpu_ms_{label}": cpu[label] * 1000 / len(lat[label]),
            f"write_wal_bytes_{label}": wal[label] / len(lat[label]),
            f"write_wal_bytes_without_{label}": wal["without"] / len(lat["without"]),
            f"write_client_cpu_ms_without_{label}": cpu["without"] * 1000 / len(lat["without"]),
            "write_rounds": rounds, "writes_per_round": writes}


STRIPPED = ("mf_note_versions_tsv", "mf_note_versions_scope")
"""``--strip-indexes``: the versions' secondary indexes a new note's row enters (GIN on
``tsv``, btree on scope + kind; the partial btree on closed rows takes no new row)."""


def strip_indexes(dsn: str) -> None:
    """Drop :data:`STRIPPED` (scratch databases only: the reads at small tenants need them)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in STRIPPED:
            conn.execute(f"DROP INDEX IF EXISTS {name}")


def disk(dsn: str, n: int) -> dict[str, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        sizes = dict(conn.execute(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relname = ANY(%s)",
            (["mf_note_versions", "mf_link_versions", "mf_recall_index"],)).fetchall())
        rows = conn.execute("SELECT count(*) FROM mf_note_versions").fetchone()
    versions = sizes.get("mf_note_versions", 0) + sizes.get("mf_link_versions", 0)
    return {"versions_bytes_per_note": versions / n, "recall_index_bytes_per_note": sizes.get("mf_recall_index", 0) / n,
            "version_rows": int(rows[0]) if rows else 0}


def recalls(fab: Any, dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    """Load (unless ``--keep-db`` already did), index the tail, then the recall p50s
    (:func:`recall_p50`) and the disk per note (:func:`disk`)."""
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    middle = loaded(dsn)
    if middle is None:
        middle, _ = load(fab, args.n, args.seed)
        if args.keep_db:
            keep_middle(dsn, middle)
    out["load_s"] = time.perf_counter() - t0
    out["tail_indexed"] = index_tail(fab)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE mf_recall_index")
        conn.execute("VACUUM ANALYZE mf_note_versions")
    out.update(recall_p50(fab, middle, args.queries, args.seed))
    out.update(disk(dsn, args.n))
    return out


def report(out: dict[str, Any], args: argparse.Namespace) -> None:
    """The figures, one line each, after the run's date, load and command."""
    print(f"{out['date']}, load {out['load_avg']} -> {out['load_avg_after']}: {out['command']}")
    if "ratio" in out:
        print(f"known_at / plain recall p50: {out['ratio']:.2f}x (goal <= 2x; {out['known_at_recall_p50_ms']:.1f} / "
              f"{out['recall_p50_ms']:.1f} ms; at the middle {out['known_at_middle_p50_ms']:.1f} ms, now "
              f"{out['known_at_now_p50_ms']:.1f} ms); the scan of every version: {out['ratio_exact']:.2f}x "
              f"({out['known_at_exact_p50_ms']:.1f} ms); same hits as that scan "
              f"{out['same_hits_as_exact']}/{args.queries}")
        print(f"disk: {out['versions_bytes_per_note']:.0f} B of versions per note "
              f"(recall index {out['recall_index_bytes_per_note']:.0f} B), {out['version_rows']} version rows")
    for label in ("with", "stripped"):
        if f"write_ratio_{label}" not in out:
            continue
        low, high = out[f"write_ratio_ci95_{label}"]
        rounds = out[f"write_ratio_rounds_{label}"]
        print(f"write p50 {label} / without note versions: {out[f'write_ratio_{label}']:.3f}x "
              f"(95% CI {low:.3f}-{high:.3f}; {out[f'write_p50_ms_{label}']:.2f} / "
              f"{out[f'write_p50_ms_without_{label}']:.2f} ms); per-round ratio median {rounds['median']:.3f}, "
              f"quartiles {rounds['q1']:.3f}-{rounds['q3']:.3f}, range {rounds['min']:.3f}-{rounds['max']:.3f} "
              f"over {rounds['n']} ABAB rounds of {args.writes} writes; goal <= {WRITE_GOAL}x: "
              f"{out[f'write_verdict_{label}']}; client CPU per write {out[f'write_client_cpu_ms_{label}']:.2f} / "
              f"{out[f'write_client_cpu_ms_without_{label}']:.2f} ms; WAL per write "
              f"{out[f'write_wal_bytes_{label}']:,.0f} / {out[f'write_wal_bytes_without_{label}']:,.0f} B")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="notes (default 100000)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--writes", type=int, default=25, help="single writes per round and variant (default 25)")
    ap.add_argument("--write-rounds", type=int, default=24, help="ABAB rounds of the write A/B (default 24)")
    ap.add_argument("--writes-only", action="store_true",
                    help="only the write A/B (no load, no recalls): the write cost on an empty database")
    ap.add_argument("--strip-indexes", action="store_true",
                    help="then drop the versions' GIN and scope btree and run the write A/B again "
                         "(where the write cost is; not with --keep-db)")
    ap.add_argument("--dsn", default=None, help="server to use (default: a throwaway embedded one)")
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--vocab", type=int, default=5000,
                    help="made-up words notes and queries draw from (default 5000: each word in few notes; "
                         "0: 20 common words)")
    ap.add_argument("--json", default=None, help="also write the result here")
    ap.add_argument("--keep-db", default=None, metavar="NAME",
                    help="with --dsn: load database NAME only once and keep it (a rerun skips the load)")
    args = ap.parse_args(argv)
    if args.keep_db and not args.dsn:
        ap.error("--keep-db needs --dsn (a server that outlives the run)")
    if args.keep_db and args.strip_indexes:
        ap.error("--strip-indexes drops indexes: use a scratch database, not --keep-db")
    from memfabric.adapters import open_fabric

    WORDS[:] = vocabulary(args.vocab, args.seed)

    out: dict[str, Any] = {"n": args.n, "superseded": 0.2, "vocab": args.vocab, **run_header()}
    database = (kept_database(args.dsn, args.keep_db) if args.keep_db
                else scratch_database(args.dsn, "bench-known-at"))
    with database as dsn, open_fabric(dsn) as fab:
        if not args.writes_only:
            out.update(recalls(fab, dsn, args))
        out.update(write_ab(fab, dsn, args.writes, args.write_rounds))
        if args.strip_indexes:
            strip_indexes(dsn)
            out.update(write_ab(fab, dsn, args.writes, args.write_rounds, label="stripped"))
    out["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))
    report(out, args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
