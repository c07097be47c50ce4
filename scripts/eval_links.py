"""Issue 15 goals on LoCoMo dev: the linker (attached during ingestion) vs no links.

Run (from the repository root)::

    python scripts/eval_links.py                     # every conversation, hash embedder
    python scripts/eval_links.py --embedder hash,wordllama --out /tmp/links.json   # both, one run
    python scripts/eval_links.py --by similarity --top-k-links 3   # the nearest-vector linker

Ingests every conversation exactly like ``scripts/eval_locomo.py`` (one ``fact`` per
turn, ``remember_many`` in turn order, consolidation on) into three fabrics on one
embedded PostgreSQL:

* ``off``: no workers (no links), recall as today;
* ``linker``: ``linker={"enabled": True, "top_k": K, "by": B, "adjacent": A}`` (default
  ``top_k`` 8, ``by="terms"``: shared rare terms, :mod:`memfabric.domain.link_terms`;
  ``adjacent`` 0.5: a ``follows`` edge to the previous turn of the session), a session attached to each
  conversation's scope during ingestion (so the linker runs), then recall with
  ``expand_links=True`` (the default);
* ``linker, no expansion``: the same fabric recalled with ``expand_links=False``
  (isolates the effect of the expansion from the write path).

**Cross-validation** (issue 29): the dev conversations are split in two halves (by
order); on each half the rule of :func:`choose` picks one setting of :data:`GRID`
(every category at least the unlinked run's, then the largest multi-hop frac@10, ties:
fewer edges) and the other half reports it, off vs linker: both folds are printed.
**Latency on the same notes**: each conversation is stored twice in one fabric, once
with the linker attached and once without, and the two recalls of each question run
back to back (p50 / p95 and the p50 ratio; goal ≤ 1.3×). **At scale** (``--scale N``,
default 100,000; 0 skips it): the synthetic notes of ``scripts/bench_recall.py`` (10
tenants, the queried one holds 10%) with the queried tenant's notes stored a second time
in a tenant of their own, ``--scale-links`` edges per note written into the link graph of
every tenant but that copy, the two recalls of each paraphrase query back to back as
above: both ratios print in one run. ``--latency-only`` runs only the two latency parts.

Reports frac@10 / any@10 / frac@25 per LoCoMo category (the goal: multi-hop,
category 1, frac@10 +10% relative with the linker, no other category lower), link
count per note, ingestion time per turn (write-latency cost, batched), single
``remember`` p50 with the linker and evolution attached vs off, and recall p50 with and
without expansion. Several embedders (``--embedder hash,wordllama``) are each measured
off vs on in the same run. The data (CC BY-NC 4.0) is read in place and never copied.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _eval_common as common  # noqa: E402
import eval_locomo as locomo  # noqa: E402


class _Session:
    id = "eval-links"


def run(convs: Sequence[locomo.Conversation], *, linker: dict[str, Any] | None, dsn: str | None,
        data_dir: str, embedder: str, expand_modes: Sequence[bool],
        link_weight: float | None = None) -> dict[str, Any]:
    from memfabric.adapters import open_fabric

    kwargs: dict[str, Any] = {"dsn": dsn, "embedder": common.make_embedder(embedder)}
    if dsn is None:
        kwargs["data_dir"] = data_dir
    if linker is not None:
        kwargs["linker"] = linker
    tenant = common.new_tenant("links")
    rankings: dict[bool, dict[tuple[str, int], Any]] = {e: {} for e in expand_modes}
    latencies: dict[bool, list[float]] = {e: [] for e in expand_modes}
    ingest_s = 0.0
    turns = 0
    notes_total = 0
    edges_total = 0
    with open_fabric(**kwargs) as fabric:
        for conv in convs:
            notes = fabric.scope(tenant, resource_id=conv.sample_id)
            att = notes.attach(_Session()) if linker is not None else None
            t0 = time.perf_counter()
            info = locomo.ingest(notes, conv)
            ingest_s += time.perf_counter() - t0
            turns += len(conv.turns)
            if att is not None:
                att.detach()
            ids = set(info.turn_note.values())
            notes_total += len(ids)
            edges_total += sum(len(notes.get(i).links) for i in ids)
            for expand in expand_modes:
                for qi, q in enumerate(conv.questions):
                    t0 = time.perf_counter()
                    res = notes.recall(q.question, top_k=locomo.TOP_K, expand_links=expand,
                                       scoring=None if link_weight is None else {"link_weight": link_weight})
                    latencies[expand].append(time.perf_counter() - t0)
                    hits = list(res.hits)[: locomo.TOP_K]
                    rankings[expand][(conv.sample_id, qi)] = [frozenset(common.source_ids(h)) for h in hits]
    return {
        "rankings": rankings,
        "scores": {e: locomo.json_view(locomo.score_run(convs, rankings[e])) for e in expand_modes},
        "ingest_ms_per_turn": 1000 * ingest_s / max(turns, 1),
        "links_per_note": edges_total / max(notes_total, 1),
        "notes": notes_total,
        "recall_p50_ms": {e: 1000 * statistics.median(latencies[e]) for e in expand_modes},
    }


def write_latency(conv: locomo.Conversation, *, workers: bool, dsn: str | None, data_dir: str,
                  embedder: str, linker: dict[str, Any], preload: int = 200,
                  timed: int = 100) -> dict[str, float]:
    """p50 / mean of single ``remember`` calls after ``preload`` turns, workers on
    (``linker`` + evolution, attached) or off."""
    from memfabric.adapters import open_fabric

    kwargs: dict[str, Any] = {"dsn": dsn, "embedder": common.make_embedder(embedder)}
    if dsn is None:
        kwargs["data_dir"] = data_dir
    if workers:
        kwargs |= {"linker": linker, "evolution": {"enabled": True, "max_patches": 8}}
    times = []
    with open_fabric(**kwargs) as fabric:
        notes = fabric.scope(common.new_tenant("links-w"), resource_id=conv.sample_id)
        if workers:
            notes.attach(_Session())
        items = [dict(kind="fact", content=t.content, t_ref=t.when, valid_from=t.when,
                      source_entry_ids=[t.dia_id]) for t in conv.turns]
        common.remember_all(notes, items[:preload])
        for item in items[preload: preload + timed]:
            t0 = time.perf_counter()
            notes.remember(**item)
            times.append(time.perf_counter() - t0)
    return {"p50_ms": 1000 * statistics.median(times), "mean_ms": 1000 * statistics.fmean(times),
            "n": len(times)}


GRID = tuple({"top_k": k, "adjacent": a} for k in (4, 8) for a in (0.0, 0.5))
"""The linker settings cross-validation chooses among (``by="terms"``): ``top_k`` 4 or 8
edges per note, with or without the ``follows`` edge (``adjacent`` 0.5)."""


def choose(off: dict[str, Any], runs: dict[str, dict[str, Any]]) -> str | None:
    """The stated rule: among the settings whose every LoCoMo category (1-5, frac@10) is
    at least the unlinked run's on the choosing half, the one of largest multi-hop frac@10;
    ties: the fewer edges (the earlier in :data:`GRID`). ``None`` (no linker) when none
    qualifies. ``off`` / ``runs[name]``: category → metrics on the choosing half."""
    ok = [name for name, sc in runs.items()
          if all(sc.get(c, {}).get("frac@10", 0.0) >= off[c]["frac@10"] - 1e-9 for c in off if c in locomo.CATEGORIES)]
    if not ok:
        return None
    return max(ok, key=lambda name: (runs[name]["1"]["frac@10"], -list(runs).index(name)))


def cross_validate(convs: Sequence[locomo.Conversation], args: argparse.Namespace, embedder: str,
                   data_dir: str, off: dict[str, Any]) -> list[dict[str, Any]]:
    """Two folds over the dev conversations (first half / second half by order): the
    setting :func:`choose` picks on one half is reported on the other, off vs linker."""
    runs = {}
    for setting in GRID:
        linker = {"enabled": True, "by": args.by, **setting}
        runs[f"top_k={setting['top_k']} adjacent={setting['adjacent']}"] = run(
            convs, linker=linker, dsn=args.dsn, data_dir=data_dir, embedder=embedder, expand_modes=(True,),
            link_weight=args.link_weight)["rankings"][True]
    half = max(1, len(convs) // 2)
    folds = []
    for choose_on, report_on in ((convs[:half], convs[half:]), (convs[half:], convs[:half])):
        score = lambda part, ranking: locomo.json_view(locomo.score_run(part, ranking))  # noqa: E731
        picked = choose(score(choose_on, off), {n: score(choose_on, r) for n, r in runs.items()})
        folds.append({"chosen_on": [c.sample_id for c in choose_on], "reported_on": [c.sample_id for c in report_on],
                      "setting": picked, "off": score(report_on, off),
                      "linker": score(report_on, runs[picked]) if picked else score(report_on, off)})
    return folds


def print_folds(folds: list[dict[str, Any]], embedder: str) -> None:
    for i, f in enumerate(folds, start=1):
        rows = []
        for cat in (*locomo.CATEGORIES, locomo.POOLED):
            b, a = f["off"].get(cat), f["linker"].get(cat)
            if not b:
                continue
            rel = (a["frac@10"] / b["frac@10"] - 1) if b["frac@10"] else None
            rows.append([f"{cat} {locomo.CATEGORY_NAMES[cat]}", b["n"] if "n" in b else "-", b["frac@10"],
                         a["frac@10"], "-" if rel is None else f"{100 * rel:+.1f}%"])
        common.print_table(f"fold {i} ({embedder}): setting chosen on {', '.join(f['chosen_on'])}:"
                           f" {f['setting'] or 'no linker'}; frac@10 on {', '.join(f['reported_on'])}",
                           ["category", "n", "off", "linker", "rel"], rows)


def same_notes_latency(convs: Sequence[locomo.Conversation], args: argparse.Namespace, embedder: str,
                       data_dir: str, linker: dict[str, Any]) -> dict[str, float]:
    """Recall p50 / p95 (ms) on each conversation's notes stored twice in one fabric:
    once with the linker attached (links; recall expands) and once without a session
    (the same notes, no links); the two recalls of a question run back to back,
    alternating which goes first."""
    from memfabric.adapters import open_fabric

    kwargs: dict[str, Any] = {"dsn": args.dsn, "embedder": common.make_embedder(embedder), "linker": linker}
    if args.dsn is None:
        kwargs["data_dir"] = data_dir
    lat: dict[str, list[float]] = {"links": [], "plain": []}
    with open_fabric(**kwargs) as fabric:
        tenant = common.new_tenant("links-lat")
        for conv in convs:
            linked = fabric.scope(tenant, resource_id=f"{conv.sample_id}-links")
            plain = fabric.scope(tenant, resource_id=f"{conv.sample_id}-plain")
            att = linked.attach(_Session())
            locomo.ingest(linked, conv)
            att.detach()
            locomo.ingest(plain, conv)
            for qi, q in enumerate(conv.questions):
                order = (("links", linked), ("plain", plain)) if qi % 2 == 0 else (("plain", plain), ("links", linked))
                for name, notes in order:
                    t0 = time.perf_counter()
                    notes.recall(q.question, top_k=locomo.TOP_K)
                    lat[name].append(time.perf_counter() - t0)
    return _latency_summary(lat)


def scale_latency(args: argparse.Namespace) -> dict[str, float]:
    """Recall p50 / p95 (ms) at ``args.scale`` notes: the queried tenant's notes with
    ``args.scale_links`` edges per note (``bench_recall.add_links``) vs the same notes
    stored again in a tenant without links; ``args.scale_queries`` paraphrase queries,
    ``top_k`` as the conversation part, the two recalls of a query back to back,
    alternating which goes first, after 20 untimed queries."""
    import psycopg  # noqa: PLC0415

    import _bench_common as data  # noqa: PLC0415

    ds = data.make_dataset(args.scale, n_queries=args.scale_queries + 20)
    plain_tenant = data.tenant_name(data.QUERY_TENANT) + "-plain"
    with data.scratch_database(args.dsn, "mf-eval-links") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        lat = _scale_run(args, ds, dsn, plain_tenant)
    return _latency_summary(lat) | {"notes": args.scale + ds.tenants.count(data.QUERY_TENANT)}


def _scale_run(args: argparse.Namespace, ds: Any, dsn: str, plain_tenant: str) -> dict[str, list[float]]:
    """Load, link and time :func:`scale_latency`'s recalls on the database ``dsn``."""
    import bench_recall  # noqa: PLC0415
    import psycopg  # noqa: PLC0415

    import _bench_common as data  # noqa: PLC0415
    from memfabric.adapters import HashEmbedder, open_fabric  # noqa: PLC0415

    warmup = len(ds.queries) - args.scale_queries
    with open_fabric(dsn, embedder=HashEmbedder(), consolidate=False) as fabric:
        bench_recall.load(fabric, ds, 5000)
        again = [ds.texts[r] for r, t in enumerate(ds.tenants) if t == data.QUERY_TENANT]
        fabric.scope(plain_tenant).remember_many([{"kind": "fact", "content": c} for c in again])
        with psycopg.connect(dsn, autocommit=True) as conn:
            bench_recall.add_links(conn, args.scale_links)
            conn.execute("DELETE FROM mf_link_graph WHERE tenant_id = %s", (plain_tenant,))
            conn.execute("VACUUM ANALYZE mf_recall_index")
            conn.execute("VACUUM ANALYZE mf_link_graph")
        scopes = {"links": fabric.scope(data.tenant_name(data.QUERY_TENANT)), "plain": fabric.scope(plain_tenant)}
        lat: dict[str, list[float]] = {"links": [], "plain": []}
        for qi, query in enumerate(ds.queries):
            for name in (("links", "plain") if qi % 2 == 0 else ("plain", "links")):
                t0 = time.perf_counter()
                scopes[name].recall(query, top_k=locomo.TOP_K)
                if qi >= warmup:
                    lat[name].append(time.perf_counter() - t0)
    return lat


