"""Benchmark recall with a long query (issue 17, defect 5): an end user's 8,000-character
message used as the query (the context provider passes the last user message) must not
cost seconds.

Loads N notes into one tenant (default 20,000; synthetic facts of ``_bench_common``,
consolidation off), then recalls, interleaved query by query, short paraphrase queries
and long queries (about 1,000 distinct words, 8,000 characters: the documented
maximum), in hybrid and lexical mode, and prints p50 / p95 per kind and the long /
short ratios.

Run (from the repository root)::

    python scripts/bench_long_query.py                  # 20k notes, embedded PostgreSQL
    python scripts/bench_long_query.py --n 50000 --queries 30
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as data  # noqa: E402

from memfabric.adapters import open_fabric  # noqa: E402


def long_query(rng: random.Random, words: list[str]) -> str:
    """About 1,000 distinct words, cut at 8,000 characters."""
    picked = rng.sample(words, min(len(words), 1000))
    return " ".join(picked)[:8000]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--queries", type=int, default=30, help="timed queries per kind and mode")
    p.add_argument("--dsn", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    ds = data.make_dataset(args.n, n_queries=args.queries)
    rng = random.Random(7)
    vocab = sorted({w for text in ds.texts for w in text.lower().split() if w.isalpha()})
    vocab += [f"word{i}" for i in range(max(0, 1200 - len(vocab)))]
    with data.scratch_database(args.dsn, "mf_bench_longq") as dsn, \
            open_fabric(dsn, consolidate=False) as fab:
        notes = fab.scope("tenant-0")
        for start in range(0, len(ds.texts), 5000):
            notes.remember_many([{"kind": "fact", "content": t} for t in ds.texts[start:start + 5000]])
        shorts = list(ds.queries[: args.queries])
        longs = [long_query(rng, vocab) for _ in range(args.queries)]
        times: dict[str, list[float]] = {}
        for mode in ("hybrid", "lexical"):
            notes.recall(shorts[0], mode=mode)
            notes.recall(longs[0], mode=mode)  # warm-up
            for short, long in zip(shorts, longs, strict=True):
                for kind, q in (("short", short), ("long", long)):
                    t0 = time.perf_counter()
                    notes.recall(q, mode=mode)
                    times.setdefault(f"{mode}/{kind}", []).append((time.perf_counter() - t0) * 1000)
    out: dict[str, object] = {"n": args.n, "queries": args.queries}
    for key, values in times.items():
        out[key] = {"p50_ms": data.pct(values, 50), "p95_ms": data.pct(values, 95)}
        print(f"{key:16s} p50 {data.pct(values, 50):8.1f} ms   p95 {data.pct(values, 95):8.1f} ms")
    for mode in ("hybrid", "lexical"):
        ratio = (data.pct(times[f"{mode}/long"], 95) or 0) / (data.pct(times[f"{mode}/short"], 95) or 1)
        out[f"{mode}_long_over_short_p95"] = ratio
        print(f"{mode}: long / short p95 = {ratio:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
