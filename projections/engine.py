"""Keeps projections exactly in step with the notification log.

Every projection records its position with eventsourcing's ``PostgresTrackingRecorder``
(table ``mf_<name>_tracking``) in the same transaction as its row writes, under a
per-projection advisory lock, so each event is applied exactly once and work resumes
where it stopped. Rows are a function of the aggregates' current states, so applying a
later state early (a catch-up that loads an aggregate which has moved on) is idempotent.

Writers project inline (inside the event-insert transaction, after the events table
lock: the positions are gap-free); a writer that finds the projection behind first
catches up the gap in the same transaction. Write-side projections (those whose
``write_side`` is True: what write decisions read) are always projected by the writer;
the others (the recall index) are projected by the writer too unless the fabric runs
a separate runner, which ``catch_up`` serves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError, Tracking
from eventsourcing.postgres import PostgresTrackingRecorder
from psycopg import Cursor, sql

from memfabric.domain.errors import ProjectionError
from memfabric.domain.note import Note
from memfabric.projections import tables
from memfabric.projections.base import NoteProjection, accepted

LoadNotes = Callable[[Cursor[Any], Sequence[UUID]], list[Note]]
"""Replays aggregates by id in the transaction of the given cursor."""

ERRORS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {tables.PROJECTION_ERRORS} ("
    " projection text PRIMARY KEY, notification_id bigint NOT NULL, topic text NOT NULL,"
    " error text NOT NULL, at timestamptz NOT NULL DEFAULT now())"
)
"""Where a projection that stopped on an event is recorded (cleared once it gets past)."""


def advisory_key(name: str) -> int:
    """Stable signed 63-bit advisory-lock key for ``name`` (BLAKE2b)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


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
        self._positions_sql: dict[tuple[str, ...], tuple[str, list[Any]]] = {}
        self._tracking_sql: dict[tuple[str, ...], bytes] = {}
        self.trackers = {
            p.name: PostgresTrackingRecorder(datastore, tracking_table_name=tables.tracking(p.name))
            for p in self.projections
        }

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

    def position(self, name: str, cur: Cursor[Any] | None = None) -> int:
        tracker = self.trackers[name]
        if cur is not None:
            return tracker._max_tracking_id(self.application_name, cur) or 0  # noqa: SLF001
        return tracker.max_tracking_id(self.application_name) or 0

    def _record(self, cur: Cursor[Any], name: str, position: int) -> None:
        self.trackers[name]._insert_tracking(  # noqa: SLF001 - same-transaction tracking
            cur, Tracking(self.application_name, position)
        )

    def set_position(self, cur: Cursor[Any], name: str, position: int) -> None:
        """Set projection ``name``'s tracked position to exactly ``position`` (also
        backwards) in the caller's transaction; used by rebuilds, which must hold the
        projection's advisory lock."""
        cur.execute(
            sql.SQL(
                "INSERT INTO {t} (application_name, notification_id) VALUES (%s, %s)"
                " ON CONFLICT (application_name) DO UPDATE SET notification_id = EXCLUDED.notification_id"
            ).format(t=sql.Identifier(self.datastore.schema, self.trackers[name].tracking_table_name)),
            (self.application_name, position),
        )

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

    def apply_inline(self, cur: Cursor[Any], notes: Iterable[Any], ids: Sequence[int],
                     projections: Sequence[NoteProjection]) -> None:
        """Project ``notes`` (just saved, events got ``ids``) in the writer's transaction
        into ``projections`` (see :meth:`inline`), catching up any gap first."""
        if not ids or not projections:
            return
        notes = list(notes)
        first, last = min(ids), max(ids)
        positions = self._lock_and_read_positions(cur, projections)
        for p in projections:
            pos = positions[p.name]
            if pos < first - 1:
                self._apply_range(cur, p, pos, first - 1)
            p.apply(cur, accepted(p, notes))
        self._record_all(cur, last, projections)

    def _record_all(self, cur: Cursor[Any], position: int, projections: Sequence[NoteProjection]) -> None:
        """Record ``position`` for every projection with eventsourcing's tracking
        statements, composed into one statement (one data-modifying CTE per projection:
        one round trip). Raises ``IntegrityError`` when a projection was already past
        ``position`` (eventsourcing's single-row tracking refuses to move back)."""
        names = tuple(p.name for p in projections)
        query = self._tracking_sql.get(names)
        if query is None:
            query = self._tracking_sql[names] = self._tracking_query(names)
        params = {"application_name": self.application_name, "notification_id": position}
        row = cur.execute(query, params, prepare=True).fetchone()
        counts = list(row.values()) if isinstance(row, dict) else list(row or ())
        for name, count in zip(names, counts, strict=True):
            if not count:
                raise IntegrityError(f"failed to record tracking for {name} at {position}")

    def _tracking_query(self, names: Sequence[str]) -> bytes:
        """``WITH t0 AS (<tracking insert 0>), ... SELECT (SELECT count(*) FROM t0), ...``"""
        ctes = sql.SQL(", ").join(
            sql.SQL("{} AS ({})").format(sql.Identifier(f"t{i}"), self.trackers[n].insert_tracking_statement)
            for i, n in enumerate(names))
        counts = sql.SQL(", ").join(
            sql.SQL("(SELECT count(*) FROM {}) AS {}").format(sql.Identifier(f"t{i}"), sql.Identifier(f"c{i}"))
            for i in range(len(names)))
        return sql.SQL("WITH {} SELECT {}").format(ctes, counts).as_bytes(None)

    def _lock_and_read_positions(self, cur: Cursor[Any], projections: Sequence[NoteProjection]) -> dict[str, int]:
        """Take the projections' advisory locks (in engine order, as every projection
        writer does) and read their tracked positions, in one round trip."""
        names = [p.name for p in projections]
        key = tuple(names)
        if key not in self._positions_sql:
            self._positions_sql[key] = self._positions_query(names)
        query, params = self._positions_sql[key]
        rows = cur.execute(query, params, prepare=True).fetchall()
        return {row["name"]: int(row["pos"] or 0) for row in rows}

    def _positions_query(self, names: list[str]) -> tuple[str, list[Any]]:
        locks = ", ".join("pg_advisory_xact_lock(%s)" for _ in names)
        reads = " UNION ALL ".join(
            f"(SELECT %s::text AS name, max(notification_id) AS pos FROM "  # noqa: S608
            f"{self.trackers[n].tracking_table_name} WHERE application_name = %s)"
            for n in names
        )
        params: list[Any] = [advisory_key(n) for n in names]
        for n in names:
            params += [n, self.application_name]
        return f"WITH l AS MATERIALIZED (SELECT {locks}) SELECT r.* FROM l, ({reads}) r", params  # noqa: S608

    # --------------------------------------------------------------- catch-up
    def _select(self, cur: Cursor[Any], after: int, upto: int | None, limit: int) -> list[dict[str, Any]]:
        stop = "AND notification_id <= %s " if upto is not None else ""
        params: list[Any] = [after]
        if upto is not None:
            params.append(upto)
        params.append(limit)
        return cur.execute(
            f"SELECT notification_id, originator_id, topic FROM {self.events_table} "  # noqa: S608
            f"WHERE notification_id > %s {stop}ORDER BY notification_id LIMIT %s",
            params,
        ).fetchall()

    def _apply_range(
        self, cur: Cursor[Any], p: NoteProjection, after: int, upto: int | None, limit: int = 2000
    ) -> int:
        """Apply events ``(after, upto]`` to ``p``; returns the last position applied."""
        pos = after
        while True:
            rows = self._select(cur, pos, upto, limit)
            if not rows:
                return pos
            ids = list(dict.fromkeys(r["originator_id"] for r in rows))
            try:
                notes = self.load_notes(cur, ids)
                p.apply(cur, accepted(p, notes))
            except Exception as exc:  # name the event that stopped the projection
                raise self._locate(p.name, rows, ids, exc) from exc
            pos = int(rows[-1]["notification_id"])
            if len(rows) < limit:
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
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key(p.name),))
                pos = self.position(p.name, cur)
                if upto > pos:
                    new = self._apply_range(cur, p, pos, upto)
                    if new > pos:
                        self._record(cur, p.name, new)
        except ProjectionError:
            pass

    def catch_up(self, *, batch: int = 2000) -> dict[str, int]:
        """Bring every projection up to the log head; returns the new positions.

        A projection that fails on an event keeps its position before that event, its
        stop is recorded in ``mf_projection_errors`` (see :meth:`errors`), the other
        projections still catch up, and the first ``ProjectionError`` is raised at the
        end: no event is ever skipped."""
        out: dict[str, int] = {}
        failed: ProjectionError | None = None
        for p in self.projections:
            try:
                while True:
                    with self._transaction() as cur:
                        cur.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key(p.name),))
                        pos = self.position(p.name, cur)
                        new = self._apply_range(cur, p, pos, None, limit=batch)
                        if new > pos:
                            self._record(cur, p.name, new)
                            self.clear_error(cur, p.name)
                    if new == pos or new - pos < batch:
                        out[p.name] = new
                        break
            except ProjectionError as exc:
                self._advance_to(p, exc.notification_id - 1)
                self.record_error(exc)
                failed = failed or exc
        if failed is not None:
            raise failed
        return out

    def head(self) -> int:
        with self.datastore.get_connection() as conn:
            row = conn.execute(f"SELECT max(notification_id) AS m FROM {self.events_table}").fetchone()  # noqa: S608
        return int(row["m"] or 0)
