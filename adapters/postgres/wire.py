"""A unit of work's statements on libpq's pipeline, sent together (issue 24).

psycopg's pipeline mode sends each statement as it is executed (a flush, a ``send``
system call and a wake-up of the server per statement) and builds a cursor, a query
conversion and a result object for each. A plain ``remember`` is six statements that
need no answer until COMMIT. :class:`Wire` writes them into libpq's output buffer
(``PQsendQueryPrepared``, libpq's pipeline mode) and sends them with one Sync: one
``send``, one wake-up of the server, one read of every result.

Statements are prepared once per connection under names of their own (``mf_<n>``,
never psycopg's ``_pg3_<n>``), the Parse message travelling in the same buffer as its
first execution. psycopg deallocates every prepared statement of a connection when it
runs a ``ROLLBACK``, ``DROP``, ``ALTER`` or ``DISCARD ALL`` (``PrepareManager.clear``);
:func:`_registry` counts those clears on each connection and forgets its names after one.

The connection is psycopg's: a :class:`Wire` must be :meth:`~Wire.settle`-d (its
statements sent and answered, libpq back out of pipeline mode) before psycopg runs
anything on it, and the unit of work does so before it hands the connection out.
Parameters are dumped by the connection's psycopg adapters (its C dumpers, pgvector's,
the batch's :class:`~memfabric.projections.batch.VectorBinary`); results are psycopg
``PGresult`` objects, errors psycopg's exceptions (``psycopg.errors``, by SQLSTATE).
"""

from __future__ import annotations

import weakref
from collections.abc import Generator, Sequence
from typing import Any

import psycopg
from psycopg import Connection, generators, pq
from psycopg._preparing import PrepareManager
from psycopg._queries import PostgresQuery, _query2pg_nocache
from psycopg.adapt import PyFormat, Transformer

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)

_CONVERTED: dict[tuple[bytes, bool], Any] = {}
"""psycopg's conversion of a statement (``$n`` query, formats, names, parts), by
(statement, named parameters?)."""


class _CountingPrepareManager(PrepareManager):
    """psycopg's prepared-statement cache that counts its clears (each one is followed
    by a ``DEALLOCATE ALL`` that drops :class:`Wire`'s statements too)."""

    clears = 0

    def clear(self) -> bool:
        self.clears += 1
        return super().clear()


class _Registry:
    """The statements :class:`Wire` prepared on one connection, by (query, parameter
    types), valid while psycopg has not cleared its cache since (``clears``)."""

    def __init__(self, conn: Connection[Any]) -> None:
        prepared = conn._prepared  # noqa: SLF001 - psycopg keeps no public hook for its DEALLOCATE ALL
        if type(prepared) is PrepareManager:
            prepared.__class__ = _CountingPrepareManager
        self.manager: Any = prepared
        self.clears = getattr(prepared, "clears", 0)
        self.names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self.transformer = Transformer(conn)
        self.made = 0
        """Statements prepared on this connection so far (the next name's number)."""

    def new_name(self) -> bytes:
        self.made += 1
        return b"mf_%d" % self.made

    def valid_names(self) -> dict[tuple[bytes, tuple[int, ...]], bytes]:
        """The names, emptied when psycopg has cleared its cache since they were made
        (its pending deallocation is run first, so it cannot drop newer ones later)."""
        clears = getattr(self.manager, "clears", 0)
        if clears != self.clears:
            self.clears = clears
            self.names.clear()
        return self.names


_REGISTRIES: weakref.WeakKeyDictionary[Connection[Any], _Registry] = weakref.WeakKeyDictionary()


def _registry(conn: Connection[Any]) -> _Registry:
    found = _REGISTRIES.get(conn)
    if found is None:
        found = _REGISTRIES[conn] = _Registry(conn)
    return found


class Result:
    """The outcome of one statement a :class:`Wire` sent: ``pgresult`` once synced."""

    __slots__ = ("pgresult",)

    def __init__(self) -> None:
        self.pgresult: pq.abc.PGresult | None = None


