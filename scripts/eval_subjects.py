"""Subject-inference evaluation (pure, no database): does the rule extractor give all
values of one fact the same key, different facts different keys, and distinct chat
turns different keys?

Run (from the repository root)::

    python scripts/eval_subjects.py
    python scripts/eval_subjects.py --data ../shared/data/dyknow-dev/dyknow-dev.json --show 10

* **DyKnow** (``--data``): every answer value ``v`` of a fact becomes the note
  ``"<question> <v>"`` as in ``eval_temporal.py`` (the ``generic`` question; the
  ``all-questions`` row uses every phrasing of the fact: generic, contextualized,
  rephrased_*).  *recall* = fraction of same-fact value pairs whose keys match (both
  extracted and equal); *false merges* = fraction of cross-fact pairs with equal keys;
  *coverage* = notes with a key.
* **Suites** (``tests/data/supersession``): positive = fraction of pairs where the new
  note supersedes the old one; negative = number of pairs that wrongly supersede.
* **Generated phrasings** (``tests/supersession_phrasings.py``, issue 29): the same two
  figures per family of sentence (a negative pair counts if it supersedes either way).
* **LoCoMo** (``--locomo``): every turn ``"<speaker>: <text>"``; how many turns get a key,
  how many distinct turn pairs share a key (same value = restatement, different value =
  would supersede), with examples.
* **Cost**: µs per ``extract`` call over all LoCoMo turns (p50 / p95 / max).

The data sets are read in place and never copied into the project.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

try:
    from memfabric.domain.subjects import RuleSubjectExtractor, SubjectKey, supersedes
except ImportError:  # running without the package installed
    sys.path.insert(0, str(ROOT / "domain"))
    from subjects import RuleSubjectExtractor, SubjectKey, supersedes  # type: ignore[no-redef]


def iter_facts(data: dict[str, Any]) -> list[tuple[str, dict[str, str], list[str]]]:
    out = []
    for category, entities in data.items():
        for entity, body in entities.items():
            bodies = [(f"{category}/{entity}", body)] if "questions" in body else [
                (f"{category}/{entity}/{rel}", rb) for rel, rb in body.items()
            ]
            for key, b in bodies:
                values = []
                for raw in b["answers"]:
                    v = raw.split("|", 1)[0].strip()
                    if v and v not in values:
                        values.append(v)
                out.append((key, {k: q.strip() for k, q in b["questions"].items()}, values))
    return out


def dyknow(ex: RuleSubjectExtractor, path: Path, show: int) -> None:
    facts = iter_facts(json.loads(path.read_text()))
    for label, question_keys in (("generic", ("generic",)), ("all-questions", None)):
        notes: list[tuple[int, str, SubjectKey | None]] = []
        for i, (_, questions, values) in enumerate(facts):
            qs = [questions[k] for k in (question_keys or sorted(questions)) if k in questions]
            for q in qs:
                for v in values:
                    text = f"{q} {v}"
                    notes.append((i, text, ex.extract(text)))
        same = same_ok = cross = cross_bad = 0
        misses: list[str] = []
        merges: list[str] = []
        for (fa, ta, ka), (fb, tb, kb) in itertools.combinations(notes, 2):
            match = ka is not None and kb is not None and ka.key == kb.key
            if fa == fb:
                same += 1
                same_ok += match
                if not match and len(misses) < show:
                    misses.append(f"{ta!r} -> {ka and ka.key} / {tb!r} -> {kb and kb.key}")
            else:
                cross += 1
                cross_bad += match
                if match and len(merges) < show:
                    merges.append(f"{ta!r} / {tb!r} -> {ka and ka.key}")
        covered = sum(1 for _, _, k in notes if k is not None)
        print(
            f"DyKnow [{label}]: {len(facts)} facts, {len(notes)} notes, coverage {covered / len(notes):.3f}; "
            f"same-fact recall {same_ok / max(1, same):.3f} ({same_ok}/{same}); "
            f"cross-fact false merges {cross_bad / max(1, cross):.4f} ({cross_bad}/{cross})"
        )
        for line in misses:
            print("   miss:  " + line)
        for line in merges:
            print("   MERGE: " + line)


def suites(ex: RuleSubjectExtractor, show: int) -> None:
    base = ROOT / "tests" / "data" / "supersession"
    for name in ("positive", "negative"):
        rows = [json.loads(line) for line in (base / f"{name}.jsonl").read_text().splitlines() if line.strip()]
        hits = 0
        wrong: list[str] = []
        for r in rows:
            s = supersedes(ex.extract(r["new"]), ex.extract(r["old"]))
            hits += s is not None
            if (s is None) == (name == "positive") and len(wrong) < show:
                wrong.append(f"{r['old']!r} -> {r['new']!r}")
        if name == "positive":
            print(f"positive suite: {hits}/{len(rows)} recognised ({hits / len(rows):.3f})")
        else:
            print(f"negative suite: {hits}/{len(rows)} wrongly supersede")
        for w in wrong:
            print("   " + w)


def generated(ex: RuleSubjectExtractor, show: int) -> None:
    """The generated phrasings of issue 29 (``tests/supersession_phrasings.py``), per family."""
    from tests import supersession_phrasings as ph

    for name, rows in (("positive", ph.positive()), ("negative", ph.negative())):
        per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        wrong: list[str] = []
        for r in rows:
            a, b = ex.extract(r["new"]), ex.extract(r["old"])
            hit = supersedes(a, b) is not None or (name == "negative" and supersedes(b, a) is not None)
            per[r["category"]][0] += hit
            per[r["category"]][1] += 1
            if hit != (name == "positive") and len(wrong) < show:
                wrong.append(f"[{r['category']}] {r['old']!r} -> {r['new']!r}")
        hits, n = sum(v[0] for v in per.values()), len(rows)
        verb = "recognised" if name == "positive" else "wrongly supersede (either way round)"
        print(f"generated {name}: {hits}/{n} {verb}; " + ", ".join(f"{c} {v[0]}/{v[1]}" for c, v in per.items()))
        for w in wrong:
            print("   " + w)


def locomo(ex: RuleSubjectExtractor, path: Path, show: int) -> list[str]:
    data = json.loads(path.read_text())
    texts: list[str] = []
    per_conv: list[list[tuple[str, SubjectKey | None]]] = []
    for sample in data:
        conv = sample["conversation"]
        turns = []
        for k in sorted((k for k in conv if k.startswith("session_") and isinstance(conv[k], list)),
                        key=lambda k: int(k.split("_")[1])):
            for t in conv[k]:
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [image: {t['blip_caption']}]"
                texts.append(text)
                turns.append((text, ex.extract(text)))
        per_conv.append(turns)
    keyed = sum(1 for turns in per_conv for _, k in turns if k is not None)
    restate = change = 0
    examples: list[str] = []
    for turns in per_conv:
        by_key: dict[str, list[tuple[str, SubjectKey]]] = defaultdict(list)
        for text, k in turns:
            if k is not None:
                by_key[k.key].append((text, k))
        for group in by_key.values():
            for (ta, ka), (tb, kb) in itertools.combinations(group, 2):
                if ta == tb:
                    continue
                if supersedes(kb, ka) is not None or supersedes(ka, kb) is not None:
                    change += 1
                    tag = "SUPERSEDE"
                else:
                    restate += 1
                    tag = "same value"
                if len(examples) < show:
                    examples.append(f"[{tag}] {ka.key}: {ta[:90]!r} / {tb[:90]!r}")
    print(
        f"LoCoMo: {len(texts)} turns, {keyed} with a key; distinct turn pairs sharing a key: "
        f"{restate + change} ({change} would supersede, {restate} same value)"
    )
    for e in examples:
        print("   " + e)
    return texts


def cost(ex: RuleSubjectExtractor, texts: list[str]) -> None:
    for t in texts[:50]:
        ex.extract(t)  # warm caches / regex compilation
    samples = []
    for _ in range(3):
        for t in texts:
            t0 = time.perf_counter_ns()
            ex.extract(t)
            samples.append((time.perf_counter_ns() - t0) / 1000.0)
    samples.sort()
    p50 = statistics.median(samples)
    p95 = samples[int(0.95 * (len(samples) - 1))]
    print(f"cost: {len(samples)} extract calls on LoCoMo turns: p50 {p50:.1f} µs, p95 {p95:.1f} µs, "
          f"max {samples[-1]:.1f} µs")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "dyknow-dev" / "dyknow-dev.json")
    p.add_argument("--locomo", type=Path, default=ROOT.parent / "shared" / "data" / "locomo-dev" / "locomo-dev.json")
    p.add_argument("--show", type=int, default=5, help="examples of misses / merges to print")
    args = p.parse_args(argv)
    ex = RuleSubjectExtractor()
    dyknow(ex, args.data, args.show)
    suites(ex, args.show)
    generated(ex, args.show)
    texts = locomo(ex, args.locomo, args.show)
    cost(ex, texts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
