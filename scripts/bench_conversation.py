"""Measure ``notes.search_conversation`` (issue 14): LoCoMo dev conversations and a
synthetic long thread, p50/p95 latency, plus evidence recall@k on LoCoMo's QA.

    .venv/bin/python scripts/bench_conversation.py [--synthetic 100000] [--queries 200]

Data: /work/shared/data/locomo-dev/locomo-dev.json (read in place). Runs on a fresh
embedded PostgreSQL in a temporary directory (or ``--dsn``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from memfabric.adapters import open_fabric

LOCOMO = "/work/shared/data/locomo-dev/locomo-dev.json"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def ms(xs: list[float]) -> str:
    return f"p50 {pct(xs, 0.5) * 1000:.2f} ms, p95 {pct(xs, 0.95) * 1000:.2f} ms (n={len(xs)})"


def locomo(fabric: Any, top_k: int) -> dict[str, Any]:
    data = json.load(open(LOCOMO))
    lat: list[float] = []
    hit = total = entries = 0
    append_s = 0.0
    for sample in data:
        conv = sample["conversation"]
        notes = fabric.scope("locomo", "dev", sample["sample_id"])
        ledger = notes.conversation()
        rows, dia = [], []
        n = 1
        while f"session_{n}" in conv:
            for turn in conv[f"session_{n}"]:
                rows.append({"role": "user" if turn["speaker"] == conv["speaker_a"] else "assistant",
                             "text": f"{turn['speaker']}: {turn['text']}"})
                dia.append(turn["dia_id"])
            n += 1
        t0 = time.perf_counter()
        made = ledger.extend(rows)
        append_s += time.perf_counter() - t0
        entries += len(made)
        by_entry = {e.id: d for e, d in zip(made, dia, strict=True)}
        for qa in sample["qa"]:
            if not qa.get("evidence"):
                continue
            t0 = time.perf_counter()
            res = notes.search_conversation(str(qa["question"]), top_k=top_k, limit=5)
            lat.append(time.perf_counter() - t0)
            found = {by_entry[h.entry_id] for h in res.hits}
            total += 1
            hit += bool(found & set(qa["evidence"]))
    return {"conversations": len(data), "entries": entries, "queries": total,
            f"evidence_recall@{top_k}": round(hit / max(total, 1), 3), "latency": ms(lat),
            "append_s": round(append_s, 2)}


def synthetic(fabric: Any, n: int, queries: int, batch: int, top_k: int) -> dict[str, Any]:
    rng = random.Random(14)
    vocab = [f"w{i:04d}" for i in range(5000)]
    notes = fabric.scope("synthetic", "bench", f"thread-{n}")
    ledger = notes.conversation()
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    start = time.perf_counter()
    batch_s: list[float] = []
    for i in range(0, n, batch):
        rows = [{"role": "user" if j % 2 else "assistant", "text": " ".join(rng.choices(vocab, k=12)),
                 "timestamp": t0 + timedelta(seconds=j)} for j in range(i, min(n, i + batch))]
        b0 = time.perf_counter()
        ledger.extend(rows)
        batch_s.append(time.perf_counter() - b0)
    load = time.perf_counter() - start
    lat, scanned = [], []
    for _ in range(queries):
        q = " ".join(rng.choices(vocab, k=3))
        q0 = time.perf_counter()
        res = notes.search_conversation(q, top_k=top_k, limit=10)
        lat.append(time.perf_counter() - q0)
        scanned.append(res.scanned)
    a0 = time.perf_counter()
    ledger.append("user", "one more entry at the end")
    append_one = time.perf_counter() - a0
    p0 = time.perf_counter()
    page = ledger.entries(limit=50, direction="backward")
    page_s = time.perf_counter() - p0
    return {"entries": n, "load_s": round(load, 1), "last_batch_s": round(batch_s[-1], 2),
            "search": ms(lat), "mean_scanned": round(statistics.mean(scanned), 1),
            "append_one_at_end_s": round(append_one, 3), "latest_page_ms": round(page_s * 1000, 2),
            "page_len": len(page.entries)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--synthetic", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--top-k", type=int, default=5)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mf-bench-conv-")
    os.chmod(tmp, 0o755)
    kw: dict[str, Any] = {"dsn": args.dsn} if args.dsn else {"data_dir": os.path.join(tmp, "pg")}
    with open_fabric(**kw) as fabric:
        print("locomo-dev:", json.dumps(locomo(fabric, args.top_k)), flush=True)
        if args.synthetic:
            print("synthetic:", json.dumps(synthetic(fabric, args.synthetic, args.queries,
                                                     args.batch, args.top_k)), flush=True)


if __name__ == "__main__":
    main()