class Wire:
    """Statements of one transaction buffered in libpq and sent at :meth:`sync` (see
    the module doc). ``conn``: a pooled connection in autocommit mode, not in psycopg's
    pipeline mode."""

    def __init__(self, conn: Connection[Any]) -> None:
        self.conn = conn
        self._pg = conn.pgconn
        registry = _registry(conn)
        if registry.manager._to_flush:  # noqa: SLF001 - a DEALLOCATE psycopg has not sent yet
            conn.wait(registry.manager.maintain_gen(conn))
        self._registry = registry
        self._names = registry.valid_names()
        self._tx = registry.transformer
        self._expected: list[tuple[Result | None, bytes | None]] = []
        """One entry per message that answers: (its result holder, or ``None`` for a
        Parse of ``name``)."""
        self.active = False
        """Whether libpq is in pipeline mode (statements sent and not yet synced)."""

    @property
    def pending(self) -> bool:
        """Whether statements wait for :meth:`sync`."""
        return bool(self._expected)

    def send(self, query: bytes, params: Sequence[Any] = ()) -> Result:
        """Buffer ``query`` (PostgreSQL's ``$n`` placeholders) with ``params``; its
        result is read at :meth:`sync`."""
        values = self._tx.dump_sequence(params, [PyFormat.AUTO] * len(params)) if params else []
        return self._send_dumped(query, values, tuple(self._tx.types or ()) if params else (),
                                 self._tx.formats if params else None)

    def send_plain(self, command: bytes) -> Result:
        """Buffer a statement without parameters, unprepared (``BEGIN``, ``COMMIT``)."""
        self._enter()
        self._pg.send_query_params(command, None)
        result = Result()
        self._expected.append((result, None))
        return result

    def _enter(self) -> None:
        if not self.active:
            self._pg.enter_pipeline_mode()
            self.active = True

    def send_psycopg(self, query: Any, params: Any = None) -> Result:
        """:meth:`send` for a statement in psycopg's form (``%s`` / ``%(name)s``
        placeholders, a ``psycopg.sql.Composable``). The conversion of a ``bytes`` or
        ``str`` statement to ``$n`` placeholders is kept (psycopg keeps none for a
        statement over 4,096 bytes or 50 parameters, such as the neighbour lookup, and
        parses a ``str`` again on every call, as the entity-key lookup's)."""
        if isinstance(query, str):
            query = query.encode(self._tx.encoding)
        if params is None or not isinstance(query, bytes):
            converted = PostgresQuery(self._tx)
            converted.convert(query, params)
            return self._send_dumped(converted.query, list(converted.params or ()), tuple(converted.types),
                                     converted.formats)
        key = (query, isinstance(params, dict))
        parsed = _CONVERTED.get(key)
        if parsed is None:
            if len(_CONVERTED) > 512:
                _CONVERTED.clear()
            parsed = _CONVERTED[key] = _query2pg_nocache(query, self._tx.encoding)
        pgquery, want_formats, order, parts = parsed
        ordered = PostgresQuery.validate_and_reorder_params(parts, params, order)
        values = self._tx.dump_sequence(ordered, want_formats)
        return self._send_dumped(pgquery, values, tuple(self._tx.types or ()), self._tx.formats)

    def _send_dumped(self, query: bytes, values: Sequence[Any], types: tuple[int, ...],
                     formats: Sequence[pq.Format] | None) -> Result:
        self._enter()
        key = (query, types)
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = self._registry.new_name()
            self._pg.send_prepare(name, query, param_types=types)
            self._expected.append((None, name))
        self._pg.send_query_prepared(name, values, param_formats=formats)
        result = Result()
        self._expected.append((result, None))
        return result

    def sync(self) -> None:
        """Send everything buffered with a Sync and read every result (one round
        trip). Raises the first failure as psycopg's exception for its SQLSTATE;
        statements after it were not run (the server skips them to the Sync)."""
        if not self._expected:
            return
        expected, self._expected = self._expected, []
        self._pg.pipeline_sync()
        answers = self.conn.wait(_exchange(self._pg, len(expected)))
        failed: pq.abc.PGresult | None = None
        for (holder, parsed), results in zip(expected, answers, strict=True):
            result = results[-1] if results else None
            ok = result is not None and result.status in _OK
            if parsed is not None and not ok:
                self._forget(parsed)  # a Parse that failed or was skipped prepared nothing
            if holder is not None:
                holder.pgresult = result
            if failed is None and result is not None and result.status == pq.ExecStatus.FATAL_ERROR:
                failed = result
        if failed is not None:
            error = psycopg.errors.error_from_result(failed, encoding=self.conn.info.encoding)
            if isinstance(error, psycopg.errors.InvalidSqlStatementName):
                self._names.clear()  # deallocated behind psycopg's back: prepared again next time
            raise error

    def _forget(self, name: bytes) -> None:
        for key, known in list(self._names.items()):
            if known == name:
                del self._names[key]

    def rows(self, result: Result) -> list[tuple[Any, ...]]:
        """The rows of a synced statement, as tuples of Python values."""
        res = result.pgresult
        if res is None or res.status != pq.ExecStatus.TUPLES_OK:
            return []
        self._tx.set_pgresult(res)
        return self._tx.load_rows(0, res.ntuples, tuple)

    def dicts(self, result: Result) -> list[dict[str, Any]]:
        """:meth:`rows` as dicts by column name."""
        res = result.pgresult
        if res is None:
            return []
        names = [(res.fname(i) or b"").decode() for i in range(res.nfields)]
        return [dict(zip(names, row, strict=True)) for row in self.rows(result)]

    def settle(self) -> None:
        """Sync what is buffered and leave libpq's pipeline mode: psycopg may use the
        connection again."""
        try:
            self.sync()
        finally:
            if self.active:
                self.active = False
                self._pg.exit_pipeline_mode()

    def abandon(self) -> None:
        """After a failure: read whatever is still owed, leave pipeline mode and roll
        back an open transaction, so the connection goes back to the pool idle (or is
        closed when even that fails)."""
        try:
            if self._expected:
                self.sync()
        except psycopg.Error:
            pass
        try:
            if self.active:
                self.active = False
                self._pg.exit_pipeline_mode()
            if self._pg.transaction_status != pq.TransactionStatus.IDLE:
                self.conn.wait(_exchange_simple(self._pg, b"ROLLBACK"))
        except psycopg.Error:
            self.conn.close()


def _exchange(pg: pq.abc.PGconn, n: int) -> Generator[Any, Any, list[list[pq.abc.PGresult]]]:
    """Flush the buffer, then read the results of ``n`` messages and the Sync's."""
    yield from generators.send(pg)
    out = []
    for _ in range(n):
        out.append((yield from generators.fetch_many(pg)))
    yield from generators.fetch_many(pg)  # the PIPELINE_SYNC
    return out


def _exchange_simple(pg: pq.abc.PGconn, command: bytes) -> Generator[Any, Any, None]:
    """Run ``command`` outside pipeline mode (a simple query) and read its result."""
    pg.send_query(command)
    yield from generators.send(pg)
    yield from generators.fetch_many(pg)
