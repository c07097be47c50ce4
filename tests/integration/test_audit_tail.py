"""Issue 28 item 3: a deleted event at the log's tail (a note's last event, the last row
of the log) is told apart from a rolled-back write: ``audit verify`` reports it as
removed and writes no checkpoint; a rolled-back write stays a gap, not a failure."""

from __future__ import annotations

import psycopg

from memfabric.adapters import Fabric
from memfabric.adapters.audit import verify_chain


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
