"""Issue 24: a unit of work of thousands of notes (``remember_many(chunk_size=None)``,
past the row statement's parameter limit and the recall index's bulk size) writes
them table by table, and the projections equal a rebuild from the log."""

from __future__ import annotations

from memfabric.adapters import Fabric, ProjectionAdmin
from tests.conftest import fetch


def test_a_large_import_in_one_unit_of_work(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "importer")
    items = [{"kind": "fact", "content": f"imported fact {i} about part {i * 7}"} for i in range(2100)]
    got = notes.remember_many(items, chunk_size=None, consolidate=False)
    assert len(got) == 2100 and len({n.id for n in got}) == 2100
    assert fetch(dsn, "SELECT count(*) FROM mf_recall_index WHERE tenant_id = 'acme'") == [(2100,)]
    assert [h.content for h in notes.recall("imported fact 1234").hits][:1] == ["imported fact 1234 about part 8638"]
    reports = ProjectionAdmin.for_fabric(fabric).verify()
    assert reports and all(r.ok for r in reports), [r for r in reports if not r.ok]
