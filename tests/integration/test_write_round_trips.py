"""Issue 24: a plain ``remember`` is one round trip: six statements (BEGIN, the scope
locks, the tenant lock, the keys and the append, the batched rows with the tracking,
COMMIT) buffered on the unit of work's wire (``adapters/postgres/wire.py``) and sent with
one Sync, none through a psycopg cursor; a failure at that Sync rolls the whole write
back and leaves the pooled connection usable; the batched rows equal a rebuild from
the log."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import psycopg
import pytest

from memfabric.adapters import Fabric, ProjectionAdmin
from memfabric.adapters.postgres import wire
from memfabric.domain.errors import TrackingError
from tests.conftest import event_count, fetch
from tests.history import make_history


def _count_round_trips(mp: pytest.MonkeyPatch, seen: Counter[str]) -> None:
    """Count, in this thread, the statements a unit of work sends on its wire, its
    Syncs, and any statement through a psycopg cursor."""
    writer = threading.current_thread()  # (not the recall tail's indexer)

    def counting(name: str, method: Any) -> Any:
        def counted(self: Any, *a: Any, **k: Any) -> Any:
            if threading.current_thread() is writer and (name != "syncs" or self.pending):
                seen[name] += 1
            return method(self, *a, **k)
        return counted
    mp.setattr(wire.Wire, "_send_dumped", counting("statements", wire.Wire._send_dumped))  # noqa: SLF001
    mp.setattr(wire.Wire, "send_plain", counting("statements", wire.Wire.send_plain))
    mp.setattr(wire.Wire, "sync", counting("syncs", wire.Wire.sync))
    mp.setattr(psycopg.Cursor, "execute", counting("psycopg", psycopg.Cursor.execute))
    mp.setattr(psycopg.Cursor, "executemany", counting("psycopg", psycopg.Cursor.executemany))


def test_a_plain_remember_is_six_statements_and_one_round_trip(dsn: str) -> None:
    from memfabric.adapters import open_fabric
    with open_fabric(dsn, consolidate=False) as fab:
        notes = fab.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="warm the pool and the statement caches")
        seen: Counter[str] = Counter()
        with pytest.MonkeyPatch.context() as mp:
            _count_round_trips(mp, seen)
            got = notes.remember(kind="fact", content="the build server is in Frankfurt")
        assert seen == Counter({"statements": 6, "syncs": 1}), seen
        assert [h.id for h in notes.recall("build server Frankfurt").hits][:1] == [got.id]


def test_a_plain_remember_naming_a_subject_is_one_round_trip(dsn: str) -> None:
    """Issue 24: the entity-key lookup of the subject a text names ("Person 7") is not
    read before the write: a guard that no such key exists travels with the write (a
    seventh statement) and the write stays one round trip (it was two)."""
    from memfabric.adapters import open_fabric
    with open_fabric(dsn, consolidate=False) as fab:
        notes = fab.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="Person 1 works as a cook in Porto")
        seen: Counter[str] = Counter()
        with pytest.MonkeyPatch.context() as mp:
            _count_round_trips(mp, seen)
            got = notes.remember(kind="fact", content="Person 7 works as a nurse in Lisbon")
        assert seen == Counter({"statements": 7, "syncs": 1}), seen
        assert [h.id for h in notes.recall("nurse in Lisbon").hits][:1] == [got.id]


def test_only_a_small_write_guards_against_entity_keys(dsn: str) -> None:
    """A batch of at most 16 items naming subjects guards (one round trip); a larger one
    reads the keys first (a refused guard would cost it a whole chunk's work)."""
    from memfabric.adapters import open_fabric
    with open_fabric(dsn, consolidate=False) as fab:
        notes = fab.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="Person 1 works as a cook in Porto")
        for n, syncs in ((16, 1), (17, 2)):
            seen: Counter[str] = Counter()
            with pytest.MonkeyPatch.context() as mp:
                _count_round_trips(mp, seen)
                notes.remember_many([{"kind": "fact", "content": f"Person {n}-{i} works as a nurse in Lisbon"}
                                     for i in range(n)])
            assert seen["syncs"] == syncs, (n, seen)


