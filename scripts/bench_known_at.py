"""Issue 31: the cost of ``known_at``: recall p50 with ``known_at`` vs plain recall, the
disk the note versions take per note, and single-write latency with and without the
note-versions projection.

One tenant gets ``--n`` notes (default 100,000) through ``remember_many``
(consolidation off): ``0.8 n`` first, then ``0.2 n`` that each supersede one of them
(``supersedes=``), so 20% of the notes are superseded. Then ``--queries`` recalls
(top 10, hybrid) run plain and with ``known_at`` (half at the instant between the two
loads, half now), alternating, and the p50s are compared. Write latency: 4 rounds of
``--writes`` single ``remember`` calls into another tenant, alternating with the
projection applied and taken out of the engine's list (same process, same database).

    .venv/bin/python scripts/bench_known_at.py --n 10000
    .venv/bin/python scripts/bench_known_at.py --n 100000 --json out.json

Prints one JSON object (``--json FILE`` also writes it).
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
from _bench_common import scratch_database  # noqa: E402

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


def recall_p50(fab: Any, middle: datetime, queries: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed + 1)
    notes = fab.scope("bench", "u", "t")
    plain: list[float] = []
    known: list[float] = []
    for q in range(queries):
        query = " ".join(rng.sample(WORDS, 2))
        at = middle if q % 2 == 0 else datetime.now(timezone.utc)
        for out, kwargs in ((plain, {}), (known, {"known_at": at})):
            t0 = time.perf_counter()
            notes.recall(query, **kwargs)
            out.append((time.perf_counter() - t0) * 1000)
    p_plain, p_known = statistics.median(plain), statistics.median(known)
    return {"recall_p50_ms": p_plain, "known_at_recall_p50_ms": p_known, "ratio": p_known / p_plain}


def write_ab(fab: Any, writes: int, rounds: int = 4) -> dict[str, float]:
    """Single-write p50 with the note-versions projection and without it (alternating)."""
    full = list(fab.engine.projections)
    without = [p for p in full if p.name != "note_versions"]
    lat: dict[str, list[float]] = {"with": [], "without": []}
    notes = fab.scope("writes", "u", "t")
    i = 0
    for _ in range(rounds):
        for label, projections in (("without", without), ("with", full)):
            fab.engine.projections = projections
            for _ in range(writes):
                t0 = time.perf_counter()
                notes.remember(kind="fact", content=f"write {i} about widget{i} in zone {i % 17}",
                               consolidate=False)
                lat[label].append((time.perf_counter() - t0) * 1000)
                i += 1
    fab.engine.projections = full
    w, wo = statistics.median(lat["with"]), statistics.median(lat["without"])
    return {"write_p50_ms_with_versions": w, "write_p50_ms_without": wo, "write_ratio": w / wo}


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="notes (default 100000)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--writes", type=int, default=50, help="single writes per round and variant")
    ap.add_argument("--dsn", default=None, help="server to use (default: a throwaway embedded one)")
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--vocab", type=int, default=5000,
                    help="made-up words notes and queries draw from (default 5000: each word in few notes; "
                         "0: 20 common words)")
    ap.add_argument("--json", default=None, help="also write the result here")
    args = ap.parse_args(argv)
    from memfabric.adapters import open_fabric

    WORDS[:] = vocabulary(args.vocab, args.seed)

    out: dict[str, Any] = {"n": args.n, "superseded": 0.2, "vocab": args.vocab, "date": datetime.now(timezone.utc).isoformat(),
                           "load_avg": os.getloadavg()}
    with scratch_database(args.dsn, "bench-known-at") as dsn, open_fabric(dsn) as fab:
        t0 = time.perf_counter()
        middle, _ = load(fab, args.n, args.seed)
        out["load_s"] = time.perf_counter() - t0
        out.update(recall_p50(fab, middle, args.queries, args.seed))
        out.update(disk(dsn, args.n))
        out.update(write_ab(fab, args.writes))
    out["load_avg_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
