"""Issue 24, round 3 session 2: a plain ``remember`` is six statements (BEGIN, the scope
locks, the tenant lock, the append, the batched rows with the tracking, COMMIT), plus
the note-versions projection's own (issue 31), in one pipeline Sync; a failure at that
Sync rolls the whole write back and leaves the pooled connection usable; the batched
rows equal a rebuild from the log."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg import _pipeline_base

from memfabric.adapters import Fabric, ProjectionAdmin
from memfabric.domain.errors import TrackingError
from tests.conftest import event_count, fetch
from tests.history import make_history


def test_a_plain_remember_is_six_statements_and_one_sync(dsn: str) -> None:
    from memfabric.adapters import open_fabric
    with open_fabric(dsn, consolidate=False) as fab:
        notes = fab.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="warm the pool and the statement caches")
        with pytest.MonkeyPatch.context() as mp:
            seen: Counter[str] = Counter()
            execute, sync = psycopg.Cursor.execute, _pipeline_base.BasePipeline._enqueue_sync  # noqa: SLF001

            writer = threading.current_thread()  # (not the recall tail's indexer)

            def counted_execute(self: Any, *a: Any, **k: Any) -> Any:
                seen["statements"] += threading.current_thread() is writer
                return execute(self, *a, **k)

            def counted_sync(self: Any) -> None:
                seen["syncs"] += 1
                sync(self)
            mp.setattr(psycopg.Cursor, "execute", counted_execute)
            executemany = psycopg.Cursor.executemany

            def counted_executemany(self: Any, query: Any, params: Any, **k: Any) -> Any:
                params = list(params)
                seen["statements"] += len(params)
                seen["versions"] += len(params) if b"mf_note_versions" in bytes(query if isinstance(
                    query, bytes) else str(query).encode()) else 0
                return executemany(self, query, params, **k)
            mp.setattr(psycopg.Cursor, "executemany", counted_executemany)
            mp.setattr(_pipeline_base.BasePipeline, "_enqueue_sync", counted_sync)
            got = notes.remember(kind="fact", content="the build server is in Frankfurt")
        # six of the write path, and the versions projection's own (issue 31: close the
        # open version, insert the new one), each a statement of its own
        assert seen["syncs"] == 1 and seen["statements"] - seen["versions"] == 6, seen
        assert seen["versions"] <= 2, seen
        assert [h.id for h in notes.recall("build server Frankfurt").hits][:1] == [got.id]


def test_a_failure_at_the_sync_rolls_the_write_back_and_the_pool_goes_on(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="the first note commits")
    before = event_count(dsn)
    engine = fabric.engine  # type: ignore[attr-defined]
    row = engine.tenant_row("acme")
    tracking = [p.name for p in engine.inline(all_projections=True)]
    with psycopg.connect(dsn, autocommit=True) as conn:  # a tracking row ahead: the check must fail
        conn.execute(f'UPDATE "mf_{tracking[0]}_tracking" SET notification_id = notification_id + 100'  # noqa: S608
                     " WHERE application_name = %s", (row,))
    with pytest.raises(TrackingError, match="failed to record tracking of"):
        notes.remember(kind="fact", content="this write must not survive")
    assert event_count(dsn) == before
    assert fetch(dsn, "SELECT count(*) FROM mf_note_keys") == [(1,)]
    assert fetch(dsn, "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%%'") == [(0,)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'UPDATE "mf_{tracking[0]}_tracking" SET notification_id = notification_id - 100'  # noqa: S608
                     " WHERE application_name = %s", (row,))
    for i in range(4):  # every pooled connection is usable again
        notes.remember(kind="fact", content=f"note {i} after the failure commits")
    assert event_count(dsn) == before + 4
    assert len(notes.list().items) == 5


def test_rows_written_batched_equal_a_rebuild_from_the_log(fabric: Fabric) -> None:
    make_history(fabric)  # facts, folds, supersessions, working blocks, links, forgets
    reports = ProjectionAdmin.for_fabric(fabric).verify()
    assert reports and all(r.ok for r in reports), [r for r in reports if not r.ok]


def test_a_unit_of_work_left_without_commit_keeps_the_prepared_statements(fabric: Fabric) -> None:
    """A unit of work that writes nothing (the second, identical ``define``) rolls back;
    the pooled connection's prepared statements must stay usable (a ``ROLLBACK`` sent as
    a pipeline statement made psycopg drop its cache and deallocate the server's later:
    "prepared statement _pg3_N does not exist" on a following read)."""
    profile = {"read_kinds": ["fact"], "recall_scope": ["acme/u1/*"]}
    fabric.principals.define("bot", profile)  # type: ignore[attr-defined]
    fabric.principals.define("bot", profile)  # type: ignore[attr-defined] - writes nothing
    notes = fabric.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="the units are metric")
    bot = notes.as_principal("bot")
    for _ in range(12):  # every pooled connection serves a few of these reads
        assert [h.content for h in bot.recall("units").hits] == ["the units are metric"]
        assert len(notes.recall("units").hits) == 1
