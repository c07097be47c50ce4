"""The PostgreSQL unit of work: one connection, one transaction per write.

:class:`PostgresUnitOfWork` owns everything a write touches, explicitly (no context
variables, no pass-through keyword arguments):

- the pooled connection and its transaction, held by a
  :class:`~memfabric.adapters.postgres.session.TxSession`: ``BEGIN`` and the opening
  locks are buffered on the wire (``adapters/postgres/wire.py``) and sent with the first
  read, or with ``COMMIT`` (a plain write is one round trip, issue 24);
- the projections' shared advisory locks and the scopes' write locks
  (``pg_advisory_xact_lock``, in sorted key order so two multi-scope writers cannot
  deadlock), taken first, in one statement, before any read;
- every read the write decides on: aggregate replays (from the process's note cache
  when it holds the note, :mod:`.note_cache`), key reads, the consolidation neighbours,
  entity keys, paths and the working value, all in this transaction (on the wire while
  it can: :class:`~memfabric.adapters.postgres.uow_reads.DecisionReads`);
- the aggregates to save, their new data keys and the keys to destroy;
- at :meth:`~PostgresUnitOfWork.commit`: seal the events, take the tenants' append
  locks, insert the keys and the events (one statement), and per tenant one statement
  with the projections' rows and its tracking, which checks the tenant had no gap
  (``ProjectionEngine.fast_statement``), then COMMIT; nothing is read back before it. A
  gap, or a write whose projections a runner keeps, takes the path that reads the
  tenant's positions back and catches the gap up first (:meth:`_commit_slow`).
  Writers of different tenants never wait for each other here (issue 24); writers of
  one tenant queue on its lock from the append to COMMIT.
"""

from __future__ import annotations

import contextlib
import functools

import hmac
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import Any, cast
from uuid import UUID

from memfabric.adapters.crypto import TransactionKeys
from memfabric.adapters.crypto_keys import KEYS_SELECT
from memfabric.adapters.postgres import appends, replays
from memfabric.adapters.postgres import NoteLog, VectorTypes, dimension_guard, select_notes
from memfabric.adapters.postgres.session import Sent, SessionStatements, TxSession
from memfabric.adapters.postgres.uow_errors import (gap_refused, guard_refused, statements_lost,
                                                    tracking_refused)
from memfabric.adapters.postgres.uow_reads import DecisionReads
from eventsourcing.persistence import IntegrityError

from memfabric.domain.errors import ConflictError, FabricError, GuardRefusedError, LockTimeoutError, TrackingError
from memfabric.domain.note import Note, note_uuid
from memfabric.domain.scope import Scope
from memfabric.domain.shredding import shreds_keys
from memfabric.projections.batch import BatchCursor, RowBatch, encode_params
from memfabric.projections.engine import ProjectionEngine, bounded_locks, lock_timed_out
import psycopg
from psycopg import Connection, Cursor
from psycopg.rows import tuple_row


