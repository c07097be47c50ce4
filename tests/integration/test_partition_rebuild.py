"""Issue 25: rebuild, verify and reembed one tenant partition
(``ProjectionAdmin.rebuild_partition`` / ``verify_partition``,
``memfabric projections rebuild|verify --partition N | --tenant ID``): the partition's rows
are replaced from its events alone, the other partitions' rows are not rewritten (the
same row versions), writers and readers of other partitions go on meanwhile while the
partition's writers wait, and the tracking stays exactly-once (each of the partition's
tenant rows at its newest event, the floor as it was). ``reembed(partition=)`` embeds one
partition's notes and switches nothing; the final whole ``reembed`` finds them done."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.embedders import HashEmbedder
from memfabric.domain.errors import FabricError
from memfabric.projections import partition_admin, partitions
from memfabric.projections.rebuild import ProjectionAdmin
from tests.conftest import fetch
from tests.integration.test_admin import invoke

TENANTS = [f"t{i}" for i in range(8)]
N = 4


def fill(fab: Fabric, tenants: list[str] = TENANTS) -> None:
    """Notes (a superseding pair, a link), an entity, a working block and a
    conversation in each tenant: rows in every projection a partition rebuild covers."""
    for t in tenants:
        notes = fab.scope(t, "u1", "th")
        notes.entities.upsert("Maria Lopez", type="person", identifiers=[("email", f"maria@{t}.example")])
        notes.remember_many([{"kind": "fact", "content": f"{t} note {i} about topic{i % 3}"} for i in range(4)])
        home = notes.remember(kind="fact", content="Maria Lopez lives in Lisbon")
        notes.remember(kind="fact", content="Maria Lopez moved to Porto")
        notes.remember(kind="fact", content=f"{t} source of a link", links=[{"id": home.id}])
        notes.remember(kind="working", block="persona", content=f"Terse, for {t}.")
        ledger = notes.conversation()
        ledger.append("user", f"hello from {t}")
        ledger.append("assistant", "hi")


def partition_of(dsn: str, tenant: str) -> int:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        return partitions.of_tenant(cur, tenant)


COVERED = ("mf_recall_index", "mf_consolidation", "mf_note_scope", "mf_working_value", "mf_link_graph",
           "mf_retention", "mf_ledger_threads", "mf_note_versions", "mf_link_versions", "mf_entities",
           "mf_entity_keys", "mf_entity_notes")
"""The rebuilt tables with a tenant column (the ledger's entries and observations have none)."""


def row_versions(dsn: str, tenants: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Each covered table's rows of ``tenants`` as (physical location, creating
    transaction, content): equal before and after means not rewritten."""
    out = {}
    for table in COVERED:
        out[table] = fetch(dsn, f"SELECT tableoid::regclass::text, ctid::text, xmin::text, (to_jsonb(t) - 'indexed')::text"  # noqa: S608
                                f" FROM {table} t WHERE tenant_id = ANY(%s) ORDER BY 2, 1", (tenants,))
    return out


def tracking(dsn: str, projection: str = "recall_index") -> dict[str, int]:
    return {str(a): int(n) for a, n in fetch(dsn, f"SELECT application_name, notification_id FROM mf_{projection}_tracking")}  # noqa: S608


def newest(dsn: str, tenant: str) -> int:
    return int(fetch(dsn, "SELECT max(notification_id) FROM memfabric_events WHERE tenant = %s", (tenant,))[0][0])


def damage(dsn: str, tenant: str) -> None:
    """Change one recall row, delete one note version and one conversation entry of ``tenant``."""
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE mf_recall_index SET content = 'damaged' WHERE aggregate_id ="
                     " (SELECT aggregate_id FROM mf_recall_index WHERE tenant_id = %s LIMIT 1)", (tenant,))
        conn.execute("DELETE FROM mf_note_versions WHERE aggregate_id ="
                     " (SELECT aggregate_id FROM mf_note_versions WHERE tenant_id = %s LIMIT 1)", (tenant,))
        conn.execute("DELETE FROM mf_ledger_entries WHERE position = 1 AND aggregate_id ="
                     " (SELECT aggregate_id FROM mf_ledger_threads WHERE tenant_id = %s)", (tenant,))


def broken(reports: list[Any]) -> set[str]:
    return {r.table for r in reports if not r.ok}


@pytest.fixture
def fab(dsn: str) -> Iterator[Fabric]:
    with open_fabric(dsn, partitions=N) as f:
        fill(f)
        yield f


def test_a_partition_rebuild_replaces_its_rows_and_rewrites_no_other(fab: Fabric, dsn: str) -> None:
    mine = partition_of(dsn, "t1")
    inside = [t for t in TENANTS if partition_of(dsn, t) == mine]
    outside = [t for t in TENANTS if t not in inside]
    assert outside and len(inside) < len(TENANTS)
    other = outside[0]
    damage(dsn, "t1")
    damage(dsn, other)
    admin = ProjectionAdmin.for_fabric(fab)
    before = row_versions(dsn, outside)
    floor = tracking(dsn).get("memfabric", 0)
    assert broken(admin.verify_partition(tenant="t1")) == {
        f"mf_recall_index_p{mine}", "mf_note_versions", "mf_ledger_entries"}

    report = admin.rebuild_partition(tenant="t1")

    assert (report.remainder, report.count, report.tenants) == (mine, N, sorted(inside))
    assert "principals" not in report.projections and report.rows["recall_index"] == report.deleted["recall_index"]
    assert row_versions(dsn, outside) == before  # not one row of another partition rewritten
    assert broken(admin.verify_partition(mine)) == set()
    other_reports = admin.verify_partition(tenant=other)  # the other partition keeps its damage
    assert broken(other_reports) == {f"mf_recall_index_p{partition_of(dsn, other)}", "mf_note_versions",
                                     "mf_ledger_entries"}
    assert all(d.key for r in other_reports for d in r.first)
    hits = fab.scope("t1", "u1", "th").recall("t1 note topic1").hits
    assert hits and all(h.content != "damaged" for h in hits)
    rows = tracking(dsn)  # exactly-once: the partition's tenants at their newest event, the floor unchanged
    assert rows.get("memfabric", 0) == floor
    assert {t: rows[f"memfabric|{t}"] for t in inside} == {t: newest(dsn, t) for t in inside}
    assert report.positions == {t: newest(dsn, t) for t in inside}
    fab.scope("t1", "u1", "th").remember(kind="fact", content="t1 writes again after the rebuild")
    admin.rebuild_partition(tenant=other)
    assert all(r.ok for r in admin.verify())


PARTITION_LAYOUT = (
    "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound,"
    " (SELECT count(*) FROM pg_inherits pi WHERE pi.inhparent = p.oid AND pi.inhrelid = c.oid) AS attached,"
    " array(SELECT (ic.relname, x.indisvalid AND x.indisready AND x.indislive,"
    "  EXISTS (SELECT 1 FROM pg_inherits ii WHERE ii.inhrelid = x.indexrelid))::text"
    "  FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid WHERE x.indrelid = c.oid ORDER BY ic.relname) AS indexes,"
    " (SELECT count(*) FROM pg_index px WHERE px.indrelid = p.oid) AS parent_indexes"
    " FROM pg_class p JOIN pg_partitioned_table pt ON pt.partrelid = p.oid"
    " JOIN pg_inherits i ON i.inhparent = p.oid JOIN pg_class c ON c.oid = i.inhrelid"
    " WHERE p.relname = ANY(%s) AND pg_get_expr(c.relpartbound, c.oid) LIKE %s ORDER BY 1")


def test_a_rebuilt_partition_stays_attached_with_the_same_bound_and_valid_indexes(fab: Fabric, dsn: str) -> None:
    mine = partition_of(dsn, "t1")
    layout = lambda: fetch(dsn, PARTITION_LAYOUT, (list(COVERED), f"%remainder {mine})"))  # noqa: E731
    before = layout()
    assert len(before) == 7  # the covered tables partitioned by tenant
    ProjectionAdmin.for_fabric(fab).rebuild_partition(tenant="t1")
    after = layout()
    assert after == before
    for name, bound, attached, indexes, parent_indexes in after:
        assert bound == f"FOR VALUES WITH (modulus {N}, remainder {mine})" and attached == 1, name
        assert len(indexes) == parent_indexes and all(i.endswith(",t,t)") for i in indexes), (name, indexes)


def test_a_partition_rebuild_leaves_recall_rows_outside_the_graph_and_recall_finds_them(
        fab: Fabric, dsn: str) -> None:
    """The rebuilt recall rows land as a writer's do (``indexed = false``, no HNSW
    insertion in the rebuild); a recall through HNSW finds them by the tail's exact scan,
    and the other partitions' index state is untouched."""
    mine = partition_of(dsn, "t1")
    inside = [t for t in TENANTS if partition_of(dsn, t) == mine]
    outside = [t for t in TENANTS if t not in inside]
    state = "SELECT tenant_id, aggregate_id::text, indexed FROM mf_recall_index WHERE tenant_id = ANY(%s) ORDER BY 1, 2"
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE mf_recall_index SET indexed = true")  # every row in the graph, as after a full rebuild
    others = fetch(dsn, state, (outside,))
    ProjectionAdmin.for_fabric(fab).rebuild_partition(tenant="t1")
    rebuilt = fetch(dsn, state, (inside,))
    assert rebuilt and not any(indexed for _, _, indexed in rebuilt)
    assert fetch(dsn, state, (outside,)) == others
    fab.store.exact_search_max = 0  # every tenant recalls through HNSW
    hits = fab.scope("t1", "u1", "th").recall("Maria Lopez Porto").hits
    assert any(h.content == "Maria Lopez moved to Porto" for h in hits)