def _latency_summary(lat: dict[str, list[float]]) -> dict[str, float]:
    """``{links,plain}_{p50,p95}_ms``, ``ratio_p50`` (links / plain) and ``n`` of
    ``lat`` (seconds per recall, keyed ``links`` / ``plain``)."""
    q = {k: sorted(v) for k, v in lat.items()}
    out = {f"{k}_p50_ms": 1000 * statistics.median(v) for k, v in q.items()}
    out |= {f"{k}_p95_ms": 1000 * v[int(0.95 * (len(v) - 1))] for k, v in q.items()}
    out["ratio_p50"] = out["links_p50_ms"] / out["plain_p50_ms"]
    out["n"] = len(q["links"])
    return out


def print_latency(label: str, same: dict[str, float]) -> None:
    print(f"recall with vs without links, {label} (interleaved, n={same['n']}):"
          f" p50 {same['links_p50_ms']:.2f} vs {same['plain_p50_ms']:.2f} ms ({same['ratio_p50']:.2f}x, goal <= 1.3x),"
          f" p95 {same['links_p95_ms']:.2f} vs {same['plain_p95_ms']:.2f} ms")


def latency_only(convs: Sequence[locomo.Conversation], args: argparse.Namespace,
                 linker: dict[str, Any], embedder: str) -> dict[str, Any]:
    """The two latency parts alone: the same notes with vs without links on the
    conversations, then at ``args.scale`` notes (skipped when 0)."""
    with common.scratch_dir(None) as data_dir:
        same = same_notes_latency(convs, args, embedder, data_dir, linker)
        print_latency(f"same conversation notes ({embedder})", same)
        scale = scale_latency(args) if args.scale else {}
    if scale:
        print_latency(f"{scale['notes']} notes, {args.scale_links} edges per note (hash)", scale)
    return {"same_notes_latency": same, "scale_latency": scale}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=common.default_data_path("locomo-dev", "locomo-dev.json"))
    p.add_argument("--dsn", default=None)
    p.add_argument("--embedder", default="hash",
                   help=f"one of {', '.join(common.EMBEDDERS)}, or several comma-separated"
                   " (each: off vs linker, one run)")
    p.add_argument("--by", choices=("similarity", "terms"), default="terms",
                   help="LinkerSettings.by (default terms: shared rare terms)")
    p.add_argument("--top-k-links", type=int, default=8)
    p.add_argument("--adjacent", type=float, default=0.5,
                   help="LinkerSettings.adjacent: weight of the follows edge to the previous turn (0 = none)")
    p.add_argument("--floor", type=float, default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--link-weight", type=float, default=None, help="Scoring.link_weight (default the library's)")
    p.add_argument("--no-single", action="store_true", help="skip the single-write latency runs")
    p.add_argument("--no-cv", action="store_true", help="skip the two-fold cross-validation of the setting")
    p.add_argument("--scale", type=int, default=100_000,
                   help="notes of the at-scale latency part (default 100000; 0 skips it)")
    p.add_argument("--scale-links", type=int, default=6, help="edges per note at scale (default 6)")
    p.add_argument("--scale-queries", type=int, default=200, help="timed queries at scale (default 200)")
    p.add_argument("--latency-only", action="store_true",
                   help="only the latency parts (same conversation notes, then at --scale notes)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the tenant names and note ids (default 0: every run ranks ties alike)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    common.fixed_ids(args.seed)
    stats = locomo.EvidenceStats()
    convs = locomo.load_conversations(args.data, args.limit, stats)
    linker: dict[str, Any] = {"enabled": True, "top_k": args.top_k_links, "by": args.by,
                              "adjacent": args.adjacent}
    if args.floor is not None:
        linker["floor"] = args.floor
    embedders = [e.strip() for e in args.embedder.split(",") if e.strip()]
    results: dict[str, Any] = {}
    for embedder in embedders:
        if args.latency_only:
            results[embedder] = latency_only(convs, args, linker, embedder)
            args.scale = 0  # the synthetic part uses the hash embedder: once per run
        else:
            results[embedder] = one_embedder(convs, args, linker, embedder)
    common.write_json(args.out, {**results, "args": vars(args) | {"data": str(args.data)}})
    return 0


def one_embedder(convs: Sequence[locomo.Conversation], args: argparse.Namespace,
                 linker: dict[str, Any], embedder: str) -> dict[str, Any]:
    """Off vs linker (and the single-write latency) for one embedder; prints the table."""
    with common.scratch_dir(None) as data_dir:
        off = run(convs, linker=None, dsn=args.dsn, data_dir=data_dir, embedder=embedder,
                  expand_modes=(True,))
        on = run(convs, linker=linker, dsn=args.dsn, data_dir=data_dir, embedder=embedder,
                 expand_modes=(True, False), link_weight=args.link_weight)
        single = {} if args.no_single else {
            name: write_latency(convs[0], workers=flag, dsn=args.dsn, data_dir=data_dir, embedder=embedder,
                                linker=linker) for name, flag in (("off", False), ("workers", True))}
        folds = [] if args.no_cv or len(convs) < 2 else cross_validate(
            convs, args, embedder, data_dir, off["rankings"][True])
        same = same_notes_latency(convs, args, embedder, data_dir, linker)
        scale = scale_latency(args) if args.scale else {}
        args.scale = 0  # the synthetic part uses the hash embedder: once per run
    rows = []
    for cat in (*locomo.CATEGORIES, locomo.POOLED):
        b = off["scores"][True].get(cat, {})
        a = on["scores"][True].get(cat, {})
        n = on["scores"][False].get(cat, {})
        if not b:
            continue
        rel = (a["frac@10"] / b["frac@10"] - 1) if b.get("frac@10") else None
        rows.append([f"{cat} {locomo.CATEGORY_NAMES[cat]}", b["frac@10"], a["frac@10"], n["frac@10"],
                     "-" if rel is None else f"{100 * rel:+.1f}%", b["frac@25"], a["frac@25"]])
    common.print_table(f"LoCoMo frac@10, linker by={args.by} top_k={args.top_k_links} adjacent={args.adjacent}"
                       f" (embedder={embedder})",
                       ["category", "off", "linker", "linker,no-expand", "rel", "off@25", "linker@25"], rows)
    print(f"links per note: {on['links_per_note']:.2f} over {on['notes']} notes")
    print(f"ingest ms/turn: off {off['ingest_ms_per_turn']:.2f}, linker {on['ingest_ms_per_turn']:.2f}")
    print(f"recall p50 ms: off {off['recall_p50_ms'][True]:.2f}, linker+expand {on['recall_p50_ms'][True]:.2f},"
          f" linker no-expand {on['recall_p50_ms'][False]:.2f}")
    if single:
        print(f"single remember after 200 notes, p50 ms: off {single['off']['p50_ms']:.2f},"
              f" linker+evolution attached {single['workers']['p50_ms']:.2f}"
              f" (mean {single['off']['mean_ms']:.2f} / {single['workers']['mean_ms']:.2f})")
    print_latency("same conversation notes (one fabric)", same)
    if scale:
        print_latency(f"{scale['notes']} notes, {args.scale_links} edges per note (hash)", scale)
    print_folds(folds, embedder)
    for part in (off, on):
        part.pop("rankings")
    return {"off": off, "linker": on, "single_remember": single, "folds": folds, "same_notes_latency": same,
            "scale_latency": scale}


if __name__ == "__main__":
    raise SystemExit(main())
