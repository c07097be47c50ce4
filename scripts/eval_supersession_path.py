"""Issue 12: the supersession suites (tests/data/supersession) and write latency through
the real write path. Each pair is remembered in a fresh scope with the defaults; a
positive pair must supersede, a negative pair must not. Latency: p50/p95 of one
``remember`` with inference on vs off (``subjects=None``), side by side, on three
streams: distinct facts (the same outcome, inserts, in both modes), updates with an
explicit ``subject`` on the inference-off side (the same outcome, a supersession, in
both modes: the cost of inference itself) and updates without one (off inserts where on
supersedes: the cost of inference plus the supersession it finds, reported, not
limited)."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from memfabric.adapters import open_fabric

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "supersession"


def rate(fab, name: str) -> tuple[int, int]:
    """(supersessions, pairs) of suite ``name`` through the write path."""
    return rate_rows(fab, [json.loads(x) for x in (DATA / f"{name}.jsonl").read_text().splitlines() if x.strip()])


GENERATED_STRIDE = 5
"""Every 5th row of the generated phrasings (issue 29) goes through the write path (all
of them: ``scripts/eval_subjects.py``, without a database)."""


def rate_rows(fab, rows: list[dict[str, str]]) -> tuple[int, int]:
    hits = 0
    for r in rows:
        notes = fab.scope("suite-" + uuid.uuid4().hex[:8])
        notes.remember(kind="fact", content=r["old"])
        hits += notes.remember(kind="fact", content=r["new"]).outcome == "superseding"
    return hits, len(rows)


LIMIT = 1.2
"""Issue 12: p50 of ``remember`` with inference on must be at most this times inference off."""


def block_latencies(notes, texts: list[tuple[str, str | None]]) -> list[float]:
    """Latency (ms) of each ``remember`` of ``(content, subject)`` into ``notes``, in order."""
    out = []
    for t, subject in texts:
        t0 = time.perf_counter()
        notes.remember(kind="fact", content=t, subject=subject)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def ab_latency(on, off, stream: list[tuple[str, str | None]], rounds: int, block: int) -> dict[str, float]:
    """Interleaved A/B on one server: ``rounds`` alternations; in each, the next ``block``
    texts of ``stream`` go through fabric ``on`` (inference on) and ``off`` (inference
    off), each into its own fresh scope per stream pass, the order flipped every round so
    neither side always runs first. Returns p50/p95 per side over all writes and the
    median over rounds of the per-round p50 ratio (on / off), which cancels the drift
    of a shared, noisy machine."""
    tag = uuid.uuid4().hex[:8]
    scopes = {"on": on.scope("lat-on-" + tag), "off": off.scope("lat-off-" + tag)}
    lats: dict[str, list[float]] = {"on": [], "off": []}
    ratios = []
    for r in range(rounds):
        k = (r * block) % max(1, len(stream) - block + 1)
        texts = stream[k:k + block]
        if k == 0 and r:
            tag = uuid.uuid4().hex[:8]  # a new pass over the stream: fresh scopes, same state
            scopes = {"on": on.scope("lat-on-" + tag), "off": off.scope("lat-off-" + tag)}
        order = ("on", "off") if r % 2 == 0 else ("off", "on")
        plain = [(t, None) for t, _ in texts]  # inference on never gets a subject
        got = {side: block_latencies(scopes[side], plain if side == "on" else texts) for side in order}
        for side in order:
            lats[side] += got[side]
        ratios.append(statistics.median(got["on"]) / statistics.median(got["off"]))
    q = {side: sorted(v) for side, v in lats.items()}
    return {"on_p50": statistics.median(q["on"]), "on_p95": q["on"][int(0.95 * (len(q["on"]) - 1))],
            "off_p50": statistics.median(q["off"]), "off_p95": q["off"][int(0.95 * (len(q["off"]) - 1))],
            "ratio_median": statistics.median(ratios), "rounds": rounds, "block": block}


def main() -> int:
    """Print both suites' rates and the A/B latency per stream; exit 1 when the median
    ratio of a stream is above :data:`LIMIT` (``argv[1]``: optional DSN; default: a fresh
    embedded server in a temporary directory)."""
    dsn = (sys.argv[1] if len(sys.argv) > 1 else "") or None
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    server = None
    if dsn is None:
        from memfabric.adapters.postgres.embedded import EmbeddedPostgres
        server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="mf-sup-")) / "pg")
        dsn = server.dsn
    pos = [json.loads(x) for x in (DATA / "positive.jsonl").read_text().splitlines() if x.strip()]
    updates = [(r[k], f"pair-{i}") for i, r in enumerate(pos) for k in ("old", "new")]
    neg = [json.loads(x) for x in (DATA / "negative.jsonl").read_text().splitlines() if x.strip()]
    distinct = [(t, None) for t in dict.fromkeys(r[k] for r in neg for k in ("old", "new"))]
    # (stream, held to LIMIT?): only streams with the same outcome in both modes are
    limited = {"distinct facts (negative suite; inserts in both modes)": (distinct, True),
               "updates (positive suite; off has an explicit subject: supersedes in both modes)":
                   (updates, True),
               "updates (positive suite; off has no subject: inserts where on supersedes)":
                   ([(t, None) for t, _ in updates], False)}
    worst = 0.0
    try:
        with open_fabric(dsn) as fab:
            p, np_ = rate(fab, "positive")
            n, nn = rate(fab, "negative")
            print(f"positive suite: {p}/{np_} superseded ({p / np_:.1%}); negative suite: {n}/{nn} superseded")
            from tests import supersession_phrasings as ph
            gp, ngp = rate_rows(fab, ph.positive()[::GENERATED_STRIDE])
            gn, ngn = rate_rows(fab, ph.negative()[::GENERATED_STRIDE])
            print(f"generated phrasings (every {GENERATED_STRIDE}th row): positive {gp}/{ngp} superseded"
                  f" ({gp / ngp:.1%}); negative {gn}/{ngn} superseded")
        with open_fabric(dsn, subjects=True) as on, open_fabric(dsn, subjects=None) as off:
            ab_latency(on, off, updates, 2, 10)  # warm-up: plans, caches, pools
            for name, (stream, held) in limited.items():
                r = ab_latency(on, off, stream, rounds, 10)
                if held:
                    worst = max(worst, r["ratio_median"])
                print(f"latency, {name} (ms, {r['rounds']} interleaved rounds of {r['block']} writes"
                      f" per side): inference on p50={r['on_p50']:.2f} p95={r['on_p95']:.2f};"
                      f" off p50={r['off_p50']:.2f} p95={r['off_p95']:.2f};"
                      f" median of per-round p50 ratios {r['ratio_median']:.3f}x"
                      + (f" (limit {LIMIT}x)" if held else " (reported, not limited)"))
    finally:
        if server is not None:
            server.close()
    print(f"worst median ratio of the same-outcome streams {worst:.3f}x: {'OK' if worst <= LIMIT else 'ABOVE LIMIT'}")
    return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    raise SystemExit(main())