class Pause:
    """A rebuild's progress sink that stops the rebuild inside its transaction (after
    the partition's rows are deleted, before any is loaded) until :meth:`release`."""

    def __init__(self) -> None:
        self.reached, self.go = threading.Event(), threading.Event()

    def task(self, description: str, total: int | None, unit: str = "events") -> Callable[[int], None]:
        def advance(n: int) -> None:
            self.reached.set()
            assert self.go.wait(60)
        return advance

    def release(self) -> None:
        self.go.set()


def test_other_partitions_write_and_read_while_a_partition_rebuilds(fab: Fabric, dsn: str) -> None:
    mine = partition_of(dsn, "t1")
    other = next(t for t in TENANTS if partition_of(dsn, t) != mine)
    admin = ProjectionAdmin.for_fabric(fab)
    pause, done, blocked = Pause(), {}, {}
    # opened first: an open's idempotent DDL (CREATE INDEX IF NOT EXISTS) waits for the rebuild
    with open_fabric(dsn, lock_timeout=2) as quick:  # a lock wait over 2 s fails the call
        rebuild = threading.Thread(target=lambda: done.update(r=admin.rebuild_partition(tenant="t1", reporter=pause)))
        rebuild.start()
        try:
            assert pause.reached.wait(60)
            t0 = time.perf_counter()
            wrote = quick.scope(other, "u1", "th").remember(kind="fact", content=f"{other} writes during it")
            assert quick.scope(other, "u1", "th").recall("writes during it").hits[0].id == wrote.id
            quick.scope(other, "u1", "th").conversation().append("user", "still talking")
            assert time.perf_counter() - t0 < 2
            during = quick.scope("t1", "u1", "th").recall("t1 note topic1").hits  # the old rows, unblocked
            assert during and all(h.content.startswith("t1 ") for h in during)
            writer = threading.Thread(target=lambda: blocked.update(n=fab.scope("t1", "u1", "th").remember(
                kind="fact", content="t1 writes during its rebuild")))
            writer.start()
            time.sleep(0.5)
            assert writer.is_alive() and "n" not in blocked  # the partition's writer waits at its append
        finally:
            pause.release()
            rebuild.join(60)
        writer.join(60)
    assert done["r"].remainder == mine and blocked["n"].outcome == "inserted"
    assert fab.scope("t1", "u1", "th").recall("writes during its rebuild").hits[0].id == blocked["n"].id
    assert tracking(dsn)["memfabric|t1"] == newest(dsn, "t1")
    assert all(r.ok for r in admin.verify())


