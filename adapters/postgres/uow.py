"""The PostgreSQL unit of work: one connection, one transaction per write.

:class:`PostgresUnitOfWork` owns everything a write touches, explicitly (no context
variables, no pass-through keyword arguments):

- the pooled connection and its transaction (opened on ``__enter__``);
- the projections' shared advisory locks and the scopes' write locks
  (``pg_advisory_xact_lock``, in sorted key order so two multi-scope writers cannot
  deadlock), taken first, in one statement, before any read;
- every read the write decides on: aggregate replays, key reads, the consolidation
  neighbours, paths and the working value — all on this connection;
- the aggregates to save, their new data keys and the keys to destroy;
- at :meth:`~PostgresUnitOfWork.commit`: take the tenant's append lock
  (``ProjectionEngine.lock_statement``), seal the
  events, insert the keys, delete the shredded keys, append the events (one
  statement), apply the write-side projections (and every projection when projecting
  inline) with the tenant's tracking, then COMMIT. One transaction, one connection: a
  pool of size 1 suffices. Writers of different tenants never wait for each other
  here (issue 24); writers of one tenant queue on its lock from the append to COMMIT.
"""

from __future__ import annotations

import functools

import hashlib
import hmac
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import datetime
from types import TracebackType
from typing import Any
from uuid import UUID

from memfabric.adapters.crypto import TransactionKeys
from memfabric.adapters.postgres import NoteLog, VectorTypes, dimension_guard, select_notes
from memfabric.domain.consolidation import Neighbour, NeighbourQuery
from eventsourcing.persistence import IntegrityError

from memfabric.domain.link_terms import TermPostings
from memfabric.domain.errors import ConflictError, FabricError, LockTimeoutError, TrackingError
from memfabric.domain.note import Note, note_uuid
from memfabric.domain.scope import Scope
from memfabric.domain.shredding import shreds_keys
from memfabric.domain.working import BlockEntry
from memfabric.projections import consolidation_index, note_scope, tables, working_value
from memfabric.projections.engine import ProjectionEngine, bounded_locks, lock_timed_out
import psycopg
from psycopg import Connection, Cursor, sql


