"""Issue 24: the HNSW index off the durable write. A write's recall-index row joins the
unindexed tail; recall through HNSW scans the tail exactly, so it never misses an
acknowledged write; the tail indexer puts the rows into the graph in the background."""

from __future__ import annotations

import time

import psycopg
import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.projections import recall_index, recall_tail
from memfabric.projections.rebuild import ProjectionAdmin
from memfabric.adapters.postgres import schema_stamp
from tests.conftest import fetch

FACTS = [f"Project {w} ships on day {i} with {c} reviewers" for i, (w, c) in
         enumerate(zip(["apollo", "borealis", "cygnus", "draco", "eridanus", "fornax", "gemini", "hydra"],
                       ["two", "three", "four", "five", "six", "seven", "eight", "nine"], strict=True))]


def tail(dsn: str, tenant: str = "acme") -> int:
    with psycopg.connect(dsn) as conn:
        return recall_tail.tail_size(conn.cursor(), recall_index.TABLE, tenant)


def through_hnsw(fabric: Fabric, *, background: bool) -> None:
    """Every tenant's recall through HNSW (not the small-tenant exact scan)."""
    fabric.store.exact_search_max = 0
    if not background:
        fabric.store.tail.close()  # the indexer runs only when the test says so


def test_recall_reads_the_unindexed_tail_then_the_graph(fabric: Fabric, dsn: str) -> None:
    through_hnsw(fabric, background=False)
    notes = fabric.scope("acme", "u1", "t1")
    written = [notes.remember(kind="fact", content=c) for c in FACTS]
    assert tail(dsn) == len(FACTS)  # the commit did not put them into the graph
    for note, content in zip(written, FACTS, strict=True):  # read-your-writes from the tail
        assert notes.recall(content, top_k=3).hits[0].id == note.id
    assert fabric.store.tail.run_once(["acme"]) == len(FACTS)
    assert tail(dsn) == 0
    for note, content in zip(written, FACTS, strict=True):  # now from the graph
        assert notes.recall(content, top_k=3).hits[0].id == note.id
    again = notes.remember(kind="fact", content=FACTS[0])  # a fold rewrites the row: back to the tail
    assert again.outcome == "folded" and tail(dsn) == 1
    assert notes.recall(FACTS[0], top_k=3).hits[0].id == written[0].id


def test_the_vector_list_uses_the_partial_hnsw_index(fabric: Fabric, dsn: str) -> None:
    through_hnsw(fabric, background=False)
    notes = fabric.scope("acme", "u1", "t1")
    for c in FACTS:
        notes.remember(kind="fact", content=c)
    fabric.store.tail.run_once(["acme"])
    rows = fetch(dsn, "SELECT indexdef FROM pg_indexes WHERE indexname = 'mf_recall_index_hnsw'")
    assert rows and "WHERE indexed" in str(rows[0][0])
    with psycopg.connect(dsn) as conn:
        conn.execute("SET enable_seqscan = off; SET enable_sort = off")  # a tiny table: force the ordering
        vector = conn.execute("SELECT embedding::text FROM mf_recall_index LIMIT 1").fetchone()[0]  # type: ignore[index]
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT aggregate_id FROM mf_recall_index WHERE tenant_id = 'acme' AND indexed"
            " ORDER BY embedding <=> %s::vector LIMIT 5", (vector,)).fetchall())
    assert "mf_recall_index_hnsw" in plan


def test_projections_verify_ignores_the_index_state(fabric: Fabric, dsn: str) -> None:
    through_hnsw(fabric, background=False)
    notes = fabric.scope("acme", "u1", "t1")
    for c in FACTS:
        notes.remember(kind="fact", content=c)
    fabric.store.tail.run_once(["acme"])
    notes.remember(kind="fact", content="A note still in the tail")
    assert tail(dsn) == 1
    reports = ProjectionAdmin.for_fabric(fabric).verify("recall_index")
    assert reports and all(r.ok for r in reports), reports


def test_the_background_indexer_empties_a_large_tenants_tail(fabric: Fabric, dsn: str) -> None:
    through_hnsw(fabric, background=True)
    notes = fabric.scope("acme", "u1", "t1")
    for c in FACTS:
        notes.remember(kind="fact", content=c)
    deadline = time.monotonic() + 20
    while tail(dsn) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tail(dsn) == 0 and fabric.store.tail.indexed >= len(FACTS)
    assert fabric.store.tail.last_error is None


