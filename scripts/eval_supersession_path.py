"""Issue 12: the supersession suites (tests/data/supersession) and write latency through
the real write path. Each pair is remembered in a fresh scope with the defaults; a
positive pair must supersede, a negative pair must not. Latency: p50/p95 of one
``remember`` with inference on vs off (``subjects=None``), side by side."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from memfabric.adapters import open_fabric

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "supersession"


def rate(fab, name: str) -> tuple[int, int]:
    rows = [json.loads(x) for x in (DATA / f"{name}.jsonl").read_text().splitlines() if x.strip()]
    hits = 0
    for r in rows:
        notes = fab.scope("suite-" + uuid.uuid4().hex[:8])
        notes.remember(kind="fact", content=r["old"])
        hits += notes.remember(kind="fact", content=r["new"]).outcome == "superseding"
    return hits, len(rows)


def latency(fab, texts: list[str]) -> tuple[float, float]:
    notes = fab.scope("lat-" + uuid.uuid4().hex[:8])
    out = []
    for t in texts:
        t0 = time.perf_counter()
        notes.remember(kind="fact", content=t)
        out.append((time.perf_counter() - t0) * 1000)
    out.sort()
    return statistics.median(out), out[int(0.95 * (len(out) - 1))]


def main() -> int:
    dsn = sys.argv[1] if len(sys.argv) > 1 else None
    tmp = tempfile.mkdtemp(prefix="mf-sup-")
    kw = {} if dsn else {"data_dir": tmp}
    pos = [json.loads(x) for x in (DATA / "positive.jsonl").read_text().splitlines() if x.strip()]
    texts = [r[k] for r in pos for k in ("old", "new")] * 2
    with open_fabric(dsn, **kw) as fab:
        p, np_ = rate(fab, "positive")
        n, nn = rate(fab, "negative")
        print(f"positive suite: {p}/{np_} superseded ({p / np_:.1%}); negative suite: {n}/{nn} superseded")
        latency(fab, texts[:20])  # warm-up
        on = latency(fab, texts)
    with open_fabric(dsn, subjects=None, **kw) as fab:
        off = latency(fab, texts)
    with open_fabric(dsn, **kw) as fab:
        on2 = latency(fab, texts)
    print(f"latency (ms, n={len(texts)}) inference on p50={on[0]:.2f} p95={on[1]:.2f};"
          f" off p50={off[0]:.2f} p95={off[1]:.2f}; on again p50={on2[0]:.2f} p95={on2[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