class PostgresUnitOfWork:
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
        self._conn: Connection[Any] | None = None
        self._keys: TransactionKeys | None = None
        self._events: list[Any] = []
        self._aggregates: dict[UUID, Note] = {}
        self._others: dict[UUID, Any] = {}
        """Aggregates other than notes (the conversation ledger), saved alike."""
        self._committed = False
        self._position = 0
        self._tenants: list[str] = []
        """The tenants :meth:`commit` appended events of (for ``engine.on_commit``)."""

    # --------------------------------------------------------------- lifetime
    def __enter__(self) -> PostgresUnitOfWork:
        stack = ExitStack()
        try:
            conn = stack.enter_context(self._log.datastore.get_connection())
            self._vectors.ensure(conn)
            # Pipeline mode (issue 24) with BEGIN and COMMIT sent as statements (the pool's
            # connections are in autocommit mode): psycopg's ``transaction()`` nests
            # pipelines and syncs at each level, five round trips for a write that needs
            # two (everything up to the append's ids; the rows, the tracking and COMMIT).
            pipeline = conn.pipeline()
            pipeline.__enter__()
            stack.callback(self._end_pipeline, conn, pipeline)
            conn.execute(b"BEGIN")
            projections = self._engine.inline(all_projections=self._inline_all)
            keys = sorted(self._engine.lock_key("scope:" + key) for key in {s.key for s in self._scopes})
            conn.execute(_opening_sql(len(projections), len(keys)),
                         [self._engine.timeout_setting(), *self._engine.shared_keys(projections), *keys],
                         prepare=True)
        except BaseException as exc:
            self._ending = exc
            stack.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._stack, self._conn = stack, conn
        self._keys = TransactionKeys(conn, self._log.keys)
        return self

    _ending: BaseException | None = None
    """The exception a unit of work ends with (``None``: it commits or rolls back cleanly)."""

    def _end_pipeline(self, conn: Connection[Any], pipeline: Any) -> None:
        """End the transaction and leave pipeline mode: COMMIT when :meth:`commit` ran
        and nothing failed, else roll back (psycopg's ``rollback()``, after the Sync). A
        failure the final Sync reports (a statement's error surfaces there in pipeline
        mode) leaves the session in a failed transaction block: it is rolled back before
        the error propagates."""
        failed = self._ending
        if failed is None and self._committed:
            conn.execute(b"COMMIT")
        # Otherwise psycopg's own ``rollback()`` below, after the Sync: a ``ROLLBACK`` sent
        # as a statement makes psycopg forget its prepared statements and defer the
        # server's ``DEALLOCATE ALL`` past the next statement it prepares ("prepared
        # statement _pg3_N does not exist" on that connection's next use).
        try:
            pipeline.__exit__(type(failed) if failed else None, failed, None)
        finally:
            if conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE and not conn.closed:
                conn.rollback()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        stack, self._stack, self._conn = self._stack, None, None
        if stack is None:
            return
        self._ending = exc
        with bounded_locks("write"):  # a lock wait that ran out: LockTimeoutError
            if lock_timed_out(exc):
                stack.__exit__(exc_type, exc, tb)
                raise LockTimeoutError(f"write: a lock wait ran out ({exc}); nothing was written") from exc
            try:
                stack.__exit__(exc_type, exc, tb)
            except Exception as failed:
                if _tracking_refused(failed):  # the batched tracking check, reported at the Sync
                    raise TrackingError(f"write: {failed}; nothing was written") from failed
                raise
        if exc_type is None and self._committed and self._keys is not None:
            self._keys.committed()
            if self._tenants and self._engine.on_commit is not None:
                self._engine.on_commit(self._tenants)

    @property
    def conn(self) -> Connection[Any]:
        if self._conn is None:
            raise FabricError("the unit of work is not open")
        return self._conn

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

    def load_ids(self, aggregate_ids: Sequence[UUID]) -> list[Note]:
        """The notes ``aggregate_ids`` (held here, else replayed), read in the tenants of
        this unit of work's scopes only (a note of another tenant is never one a write
        decides on; a partitioned log is then read in their partitions, issue 25)."""
        missing = [i for i in aggregate_ids if i not in self._aggregates]
        tenants = sorted({s.tenant_id for s in self._scopes}) or None
        with self.conn.cursor() as cur:
            loaded = {n.id: n for n in select_notes(cur, self._log.sealing_mapper, missing, self.keys, tenants)}
        out = []
        for i in aggregate_ids:
            note = self._aggregates.get(i) or loaded.get(i)
            if note is not None:
                out.append(note)
        return out

    def load_unreadable(self, aggregate_ids: Sequence[UUID]) -> list[Note]:
        """Replay ``aggregate_ids`` as if their data keys were destroyed (protected
        fields read ``<erased>``): how a note whose key is faulty is still tombstoned."""
        self.keys.unreadable.update(aggregate_ids)
        return self.load_ids(aggregate_ids)

    def exists(self, scope: Scope, note_id: str) -> bool:
        aggregate_id = note_uuid(scope, note_id)
        if aggregate_id in self._aggregates:
            return True
        row = self.conn.execute(
            sql.SQL("SELECT 1 FROM {t} WHERE originator_id = %s LIMIT 1").format(
                t=sql.Identifier(tables.EVENTS)), (aggregate_id,)).fetchone()
        return row is not None

    def resolve(self, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
        """:func:`memfabric.projections.note_scope.resolve` on this transaction's connection."""
        with self.conn.cursor() as cur:
            return list(note_scope.resolve(cur, scope, note_id))

    def neighbours(self, scope: Scope, queries: Sequence[NeighbourQuery], *,
                   now: datetime, per_query: int = 3) -> list[list[Neighbour]]:
        with dimension_guard(), self.conn.cursor() as cur:
            return consolidation_index.select_neighbours(cur, scope, queries, now=now,
                                                         per_query=per_query)

    def term_postings(self, scope: Scope, kind: str, terms: Sequence[str], *,
                      now: datetime, latest: bool = False) -> TermPostings:
        with self.conn.cursor() as cur:
            return consolidation_index.select_term_postings(cur, scope, kind, terms, now=now, latest=latest)

    def note_ids_by_path(self, scope: Scope, path: str) -> list[str]:
        with self.conn.cursor() as cur:
            return note_scope.ids_by_path(cur, scope, path)

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        with self.conn.cursor() as cur:
            return working_value.select_blocks(cur, scope)

    def content_hmac(self, text: str) -> str:
        return hmac.new(self._secret(), text.encode(), hashlib.sha256).hexdigest()

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
        that writes several (a fabric-wide sweep record beside a tenant's notes) takes
        their locks in sorted order and records each tenant's positions."""
        conn = self.conn
        if not self._events:
            self._committed = True
            return
        aggregates: dict[UUID, Any] = {**self._others, **self._aggregates}
        event_tenants = [_tenant_of(aggregates[e.originator_id]) for e in self._events]
        tenants = sorted(set(event_tenants))
        self._tenants = tenants
        projections = self._engine.inline(all_projections=self._inline_all)
        mapper = self._log.sealing_mapper.bound(self.keys)
        stored = [mapper.to_stored_event(e) for e in self._events]
        if len(tenants) == 1 and self._inline_all:
            self._commit_one_tenant(stored, tenants[0], aggregates, projections)
            return
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


    def _commit_one_tenant(self, stored: Sequence[Any], tenant: str, aggregates: dict[UUID, Any],
                           projections: Sequence[Any]) -> None:
        """:meth:`commit` of a unit of work that writes one tenant and projects inline:
        the tenant's lock, then one statement that inserts the new keys and the events
        and returns their ids with the tenant's positions (its snapshot is taken after
        the lock, so it sees every earlier write of the tenant), then the rows and the
        tracking in one more (``ProjectionEngine.apply_inline``): four statements with
        the scope locks, where one per table would be eleven."""
        conn = self.conn
        with dimension_guard(), conn.cursor() as cur, conn.cursor() as ins:
            query, params = self._engine.lock_statement([tenant])
            cur.execute(query, params, prepare=True)
            self.keys.destroy(cur)
            statement, args = self._append_statement(stored, tenant, projections)
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

    def _append_statement(self, stored: Sequence[Any], tenant: str,
                          projections: Sequence[Any]) -> tuple[bytes, list[Any]]:
        """``WITH k AS (<new keys>), e AS (<events> RETURNING notification_id) SELECT
        <ids in order>, <the tenant's positions>`` and its parameters."""
        recorder = self._log.note_recorder
        positions, n = self._engine.positions_array(projections)
        keys = self.keys.pending
        key = (bool(keys), positions)
        query = _APPEND_SQL.get(key)
        if query is None:
            ctes = ([b"k AS (" + TransactionKeys.FLUSH_SQL.encode() + b")"] if keys else [])
            ctes.append(b"e AS (" + recorder.insert_sql() + b")")
            query = _APPEND_SQL[key] = (b"WITH " + b", ".join(ctes)
                                        + b" SELECT ARRAY(SELECT notification_id FROM e ORDER BY 1) AS ids, "
                                        + positions + b" AS pos")
        args: list[Any] = [*(self.keys.flush_params() if keys else ()),
                           *recorder.insert_params(stored, [tenant] * len(stored)),
                           *([self._engine.tenant_rows(tenant)] * n)]
        return query, args


_APPEND_SQL: dict[tuple[bool, bytes], bytes] = {}
"""The append statements of :meth:`PostgresUnitOfWork._append_statement`, by (new keys?, positions)."""


@functools.lru_cache(maxsize=64)
def _opening_sql(n_shared: int, n_scopes: int) -> bytes:
    """The statement a unit of work opens with: its ``lock_timeout``, the shared lock of
    each of its ``n_shared`` projections (``ProjectionEngine.shared_keys``), then the
    exclusive lock of each of its ``n_scopes`` scopes; one ``%s`` each, composed once."""
    items = ["set_config('lock_timeout', %s, true)", *["pg_advisory_xact_lock_shared(%s)"] * n_shared,
             *["pg_advisory_xact_lock(%s)"] * n_scopes]
    return ("SELECT " + ", ".join(items)).encode()


def _tracking_refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or one it was raised from) is the tracking statement's refusal
    (``ProjectionEngine._record_all``: a cast error naming the projection)."""
    seen = 0
    while exc is not None and seen < 5:
        if "memfabric: failed to record tracking" in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


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
