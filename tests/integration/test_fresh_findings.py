"""Findings of a fresh user's session (2026-12-01): each test failed before its fix.

1. A write's decision read the note-scope index on a *second* pooled connection while
   its unit of work held the first (with the scope's and the projections' locks): a
   fold from thread-2 into a user-level note that superseded another, an explicit
   ``id=`` and a ``links=`` target of another scope. With ``pool_size=1`` the write
   waited for itself until the pool's timeout (a raw ``OperationalError`` after 30 s);
   with the default pool, 16 writing threads exhausted it under a catch-up's exclusive
   lock, and every other process's ``open_fabric`` and writes failed with
   ``LockTimeoutError`` after ``lock_timeout``. docs/api.md (the README until issue 34)
   says a pool of one connection suffices.
3. ``memfabric reembed`` right after ``projections rebuild --blue-green`` (on a fabric of
   many tenants) failed with a raw ``ProgrammingError: the last operation didn't produce
   records (command status: INSERT 0 1)``: in pipeline mode a writer caught up a
   tenant's gap with a SELECT on the cursor that still awaited the result of rows an
   earlier projection had written; once the server had flushed that result, the SELECT
   was handed it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from memfabric.adapters import LinkScopeError, NoteExistsError, RetentionFloorError, open_fabric
from tests.conftest import event_count


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()`` run in a thread; fails when it has not returned after ``seconds``."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
    t = threading.Thread(target=run, daemon=True)
    started = time.perf_counter()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"the call did not return within {seconds} s (waits for a second pooled connection)"
    assert time.perf_counter() - started < seconds
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_fold_from_another_thread_needs_one_pooled_connection(dsn: str) -> None:
    with open_fabric(dsn, pool_size=1, max_overflow=0) as fabric:
        t1, t2 = fabric.scope("acme", "u1", "t1"), fabric.scope("acme", "u1", "t2")
        t1.remember(kind="fact", content="User prefers metric units")
        newer = t1.remember(kind="fact", content="User prefers imperial units")
        assert newer.outcome == "superseding"
        again = _within(10, lambda: t2.remember(kind="fact", content="User prefers imperial units"))
        assert again.outcome == "folded" and again.id == newer.id
        assert [h.id for h in t2.recall("preferred units").hits] == [newer.id]


def test_an_explicit_id_needs_one_pooled_connection(dsn: str) -> None:
    with open_fabric(dsn, pool_size=1, max_overflow=0) as fabric:
        t1, t2 = fabric.scope("acme", "u1", "t1"), fabric.scope("acme", "u1", "t2")
        note = _within(10, lambda: t1.remember(kind="fact", id="0123456789ab", content="The VPN uses WireGuard"))
        assert note.id == "0123456789ab"
        with pytest.raises(NoteExistsError):  # the user-level note is seen from thread-2
            _within(10, lambda: t2.remember(kind="fact", id="0123456789ab", content="The printer is on floor 2"))


def test_a_link_to_another_scope_needs_one_pooled_connection(dsn: str) -> None:
    with open_fabric(dsn, pool_size=1, max_overflow=0) as fabric:
        t1, t2 = fabric.scope("acme", "u1", "t1"), fabric.scope("acme", "u1", "t2")
        target = t1.remember(kind="fact", content="The staging database runs PostgreSQL 18")
        with pytest.raises(LinkScopeError):
            _within(10, lambda: t2.remember(kind="fact", content="Backups run nightly",
                                            links=[{"id": target.id}]))


def test_notes_link_to_another_scope_needs_one_pooled_connection(dsn: str) -> None:
    with open_fabric(dsn, pool_size=1, max_overflow=0) as fabric:
        t1, t2 = fabric.scope("acme", "u1", "t1"), fabric.scope("acme", "u1", "t2")
        source = t1.remember(kind="fact", content="Deploys happen on Tuesdays")
        other = t2.remember(kind="fact", content="The on-call rota is weekly")
        with pytest.raises(LinkScopeError):
            _within(10, lambda: t2.link(source.id, other.id))


def test_the_floor_check_of_an_erasure_needs_one_pooled_connection(dsn: str) -> None:
    with open_fabric(dsn, pool_size=1, max_overflow=0,
                     retention={"regulated": {"floor": "7y", "ceiling": "10y"}}) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        kept = notes.remember(kind="fact", content="Invoice 42 totals 100 EUR", retention="regulated")
        notes.remember(kind="file", path="/inv.txt", content="invoice 43", retention="regulated")
        before = event_count(dsn)
        with pytest.raises(RetentionFloorError):
            _within(10, lambda: notes.forget(id=kept.id))
        with pytest.raises(RetentionFloorError):
            _within(10, lambda: notes.delete_path("/inv.txt"))
        result = _within(10, lambda: fabric.erase_scope("acme", "u1", "t1"))
        assert result.deleted == 0
        assert event_count(dsn) == before
        assert _within(10, lambda: notes.forget(id=kept.id, approval="DPO-1")).deleted == 1


class _RolledBack(Exception):
    pass


def test_a_tenant_gap_is_caught_up_on_a_cursor_no_earlier_write_waits_on(dsn: str) -> None:
    with open_fabric(dsn) as fabric:
        fabric.scope("acme", "u1", "t1").remember(kind="fact", content="Alice likes coffee")
        head, first = fabric.engine.head(), fabric.engine.projections[0]
        with fabric.log.datastore.get_connection() as conn, pytest.raises(_RolledBack):
            assert fabric.engine.prepare is not None
            fabric.engine.prepare(conn)
            with conn.transaction(), conn.pipeline(), conn.cursor() as cur:
                cur.execute("CREATE TEMP TABLE scratch (x int) ON COMMIT DROP")
                cur.execute("INSERT INTO scratch VALUES (1)")  # a row written, its result not fetched
                with conn.cursor() as other:
                    other.execute("SELECT repeat('x', 200000)")  # the server flushes its output
                    time.sleep(0.3)
                    # tenant globex's position 0 is behind the log: a gap to catch up first
                    fabric.engine.apply_inline(cur, [], [head + 5], [first], "globex", positions={first.name: 0})
                    other.fetchall()
                raise _RolledBack
