"""Issue 28 item 3: a deleted event is told apart from a rolled-back write, before and
after the last checkpoint, at a tenant's tail and in its middle: ``audit verify``
reports it (``removed``, ``acknowledged_missing`` or ``miscounted``: the per-tenant
count every committed append keeps, ``adapters/postgres/tenant_heads.py``) and writes no
checkpoint; a rolled-back write stays a gap, not a failure."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.audit import verify_chain
from memfabric.adapters.postgres import tenant_heads
from memfabric.adapters.postgres import schema_stamp
from tests.history import EVENT_TYPES, make_history


def _last_id(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT max(notification_id) FROM memfabric_events").fetchone()
    assert row is not None
    return int(row[0])


def test_deleting_the_last_event_of_the_log_fails_verify(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    n = notes.remember(kind="fact", content="User prefers tea")
    assert verify_chain(fabric).ok
    notes.forget(id=n.id, hold=True)  # the hold's tombstone: the note's and the log's last event
    last = _last_id(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute("DELETE FROM memfabric_events WHERE notification_id = %s", (last,))
    report = verify_chain(fabric)
    assert not report.ok and report.removed == [last], report
    assert report.acknowledged_missing == [("acme", last)] and report.written == 0
    assert not verify_chain(fabric).ok  # never checkpointed away


def test_a_rolled_back_write_is_a_gap_not_a_removal(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    notes.remember(kind="fact", content="User prefers tea")
    with psycopg.connect(dsn) as conn:  # what a rolled-back append leaves: a consumed id
        conn.execute("SELECT nextval(pg_get_serial_sequence('memfabric_events', 'notification_id'))")
    fabric.scope("globex", "u1").remember(kind="fact", content="User prefers coffee")
    report = verify_chain(fabric)
    assert report.ok and report.gaps and report.removed == [] and report.acknowledged_missing == [], report


def test_deleting_one_tenants_last_write_is_named_with_its_tenant(fabric: Fabric, dsn: str) -> None:
    a = fabric.scope("acme", "u1").remember(kind="fact", content="Alice plays the cello")
    fabric.scope("globex", "u1").remember(kind="fact", content="Bob plays the drums")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT max(notification_id) FROM memfabric_events WHERE tenant = 'acme'").fetchone()
        assert row is not None
        conn.execute("DELETE FROM memfabric_events WHERE notification_id = %s", (row[0],))
    report = verify_chain(fabric)
    assert not report.ok and report.acknowledged_missing == [("acme", int(row[0]))], (report, a.id)


def _event_rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT notification_id, originator_id, originator_version, topic, state, tenant"
                            " FROM memfabric_events ORDER BY notification_id").fetchall()


def _restore(dsn: str, row: tuple[Any, ...]) -> None:
    """Put a deleted event row back as it was, past the counting trigger (as a restore
    from a backup would: the count already holds it)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("INSERT INTO memfabric_events (notification_id, originator_id, originator_version, topic,"
                     " state, tenant) VALUES (%s, %s, %s, %s, %s, %s)", row)


def _kind(topic: str) -> str:
    return topic.rsplit(".", 1)[-1]