def _inferred_key(dsn: str, note_id: str) -> object:
    rows = fetch(dsn, "SELECT c.inferred_key FROM mf_consolidation c JOIN mf_note_scope s"
                      " ON s.aggregate_id = c.aggregate_id WHERE s.note_id = %s", (note_id,))
    return rows[0][0] if rows else None


def test_a_plain_remember_naming_an_entity_still_names_it(dsn: str) -> None:
    """When a key of the subject exists the guard refuses at COMMIT, nothing of that
    transaction is written, and the write runs again with the lookup: the note's key
    names the entity, as without the guard. The process then remembers the key as
    found and reads it first (two round trips, no refused transaction)."""
    from memfabric.adapters import open_fabric
    with open_fabric(dsn, consolidate=False) as fab:
        maria = fab.scope("acme", "u1", "t1").entities.upsert("Maria Lopez", type="person")
    with open_fabric(dsn, consolidate=False) as fab:  # a process that has found no key yet
        notes = fab.scope("acme", "u1", "t1")
        before = event_count(dsn)
        seen: Counter[str] = Counter()
        with pytest.MonkeyPatch.context() as mp:
            _count_round_trips(mp, seen)
            lives = notes.remember(kind="fact", content="Maria Lopez lives in Lisbon")
        assert seen["syncs"] == 3, seen  # refused (1), then the lookup and the write (2)
        assert event_count(dsn) == before + 1
        assert _inferred_key(dsn, lives.id) == f"entity:{maria.entity.id}|residence"
        seen.clear()
        with pytest.MonkeyPatch.context() as mp:
            _count_round_trips(mp, seen)
            works = notes.remember(kind="fact", content="Maria Lopez works at Globex")
        assert seen["syncs"] == 2, seen
        assert str(_inferred_key(dsn, works.id)).startswith(f"entity:{maria.entity.id}|")


def test_a_consolidating_insert_is_two_round_trips(dsn: str) -> None:
    """The reads a decision needs travel on the wire, with BEGIN, the locks and the
    tenant's gap probe: the neighbour lookup, sent ahead (issue 24), and the entities
    named by the inferred subject ("bob") in one round trip; the decision's events, rows
    and COMMIT in the last (before the send-ahead: three round trips).
    A fold or a supersession replays the note it changes through psycopg, then commits
    there."""
    from memfabric.adapters import open_fabric
    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="Alice lives in Lisbon")
        seen: Counter[str] = Counter()
        with pytest.MonkeyPatch.context() as mp:
            _count_round_trips(mp, seen)
            works = notes.remember(kind="fact", content="Bob works at Initech")
        assert works.outcome == "inserted"
        assert seen == Counter({"statements": 9, "syncs": 2}), seen
        moved = notes.remember(kind="fact", content="Alice moved to Porto")
        assert moved.outcome == "superseding"
        assert [h.id for h in notes.recall("where does Alice live").hits][:1] == [moved.id]
        assert [h.id for h in notes.recall("where does Bob work").hits][:1] == [works.id]


def test_a_subject_that_names_an_entity_looks_its_neighbours_up_again(dsn: str) -> None:
    """The neighbours sent ahead are those of the key as inferred ("maria|residence");
    when the subject resolves to an entity the key changes ("entity:<id>|residence"), so
    the lookup runs again (one more round trip) and the change stated under the alias
    supersedes the note stated under the full name."""
    from memfabric.adapters import open_fabric
    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1", "t1")
        maria = notes.entities.upsert("Maria Lopez", type="person", identifiers=[("email", "maria@acme.example")])
        alias = notes.entities.upsert("Maria", identifiers=[("email", "maria@acme.example")])
        assert alias.entity.id == maria.entity.id
        first = notes.remember(kind="fact", content="Maria Lopez lives in Lisbon")
        seen: Counter[str] = Counter()
        with pytest.MonkeyPatch.context() as mp:
            _count_round_trips(mp, seen)
            moved = notes.remember(kind="fact", content="Maria moved to Porto")
        assert (moved.outcome, moved.supersedes) == ("superseding", first.id), moved.decision
        assert moved.decision is not None and moved.decision["subject_key"].startswith("entity:")
        assert seen["syncs"] >= 3, seen
        assert [h.id for h in notes.recall("where does Maria live").hits][:1] == [moved.id]


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