def test_deferred_projections_keep_exactly_once_across_a_partition_rebuild(dsn: str) -> None:
    with open_fabric(dsn, partitions=N, inline_projections=False, await_projections=False) as fab:
        fill(fab, TENANTS[:4])
        admin = ProjectionAdmin.for_fabric(fab)
        lag = {s.name: s.lag_events for s in admin.status()}["recall_index"]
        assert lag > 0  # no runner yet: the recall index is behind
        report = admin.rebuild_partition(tenant="t1", names=["recall_index"])
        assert report.projections == ["recall_index"]
        rows = tracking(dsn)  # writers record no recall row here: these are the rebuild's
        assert {t: rows[f"memfabric|{t}"] for t in report.tenants} == {t: newest(dsn, t) for t in report.tenants}
        assert 0 < {s.name: s.lag_events for s in admin.status()}["recall_index"] < lag
        assert fab.scope("t1", "u1", "th").recall("t1 note topic2").hits
        fill(fab, TENANTS[:2])  # more events in the rebuilt partition and others
        pause, done, ran = Pause(), {}, {}
        rebuild = threading.Thread(target=lambda: done.update(r=admin.rebuild_partition(
            tenant="t1", names=["recall_index"], reporter=pause)))
        rebuild.start()
        try:
            assert pause.reached.wait(60)
            runner = threading.Thread(target=lambda: ran.update(p=fab.engine.catch_up()))
            runner.start()
            time.sleep(0.5)  # the runner writes rows of every tenant: it waits for the rebuild
            assert runner.is_alive() and not ran
        finally:
            pause.release()
            rebuild.join(60)
        runner.join(60)
        assert done["r"].remainder == report.remainder and ran["p"]["recall_index"] == newest(dsn, "t1")
        with fab.log.datastore.transaction(commit=False) as cur:  # a catch-up's batch in progress
            fab.engine.lock_exclusive(cur, fab.engine.projections[0])
            late = threading.Thread(target=lambda: done.update(late=admin.rebuild_partition(
                tenant="t1", names=["recall_index"])))
            late.start()
            time.sleep(0.5)
            assert late.is_alive() and "late" not in done  # it waits for the batch to end
        late.join(60)
        assert done["late"].tenants == report.tenants
        assert {s.name: s.lag_events for s in admin.status()}["recall_index"] == 0
        assert all(r.ok for r in admin.verify())


