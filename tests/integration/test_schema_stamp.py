"""Issue 24: an open by the code that made the schema runs no DDL, so it waits for no
write and stalls none (``memfabric.adapters.postgres.schema_stamp``)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from memfabric.adapters import open_fabric
from memfabric.adapters.postgres import schema_stamp, tenant_heads


def _trigger_present(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname = %s", (tenant_heads.TRIGGER,)).fetchone()
    return bool(row and row[0])


def test_an_open_neither_waits_for_in_flight_writes_nor_blocks_them(dsn: str) -> None:
    """Every table held in ``ROW EXCLUSIVE`` mode, as in-flight writes hold it: a second
    open (lock timeout 2 s) opens and writes. Before the stamp, its ``CREATE INDEX IF NOT
    EXISTS`` waited for the holder (eventsourcing's own with no timeout at all)."""
    with open_fabric(dsn) as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="Alice lives in Lisbon")
    holder = psycopg.connect(dsn)
    try:
        names = [r[0] for r in holder.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for name in names:
            holder.execute(f'LOCK TABLE "{name}" IN ROW EXCLUSIVE MODE')  # noqa: S608
        outcome: dict[str, Any] = {}

        def second_open() -> None:
            try:
                with open_fabric(dsn, lock_timeout=2) as again:
                    outcome["id"] = again.scope("globex", "u2").remember(kind="fact", content="Bob likes tea").id
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = exc

        opener = threading.Thread(target=second_open, daemon=True)
        opener.start()
        opener.join(30)
        hung = opener.is_alive()
    finally:
        holder.rollback()
        holder.close()
    if hung:
        opener.join(30)
    assert not hung, "the open waited for the in-flight writes"
    assert "error" not in outcome, outcome.get("error")
    assert outcome["id"] is not None and len(names) > 20


def test_the_stamp_skips_the_ddl_until_cleared(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="Alice lives in Lisbon")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert schema_stamp.stamped(conn) == schema_stamp.fingerprint(partitions=1, dim=384)
        conn.execute(f"DROP TRIGGER {tenant_heads.TRIGGER} ON memfabric_events")  # behind memfabric's back
    with open_fabric(dsn):
        pass
    assert not _trigger_present(dsn)  # this code's stamp: no DDL ran
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema_stamp.clear(conn)
        assert schema_stamp.stamped(conn) is None
    with open_fabric(dsn):
        pass
    assert _trigger_present(dsn)


def test_other_code_runs_the_ddl_phase_and_stamps_it(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed DDL module (another release) changes the fingerprint: its first open
    migrates as before, then records its own stamp."""
    with open_fabric(dsn):
        pass
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TRIGGER {tenant_heads.TRIGGER} ON memfabric_events")
    monkeypatch.setattr(schema_stamp, "code_fingerprint", lambda: "another-release")
    with open_fabric(dsn):
        pass
    assert _trigger_present(dsn)
    with psycopg.connect(dsn) as conn:
        assert schema_stamp.stamped(conn) == "another-release/p1/d384"