class PostgresUnitOfWork(DecisionReads):
    """One write transaction (the ``UnitOfWork`` port); see the module doc.

    ``inline_all``: apply every projection in this transaction (``inline_projections``),
    else only the write-side ones. ``ef_search``: unused by the exact neighbour scan,
    kept for the recall index's HNSW when it serves neighbours."""

    def __init__(self, log: NoteLog, engine: ProjectionEngine, vectors: VectorTypes,
                 secret: Callable[[], bytes], scopes: Sequence[Scope], *, inline_all: bool) -> None:
        self._log = log
        self._engine = engine
        self._vectors = vectors
        self._secret = secret
        self._scopes = list(scopes)
        self._inline_all = inline_all
        self._stack: ExitStack | None = None
        self._session: TxSession | None = None
        self._keys: TransactionKeys | None = None
        self._events: list[Any] = []
        self._aggregates: dict[UUID, Note] = {}
        self._others: dict[UUID, Any] = {}
        self._digests: dict[UUID, Any] = {}
        """Running digests of the stored states of the notes replayed here (``note_cache``)."""
        """Aggregates other than notes (the conversation ledger), saved alike."""
        self._committed = False
        self._position = 0
        self._tenants: list[str] = []
        """The tenants :meth:`commit` appended events of (for ``engine.on_commit``)."""
        self._read = False
        """Whether anything read on the transaction's connection (:attr:`conn`)."""
        self._gap_probes: dict[str, Sent] = {}
        self._position_reader: Callable[[], int] | None = None
        self._pending: tuple[Sequence[Any], Sequence[str], dict[UUID, Any], Sequence[Any]] | None = None
        """What the one-round-trip commit wrote, kept to write it again (:meth:`_write_again`)."""
        self._guarded = False
        """Whether a guard was sent in place of a read (:meth:`guard`)."""

    # --------------------------------------------------------------- lifetime
    def __enter__(self) -> PostgresUnitOfWork:
        self._stack, self._session = self._open()
        self._keys = TransactionKeys(self._psycopg_conn, self._log.keys)
        return self

    def _open(self) -> tuple[ExitStack, TxSession]:
        """A pooled connection with the transaction begun and the opening locks sent on
        the wire (:class:`~memfabric.adapters.postgres.session.TxSession`: nothing is
        waited for; they travel with the first read, or with COMMIT)."""
        stack = ExitStack()
        try:
            conn = stack.enter_context(self._log.datastore.get_connection())
            self._vectors.ensure(conn)
            stack.push(self._after_sync)
            session = TxSession(conn)
            stack.push(self._end)
            projections = self._engine.inline(all_projections=self._inline_all)
            keys = sorted(self._engine.lock_key("scope:" + key) for key in {s.key for s in self._scopes})
            session.send(_opening_sql(len(projections), len(keys)),
                         [self._engine.timeout_setting(), *self._engine.shared_keys(projections), *keys])
        except BaseException as exc:
            self._ending = exc
            stack.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return stack, session

    def _end(self, exc_type: type[BaseException] | None, exc: BaseException | None,
             tb: TracebackType | None) -> None:
        """End the transaction: COMMIT when :meth:`commit` ran and nothing failed, else
        roll back (:meth:`TxSession.finish` / :meth:`TxSession.abandon`)."""
        session, self._session = self._session, None
        if session is None:
            return
        failed = self._ending or exc
        if failed is None:
            session.finish(commit=self._committed)
        else:
            session.abandon(failed)

    def _after_sync(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                    tb: TracebackType | None) -> None:
        """After the transaction's last round trip, before the connection goes back to
        the pool: read the position the one-round-trip write recorded."""
        reader, self._position_reader = self._position_reader, None
        if reader is not None and exc_type is None and self._ending is None and self._committed:
            self._position = reader()

    _ending: BaseException | None = None
    """The exception a unit of work ends with (``None``: it commits or rolls back cleanly)."""

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._close(exc_type, exc, tb)
        except Exception as failed:
            if self._guarded and (guard_refused(failed) or gap_refused(failed) or statements_lost(failed)):
                raise GuardRefusedError(f"write: {failed}; nothing was written") from failed
            if exc_type is not None or not (gap_refused(failed) or statements_lost(failed)):
                raise
            if self._read:  # a decision read in the rolled-back transaction: not replayable here
                raise ConflictError(f"write: {failed}; nothing was written; retry") from failed
            self._write_again()
        if exc is not None and self._guarded and guard_refused(exc):  # answered with a read after it
            raise GuardRefusedError(f"write: {exc}; nothing was written") from exc
        if exc_type is None and self._committed and self._keys is not None:
            self._keys.committed()
            self._log.note_cache.put(self._aggregates.values(),  # (digests: those replayed here, or new)
                                     replays.feed(self._digests, self._events, self._stored_states),
                                     shredded=self._keys.doomed | self._keys.unreadable,
                                     owned=True)  # this unit of work is done with them
            if self._tenants and self._engine.on_commit is not None:
                self._engine.on_commit(self._tenants)

    _stored_states: Sequence[bytes] = ()
    """The stored ``state`` bytes of the events committed, in order (set by :meth:`commit`)."""

    def _close(self, exc_type: type[BaseException] | None, exc: BaseException | None,
               tb: TracebackType | None) -> None:
        """COMMIT (or roll back) and give the connection back; a failure is typed."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        self._ending = exc
        with bounded_locks("write"):  # a lock wait that ran out: LockTimeoutError
            if lock_timed_out(exc):
                stack.__exit__(exc_type, exc, tb)
                raise LockTimeoutError(f"write: a lock wait ran out ({exc}); nothing was written") from exc
            if statements_lost(exc):  # a read's: the wire prepares them again next time
                with contextlib.suppress(Exception):  # the same error, as the pool's context re-raises it
                    stack.__exit__(exc_type, exc, tb)
                raise ConflictError(f"write: {exc}; nothing was written; retry") from exc
            try:
                with dimension_guard():
                    stack.__exit__(exc_type, exc, tb)
            except Exception as failed:
                if tracking_refused(failed):  # the batched tracking check, reported at the Sync
                    raise TrackingError(f"write: {failed}; nothing was written") from failed
                if self._appended_twice(failed):
                    raise ConflictError(f"a concurrent write appended to the same note first ({failed}); "
                                        "retry") from failed
                raise

    def _appended_twice(self, failed: BaseException) -> bool:
        """Whether ``failed`` is the events table's refusal of a version taken meanwhile
        (reported at the Sync on the one-round-trip path)."""
        cause = failed.__cause__ if isinstance(failed, IntegrityError) else failed
        diag = getattr(cause, "diag", None)
        return isinstance(cause, psycopg.errors.UniqueViolation) and diag is not None and (
            diag.table_name == self._log.note_recorder.events_table_name)

    def _write_again(self) -> None:
        """The one-round-trip write found its tenant's projections behind, or its
        connection had lost the wire's prepared statements (nothing was written): write
        the same sealed events again in a new transaction, through the path that
        catches the tenant's gap up first. Sound because no decision of this unit of
        work read the rolled-back transaction (``_read`` is false)."""
        assert self._pending is not None
        self._stack, self._session = self._open()
        self._committed = False
        self._ending = None
        try:
            self._commit_slow(*self._pending)
        except BaseException as exc:
            self._close(type(exc), exc, exc.__traceback__)
            raise
        self._close(None, None, None)

    def _psycopg_conn(self) -> Connection[Any]:
        """The connection in psycopg's pipeline mode (the session leaves the wire)."""
        if self._session is None:
            raise FabricError("the unit of work is not open")
        return self._session.psycopg()

    @property
    def conn(self) -> Connection[Any]:
        """The transaction's connection, for reads a write decides on: the first use
        sends the tenant's gap probe along (:meth:`_probe_gap`)."""
        if self._session is None:
            raise FabricError("the unit of work is not open")
        self._mark_read()
        return self._session.psycopg()

    def guard(self, query: Any, params: Any) -> bool:
        """Send ``query`` (psycopg's form), a guard that fails the transaction when a
        read the write skips would not have said what the write assumed, with what
        waits on the wire, unanswered until COMMIT (issue 24: a plain write naming a
        subject stays one round trip). Only while nothing was read and the commit can
        be the one-round-trip one; returns whether it was sent. A unit of work that
        sent one ends in ``GuardRefusedError`` (nothing written) when the guard refuses,
        and also when its commit would have to be written again
        (:meth:`_write_again` replays no read): the caller writes again with the read."""
        session = self._session
        if session is None or not session.on_wire or self._read or not self._inline_all:
            return False
        session.send_psycopg(query, params)
        self._guarded = True
        return True

    def send_setting(self, query: bytes, params: Sequence[Any] = ()) -> None:
        """Send ``query`` (``$n`` placeholders), a statement that only changes this
        transaction's settings (``set_config(name, value, true)``), with what waits on
        the wire. It reads nothing a write decides on, so unlike :attr:`conn` it leaves
        the unit of work unread and on the wire (its commit stays one round trip); a
        failure is raised at the commit, and nothing is written then."""
        if self._session is None:
            raise FabricError("the unit of work is not open")
        self._session.send(query, params)

    def _mark_read(self) -> None:
        if not self._read:
            self._read = True
            self._probe_gap()

    def _probe_gap(self) -> None:
        """Ask, with the first read (same round trip), whether the tenants of the unit of
        work's scopes have events their projections have not applied: then
        :meth:`commit` takes the path that catches them up (in this transaction), since
        a rollback of the one-round-trip write could not be replayed after a decision
        read."""
        if not self._inline_all or self._session is None:
            return
        projections = self._engine.inline(all_projections=True)
        for tenant in sorted({s.tenant_id for s in self._scopes}):
            query, params = self._engine.gap_probe(projections, tenant)
            self._gap_probes[tenant] = self._session.send_psycopg(query, params)

    def _gap_found(self, tenants: Sequence[str]) -> bool:
        """Whether the gap probe found a gap in any of ``tenants`` (or did not ask for one)."""
        probes, self._gap_probes = self._gap_probes, {}
        if any(t not in probes for t in tenants):
            return True
        if self._session is not None:
            self._session.sync()
        return any(bool(rows and rows[0][0]) for rows in (probes[t].rows() for t in tenants))

    @property
    def keys(self) -> TransactionKeys:
        assert self._keys is not None
        return self._keys

    @property
    def position(self) -> int:
        return self._position

    # ------------------------------------------------------------------ reads
    def load(self, scope: Scope, note_id: str) -> Note | None:
        aggregate_id = note_uuid(scope, note_id)
        held = self._aggregates.get(aggregate_id)
        if held is not None:
            return held
        found = self.load_ids([aggregate_id])
        return found[0] if found else None

    def load_ids(self, aggregate_ids: Sequence[UUID], *, fresh: bool = False) -> list[Note]:
        """The notes ``aggregate_ids`` (held here, else replayed), read in the tenants of
        this unit of work's scopes only (a note of another tenant is never one a write
        decides on; a partitioned log is then read in their partitions, issue 25). On
        the wire, the events and the keys are read in one round trip (events first).
        ``fresh``: replayed from the first event, not from the note cache (erasures)."""
        missing = [i for i in aggregate_ids if i not in self._aggregates]
        tenants = sorted({s.tenant_id for s in self._scopes}) or None
        loaded = {n.id: n for n in self._replay(missing, tenants, fresh=fresh)}
        out = []
        for i in aggregate_ids:
            note = self._aggregates.get(i) or loaded.get(i)
            if note is not None:
                out.append(note)
        return out

    def _replay(self, ids: list[UUID], tenants: Sequence[str] | None, *, fresh: bool = False) -> list[Note]:
        """Replay ``ids`` in this transaction: each from the state the process's note
        cache holds (``note_cache.NoteCache``; only the events after it are read),
        else from its first event; the states read are cached (not the ones replayed
        as unreadable). A cached note whose keys are gone is replayed from its first
        event (a key fault is then reported as before), and so is every note when
        ``fresh``. On the wire, the events and the keys in one round trip."""
        if not ids:
            return []
        cache = None if fresh or self.keys.unreadable.intersection(ids) else self._log.note_cache
        held, digests = cache.get(ids) if cache is not None else ({}, {})
        versions = {i: n.version for i, n in held.items()}
        query, params = replays.events_query(ids, tenants, versions)
        session = self._session
        if session is not None and session.on_wire:
            self._mark_read()
            events = session.send_psycopg(query, params)
            keys = session.send_psycopg(KEYS_SELECT, encode_params([ids]))
            session.sync()
            self.keys.absorb(ids, {(oid, int(gen)): bytes(key) for oid, gen, key in keys.rows()})
            rows = events.rows()
        else:
            with self.conn.cursor(row_factory=tuple_row) as cur:
                rows = cur.execute(query, params).fetchall()
            self.keys.preload(ids)
        doubtful = {i for i in held if self.keys.latest.get(i) is None} | replays.stale(rows, digests)
        if cache is not None and doubtful:  # keys gone or events changed since: a replay from the start tells
            cache.discard(doubtful)
            return self._replay(ids, tenants)
        loaded = replays.replay_rows(rows, self._log.sealing_mapper.bound(self.keys), ids, held, digests)
        if cache is None:  # (its states are not kept: no digest)
            return loaded
        self._digests.update((n.id, digests[n.id]) for n in loaded if n.id in digests)
        # the states read here (an erased one drops out); those changed are kept after COMMIT
        cache.put([n for n in loaded if versions.get(n.id) != n.version], digests)
        return loaded

    def load_unreadable(self, aggregate_ids: Sequence[UUID]) -> list[Note]:
        """Replay ``aggregate_ids`` as if their data keys were destroyed (protected
        fields read ``<erased>``): how a note whose key is faulty is still tombstoned."""
        self.keys.unreadable.update(aggregate_ids)
        return self.load_ids(aggregate_ids)

    def content_hmac(self, text: str) -> str:
        return hmac.digest(self._secret(), text.encode(), "sha256").hex()

    # ----------------------------------------------------------------- writes
    def add(self, note: Note) -> None:
        """Hold ``note``'s pending events; a shredding one (a tombstone) dooms its keys."""
        self._collect(note)
        self._aggregates[note.id] = note

    def _collect(self, aggregate: Any) -> None:
        events = aggregate.collect_events()
        self._events.extend(events)
        if shreds_keys(events):
            self.keys.doomed.add(aggregate.id)

    # ------------------------------------------- other aggregates (the ledger)
    def load_aggregate(self, aggregate_id: UUID) -> Any:
        """Any aggregate by id (held in this unit of work, else replayed), or ``None``."""
        held = self._others.get(aggregate_id) or self._aggregates.get(aggregate_id)
        if held is not None:
            return held
        with self.conn.cursor() as cur:
            found = select_notes(cur, self._log.sealing_mapper, [aggregate_id], self.keys)
        return found[0] if found else None

    def load_ledger_head(self, aggregate_id: UUID, scope: Scope) -> Any:
        """The conversation's write head (no replay), or ``None`` when it has no events."""
        from memfabric.adapters.postgres.ledger import select_head  # noqa: PLC0415
        held = self._others.get(aggregate_id)
        return held if held is not None else select_head(self.conn, aggregate_id, scope)

    def add_aggregate(self, aggregate: Any) -> None:
        """Like :meth:`add` for an aggregate that is not a note."""
        self._collect(aggregate)
        self._others[aggregate.id] = aggregate

    def tenant(self) -> str:
        """The tenant this unit of work writes (``FabricError`` when it writes several)."""
        tenants = {_tenant_of(a) for a in [*self._aggregates.values(), *self._others.values()]}
        tenants |= {s.tenant_id for s in self._scopes}
        if len(tenants) != 1:
            raise FabricError(f"this unit of work writes {sorted(tenants)}, not one tenant")
        return next(iter(tenants))

    def commit(self) -> None:
        """Lock, seal, append and project everything added (see the module doc). Each
        event is appended in its aggregate's tenant (:func:`_tenant_of`); a unit of work
        that writes several (a group commit of several tenants' writers, a fabric-wide
        sweep record beside a tenant's notes) takes their locks in sorted order and
        records each tenant's positions."""
        if not self._events:
            self._committed = True
            return
        aggregates: dict[UUID, Any] = {**self._others, **self._aggregates}
        event_tenants = [_tenant_of(aggregates[e.originator_id]) for e in self._events]
        self._tenants = sorted(set(event_tenants))
        projections = self._engine.inline(all_projections=self._inline_all)
        mapper = self._log.sealing_mapper.bound(self.keys)
        stored = [mapper.to_stored_event(e) for e in self._events]
        self._stored_states = [e.state for e in stored]
        pending = (stored, event_tenants, aggregates, projections)
        if self._inline_all and not (self._read and self._gap_found(self._tenants)):
            self._pending = pending
            self._commit_fast(*pending)
        else:
            self._commit_slow(*pending)

    def _commit_slow(self, stored: Sequence[Any], event_tenants: Sequence[str], aggregates: dict[UUID, Any],
                     projections: Sequence[Any]) -> None:
        """:meth:`commit` through psycopg, reading each tenant's positions back to catch
        a gap up first (``ProjectionEngine.apply_inline``); also the path of a writer
        whose projections a runner keeps (``NOTIFY``)."""
        tenants = sorted(set(event_tenants))
        if len(tenants) == 1 and self._inline_all:
            self._commit_one_tenant(stored, tenants[0], aggregates, projections)
            return
        conn = self._psycopg_conn()
        with dimension_guard(), conn.cursor() as cur, conn.cursor() as ins:
            # one round trip for lock, keys, append and the tenants' positions (pipeline mode);
            # every result that is fetched has a cursor of its own (see ``apply_inline``)
            query, params = self._engine.lock_statement(tenants)
            cur.execute(query, params, prepare=True)
            self.keys.flush(cur)
            self.keys.destroy(cur)
            try:
                appended = self._log.note_recorder.send_insert(ins, stored, event_tenants,
                                                               notify=not self._inline_all)
                readers = []
                for tenant in tenants:
                    pos = conn.cursor()
                    self._engine.send_positions(pos, projections, tenant)
                    readers.append(pos)
                ids = appended()
            except (IntegrityError, psycopg.errors.UniqueViolation) as exc:  # a version taken meanwhile
                raise ConflictError(f"a concurrent write appended to the same note first ({exc}); retry") from exc
            for tenant, pos in zip(tenants, readers, strict=True):
                self._engine.apply_inline(
                    cur, [a for a in aggregates.values() if _tenant_of(a) == tenant],
                    [i for i, t in zip(ids, event_tenants, strict=True) if t == tenant],
                    projections, tenant, positions=self._engine.read_positions(pos))
                pos.close()
        self._position = max(ids, default=0)
        self._committed = True

    def _commit_fast(self, stored: Sequence[Any], event_tenants: Sequence[str], aggregates: dict[UUID, Any],
                     projections: Sequence[Any]) -> None:
        """:meth:`commit` of a unit of work that projects inline, sent with everything
        before it (on the wire: one round trip for a plain write): the tenants' locks
        (sorted), the keys and the events (one statement), the projections that cannot
        batch (when they write anything), then per tenant one statement with every
        batched row and the tenant's tracking, which also checks the tenant had no gap
        (``ProjectionEngine.fast_statement``); COMMIT follows in ``__exit__``. Nothing is
        read back before it; failures surface there (:meth:`_close` types them)."""
        session = self._session
        assert session is not None
        tenants = sorted(set(event_tenants))
        query, params = self._engine.lock_statement_raw(tenants)
        session.send(query, params)
        if self.keys.doomed:
            self.keys.destroy(cast("Cursor[Any]", SessionStatements(session)))
        statement, args = appends.events_statement(self._log.note_recorder, self.keys, stored, event_tenants)
        session.send_psycopg(statement, args)
        sent = []
        for tenant in tenants:
            notes = [a for a in aggregates.values() if _tenant_of(a) == tenant]
            sink = BatchCursor(RowBatch(), lambda: self._psycopg_conn().cursor())
            batch = self._engine.collect(sink, notes, projections)
            query, params = self._engine.fast_statement(projections, batch, tenant, event_tenants.count(tenant))
            sent.append(session.send(query, params))
        self._position_reader = lambda: max(int(s.rows()[0][0]) for s in sent)
        self._committed = True

    def _commit_one_tenant(self, stored: Sequence[Any], tenant: str, aggregates: dict[UUID, Any],
                           projections: Sequence[Any]) -> None:
        """:meth:`commit` of a unit of work that writes one tenant and projects inline:
        the tenant's lock, then one statement that inserts the new keys and the events
        and returns their ids with the tenant's positions (its snapshot is taken after
        the lock, so it sees every earlier write of the tenant), then the rows and the
        tracking in one more (``ProjectionEngine.apply_inline``): four statements with
        the scope locks, where one per table would be eleven."""
        conn = self._psycopg_conn()
        with dimension_guard(), conn.cursor() as cur, conn.cursor() as ins:
            query, params = self._engine.lock_statement([tenant])
            cur.execute(query, params, prepare=True)
            self.keys.destroy(cur)
            statement, args = appends.positions_statement(self._log.note_recorder, self.keys, self._engine,
                                                          stored, tenant, projections)
            try:
                ins.execute(statement, args, prepare=True)
                row = ins.fetchone()
            except (IntegrityError, psycopg.errors.UniqueViolation) as exc:  # a version taken meanwhile
                raise ConflictError(f"a concurrent write appended to the same note first ({exc}); retry") from exc
            assert row is not None
            ids = [int(i) for i in _column(row, 0)]
            positions = {p.name: int(v or 0) for p, v in zip(projections, _column(row, 1), strict=True)}
            self._engine.apply_inline(cur, list(aggregates.values()), ids, projections, tenant,
                                      positions=positions)
        self._position = max(ids, default=0)
        self._committed = True