def test_deleting_any_kind_of_event_before_or_after_the_last_checkpoint_fails_verify(
        fabric: Fabric, dsn: str) -> None:
    make_history(fabric, "acme")
    first = verify_chain(fabric)
    assert first.ok and first.written
    checkpointed = first.head
    make_history(fabric, "initech")  # every kind again, after the last checkpoint
    assert verify_chain(fabric, checkpoint=False).ok
    rows = _event_rows(dsn)
    newest = {tenant: nid for nid, *_, tenant in rows}  # each tenant's last event
    picks: dict[tuple[str, str], tuple[Any, ...]] = {}
    for row in rows:
        nid, kind = row[0], _kind(row[3])
        if nid <= checkpointed:
            picks.setdefault(("checkpointed", kind), row)
        elif nid != newest[row[5]]:
            picks.setdefault(("tail, in the middle of its tenant", kind), row)
    tail_rows = [r for r in rows if r[0] > checkpointed and r[0] == newest[r[5]]]
    assert tail_rows
    picks[("tail, its tenant's last event", _kind(tail_rows[0][3]))] = tail_rows[0]
    assert {kind for where, kind in picks if where != "tail, its tenant's last event"} >= EVENT_TYPES
    for (where, kind), row in sorted(picks.items()):
        with psycopg.connect(dsn) as conn:
            conn.execute("DELETE FROM memfabric_events WHERE notification_id = %s", (row[0],))
        report = verify_chain(fabric)
        assert not report.ok and report.written == 0, (where, kind, report)
        if row[0] <= checkpointed:
            assert row[0] in report.removed, (where, kind, report)
        else:  # after the last checkpoint: counted, never taken for a rolled-back write
            assert (row[5], sum(r[5] == row[5] for r in rows) - 1, sum(r[5] == row[5] for r in rows)) \
                in report.miscounted, (where, kind, report)
        _restore(dsn, row)
        assert verify_chain(fabric, checkpoint=False).ok, (where, kind)


def test_a_rolled_back_append_leaves_a_gap_and_every_count_as_it_was(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    notes.remember(kind="fact", content="User prefers tea")
    row = _event_rows(dsn)[-1]
    with psycopg.connect(dsn) as conn, conn.transaction(force_rollback=True):
        conn.execute("INSERT INTO memfabric_events (originator_id, originator_version, topic, state, tenant)"
                     " VALUES (%s, %s, %s, %s, %s)", (row[1], 99, row[3], row[4], "acme"))
        assert conn.execute("SELECT events FROM mf_tenant_heads WHERE tenant = 'acme'").fetchone() == (2,)
    notes.remember(kind="fact", content="User plays chess on Sundays")
    report = verify_chain(fabric)
    assert report.ok and report.gaps and report.miscounted == [], report


def test_rows_inserted_past_the_append_are_reported(fabric: Fabric, dsn: str) -> None:
    fabric.scope("acme", "u1").remember(kind="fact", content="User prefers tea")
    assert verify_chain(fabric).ok
    row = _event_rows(dsn)[-1]
    _restore(dsn, (row[0] + 5, row[1], 7, row[3], row[4], "acme"))  # a copied row, no count
    report = verify_chain(fabric)
    assert not report.ok and report.miscounted == [("acme", 2, 1)] and report.written == 0, report


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_log_from_before_the_counts_is_counted_on_open(dsn: str, partitions: int) -> None:
    with open_fabric(dsn, partitions=partitions) as fab:
        make_history(fab, "acme")
        fab.scope("globex", "u2").remember_many([{"kind": "fact", "content": f"User owns {i} cats"}
                                                for i in range(40)])
    with psycopg.connect(dsn) as conn:
        counted = dict(conn.execute("SELECT tenant, events FROM mf_tenant_heads").fetchall())
        found = dict(conn.execute("SELECT tenant, count(*) FROM memfabric_events GROUP BY tenant").fetchall())
        assert counted == found and set(found) == {"acme", "globex"}
        conn.execute(f"DROP TRIGGER {tenant_heads.TRIGGER} ON memfabric_events")  # what an older release made
        conn.execute(f"DROP TABLE {tenant_heads.HEADS_TABLE}")
        schema_stamp.clear(conn)  # and no stamp of this code
    with open_fabric(dsn) as fab:
        assert verify_chain(fab).ok
        fab.scope("acme", "u1").remember(kind="fact", content="User moved to Lisbon")
        assert verify_chain(fab).ok
    with psycopg.connect(dsn) as conn:
        counted = dict(conn.execute("SELECT tenant, events FROM mf_tenant_heads").fetchall())
        assert counted == dict(conn.execute("SELECT tenant, count(*) FROM memfabric_events GROUP BY tenant"))
