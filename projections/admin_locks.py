"""The locks an administrative pass over the projections takes (rebuild, blue-green
switch, per-partition rebuild): session advisory locks held across transactions, and
the bounded locks of a blue-green switch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg import Connection, Cursor, sql

from memfabric.projections.base import NoteProjection
from memfabric.projections.engine import ProjectionEngine, bounded_locks

__all__ = ["SWITCH_ATTEMPTS", "SWITCH_LOCK_TIMEOUT", "rebuild_locks", "session_locks", "switch_locks"]


@contextmanager
def session_locks(conn: Connection[Any], engine: ProjectionEngine, names: Sequence[str]) -> Iterator[None]:
    """Hold the session advisory locks of ``names`` (engine keys, in order; released in
    reverse), each wait bounded by the engine's ``lock_timeout``
    (``LockTimeoutError``)."""
    keys = [engine.lock_key(name) for name in names]
    taken: list[int] = []
    try:
        with bounded_locks("rebuild"):
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (engine.timeout_setting(),))
            for key in keys:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
                taken.append(key)
            conn.execute("SELECT set_config('lock_timeout', '0', false)")
        yield
    finally:
        for key in reversed(taken):
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def rebuild_locks(conn: Connection[Any], engine: ProjectionEngine, selected: Sequence[Any],
                   ) -> AbstractContextManager[None]:
    """Hold the session advisory lock ``rebuild:<name>`` of every selected projection
    so two rebuilds of one projection never overlap."""
    return session_locks(conn, engine, ["rebuild:" + p.name for p in selected])


SWITCH_LOCK_TIMEOUT = "200ms"
"""How long a blue-green switch waits for each of its locks before it rolls back and
tries again: below the server's ``deadlock_timeout`` (1 s by default), so a writer
holding a lock the switch needs (it read the consolidation index, or holds a
projection's shared lock) never gets a deadlock error: the switch gives way first."""

SWITCH_ATTEMPTS = 50
"""Switch attempts of a plain blue-green rebuild before it gives up (``FabricError``)."""


def switch_locks(cur: Cursor[Any], engine: ProjectionEngine, selected: Sequence[NoteProjection]) -> bool:
    """In a switch's transaction: every selected projection's advisory lock
    (exclusive; writers hold them shared from the first statement of their unit of
    work, before any read, to COMMIT), then an ACCESS EXCLUSIVE lock on each of their
    tables (held by no writer then, only by readers outside units of work), each wait
    bounded by :data:`SWITCH_LOCK_TIMEOUT`; ``False`` when one ran out (the caller
    rolls back and retries). Fixes the deadlock of a blue-green
    rebuild of the consolidation index while writers run (round 2's closing note)."""
    def lock_tables(projections: Sequence[NoteProjection]) -> None:
        for p in projections:
            for table in p.tables:
                cur.execute(sql.SQL("LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE").format(t=sql.Identifier(table)))

    cur.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(SWITCH_LOCK_TIMEOUT)))
    try:  # writers take the projection locks (shared) first, before any read: so does the switch
        for p in selected:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (engine.lock_key(p.name),))
        lock_tables(selected)
    except psycopg.errors.LockNotAvailable:
        return False
    cur.execute("SET LOCAL lock_timeout = 0")
    return True
