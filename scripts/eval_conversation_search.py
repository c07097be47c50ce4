"""Conversation search (``notes.search_conversation``, issue 29): LoCoMo dev evidence
recall@5 and latency on a 100,000-entry thread, in one run.

    .venv/bin/python scripts/eval_conversation_search.py [--data PATH] [--synthetic 100000]
        [--queries 200] [--top-k 5] [--out FILE.json]

* **LoCoMo dev** (read in place, never copied): every turn of a conversation is appended
  to the ledger of its own thread (``"<speaker>: <text>"`` plus the image caption, as in
  ``eval_locomo.py``); each question with evidence (dia_ids parsed as ``eval_locomo.py``
  does) is searched with ``top_k``. *recall@k* = share of questions with at least one
  evidence turn among the ``k`` hits (what ``bench_conversation.py`` printed as
  ``evidence_recall@5``, 0.387 before issue 29); *frac@k* = share of a question's evidence
  turns among the hits, averaged. Per category, pooled 1-4 and over all questions.
  The same entries are also ranked by the rule before issue 29 (share of the query's
  unstemmed words, stop words included, that the entry contains; ties newer first),
  computed here in Python, side by side.
* **Latency**: a thread of ``--synthetic`` entries of 12 words drawn from a 5,000-word
  vocabulary (as ``bench_conversation.py``), ``--queries`` searches of 3 of those words;
  p50 / p95 in ms. Goals: recall@5 ≥ 0.55 (all questions), p95 ≤ 100 ms.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _eval_common as common  # noqa: E402
import eval_locomo  # noqa: E402

RECALL_GOAL = 0.55
P95_GOAL_MS = 100.0
_WORD = re.compile(r"\w+", re.UNICODE)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def old_rule(query: str, entries: list[tuple[int, str, str]], k: int) -> list[str]:
    """The ranking before issue 29: share of the query's lower-cased words (stop words
    included, no stems) an entry contains; ties newer first. ``entries``: (position, id, text)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    scored = []
    for pos, eid, text in entries:
        have = {w.lower() for w in _WORD.findall(text)}
        share = sum(w in have for w in words) / max(len(words), 1)
        if share > 0:
            scored.append((-share, -pos, eid))
    return [eid for _, _, eid in sorted(scored)[:k]]


def locomo(fabric: Any, path: Path, top_k: int) -> dict[str, Any]:
    """Per category (and pooled) recall@k / frac@k of search_conversation and of the old rule."""
    stats = eval_locomo.EvidenceStats()
    convs = eval_locomo.load_conversations(path, None, stats)
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    lat: list[float] = []
    for conv in convs:
        notes = fabric.scope("locomo", "dev", f"{conv.sample_id}-{common.new_tenant('s')}")
        made = notes.conversation().extend(
            [{"role": "user", "text": t.content} for t in conv.turns])
        dia_of = {e.id: t.dia_id for e, t in zip(made, conv.turns, strict=True)}
        entries = [(e.position, e.id, t.content) for e, t in zip(made, conv.turns, strict=True)]
        for q in conv.questions:
            t0 = time.perf_counter()
            res = notes.search_conversation(q.question, top_k=top_k, limit=1)
            lat.append(time.perf_counter() - t0)
            ev = set(q.evidence)
            for name, ids in (("new", [h.entry_id for h in res.hits]), ("old", old_rule(q.question, entries, top_k))):
                found = {dia_of[i] for i in ids} & ev
                for cat in (q.category, "pooled 1-4" if q.category in "1234" else None, "all"):
                    if cat is not None:
                        per[cat][f"{name}_recall"].append(1.0 if found else 0.0)
                        per[cat][f"{name}_frac"].append(len(found) / len(ev))
    table = {cat: {m: round(statistics.mean(v), 3) for m, v in ms.items()} | {"n": len(ms["new_recall"])}
             for cat, ms in sorted(per.items())}
    return {"categories": table, "latency_p50_ms": round(pct(lat, 0.5) * 1000, 2),
            "latency_p95_ms": round(pct(lat, 0.95) * 1000, 2), "questions": len(lat)}


def synthetic(fabric: Any, n: int, queries: int, top_k: int, batch: int = 5000) -> dict[str, Any]:
    """p50 / p95 (ms) of search_conversation on a thread of ``n`` synthetic entries."""
    rng = random.Random(14)
    vocab = [f"w{i:04d}" for i in range(5000)]
    notes = fabric.scope("synthetic", "bench", f"thread-{n}-{common.new_tenant('s')}")
    ledger = notes.conversation()
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    load = time.perf_counter()
    for i in range(0, n, batch):
        ledger.extend([{"role": "user" if j % 2 else "assistant", "text": " ".join(rng.choices(vocab, k=12)),
                        "timestamp": t0 + timedelta(seconds=j)} for j in range(i, min(n, i + batch))])
    load_s = time.perf_counter() - load
    lat, scanned = [], []
    for _ in range(queries):
        q = " ".join(rng.choices(vocab, k=3))
        q0 = time.perf_counter()
        res = notes.search_conversation(q, top_k=top_k, limit=10)
        lat.append(time.perf_counter() - q0)
        scanned.append(res.scanned)
    return {"entries": n, "load_s": round(load_s, 1), "p50_ms": round(pct(lat, 0.5) * 1000, 2),
            "p95_ms": round(pct(lat, 0.95) * 1000, 2), "mean_scanned": round(statistics.mean(scanned), 1),
            "queries": queries}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=common.default_data_path("locomo-dev", "locomo-dev.json"))
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--synthetic", type=int, default=100_000, help="entries of the long thread (0: skip)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    with common.scratch_dir() as tmp, common.fabric_session(
            dsn=args.dsn, embedder_name="hash", consolidate=True, data_dir=tmp) as fabric:
        loc = locomo(fabric, args.data, args.top_k)
        k = args.top_k
        rows = [(cat, m["n"], m["old_recall"], m["new_recall"], m["old_frac"], m["new_frac"])
                for cat, m in loc["categories"].items()]
        common.print_table(f"search_conversation on LoCoMo dev (top_k={k}): before issue 29 → now",
                           ["category", "n", f"recall@{k} old", f"recall@{k}", f"frac@{k} old", f"frac@{k}"], rows)
        print(f"LoCoMo search latency: p50 {loc['latency_p50_ms']} ms, p95 {loc['latency_p95_ms']} ms"
              f" ({loc['questions']} questions)")
        syn = synthetic(fabric, args.synthetic, args.queries, k) if args.synthetic else None
        if syn:
            print(f"{syn['entries']}-entry thread: p50 {syn['p50_ms']} ms, p95 {syn['p95_ms']} ms"
                  f" ({syn['queries']} queries, {syn['mean_scanned']} entries matched on average;"
                  f" load {syn['load_s']} s)")
    recall = loc["categories"]["all"]["new_recall"]
    ok = recall >= RECALL_GOAL and (syn is None or syn["p95_ms"] <= P95_GOAL_MS)
    print(f"goals: recall@{k} {recall:.3f} (≥ {RECALL_GOAL}), p95 "
          f"{'-' if syn is None else syn['p95_ms']} ms (≤ {P95_GOAL_MS}): {'met' if ok else 'NOT met'}")
    common.write_json(args.out, {"locomo": loc, "synthetic": syn})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