def test_what_a_partition_rebuild_refuses(fab: Fabric, dsn: str) -> None:
    admin = ProjectionAdmin.for_fabric(fab)
    with pytest.raises(FabricError, match="one partition"):
        admin.rebuild_partition()
    with pytest.raises(FabricError, match="one partition"):
        admin.rebuild_partition(1, tenant="t1")
    with pytest.raises(FabricError, match=r"partitions 0\.\.3"):
        admin.verify_partition(N)
    with pytest.raises(FabricError, match="fabric-wide"):
        admin.rebuild_partition(0, names=["principals"])
    assert partition_admin.FABRIC_WIDE == {"principals"}


def test_an_unpartitioned_fabric_is_rebuilt_whole(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="one plain table")
        with pytest.raises(FabricError, match="not partitioned"):
            ProjectionAdmin.for_fabric(fab).rebuild_partition(0)
        with pytest.raises(FabricError, match="not partitioned"):
            fab.reembed("hash", tenant="acme")


def test_the_command_line_rebuilds_and_verifies_one_partition(fab: Fabric, dsn: str) -> None:
    mine = partition_of(dsn, "t3")
    damage(dsn, "t3")
    res: Any = invoke(dsn, "projections", "verify", "--tenant", "t3", "--json")
    assert res.exit_code == 1
    assert {r["table"] for r in json.loads(res.stdout) if not r["ok"]} == {
        f"mf_recall_index_p{mine}", "mf_note_versions", "mf_ledger_entries"}
    res = invoke(dsn, "projections", "rebuild", "--tenant", "t3", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["partition"] == mine and out["partitions"] == N and "t3" in out["tenants"]
    res = invoke(dsn, "projections", "verify", "--partition", str(mine), "-p", "recall_index")
    assert res.exit_code == 0 and "OK" in res.stdout and f"mf_recall_index_p{mine}" in res.stdout
    res = invoke(dsn, "projections", "rebuild", "--partition", "0", "--blue-green")
    assert res.exit_code == 2 and "blue-green" in res.output


def reembedded(dsn: str) -> dict[str, int]:
    """``Reembedded`` events per tenant."""
    rows = fetch(dsn, "SELECT tenant, count(*) FROM memfabric_events WHERE topic LIKE %s GROUP BY tenant",
                 ("%Reembedded",))
    return {str(t): int(n) for t, n in rows}


def with_content(dsn: str, tenants: list[str]) -> int:
    """Notes of ``tenants`` that carry a vector (kinds fact, procedure, file)."""
    return int(fetch(dsn, "SELECT count(*) FROM mf_note_scope WHERE kind IN ('fact', 'procedure', 'file')"
                          " AND tenant_id = ANY(%s)", (tenants,))[0][0])


def test_reembed_one_partition_then_the_rest_with_the_switch(dsn: str) -> None:
    with open_fabric(dsn, partitions=N, embedder=HashEmbedder(256)) as fab:
        fill(fab)
        mine = partition_of(dsn, "t1")
        inside = [t for t in TENANTS if partition_of(dsn, t) == mine]

        first = fab.reembed("hash", tenant="t1")  # HashEmbedder(384), partition of t1 only

        assert (first.partition, first.rebuild, first.already) == (mine, None, 0)
        assert first.notes == with_content(dsn, inside) > 0
        assert reembedded(dsn) == {t: with_content(dsn, [t]) for t in inside}  # no other partition's note
        assert fab.service.embedder.dim == 256  # nothing switched: the fabric serves its embedder
        assert fetch(dsn, "SELECT dim FROM mf_fabric_embedder")[0][0] == 256
        assert fab.reembed("hash", partition=mine).notes == 0  # resumable: nothing twice
        late = fab.scope("t1", "u1", "th").remember(kind="fact", content="t1 writes between the passes")
        assert fab.scope("t1", "u1", "th").recall("writes between the passes").hits[0].id == late.id
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fab).verify())

        rest = fab.reembed("hash")

        assert rest.partition is None and rest.rebuild is not None
        assert rest.already == first.notes and rest.notes == with_content(dsn, TENANTS) - first.notes
        assert reembedded(dsn) == {t: with_content(dsn, [t]) for t in TENANTS}  # one event per note
        assert fetch(dsn, "SELECT dim FROM mf_fabric_embedder")[0][0] == 384
        assert fab.scope("t1", "u1", "th").recall("writes between the passes").hits[0].id == late.id
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fab).verify())


def test_the_command_line_reembeds_one_partition(fab: Fabric, dsn: str) -> None:
    mine = partition_of(dsn, "t2")
    res: Any = invoke(dsn, "reembed", "--embedder", "hash:128", "--partition", str(mine), "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["partition"] == mine and out["notes"] > 0 and out["rebuild_seconds"] == 0.0
    assert set(reembedded(dsn)) == {t for t in TENANTS if partition_of(dsn, t) == mine}
    res = invoke(dsn, "reembed", "--embedder", "hash:128", "--partition", str(N))
    assert res.exit_code == 2 and "partitions 0..3" in res.output