def test_a_tenant_searched_exactly_never_pays_for_the_graph(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1", "t1")  # default exact_search_max: 20,000 notes
    for c in FACTS:
        notes.remember(kind="fact", content=c)
    time.sleep(1.5)  # three indexer intervals
    assert tail(dsn) == len(FACTS) and fabric.store.tail.indexed == 0
    assert notes.recall(FACTS[3], top_k=3).hits[0].content == FACTS[3]


def test_writes_to_a_tenant_searched_exactly_send_the_indexer_no_wake_up(fabric: Fabric, dsn: str) -> None:
    indexer = fabric.store.tail
    notes = fabric.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content=FACTS[0])
    assert indexer.run_once(["acme"]) == 0  # what the woken thread does: the size is counted (1 note)
    wakes = indexer.wakes
    for c in FACTS[1:]:
        notes.remember(kind="fact", content=c)
    assert indexer.wakes == wakes  # known exact (cached): no thread switch, no pool checkout per write
    fabric.store.exact_search_max = 0  # the same cached size now says HNSW: its writes wake the indexer
    notes.remember(kind="fact", content="One more note for the graph")
    assert indexer.wakes == wakes + 1
    deadline = time.monotonic() + 20
    while tail(dsn) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tail(dsn) == 0


def test_a_table_made_before_the_tail_migrates_on_open(dsn: str) -> None:
    with open_fabric(dsn) as fabric:
        first = fabric.scope("acme", "u1", "t1").remember(kind="fact", content=FACTS[0])
    with psycopg.connect(dsn, autocommit=True) as conn:  # the layout before issue 24
        conn.execute("ALTER TABLE mf_recall_index DROP COLUMN indexed")
        conn.execute("CREATE INDEX mf_recall_index_hnsw ON mf_recall_index"
                     " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)")
        schema_stamp.clear(conn)  # an older release's schema: no stamp of this code
    with open_fabric(dsn) as fabric:
        through_hnsw(fabric, background=False)
        notes = fabric.scope("acme", "u1", "t1")
        second = notes.remember(kind="fact", content=FACTS[1])
        state = dict(fetch(dsn, "SELECT note_id, indexed FROM mf_recall_index"))
        assert state == {first.id: True, second.id: False}
        assert notes.recall(FACTS[0], top_k=2).hits[0].id == first.id
        assert notes.recall(FACTS[1], top_k=2).hits[0].id == second.id
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fabric).verify("recall_index"))


@pytest.mark.parametrize("partitions", [4])
def test_the_tail_on_a_partitioned_layout(pg_server: str, dsn: str, partitions: int) -> None:
    with open_fabric(dsn, partitions=partitions) as fabric:
        through_hnsw(fabric, background=False)
        for tenant in ("acme", "globex"):
            notes = fabric.scope(tenant, "u1", "t1")
            for c in FACTS[:4]:
                notes.remember(kind="fact", content=f"{tenant}: {c}")
        assert tail(dsn, "acme") == 4 and tail(dsn, "globex") == 4
        assert fabric.store.tail.run_once(["acme"]) == 4
        assert tail(dsn, "acme") == 0 and tail(dsn, "globex") == 4
        hits = fabric.scope("globex", "u1", "t1").recall(f"globex: {FACTS[2]}", top_k=2).hits
        assert hits[0].content == f"globex: {FACTS[2]}"


def test_the_indexer_thread_ends_when_idle_and_a_write_starts_it_again(fabric: Fabric, dsn: str) -> None:
    through_hnsw(fabric, background=True)
    indexer = fabric.store.tail
    indexer.idle_exit, indexer.interval = 0.3, 0.05
    notes = fabric.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content=FACTS[0])
    deadline = time.monotonic() + 10
    while indexer._thread is not None and time.monotonic() < deadline:  # noqa: SLF001 - the thread's lifetime
        time.sleep(0.05)
    assert indexer._thread is None and tail(dsn) == 0  # noqa: SLF001
    notes.remember(kind="fact", content=FACTS[1])
    while tail(dsn) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tail(dsn) == 0 and indexer.indexed == 2
