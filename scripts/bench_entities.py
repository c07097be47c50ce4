"""Measure entities (issue 32): resolution latency at growing entity counts in one
scope (default 5,000 then 100,000) and the time to merge an entity with F facts
(default 1,000) at each count.

Loads synthetic people (first x last name, one email each) in transactions of
``--chunk`` entities, growing the one scope to each count of ``--sizes`` in turn; at
each count times ``notes.entities.resolve`` on a mix of surfaces (exact names,
emails, lower-cased names, one-letter typos, unknown names: p50 / p95 / p99 in ms),
then writes F facts about a fresh entity and times ``merge(winner, loser)``
(batches of ``--batch`` notes, one transaction each; it must re-point all F).
Prints the date (UTC), the load average (``os.getloadavg``) before and after each
phase and the command.

On PostgreSQL resolution is timed twice at each count: ``cold``, right after the bulk
load (the share of the key table's pages autovacuum has marked all-visible so far is
printed beside it: the rest cost a heap visit per key row), then ``steady`` after
``VACUUM (ANALYZE)`` of the entity tables, the state autovacuum keeps a service's
tables in (their thresholds are 2 % of the rows). The goal (p95 <= 5 ms at 100,000) is
judged on ``steady``: no service stays in the state right after a bulk import.

Run (from the repository root)::

    python scripts/bench_entities.py                        # PostgreSQL (embedded), 5k and 100k
    python scripts/bench_entities.py --sizes 10000 --facts 500
    python scripts/bench_entities.py --backend memory --sizes 20000
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_common import pct, scratch_database  # noqa: E402

from memfabric.domain.entities import keys as ek  # noqa: E402
from memfabric.domain.entities import EntityContext, new_entity_id, open_uow  # noqa: E402
from memfabric.domain.entity import Entity  # noqa: E402
from memfabric.domain.entities.commands import visibility_locks  # noqa: E402

FIRST = ["maria", "john", "aiko", "li", "jose", "anna", "omar", "priya", "sven", "chloe", "kwame", "olga",
         "pedro", "fatima", "yuki", "lars", "amara", "diego", "elena", "hassan", "ingrid", "jamal", "keiko",
         "liam", "mei", "nadia", "oscar", "paula", "quentin", "rosa", "samir", "tomas", "ursula", "victor",
         "wen", "xavier", "yara", "zoe", "arjun", "bianca"]
LAST = ["lopez", "smith", "tanaka", "wei", "garcia", "muller", "haddad", "natarajan", "eriksson", "dubois",
        "mensah", "petrova", "silva", "rahman", "sato", "berg", "okafor", "ramos", "popescu", "karimi"]


def person(i: int) -> tuple[str, str]:
    """The name and email of synthetic person ``i`` (unique names up to 40*20*k)."""
    first, last = FIRST[i % len(FIRST)], LAST[(i // len(FIRST)) % len(LAST)]
    generation = i // (len(FIRST) * len(LAST))
    name = f"{first.title()} {last.title()}" + (f" {_roman(generation)}" if generation else "")
    return name, f"{first}.{last}.{i}@corp{i % 97}.example"


def _roman(n: int) -> str:
    """A short unique suffix token for the ``n``-th generation of a name ("qb", "qc" ...)."""
    letters = "bcdfghjklmnpqrstvwxz"
    out = ""
    while True:
        out = letters[n % 20] + out
        n //= 20
        if n == 0:
            return "q" + out


def load(notes: Any, n: int, chunk: int, first: int = 0) -> float:
    """Create entities ``first`` .. ``n - 1`` in transactions of ``chunk``; returns seconds."""
    svc, scope = notes._service, notes.scope  # noqa: SLF001 - a bulk loader for the bench
    t0 = time.monotonic()
    for start in range(first, n, chunk):
        with open_uow(svc, visibility_locks(scope, "resource")) as uow:
            ctx = EntityContext(svc, scope, uow)
            for i in range(start, min(n, start + chunk)):
                name, email = person(i)
                keys = ek.name_keys(name, 0) + [ek.identifier_key("email", email)]
                uow.add_aggregate(Entity.create(scope=scope, entity_id=new_entity_id(), type="person",
                                                visibility="resource", name=name,
                                                identifiers=[["email", email]], keys=ctx.sealed_keys(keys)))
            uow.commit()
        svc.store.await_position(uow.position)
    return time.monotonic() - t0


def surfaces(n: int, count: int, seed: int = 7) -> list[str]:
    """A mix of what hosts resolve: names, emails, lower-case names, typos, unknowns."""
    rng = random.Random(seed)
    out = []
    for k in range(count):
        name, email = person(rng.randrange(n))
        pick = k % 5
        out.append([name, email, name.lower(), name[:3] + name[4:], f"Unknown Person {k}"][pick])
    return out


def time_resolve(notes: Any, queries: list[str]) -> list[float]:
    for q in queries[:20]:
        notes.entities.resolve(q)  # warm caches and prepared statements
    out = []
    for q in queries:
        t0 = time.perf_counter()
        notes.entities.resolve(q)
        out.append((time.perf_counter() - t0) * 1000)
    return out


LOSERS = ["Zeddy Quorn", "Yorick Vantablack", "Xanthe Quillfeather", "Wilbur Zonnenvelt"]
"""Names of the merged entities, one per size (the facts' subjects must resolve to them)."""


def time_merge(notes: Any, facts: int, batch: int, k: int) -> tuple[float, Any]:
    """Write ``facts`` facts about a new entity, merge it into another; returns
    ``(seconds of the merge, MergeResult)``; ``SystemExit`` unless all were re-pointed."""
    loser_name = LOSERS[k % len(LOSERS)]
    winner = notes.entities.upsert(f"Prime Winner {chr(97 + k)}", identifiers=[("email", f"w{k}@prime.example")]).entity
    loser = notes.entities.upsert(loser_name, identifiers=[("email", f"l{k}@quorn.example")]).entity
    items = [{"kind": "fact", "content": f"{loser_name} likes topic{i}"} for i in range(facts)]
    for start in range(0, facts, 250):
        notes.remember_many(items[start:start + 250], consolidate=True)
    t0 = time.monotonic()
    result = notes.entities.merge(winner.id, loser.id, reason="bench", batch=batch)
    took = time.monotonic() - t0
    if result.repointed != facts:
        raise SystemExit(f"merge re-pointed {result.repointed} of {facts} facts: the subjects did not resolve")
    return took, result


def _load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _print_resolve(notes: Any, n: int, queries: int, state: str) -> None:
    ms = time_resolve(notes, surfaces(n, queries))
    print(f"resolve at {n} entities ({state}), {len(ms)} queries: p50 {pct(ms, 50):.2f} ms, "
          f"p95 {pct(ms, 95):.2f} ms, p99 {pct(ms, 99):.2f} ms; load {_load_avg()}")


def _all_visible(dsn: str) -> str:
    """The share of ``mf_entity_keys``'s pages marked all-visible (``pg_class``'s estimate)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT relallvisible, relpages FROM pg_class WHERE relname = 'mf_entity_keys'").fetchone()
    return "none yet (never vacuumed)" if row is None or not row[1] else f"{100 * row[0] / row[1]:.0f} %"


def _settle(dsn: str) -> float:
    """``VACUUM (ANALYZE)`` the entity tables; returns seconds."""
    import psycopg

    t0 = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) mf_entities, mf_entity_keys")
    return time.monotonic() - t0


def run(notes: Any, args: argparse.Namespace, dsn: str | None = None) -> None:
    """Load, resolve and merge at each size (``dsn``: the PostgreSQL database, for the
    cold / steady figures; ``None`` for the memory backend)."""
    print(f"date {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; command: python {' '.join(sys.argv)}")
    print(f"load average before: {_load_avg()}")
    loaded = 0
    for k, n in enumerate(sorted(args.sizes)):
        took = load(notes, n, args.chunk, first=loaded)
        print(f"loaded {n - loaded} entities ({n} in the scope) in {took:.1f} s; load {_load_avg()}")
        loaded = n
        if dsn is None:
            _print_resolve(notes, n, args.queries, "memory")
        else:
            _print_resolve(notes, n, args.queries, f"cold: {_all_visible(dsn)} of the key pages all-visible")
            print(f"VACUUM (ANALYZE) of the entity tables: {_settle(dsn):.1f} s")
            _print_resolve(notes, n, args.queries, "steady")
        took, result = time_merge(notes, args.facts, args.batch, k)
        print(f"merge at {n} entities of an entity with {result.repointed} facts: {took:.2f} s in "
              f"{result.batches} batches of {args.batch}; load {_load_avg()}")


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=_sizes, default=[5_000, 100_000],
                        help="entity counts to measure at, comma-separated (the scope grows)")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--facts", type=int, default=1000, help="facts about the merged entity")
    parser.add_argument("--batch", type=int, default=200, help="notes re-pointed per transaction")
    parser.add_argument("--chunk", type=int, default=1000, help="entities created per transaction")
    parser.add_argument("--backend", choices=("postgres", "memory"), default="postgres")
    parser.add_argument("--dsn", default=None, help="a server to create the scratch database on")
    args = parser.parse_args()
    if args.backend == "memory":
        from memfabric.adapters.memory import open_memory_fabric
        run(open_memory_fabric().scope("bench", "user", "thread"), args)
        return
    from memfabric.adapters import open_fabric
    with scratch_database(args.dsn, "bench-entities") as dsn, open_fabric(dsn) as fabric:
        run(fabric.scope("bench", "user", "thread"), args, dsn)


if __name__ == "__main__":
    main()
