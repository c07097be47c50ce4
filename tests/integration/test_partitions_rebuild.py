"""Issue 25: rebuild, verify and reembed on a fabric created with ``partitions=4`` keep
its layout (a blue-green rebuild's shadow tables are partitioned like the live ones, and
their partitions take the live names at the switch) and give identical projections."""

from __future__ import annotations

import psycopg

from memfabric.adapters import open_fabric
from memfabric.adapters.embedders import HashEmbedder
from memfabric.projections import partitions, tables
from memfabric.projections.rebuild import ProjectionAdmin
from tests.conftest import fetch
from tests.integration.test_partitions import PARTITIONED, layout

TENANTS = [f"t{i}" for i in range(6)]


def _fill(fab: object, n: int = 8) -> None:
    for t in TENANTS:
        notes = fab.scope(t, "u1")  # type: ignore[attr-defined]
        notes.remember_many([{"kind": "fact", "content": f"{t} note {i} about topic{i % 3}"} for i in range(n)])
        target = notes.remember(kind="fact", content=f"{t} target of a link")
        notes.remember(kind="fact", content=f"{t} source of a link", links=[{"id": target.id}])


def _names(dsn: str) -> list[str]:
    """Every table and partition of the fabric's partitioned tables, by name."""
    rows = fetch(dsn, "SELECT c.relname FROM pg_class c WHERE c.relkind IN ('r', 'p')"
                      " AND c.relname LIKE ANY(%s) ORDER BY 1", ([t + "%" for t in PARTITIONED],))
    return [str(r[0]) for r in rows]


def test_rebuilds_keep_the_partitions_and_verify(dsn: str) -> None:
    with open_fabric(dsn, partitions=4) as fab:
        _fill(fab)
        admin = ProjectionAdmin.for_fabric(fab)
        assert all(r.ok for r in admin.verify())
        before = _names(dsn)
        assert admin.rebuild().events > 0  # in place
        for _ in range(2):  # the second one needs the first's partition names freed
            admin.rebuild(blue_green=True)
            assert layout(dsn) == dict.fromkeys(PARTITIONED, 4)
            assert _names(dsn) == before  # <table>_p<i>, nothing *_bg* left behind
            assert all(r.ok for r in admin.verify())
        hits = fab.scope("t2", "u1").recall("t2 note topic1").hits
        assert hits and all(h.content.startswith("t2 ") for h in hits)
    assert _names(dsn) == before  # verify's scratch tables are gone too


def test_the_shadow_tables_are_partitioned_like_the_live_ones(dsn: str) -> None:
    with open_fabric(dsn, partitions=4) as fab:
        _fill(fab, 2)
        with psycopg.connect(dsn) as conn, conn.cursor() as cur:
            for p in fab.engine.projections:  # type: ignore[attr-defined]
                p.create(cur, table_suffix="_bg")
            found = {t: partitions.count(cur, t + "_bg") for t in PARTITIONED if t != tables.EVENTS}
            conn.rollback()
    assert found == dict.fromkeys(found, 4) and len(found) == len(PARTITIONED) - 1


def test_reembed_keeps_the_partitions(dsn: str) -> None:
    with open_fabric(dsn, partitions=4, embedder=HashEmbedder(256), consolidate=False) as fab:
        _fill(fab, 5)
    with open_fabric(dsn) as fab:
        report = fab.reembed("hash")  # HashEmbedder(384)
        assert report.notes == len(TENANTS) * 7
        assert layout(dsn) == dict.fromkeys(PARTITIONED, 4)
        dims = fetch(dsn, "SELECT c.relname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
                          " JOIN pg_class c ON c.oid = a.attrelid WHERE a.attname = 'embedding'"
                          " AND c.relname LIKE 'mf_recall_index%%'")
        assert dims and {d for _, d in dims} == {"vector(384)"}  # the parent and each partition
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fab).verify())
        hits = fab.scope("t4", "u1").recall("t4 note topic2").hits
        assert hits and all(h.content.startswith("t4 ") for h in hits)
