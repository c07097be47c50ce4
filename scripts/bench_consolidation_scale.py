"""A consolidating write against the size of its scope (issue 24).

Loads subject-less facts into one scope per size (``--sizes``, default 1,000 and
20,000; ``remember_many`` without consolidation), then times ``--writes`` single
consolidating ``remember`` calls of new facts into each scope (the first 20 not
counted), in two modes alternating per round:

- ``shipped``: the neighbour lookup as shipped: the same token hash, the same inferred
  key or entity, by btree; the nearest vectors only for the workers that use them;
- ``nearest``: the same write with the exact nearest-vector scan of the whole group
  added to every lookup, as every consolidating write did before (the lookup's
  ``near`` forced on).

Prints p50 / p95 per size and mode and the ratio of the largest size's p50 to the
smallest's (1.0: the write's cost does not grow with the scope), with the run header
(date, load, command); ``--json`` writes the same as a document.

    python scripts/bench_consolidation_scale.py [--sizes 1000 20000] [--writes 150] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import run_header, scratch_database  # noqa: E402

import memfabric.domain.remember as remember  # noqa: E402
from memfabric.adapters import open_fabric  # noqa: E402

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november"
         " oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()
SHIPPED = remember._neighbour_lookup  # noqa: SLF001


def _with_nearest(*args: Any, **kwargs: Any) -> Any:
    workers, asking, wanted = SHIPPED(*args, **kwargs)
    return workers, asking, wanted._replace(near=True)


def _text(rng: random.Random, i: int) -> str:
    return f"Note {i}: " + " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(8))


def _load(dsn: str, sizes: list[int], rng: random.Random) -> None:
    with open_fabric(dsn, consolidate=False) as fab:
        for n in sizes:
            notes = fab.scope(f"size-{n}", "u1")
            for start in range(0, n, 1000):
                notes.remember_many([{"kind": "fact", "content": _text(rng, i)}
                                     for i in range(start, min(n, start + 1000))])


def _time_writes(notes: Any, rng: random.Random, writes: int, first: int) -> list[float]:
    lat = []
    for i in range(writes):
        t0 = time.perf_counter()
        notes.remember(kind="fact", content=_text(rng, first + i))
        lat.append((time.perf_counter() - t0) * 1000)
    return lat[20:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 20_000])
    ap.add_argument("--writes", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dsn", default=None, help="a server to create the scratch database on")
    ap.add_argument("--json", default=None, help="write the figures here as JSON")
    args = ap.parse_args()
    rng = random.Random(20261203)
    out: dict[str, Any] = {"header": run_header(), "rounds": []}
    print(out["header"])
    with scratch_database(args.dsn, "bench-consolidation-scale") as dsn:
        _load(dsn, args.sizes, rng)
        with open_fabric(dsn) as fab:
            for rnd in range(args.rounds):
                for mode in ("shipped", "nearest"):
                    remember._neighbour_lookup = SHIPPED if mode == "shipped" else _with_nearest  # type: ignore[assignment]  # noqa: SLF001
                    row: dict[str, Any] = {"round": rnd + 1, "mode": mode}
                    for n in args.sizes:
                        lat = _time_writes(fab.scope(f"size-{n}", "u1"), rng, args.writes, 10**6 * (rnd + 2))
                        row[str(n)] = {"p50_ms": round(statistics.median(lat), 2),
                                       "p95_ms": round(sorted(lat)[int(0.95 * len(lat))], 2)}
                    big, small = row[str(max(args.sizes))], row[str(min(args.sizes))]
                    row["p50_ratio_largest_to_smallest"] = round(big["p50_ms"] / small["p50_ms"], 2)
                    out["rounds"].append(row)
                    print(row, flush=True)
            remember._neighbour_lookup = SHIPPED  # type: ignore[assignment]  # noqa: SLF001
    out["load_after"] = run_header()["load_avg"]
    print("load after:", out["load_after"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
