"""Issue 18's write-path changes on real PostgreSQL: the tracking rows of every projection
in one statement (still refusing to move back), the inferred key as plain columns (and
the move from issue 12's jsonb column), link rows of new notes, recall in one statement."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError

from memfabric.adapters import Fabric, open_fabric
from memfabric.projections import consolidation_index
from memfabric.adapters.postgres import schema_stamp
from tests.conftest import fetch


def _engine(fabric: Fabric) -> Any:
    return fabric.engine  # type: ignore[attr-defined]


def test_one_statement_records_every_projection_and_refuses_to_move_back(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1")
    notes.remember(kind="fact", content="the build server is in Frankfurt")
    engine = _engine(fabric)
    head = engine.head()
    inline = engine.inline(all_projections=True)
    assert len(inline) >= 3
    assert {p.name: engine.position(p.name) for p in inline} == {p.name: head for p in inline}
    with engine.datastore.transaction(commit=False) as cur:
        with pytest.raises(IntegrityError, match="failed to record tracking"):
            engine._record_all(cur, head - 1, inline, "acme")  # noqa: SLF001 - the statement under test
    with engine.datastore.transaction(commit=False) as cur:
        engine._record_all(cur, head + 5, inline, "acme")  # noqa: SLF001
        assert engine._tenant_positions(cur, inline, "acme") == {p.name: head + 5 for p in inline}  # noqa: SLF001
        assert engine._tenant_positions(cur, inline, "other") == {p.name: 0 for p in inline}  # noqa: SLF001
    # that transaction rolled back: the positions are unchanged
    with engine.datastore.transaction(commit=False) as cur:
        assert engine._tenant_positions(cur, inline, "acme") == {p.name: head for p in inline}  # noqa: SLF001
    assert {p.name: engine.position(p.name) for p in inline} == {p.name: head for p in inline}


def test_inferred_key_is_stored_as_plain_columns(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    notes.remember(kind="fact", content="Alice lives in Berlin")
    rows = fetch(dsn, "SELECT inferred_key, inferred_entity, inferred_attribute, inferred_value,"
                      " inferred_polarity, inferred_single FROM mf_consolidation")
    assert rows == [("alice|residence", "alice", "residence", "berlin", True, True)]
    cols = {r[0] for r in fetch(dsn, "SELECT column_name FROM information_schema.columns"
                                     " WHERE table_name = 'mf_consolidation'")}
    assert "inferred" not in cols
    assert notes.remember(kind="fact", content="Alice moved to Munich").outcome == "superseding"


def test_jsonb_inferred_column_of_issue_12_is_moved_into_the_columns(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="Alice lives in Berlin")
    with psycopg.connect(dsn) as conn:  # lay the table out as issue 12's first release did
        conn.execute("ALTER TABLE mf_consolidation ADD COLUMN inferred jsonb")
        conn.execute("UPDATE mf_consolidation SET inferred = jsonb_build_object('key', inferred_key,"
                     " 'entity', inferred_entity, 'attribute', inferred_attribute, 'value', inferred_value,"
                     " 'rule', inferred_rule, 'polarity', true, 'single_valued', true, 'previous', null)")
        for c, _ in consolidation_index.INFERRED_COLUMNS:
            conn.execute(f"ALTER TABLE mf_consolidation DROP COLUMN {c}")
        schema_stamp.clear(conn)  # an older release's schema: no stamp of this code
    with open_fabric(dsn) as fab:  # create() migrates
        rows = fetch(dsn, "SELECT inferred_entity, inferred_attribute, inferred_value FROM mf_consolidation")
        assert rows == [("alice", "residence", "berlin")]
        cols = {r[0] for r in fetch(dsn, "SELECT column_name FROM information_schema.columns"
                                         " WHERE table_name = 'mf_consolidation'")}
        assert "inferred" not in cols
        moved = fab.scope("acme", "u1").remember(kind="fact", content="Alice moved to Munich")
        assert moved.outcome == "superseding"


def test_new_note_without_links_writes_no_edge_and_linked_notes_keep_theirs(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    a = notes.remember(kind="fact", content="the staging database runs PostgreSQL 18")
    assert fetch(dsn, "SELECT count(*) FROM mf_link_graph") == [(0,)]
    b = notes.remember(kind="fact", content="staging backups run nightly", links=[{"id": a.id}])
    assert fetch(dsn, "SELECT from_note_id, to_note_id FROM mf_link_graph") == [(b.id, a.id)]
    notes.forget(id=b.id)
    assert fetch(dsn, "SELECT count(*) FROM mf_link_graph") == [(0,)]


@pytest.mark.parametrize("exact_search_max", [0, 20_000], ids=["hnsw", "exact"])
def test_recall_is_one_statement_outside_a_transaction(dsn: str, exact_search_max: int) -> None:
    with open_fabric(dsn) as fab:
        fab.store.exact_search_max = exact_search_max  # type: ignore[attr-defined]
        notes = fab.scope("acme", "u1")
        notes.remember_many([{"kind": "fact", "content": f"server {i} runs in rack {i % 7}"} for i in range(40)])
        fab.scope("other", "u1").remember_many([{"kind": "fact", "content": f"server {i} of other"}
                                                for i in range(200)])
        seen: list[tuple[int, str]] = []
        orig = psycopg.Cursor.execute

        def spy(self: Any, query: Any, *a: Any, **k: Any) -> Any:
            text = query if isinstance(query, str) else repr(query)
            kind = ("SET" if "SET hnsw" in text else "LINKS" if "array_agg(g.to_note_id" in text
                    else "WITH" if "WITH" in text else text)
            seen.append((id(self.connection), kind))
            return orig(self, query, *a, **k)
        notes.recall("server rack", top_k=10, mode="vector")  # the tenant's size is counted once
        psycopg.Cursor.execute = spy  # type: ignore[method-assign]
        try:
            for _ in range(6):
                hits = notes.recall("server rack", top_k=10, mode="vector").hits
                assert len(hits) == 10 and all("other" not in h.content for h in hits)
        finally:
            psycopg.Cursor.execute = orig  # type: ignore[method-assign]
        kinds = [k for _, k in seen]
        # the candidates in one statement, the hits' link edges in a second (issue 29)
        assert kinds.count("WITH") == 6 and kinds.count("LINKS") == 6, kinds
        assert set(kinds) <= {"WITH", "LINKS", "SET"}, kinds
        # the HNSW settings are sent at most once per pooled connection, never for exact search
        sets = [c for c, k in seen if k == "SET"]
        assert len(sets) == len(set(sets))
        if exact_search_max > 0:
            assert not sets
