"""The transaction of one unit of work on a pooled connection, in two modes (issue 24).

A :class:`TxSession` starts on the :class:`~memfabric.adapters.postgres.wire.Wire`:
``BEGIN``, the opening locks and, for a plain write, everything up to ``COMMIT`` are
buffered and sent with one Sync (:meth:`TxSession.finish`). The first time code needs
psycopg itself (a read through a cursor, a projection that runs its own statements),
:meth:`TxSession.psycopg` sends what is buffered, leaves libpq's pipeline mode and
enters psycopg's pipeline mode, where the rest of the transaction runs as before;
statements sent through :meth:`TxSession.send` then go through psycopg.

Ending it: ``COMMIT`` (or ``ROLLBACK``) is sent as a statement of the current mode
and answered with the rest. A failure is rolled back before the connection goes back
to the pool, never with psycopg's ``rollback()`` while on the wire (psycopg drops its
prepared statements after a ``ROLLBACK`` it runs: see
``test_a_unit_of_work_left_without_commit_keeps_the_prepared_statements``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg import Connection, Cursor
from psycopg.rows import tuple_row

from memfabric.adapters.postgres.wire import Result, Wire


class Sent:
    """A statement :class:`TxSession` sent: its rows once the session has synced."""

    def __init__(self, read: Callable[[], list[tuple[Any, ...]]]) -> None:
        self._read = read

    def rows(self) -> list[tuple[Any, ...]]:
        return self._read()


class TxSession:
    """One transaction on ``conn`` (see the module doc); ``wire`` mode until
    :meth:`psycopg` is asked for."""

    def __init__(self, conn: Connection[Any]) -> None:
        self.conn = conn
        self._wire: Wire | None = Wire(conn)
        self._pipeline: Any = None
        self._wire.send_plain(b"BEGIN")

    @property
    def on_wire(self) -> bool:
        """Whether statements still go through the wire (psycopg has not been asked for)."""
        return self._wire is not None

    def send(self, query: bytes, params: Sequence[Any] = ()) -> Sent:
        """Send ``query`` (``$n`` placeholders) without waiting; its rows are read after
        the next sync (wire) or by psycopg's pipeline on demand."""
        if self._wire is not None:
            wire, result = self._wire, self._wire.send(query, params)
            return Sent(lambda: wire.rows(result))
        raw = psycopg.RawCursor(self.conn, row_factory=tuple_row)
        raw.execute(query, list(params), prepare=True)
        return Sent(lambda: _fetch_all(raw))

    def send_psycopg(self, query: Any, params: Any = None, *, prepare: bool = True) -> Sent:
        """:meth:`send` for a statement in psycopg's form (``%s``, ``%(name)s``, composed SQL)."""
        if self._wire is not None:
            wire, result = self._wire, self._wire.send_psycopg(query, params)
            return Sent(lambda: wire.rows(result))
        cur = self.conn.cursor(row_factory=tuple_row)
        cur.execute(query, params, prepare=prepare)
        return Sent(lambda: _fetch_all(cur))

    def dicts(self, query: Any, params: Any = None) -> list[dict[str, Any]]:
        """Run a read in psycopg's form now and return its rows as dicts (one round
        trip with everything sent before it)."""
        if self._wire is not None:
            wire = self._wire
            result = wire.send_psycopg(query, params)
            wire.sync()
            return wire.dicts(result)
        return list(self.conn.execute(query, params).fetchall())

    def send_read(self, query: Any, params: Any = None) -> Callable[[], list[dict[str, Any]]]:
        """Send a read in psycopg's form on the wire without waiting (wire mode only):
        the function returned gives its rows as dicts, syncing first when the read is
        still unanswered (answered by any later sync, or when the session leaves the wire)."""
        wire = self._wire
        if wire is None:
            raise RuntimeError("send_read needs the wire")
        result = wire.send_psycopg(query, params)

        def answer() -> list[dict[str, Any]]:
            if result.pgresult is None and wire is self._wire:
                wire.sync()
            return wire.dicts(result)
        return answer

    def sync(self) -> None:
        """Send what is buffered on the wire and read its results (no-op in psycopg mode)."""
        if self._wire is not None:
            self._wire.sync()

    def psycopg(self) -> Connection[Any]:
        """The connection in psycopg's pipeline mode, for code that uses cursors; the
        wire's statements are sent and answered first (one round trip when any wait)."""
        wire = self._wire
        if wire is not None:
            wire.settle()
            self._wire = None
            self._pipeline = self.conn.pipeline()
            self._pipeline.__enter__()
        return self.conn

    def cursor(self) -> Cursor[Any]:
        return self.psycopg().cursor()

    def finish(self, commit: bool) -> None:
        """``COMMIT`` (else ``ROLLBACK``) with everything still unsent, in one round trip;
        a failure is rolled back and re-raised."""
        if self._wire is not None:
            wire = self._wire
            wire.send_plain(b"COMMIT" if commit else b"ROLLBACK")
            try:
                wire.settle()
            except BaseException:
                wire.abandon()
                raise
            return
        if commit:
            try:
                self.conn.execute(b"COMMIT")
            except BaseException as failed:  # an earlier statement's error, read with COMMIT's send
                self._end_pipeline(failed)
                raise
        # without COMMIT: psycopg's own ``rollback()`` after the Sync (see the module doc)
        self._end_pipeline(None)

    def abandon(self, failed: BaseException) -> None:
        """End after ``failed``: read what is owed, roll back, leave every pipeline."""
        if self._wire is not None:
            self._wire.abandon()
            return
        self._end_pipeline(failed)

    def _end_pipeline(self, failed: BaseException | None) -> None:
        """Leave psycopg's pipeline mode (its Sync answers what is owed) and roll back a
        transaction still open (a failure reported at the Sync leaves the session in a
        failed transaction block: it is rolled back before the error propagates)."""
        conn, pipeline, self._pipeline = self.conn, self._pipeline, None
        try:
            if pipeline is not None:
                pipeline.__exit__(type(failed) if failed else None, failed, None)
        finally:
            if conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
                conn.close()  # results left unread (psycopg logs and ignores it after a failure)
            elif conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE and not conn.closed:
                conn.rollback()


class SessionReads:
    """A read-only stand-in for a cursor whose statements run on a session (a read on
    the wire: sent with whatever waits there, answered as dict rows); ``guard``: a
    context that each read's round trip runs in (it may translate errors)."""

    def __init__(self, session: TxSession, guard: Callable[[], AbstractContextManager[None]] | None = None) -> None:
        self._session = session
        self._guard = guard
        self._rows: list[dict[str, Any]] = []

    def execute(self, query: Any, params: Any = None, **_: Any) -> SessionReads:
        if self._guard is None:
            self._rows = self._session.dicts(query, params)
            return self
        with self._guard():
            self._rows = self._session.dicts(query, params)
        return self

    def fetchall(self) -> list[dict[str, Any]]:
        return self._rows

    def fetchone(self) -> dict[str, Any] | None:
        return self._rows[0] if self._rows else None

    def close(self) -> None:
        self._rows = []


class SessionStatements:
    """A write-only stand-in for a cursor whose statements go to a session (e.g. a key
    deletion on the wire), answered with the session's next sync."""

    def __init__(self, session: TxSession) -> None:
        self._session = session

    def execute(self, query: Any, params: Any = None) -> None:
        self._session.send_psycopg(query, params)


def _fetch_all(cur: Cursor[Any]) -> list[tuple[Any, ...]]:
    try:
        return list(cur.fetchall())
    finally:
        cur.close()


__all__ = ["Result", "Sent", "SessionReads", "SessionStatements", "TxSession"]
