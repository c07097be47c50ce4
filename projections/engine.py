"""Keeps projections exactly in step with the notification log.

Every projection records its position with eventsourcing's ``PostgresTrackingRecorder``
(table ``mf_<name>_tracking``) in the same transaction as its row writes, under a
per-projection advisory lock, so each event is applied exactly once and work resumes
where it stopped. Rows are a function of the aggregates' current states, so applying a
later state early (a catch-up that loads an aggregate which has moved on) is idempotent.

The log is ordered **per tenant** (issue 24): a writer takes its tenant's
transaction-scoped advisory lock before it draws notification ids and holds it to
COMMIT, so within one tenant id order is commit order, while writers of different
tenants commit concurrently (ids of two tenants may commit out of order).

Positions, accordingly, are kept per (projection, tenant): eventsourcing's tracking
table holds a *floor* row (``application_name`` = the application's name: every event
at or below it is applied, for every tenant) and one row per tenant
(``<application>|<tenant>``: that tenant's events at or below it are applied). The
position of tenant T is ``greatest(floor, row(T))``.

- Writers project inline (inside the event-insert transaction, under the tenant lock
  and a *shared* advisory lock per projection, taken when the unit of work begins,
  before any read): a writer that finds its tenant's
  position behind first catches up that tenant's gap in the same transaction, then
  records its tenant row. Write-side projections (``write_side``: what write decisions
  read) are always projected by the writer; the others (the recall index) too unless
  the fabric runs a separate runner.
- Global catch-up (on open, ``catch_up``, the runner) takes each projection's advisory
  lock *exclusively* (in-flight inline writers finish first, new ones wait), first
  advances the floor over the prefix of events already applied by their tenants
  (:meth:`ProjectionEngine.applied_prefix`), then applies the rest in batches. For a
  projection that writers apply inline the visible head is final under that lock;
  for a deferred one (applied by no writer) the batch ends at :meth:`safe_head`: the
  highest id below which every id is final (committed or never to commit), so no
  position ever passes an event that commits late.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast
from uuid import UUID

from eventsourcing.persistence import IntegrityError, Tracking
from eventsourcing.postgres import PostgresTrackingRecorder
import psycopg
from psycopg import Cursor, sql

from memfabric.domain.errors import ProjectionError
from memfabric.domain.note import Note
from memfabric.projections import tables
from memfabric.projections.base import NoteProjection, accepted
from memfabric.projections.batch import BatchCursor, LazyCursor, RowBatch, batch_rows
from memfabric.projections.tracking_sql import GAP_MESSAGE, TrackingSQL
from memfabric.projections.locks import LOCK_TIMEOUT, advisory_key, bounded_locks, keyed_advisory_key, lock_timed_out

__all__ = ["ERRORS_DDL", "GAP_MESSAGE", "LOCK_TIMEOUT", "SAFE_HEAD_TIMEOUT", "TENANT_SEPARATOR", "LoadNotes", "ProjectionEngine",
           "advisory_key", "bounded_locks", "keyed_advisory_key", "lock_timed_out"]

LoadNotes = Callable[[Cursor[Any], Sequence[UUID]], list[Note]]
"""Replays aggregates by id in the transaction of the given cursor."""

ERRORS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {tables.PROJECTION_ERRORS} ("
    " projection text PRIMARY KEY, notification_id bigint NOT NULL, topic text NOT NULL,"
    " error text NOT NULL, at timestamptz NOT NULL DEFAULT now())"
)
"""Where a projection that stopped on an event is recorded (cleared once it gets past)."""


TENANT_SEPARATOR = "|"
"""Between the application name and the tenant id in a per-tenant tracking row."""


SAFE_HEAD_TIMEOUT = 60.0
"""Seconds :meth:`ProjectionEngine.safe_head` waits for older transactions to end."""


class ProjectionEngine:
    """Projections of one application's notification log."""

    def __init__(
        self,
        datastore: Any,
        application_name: str,
        events_table: str,
        projections: Sequence[NoteProjection],
        load_notes: LoadNotes,
    ) -> None:
        self.datastore = datastore
        self.application_name = application_name
        self.events_table = events_table
        self.projections = list(projections)
        self.load_notes = load_notes
        self.prepare: Callable[[Any], None] | None = None
        """Called with each connection ``catch_up`` uses (e.g. to register pgvector types)."""
        self.lock_secret: bytes | None = None
        """The fabric secret that keys every runtime advisory lock (:meth:`lock_key`);
        ``None`` until the fabric has read it (then plain BLAKE2b keys)."""
        self.lock_timeout = LOCK_TIMEOUT
        """Seconds a lock wait may last in a writer, a catch-up or a rebuild."""
        self.inline_all = True
        """Whether writers apply every projection (``inline_projections``); else the
        projections that are not write-side are deferred to a runner."""
        self.on_commit: Callable[[Sequence[str]], None] | None = None
        """Called by a unit of work after its COMMIT with the tenants it wrote (issue 24:
        the recall index's tail indexer is woken this way); it must not raise."""
        self.trackers = {
            p.name: PostgresTrackingRecorder(datastore, tracking_table_name=tables.tracking(p.name))
            for p in self.projections
        }
        self.statements = TrackingSQL(self.trackers, self._tracking, events_table)
        """The tracking and inline-write statements, composed once per shape."""

    def create(self) -> None:
        """Create the projections' tables, tracking tables and the ``mf_projection_errors``
        table (idempotent)."""
        with self.datastore.transaction(commit=True) as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("mf-ddl"),))
            cur.execute(ERRORS_DDL)
        for p in self.projections:
            self.trackers[p.name].create_table()
            with self.datastore.transaction(commit=True) as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("mf-ddl"),))
                p.create(cur)

    def lock_key(self, name: str) -> int:
        """The advisory-lock key of ``name`` (a projection, ``scope:<key>``,
        ``tenant:<id>``, ``rebuild:<projection>``): keyed by :attr:`lock_secret`."""
        if self.lock_secret is None:
            return advisory_key(name)
        return keyed_advisory_key(self.lock_secret, name)

    def timeout_setting(self) -> str:
        """:attr:`lock_timeout` as a ``lock_timeout`` value (milliseconds)."""
        return f"{max(1, int(self.lock_timeout * 1000))}ms"

    def tenant_row(self, tenant: str) -> str:
        """The tracking ``application_name`` of tenant ``tenant``'s row."""
        return self.application_name + TENANT_SEPARATOR + tenant

    def _tracking(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.datastore.schema, self.trackers[name].tracking_table_name)

    def floor(self, name: str, cur: Cursor[Any]) -> int:
        """The floor of projection ``name``: every event at or below it is applied."""
        return self.trackers[name]._max_tracking_id(self.application_name, cur) or 0  # noqa: SLF001

    def position(self, name: str, cur: Cursor[Any] | None = None) -> int:
        """The applied prefix of projection ``name`` (:meth:`applied_prefix`): every event
        at or below it is applied. Opens its own connection when ``cur`` is ``None``."""
        if cur is None:
            with self.datastore.get_connection() as conn, conn.cursor() as own:
                return self.applied_prefix(name, own)
        return self.applied_prefix(name, cur)

    def applied_prefix(self, name: str, cur: Cursor[Any]) -> int:
        """The highest id ``m`` such that every event with an id at or below ``m`` is
        applied to projection ``name`` (by the floor or its tenant's row): one less than
        the first unapplied event, else the log head. One scan of the events above the
        floor, joined with the tenant rows."""
        floor = self.floor(name, cur)
        row = cur.execute(
            sql.SQL(
                "SELECT (SELECT min(e.notification_id) FROM {e} e LEFT JOIN {t} t"
                " ON t.application_name = %s || e.tenant"
                " WHERE e.notification_id > %s AND e.notification_id > coalesce(t.notification_id, 0)) AS gap,"
                " (SELECT coalesce(max(notification_id), 0) FROM {e}) AS head"
            ).format(e=sql.Identifier(self.events_table), t=self._tracking(name)),
            (self.application_name + TENANT_SEPARATOR, floor),
        ).fetchone()
        assert row is not None
        gap, head = (row["gap"], row["head"]) if isinstance(row, dict) else row
        return max(floor, int(gap) - 1 if gap is not None else int(head))

    def unapplied(self, name: str, cur: Cursor[Any]) -> int:
        """How many events of the log projection ``name`` has not applied yet."""
        row = cur.execute(
            sql.SQL(
                "SELECT count(*) AS n FROM {e} e LEFT JOIN {t} t ON t.application_name = %s || e.tenant"
                " WHERE e.notification_id > greatest(%s, coalesce(t.notification_id, 0))"
            ).format(e=sql.Identifier(self.events_table), t=self._tracking(name)),
            (self.application_name + TENANT_SEPARATOR, self.floor(name, cur)),
        ).fetchone()
        assert row is not None
        return int(row["n"] if isinstance(row, dict) else row[0])

    def tenants_ahead(self, name: str, cur: Cursor[Any], position: int) -> bool:
        """Whether some tenant row of projection ``name`` is past ``position``."""
        row = cur.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM {t} WHERE application_name LIKE %s"
                    " AND notification_id > %s) AS ahead").format(t=self._tracking(name)),
            (_like_prefix(self.application_name + TENANT_SEPARATOR), position),
        ).fetchone()
        assert row is not None
        return bool(row["ahead"] if isinstance(row, dict) else row[0])

    def _record(self, cur: Cursor[Any], name: str, position: int) -> None:
        """Move the floor of ``name`` forward to ``position`` (eventsourcing's tracking)."""
        self.trackers[name]._insert_tracking(  # noqa: SLF001 - same-transaction tracking
            cur, Tracking(self.application_name, position)
        )

    def set_position(self, cur: Cursor[Any], name: str, position: int) -> None:
        """Set projection ``name``'s floor to exactly ``position`` (also backwards) and
        drop its tenant rows, in the caller's transaction; used by rebuilds, which must
        hold the projection's advisory lock exclusively (no writer is applying it)."""
        cur.execute(
            sql.SQL(
                "INSERT INTO {t} (application_name, notification_id) VALUES (%s, %s)"
                " ON CONFLICT (application_name) DO UPDATE SET notification_id = EXCLUDED.notification_id"
            ).format(t=self._tracking(name)),
            (self.application_name, position),
        )
        cur.execute(sql.SQL("DELETE FROM {t} WHERE application_name LIKE %s").format(t=self._tracking(name)),
                    (_like_prefix(self.application_name + TENANT_SEPARATOR),))

    def safe_head(self, timeout: float = SAFE_HEAD_TIMEOUT) -> int:
        """The highest notification id at or below which every id is final: committed
        (visible) or never to commit. Reads the head and the snapshot's ``xmax`` in one
        statement, then waits until every transaction below that ``xmax`` has ended
        (``pg_snapshot_xmin`` of a new snapshot reaches it): a writer draws its ids only
        after it has a transaction id (:meth:`lock_statement` assigns one), so any id
        at or below the head still in flight belongs to one of those transactions — the
        PgQ / Emmett technique. Raises ``ProjectionLagError`` after ``timeout`` s."""
        from memfabric.domain.errors import ProjectionLagError  # noqa: PLC0415
        with self.datastore.get_connection() as conn:
            row = conn.execute(sql.SQL(
                "SELECT coalesce(max(notification_id), 0) AS head,"
                " pg_snapshot_xmax(pg_current_snapshot()) AS xmax FROM {e}").format(
                    e=sql.Identifier(self.events_table))).fetchone()
            assert row is not None
            head, xmax = int(row["head"]), row["xmax"]
            deadline = time.monotonic() + timeout
            pause = 0.001
            while True:
                done = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot()) >= %s::text::xid8 AS done",
                                    (str(xmax),)).fetchone()
                if done is not None and done["done"]:
                    return head
                if time.monotonic() > deadline:
                    raise ProjectionLagError(
                        f"a transaction older than {timeout}s holds notification ids below {head}: "
                        "the projections wait for it to end")
                time.sleep(pause)
                pause = min(pause * 2, 0.02)

    # ----------------------------------------------------------------- errors
    def record_error(self, error: ProjectionError) -> None:
        """Remember that ``error.projection`` stopped (own transaction), for ``status``."""
        with self.datastore.transaction(commit=True) as cur:
            cur.execute(
                f"INSERT INTO {tables.PROJECTION_ERRORS} (projection, notification_id, topic, error)"  # noqa: S608
                " VALUES (%s, %s, %s, %s) ON CONFLICT (projection) DO UPDATE SET"
                " notification_id = EXCLUDED.notification_id, topic = EXCLUDED.topic,"
                " error = EXCLUDED.error, at = now()",
                (error.projection, error.notification_id, error.topic, error.cause),
            )

    def clear_error(self, cur: Cursor[Any], name: str) -> None:
        """Forget a recorded stop of projection ``name`` (it got past it)."""
        cur.execute(f"DELETE FROM {tables.PROJECTION_ERRORS} WHERE projection = %s", (name,))  # noqa: S608

    def errors(self) -> dict[str, dict[str, Any]]:
        """Recorded stops by projection name: ``{notification_id, topic, error, at}``."""
        with self.datastore.get_connection() as conn:
            rows = conn.execute(
                f"SELECT projection, notification_id, topic, error, at FROM {tables.PROJECTION_ERRORS}"  # noqa: S608
            ).fetchall()
        return {r["projection"]: {k: r[k] for k in ("notification_id", "topic", "error", "at")} for r in rows}

    # ----------------------------------------------------------------- inline
    def inline(self, *, all_projections: bool) -> list[NoteProjection]:
        """The projections a writer applies: the write-side ones, or every one."""
        return [p for p in self.projections if all_projections or p.write_side]

    def deferred(self) -> list[NoteProjection]:
        """The projections a separate runner keeps (not write-side)."""
        return [p for p in self.projections if not p.write_side]

    def shared_keys(self, projections: Sequence[NoteProjection]) -> list[int]:
        """The keys of the shared advisory lock of each projection a writer applies, in
        engine order. A unit of work takes them first, before any read (with its scope
        locks), and holds them to COMMIT; global catch-up and rebuild switches take them
        exclusively, so they wait for in-flight writers and hold new ones back before
        those read anything: the switch's table locks can then never close a cycle with
        a writer."""
        return [self.lock_key(p.name) for p in projections]

    def lock_statement_raw(self, tenants: Sequence[str]) -> tuple[bytes, list[int]]:
        """:meth:`lock_statement` with ``$n`` placeholders."""
        locks = ", ".join(f"pg_advisory_xact_lock(${i})" for i in range(1, len(tenants) + 1))
        return (f"SELECT {locks}, pg_current_xact_id()".encode(),
                [self.lock_key("tenant:" + t) for t in tenants])

    def lock_statement(self, tenants: Sequence[str]) -> tuple[bytes, list[int]]:
        """The statement a writer runs before it draws notification ids: each tenant's
        exclusive lock, in the given (sorted) order (held to COMMIT: a tenant's ids
        commit in order) and ``pg_current_xact_id()`` (the writer has a transaction id
        before it draws any id: :meth:`safe_head` relies on it)."""
        locks = ", ".join("pg_advisory_xact_lock(%s)" for _ in tenants)
        return (f"SELECT {locks}, pg_current_xact_id()".encode(),
                [self.lock_key("tenant:" + t) for t in tenants])

    def apply_inline(self, cur: Cursor[Any], notes: Iterable[Any], ids: Sequence[int],
                     projections: Sequence[NoteProjection], tenant: str,
                     positions: dict[str, int] | None = None) -> None:
        """Project ``notes`` (just saved, events got ``ids``, all of tenant ``tenant``)
        in the writer's transaction into ``projections`` (see :meth:`inline`), under
        :meth:`shared_keys` and :meth:`lock_statement`: catch up the tenant's gap first, then apply and record
        the tenant's positions. ``positions``: the tenant's positions read after the
        lock (:meth:`send_positions`), else read here."""
        if not ids or not projections:
            return
        notes = list(notes)
        first, last = min(ids), max(ids)
        if positions is None:
            positions = self._tenant_positions(cur, projections, tenant)
        if all(positions[p.name] >= first - 1 for p in projections):
            self._apply_batched(cur, notes, last, projections, tenant)
            return
        for p in projections:
            pos = positions[p.name]
            # Each projection on a cursor of its own: in pipeline mode a statement sent on a
            # cursor that still waits for the result of an earlier one (the rows another
            # projection wrote) may get that result when the server has flushed it, and its
            # fetch then fails ("the last operation didn't produce records (command status:
            # INSERT 0 1)": a fresh user's reembed after a blue-green rebuild).
            with cur.connection.cursor() as own:
                if pos < first - 1:
                    self._apply_range(own, p, pos, first - 1, tenant=tenant)
                p.apply(own, accepted(p, notes))
        self._record_all(cur, last, projections, tenant)

    def _apply_batched(self, cur: Cursor[Any], notes: list[Any], last: int,
                       projections: Sequence[NoteProjection], tenant: str) -> None:
        """:meth:`apply_inline` without a gap to catch up: the rows of every projection
        that may batch travel with the tracking statement as one statement
        (:class:`~memfabric.projections.batch.RowBatch`); the others (the ledger,
        entities) are applied first, each on a cursor of its own."""
        batch = self.collect(BatchCursor(RowBatch(), cur.connection.cursor), notes, projections)
        self._record_all(cur, last, projections, tenant, batch)

    def collect(self, sink: BatchCursor, notes: list[Any], projections: Sequence[NoteProjection]) -> RowBatch:
        """Apply ``projections`` to ``notes`` in the writer's transaction: those that may
        batch (``batch_rows``) into ``sink``'s batch (returned), the others statement by
        statement now, each on a cursor made when it first runs something (a projection
        none of whose aggregate types is among ``notes`` is skipped: it has nothing to
        write). A batch over :data:`~memfabric.projections.batch.MAX_BATCH_PARAMS` is
        run at once and an empty one returned."""
        try:
            for p in projections:
                items = accepted(p, notes)
                if not items:
                    continue
                if batch_rows(p):
                    p.apply(cast("Cursor[Any]", sink), items)  # write_rows collects into the batch
                    continue
                own = LazyCursor(sink.make_cursor)
                try:
                    p.apply(cast("Cursor[Any]", own), items)
                finally:
                    own.close()
            if sink.batch.too_big():
                sink.batch.run_each(sink.direct())
                return RowBatch()
            return sink.batch
        finally:
            sink.close()

    def _record_all(self, cur: Cursor[Any], position: int, projections: Sequence[NoteProjection],
                    tenant: str, batch: RowBatch | None = None) -> None:
        """Record ``position`` as tenant ``tenant``'s row of every projection with
        eventsourcing's tracking statements, composed into one statement (one
        data-modifying CTE per projection, after ``batch``'s row writes) that fails when
        a row was already past ``position`` (eventsourcing's single-row tracking refuses
        to move back): a cast of the message ``memfabric: failed to record tracking of
        <name>`` to ``int``, so nothing has to be fetched (in pipeline mode the failure
        surfaces at COMMIT and the write rolls back). Raises ``IntegrityError`` when not
        in pipeline mode."""
        names = tuple(p.name for p in projections)
        if batch is not None and batch.parts:
            with psycopg.RawCursor(cur.connection) as raw:
                self._run_tracking(raw, self.statements.batched(names, batch),
                                   [self.tenant_row(tenant), position, *batch.params], position)
            return
        self._run_tracking(cur, self.statements.tracking(names), {"application_name": self.tenant_row(tenant),
                                                                  "notification_id": position}, position)

    @staticmethod
    def _run_tracking(cur: Cursor[Any], query: bytes, params: Any, position: int) -> None:
        try:
            cur.execute(query, params, prepare=True)
        except psycopg.errors.InvalidTextRepresentation as exc:
            raise IntegrityError(f"failed to record tracking at {position}: {exc}") from exc

    # ------------------------------------------------------ one round trip
    def fast_statement(self, projections: Sequence[NoteProjection], batch: RowBatch, tenant: str,
                       appended: int) -> tuple[bytes, list[Any]]:
        """The statement (``$n`` placeholders) and parameters with which a writer of
        tenant ``tenant`` that has just appended ``appended`` events under the tenant's
        lock, and collected its rows (:meth:`collect`), finishes without reading
        anything back first (issue 24: a plain write is one round trip): it writes the
        batched rows and records the tenant's position of every projection as the
        tenant's newest event id, which is its one value. It also checks that the
        tenant had no gap: every event of the tenant above the lowest of its positions
        must be one of the ``appended``; otherwise it fails with
        :data:`~memfabric.projections.tracking_sql.GAP_MESSAGE` (a cast error) and the
        transaction rolls back: the caller writes again through :meth:`apply_inline`,
        which catches the gap up."""
        query = self.statements.fast(tuple(p.name for p in projections), batch)
        return query, [self.tenant_row(tenant), self.application_name, tenant, appended, *batch.params]

    def gap_probe(self, projections: Sequence[NoteProjection], tenant: str) -> tuple[bytes, list[str]]:
        """A statement (and its parameters) whose one value says whether tenant
        ``tenant`` has events some of ``projections`` have not applied (a gap: a
        writer's one-round-trip statement would refuse, :meth:`fast_statement`)."""
        names = tuple(p.name for p in projections)
        return self.statements.probe(names), [tenant, *[self.tenant_row(tenant), self.application_name] * len(names)]

    def _tenant_positions(self, cur: Cursor[Any], projections: Sequence[NoteProjection],
                          tenant: str) -> dict[str, int]:
        """Tenant ``tenant``'s position of each projection (``greatest(floor, row)``),
        in one round trip."""
        self.send_positions(cur, projections, tenant)
        return self.read_positions(cur)

    @staticmethod
    def read_positions(cur: Cursor[Any]) -> dict[str, int]:
        """The result of :meth:`send_positions` on ``cur``."""
        return {row["name"]: int(row["pos"] or 0) for row in cur.fetchall()}

    def positions_array(self, projections: Sequence[NoteProjection]) -> tuple[bytes, int]:
        """An SQL expression for the tenant's position of each projection, in order, as
        one ``bigint[]`` (NULL entries: no row), with one ``%s`` (the ``text[]`` of
        :meth:`tenant_rows`) per projection; and that count. What a writer's append
        statement returns beside the new ids (:meth:`send_positions` in one array)."""
        return self.statements.positions_array(tuple(p.name for p in projections))

    def tenant_rows(self, tenant: str) -> list[str]:
        """The tracking rows whose greatest position is tenant ``tenant``'s: the floor's and its own."""
        return [self.application_name, self.tenant_row(tenant)]

    def send_positions(self, cur: Cursor[Any], projections: Sequence[NoteProjection], tenant: str) -> None:
        """Send the query of tenant ``tenant``'s positions on ``cur`` (fetched by
        :meth:`read_positions`; in pipeline mode, without waiting)."""
        cur.execute(self.statements.positions(tuple(p.name for p in projections)),
                    {"rows": [self.application_name, self.tenant_row(tenant)]}, prepare=True)

    # --------------------------------------------------------------- catch-up
    def _select(self, cur: Cursor[Any], after: int, upto: int | None, limit: int,
                tenant: str | None = None) -> list[dict[str, Any]]:
        stop = "AND notification_id <= %s " if upto is not None else ""
        only = "AND tenant = %s " if tenant is not None else ""
        params: list[Any] = [after]
        if upto is not None:
            params.append(upto)
        if tenant is not None:
            params.append(tenant)
        params.append(limit)
        return cur.execute(
            f"SELECT notification_id, originator_id, topic FROM {self.events_table} "  # noqa: S608
            f"WHERE notification_id > %s {stop}{only}ORDER BY notification_id LIMIT %s",
            params,
        ).fetchall()

    def _apply_range(
        self, cur: Cursor[Any], p: NoteProjection, after: int, upto: int | None, limit: int = 2000,
        *, tenant: str | None = None, one_page: bool = False,
    ) -> int:
        """Apply events ``(after, upto]`` (of ``tenant`` only, when given; only the first
        ``limit`` with ``one_page``) to ``p``; returns the last position applied."""
        pos = after
        while True:
            with cur.connection.cursor() as read:  # not behind ``cur``'s rows (see apply_inline)
                rows = self._select(read, pos, upto, limit, tenant)
            if not rows:
                return pos
            ids = list(dict.fromkeys(r["originator_id"] for r in rows))
            try:
                with cur.connection.cursor() as read:
                    notes = self.load_notes(read, ids)
                p.apply(cur, accepted(p, notes))
            except Exception as exc:  # name the event that stopped the projection
                raise self._locate(p.name, rows, ids, exc) from exc
            pos = int(rows[-1]["notification_id"])
            if one_page or len(rows) < limit:
                return pos

    @contextmanager
    def _transaction(self) -> Iterator[Cursor[Any]]:
        with self.datastore.get_connection() as conn:
            if self.prepare is not None:
                self.prepare(conn)
            with conn.transaction(), conn.cursor() as cur:
                yield cur

    def _locate(
        self, name: str, rows: list[dict[str, Any]], ids: list[UUID], exc: Exception
    ) -> ProjectionError:
        """The error naming the first event of the batch whose note cannot be loaded
        (the batch's first event when every note loads, e.g. a failing write)."""
        for aggregate_id in ids:
            try:
                with self._transaction() as cur:
                    self.load_notes(cur, [aggregate_id])
            except Exception as note_exc:  # noqa: BLE001 - reported, never swallowed
                row = next(r for r in rows if r["originator_id"] == aggregate_id)
                return ProjectionError(name, row["notification_id"], row["topic"], repr(note_exc))
        return ProjectionError(name, rows[0]["notification_id"], rows[0]["topic"], repr(exc))

    def _advance_to(self, p: NoteProjection, upto: int) -> None:
        """Apply the events before a failing one, so the position stops right before it
        (best effort: the stop is reported either way)."""
        try:
            with self._transaction() as cur:
                self.lock_exclusive(cur, p)
                pos = self.floor(p.name, cur)
                if upto > pos:
                    new = self._apply_range(cur, p, pos, upto)
                    if new > pos:
                        self._record(cur, p.name, new)
        except ProjectionError:
            pass

    def catch_up(self, *, batch: int = 2000,
                 on_batch: Callable[[str, int, int], None] | None = None) -> dict[str, int]:
        """Bring every projection up to the log head; returns the new positions.
        One transaction (and one hold of the projection's lock) per ``batch`` events;
        ``on_batch(name, events, position)``: called after each committed batch that has
        more behind it (the progress of a long catch-up).

        A projection that fails on an event keeps its position before that event, its
        stop is recorded in ``mf_projection_errors`` (see :meth:`errors`), the other
        projections still catch up, and the first ``ProjectionError`` is raised at the
        end: no event is ever skipped."""
        out: dict[str, int] = {}
        failed: ProjectionError | None = None
        for p in self.projections:
            try:
                while True:
                    upto = None if self.applied_inline(p) else self.safe_head()
                    with bounded_locks(f"catch-up of {p.name}"), self._transaction() as cur:
                        self.lock_exclusive(cur, p)
                        floor = self.floor(p.name, cur)
                        pos = self.applied_prefix(p.name, cur)
                        if upto is not None:
                            pos = min(pos, max(floor, upto))
                        new = self._apply_range(cur, p, pos, upto, limit=batch, one_page=True)
                        if new > floor:
                            self._record(cur, p.name, new)
                            self.clear_error(cur, p.name)
                    if new == pos or new - pos < batch:
                        out[p.name] = new
                        break
                    if on_batch is not None:
                        on_batch(p.name, new - pos, new)
            except ProjectionError as exc:
                self._advance_to(p, exc.notification_id - 1)
                self.record_error(exc)
                failed = failed or exc
        if failed is not None:
            raise failed
        return out

    def lock_exclusive(self, cur: Cursor[Any], p: NoteProjection) -> None:
        """Take ``p``'s advisory lock exclusively in ``cur``'s transaction, waiting at
        most :attr:`lock_timeout` (then ``lock_not_available``)."""
        cur.execute("SELECT set_config('lock_timeout', %s, true), pg_advisory_xact_lock(%s)",
                    (self.timeout_setting(), self.lock_key(p.name)))

    def applied_inline(self, p: NoteProjection) -> bool:
        """Whether writers apply ``p`` in their transactions (then the visible head is
        final under ``p``'s exclusive lock; else :meth:`safe_head` bounds a catch-up)."""
        return p.write_side or self.inline_all

    def head(self) -> int:
        with self.datastore.get_connection() as conn:
            row = conn.execute(f"SELECT max(notification_id) AS m FROM {self.events_table}").fetchone()  # noqa: S608
        return int(row["m"] or 0)


def _like_prefix(prefix: str) -> str:
    """A ``LIKE`` pattern matching every string that starts with ``prefix``."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