@functools.lru_cache(maxsize=64)
def _opening_sql(n_shared: int, n_scopes: int) -> bytes:
    """The statement a unit of work opens with: its ``lock_timeout``, the shared lock of
    each of its ``n_shared`` projections (``ProjectionEngine.shared_keys``), then the
    exclusive lock of each of its ``n_scopes`` scopes; one ``$n`` each, composed once."""
    items = ["set_config('lock_timeout', $1::text, true)",
             *[f"pg_advisory_xact_lock_shared(${i}::bigint)" for i in range(2, n_shared + 2)],
             *[f"pg_advisory_xact_lock(${i}::bigint)" for i in range(n_shared + 2, n_shared + n_scopes + 2)]]
    return ("SELECT " + ", ".join(items)).encode()


def _column(row: Any, i: int) -> Any:
    """Column ``i`` of a row (a dict row or a tuple)."""
    return list(row.values())[i] if isinstance(row, dict) else row[i]


def _tenant_of(aggregate: Any) -> str:
    """The tenant an aggregate's events are appended in: its scope's, else its
    ``tenant_id`` (a sweep record of one tenant), else ``""`` (a fabric-wide aggregate,
    e.g. a sweep of every tenant)."""
    scope = getattr(aggregate, "scope", None)
    if isinstance(scope, Scope):
        return scope.tenant_id
    tenant = getattr(aggregate, "tenant_id", None)
    return tenant if isinstance(tenant, str) else ""


def cursor_loader(log: NoteLog) -> Callable[[Cursor[Any], Sequence[UUID]], list[Note]]:
    """The engine's ``load_notes``: replay aggregates on the engine's cursor."""
    def load(cur: Cursor[Any], ids: Sequence[UUID]) -> list[Note]:
        return select_notes(cur, log.sealing_mapper, ids)
    return load
