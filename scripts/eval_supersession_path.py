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
    neg = [json.loads(x) for x in (DATA / "negative.jsonl").read_text().splitlines() if x.strip()]
    distinct = list(dict.fromkeys(r[k] for r in neg for k in ("old", "new")))
    streams = {"updates (positive suite, each pair supersedes with inference on)": texts,
               "distinct facts (negative suite, the same work in both modes)": distinct * 2}
    with open_fabric(dsn, **kw) as fab:
        p, np_ = rate(fab, "positive")
        n, nn = rate(fab, "negative")
        print(f"positive suite: {p}/{np_} superseded ({p / np_:.1%}); negative suite: {n}/{nn} superseded")
        latency(fab, texts[:20])  # warm-up
    for name, stream in streams.items():
        runs = []
        for subjects in (True, None, True, None):  # interleaved: the machine is shared and noisy
            with open_fabric(dsn, subjects=subjects, **kw) as fab:
                runs.append(latency(fab, stream))
        on = (statistics.median([runs[0][0], runs[2][0]]), statistics.median([runs[0][1], runs[2][1]]))
        off = (statistics.median([runs[1][0], runs[3][0]]), statistics.median([runs[1][1], runs[3][1]]))
        print(f"latency, {name} (ms, n={len(stream)}): inference on p50={on[0]:.2f} p95={on[1]:.2f};"
              f" off p50={off[0]:.2f} p95={off[1]:.2f}; ratio p50 {on[0] / off[0]:.2f}x p95 {on[1] / off[1]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
