"""Projection administration: status, fast rebuild (in place or blue-green), verify,
and the separate projection runner.

A rebuild replays the notification log from zero in one pass for every selected
projection: a server-side cursor streams the events in aggregate order
(``ORDER BY originator_id, originator_version``) in batches, each batch's data keys are
read in the same snapshot, events are decoded by the sealing mapper and applied to
in-memory ``Note`` aggregates (``event.mutate``), and each aggregate's final state is
bulk-loaded with the projections' ``copy`` (``COPY ... FROM STDIN (FORMAT BINARY)``)
as soon as its last event is seen. Memory use is one batch plus one aggregate, not the
log. Secondary indexes (HNSW, GIN, btrees) are built after the load, and the tracked
position is set to the replayed head, all in one transaction per rebuild.

- In place (:meth:`ProjectionAdmin.rebuild`): the projection's advisory lock is held
  for the whole rebuild, so writers with inline projections wait at their commit and
  readers of the table wait on the ``TRUNCATE`` lock: stop, empty, replay.
- Blue-green (``blue_green=True``): the replay fills ``<table>_bg`` tables while
  writers and readers keep using the live ones; then, in one short transaction holding
  the advisory lock, the live tables are dropped, the new ones renamed (with their
  indexes, so the next blue-green works) with the owner and every grant of the table
  they replace, the events written meanwhile applied, and the position recorded.
  Readers switch atomically at that commit.
- Verify (:meth:`ProjectionAdmin.verify`): replays into scratch ``<table>_vf`` tables
  inside a transaction that is rolled back, at the live projection's own tracked
  position, and compares the two row by row (``md5`` of each row's text, matched on
  the primary key).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol
from uuid import UUID

import psycopg
from eventsourcing.persistence import StoredEvent
from psycopg import Connection, Cursor, sql

from memfabric.domain.errors import FabricError, ProjectionError
from memfabric.projections import catalog, partition_admin, partitions, quarantine
from memfabric.projections.admin_locks import (
    SWITCH_ATTEMPTS, SWITCH_LOCK_TIMEOUT, rebuild_locks, session_locks, switch_locks,
)
from memfabric.projections.base import NoteProjection, accepted
from memfabric.projections.engine import ProjectionEngine
from memfabric.projections.partition_admin import PartitionRebuildReport
from memfabric.projections.replay import Cut, ReplayMapper, replay_notes
from memfabric.projections.verify import MIGRATION_ROW, RowDifference, VerifyReport, compare, tracking_problem

__all__ = [
    "BG_SUFFIX", "MIGRATION_ROW", "SWITCH_ATTEMPTS", "SWITCH_LOCK_TIMEOUT", "VERIFY_SUFFIX", "Cut",
    "PartitionRebuildReport", "PrivilegeCopy", "ProjectionAdmin", "ProjectionStatus", "RebuildReport", "Reporter",
    "RowDifference", "VerifyReport", "replay_notes", "tracking_problem",
]

BG_SUFFIX = "_bg"
"""Suffix of the tables a blue-green rebuild fills before the switch."""

VERIFY_SUFFIX = "_vf"
"""Suffix of the scratch tables of a verify (never committed)."""

Connect = Callable[[], AbstractContextManager[Connection[Any]]]
"""Returns a context manager yielding a pooled connection with pgvector types registered."""

SwitchCheck = Callable[[Cursor[Any]], bool]
"""Runs first in a blue-green switch's transaction; ``False`` refuses (rolls back) the switch."""

PrivilegeCopy = Callable[[Cursor[Any], str, str], None]
"""``copy(cur, table, new)``: give table ``new`` the owner and every grant of ``table``
(issue 27); supplied by the adapter that owns the roles
(``memfabric.adapters.postgres.roles.copy_privileges``)."""


# --------------------------------------------------------------------- progress

class Reporter(Protocol):
    """Progress sink: ``task(description, total, unit)`` returns an ``advance(n)``
    callable; ``unit`` is ``"events"`` or ``"indexes"``."""

    def task(self, description: str, total: int | None, unit: str = "events") -> Callable[[int], None]: ...


class _Quiet:
    def task(self, description: str, total: int | None, unit: str = "events") -> Callable[[int], None]:
        return lambda n: None


# ---------------------------------------------------------------------- reports
@dataclass(frozen=True, slots=True)
class ProjectionStatus:
    """One projection's state: ``position`` (last notification id applied), ``head``
    (last id in the log), ``lag_events`` (events after ``position``), ``lag_seconds``
    (age of the oldest unapplied event, 0.0 when caught up) and ``error`` (``None`` or
    ``{notification_id, topic, error, at}`` when it stopped on an event)."""

    name: str
    position: int
    head: int
    lag_events: int
    lag_seconds: float
    error: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """Outcome of a rebuild: projections rebuilt, events replayed, notes (aggregates)
    seen, rows loaded per projection, the position recorded, wall seconds, and the
    seconds of the replay+COPY phase and of the index build."""

    projections: list[str]
    blue_green: bool
    events: int
    notes: int
    rows: dict[str, int]
    position: int
    seconds: float
    load_seconds: float
    index_seconds: float

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


# ------------------------------------------------------------------------ admin
class ProjectionAdmin:
    """Status, rebuild, verify and the runner for every projection of an engine.

    ``engine``: the fabric's :class:`ProjectionEngine`; ``mapper``: its
    :class:`~memfabric.projections.replay.ReplayMapper`; ``connect``: a
    pooled-connection context manager with pgvector types registered
    (``fabric.store.connection``); ``copy_privileges``: the :data:`PrivilegeCopy` a
    blue-green switch gives each new table. :meth:`for_fabric` wires them from a fabric.
    """

    def __init__(self, engine: ProjectionEngine, mapper: ReplayMapper, connect: Connect, *,
                 copy_privileges: PrivilegeCopy) -> None:
        self.engine = engine
        self.mapper = mapper
        self.connect = connect
        self.copy_privileges = copy_privileges

    @classmethod
    def for_fabric(cls, fabric: Any) -> ProjectionAdmin:
        """The admin of an open ``memfabric.adapters.Fabric`` (its ``engine``,
        ``replay_mapper``, ``store.connection`` and ``copy_privileges``)."""
        return cls(fabric.engine, fabric.replay_mapper, fabric.store.connection,
                   copy_privileges=fabric.copy_privileges)

    @property
    def names(self) -> list[str]:
        """Projection names in engine order."""
        return [p.name for p in self.engine.projections]

    def select(self, names: Sequence[str] | str | None) -> list[NoteProjection]:
        """Projections named in ``names`` (``None`` or ``"all"``: every one), in engine
        order; raises ``FabricError`` naming the known projections for an unknown name."""
        if names is None or _every(names):
            return list(self.engine.projections)
        wanted = {names} if isinstance(names, str) else set(names)
        unknown = wanted - set(self.names)
        if unknown:
            raise FabricError(
                f"unknown projection(s) {sorted(unknown)}; known: {', '.join(self.names)}"
            )
        return [p for p in self.engine.projections if p.name in wanted]

    # ---------------------------------------------------------------- status
    def status(self) -> list[ProjectionStatus]:
        """The position, lag and recorded error of every projection."""
        errors = self.engine.errors()
        t = sql.Identifier(self.engine.events_table)
        out = []
        with self.connect() as conn, conn.cursor() as cur:
            head = catalog.head(cur, self.engine.events_table)
            for p in self.engine.projections:
                pos = self.engine.position(p.name, cur)
                lag = self.engine.unapplied(p.name, cur)
                seconds = 0.0
                if lag:
                    row = cur.execute(
                        sql.SQL(
                            "SELECT originator_id, originator_version, topic, state FROM {t}"
                            " WHERE notification_id > %s ORDER BY notification_id LIMIT 1"
                        ).format(t=t),
                        (pos,),
                    ).fetchone()
                    seconds = self._age(row)
                error = errors.get(p.name)
                if error is not None and error["notification_id"] <= pos:
                    error = None  # got past it since (e.g. an inline writer after a fix)
                out.append(ProjectionStatus(p.name, pos, head, lag, seconds, error))
        return out

    def _age(self, row: dict[str, Any] | None) -> float:
        if row is None:
            return 0.0
        try:
            fields, _ = self.mapper.decode_state(StoredEvent(
                row["originator_id"], row["originator_version"], row["topic"], bytes(row["state"])))
            stamp: datetime = fields["timestamp"]
        except Exception:  # noqa: BLE001 - an undecodable event: its age is unknown, status still works
            return float("nan")
        return max(0.0, (datetime.now(timezone.utc) - stamp).total_seconds())

    # --------------------------------------------------------------- rebuild
    def rebuild(
        self,
        names: Sequence[str] | str | None = None,
        *,
        blue_green: bool = False,
        batch: int = 2000,
        reporter: Reporter | None = None,
        maintenance_work_mem: str | None = None,
    ) -> RebuildReport:
        """Replay the log from zero into the selected projections (default all).

        ``blue_green``: build ``<table>_bg`` tables while the live ones keep serving,
        then switch atomically (see module doc); otherwise rebuild in place while
        holding the projections' advisory locks. ``batch``: events per fetch.
        ``maintenance_work_mem`` (e.g. ``"1GB"``) is set for the index build only.
        ``reporter`` receives the progress (events replayed, then index builds).

        Raises ``ProjectionError`` (nothing changed) when an event cannot be decoded or
        applied, ``FabricError`` for an unknown projection name.
        """
        selected = self.select(names)
        reporter = reporter or _Quiet()
        started = time.perf_counter()
        with self.connect() as conn, rebuild_locks(conn, self.engine, selected):
            if blue_green:
                report = self._blue_green(conn, selected, batch, reporter, maintenance_work_mem,
                                          between=lambda: time.sleep(0.05), attempts=SWITCH_ATTEMPTS)
            else:
                report = self._in_place(conn, selected, batch, reporter, maintenance_work_mem)
        seconds = time.perf_counter() - started
        return RebuildReport(
            projections=[p.name for p in selected], blue_green=blue_green, events=report[0],
            notes=report[1], rows=report[2], position=report[3], seconds=seconds,
            load_seconds=report[4], index_seconds=report[5],
        )

    def _load(
        self, conn: Connection[Any], cur: Cursor[Any], selected: list[NoteProjection], upto: int,
        suffix: str, batch: int, reporter: Reporter, label: str, cut: Cut | None = None,
    ) -> tuple[int, int, dict[str, int]]:
        total = catalog.count_upto(cur, self.engine.events_table, upto, cut)
        advance = reporter.task(label, total)
        rows = {p.name: 0 for p in selected}
        notes = 0
        held, skipped = quarantine.ids(cur), set[UUID]()
        for done in replay_notes(
            conn, self.engine.events_table, self.mapper, upto, batch=batch,
            label=",".join(p.name for p in selected), advance=advance, cut=cut, skip=held, skipped=skipped,
        ):
            notes += len(done)
            for p in selected:
                rows[p.name] += p.copy(cur, accepted(p, done), table_suffix=suffix)
        if suffix != VERIFY_SUFFIX and len(selected) == len(self.engine.projections):
            quarantine.release(cur, held - skipped)  # a full rebuild releases what loads again
        return total, notes, rows

    def _build_indexes(
        self, cur: Cursor[Any], selected: list[NoteProjection], suffix: str, reporter: Reporter,
        maintenance_work_mem: str | None,
    ) -> float:
        t0 = time.perf_counter()
        catalog.set_work_mem(cur, maintenance_work_mem)
        advance = reporter.task("indexes", len(selected), "indexes")
        for p in selected:
            p.create_indexes(cur, table_suffix=suffix)
            advance(1)
        return time.perf_counter() - t0

    def _in_place(
        self, conn: Connection[Any], selected: list[NoteProjection], batch: int, reporter: Reporter,
        maintenance_work_mem: str | None,
    ) -> tuple[int, int, dict[str, int], int, float, float]:
        with session_locks(conn, self.engine, [p.name for p in selected]):  # engine order, like writers
            safe = self._safe_bound(selected)
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                upto = catalog.head(cur, self.engine.events_table) if safe is None else safe
                for p in selected:
                    for table in p.tables:
                        catalog.drop_secondary_indexes(cur, table)
                        cur.execute(sql.SQL("TRUNCATE {t}").format(t=sql.Identifier(table)))
                t0 = time.perf_counter()
                events, notes, rows = self._load(conn, cur, selected, upto, "", batch, reporter, "replay")
                load_s = time.perf_counter() - t0
                index_s = self._build_indexes(cur, selected, "", reporter, maintenance_work_mem)
                for p in selected:
                    self.engine.set_position(cur, p.name, upto)
                    self.engine.clear_error(cur, p.name)
        return events, notes, rows, upto, load_s, index_s

    def _blue_green(
        self, conn: Connection[Any], selected: list[NoteProjection], batch: int, reporter: Reporter,
        maintenance_work_mem: str | None, before_switch: SwitchCheck | None = None,
        between: Callable[[], None] | None = None, attempts: int = 1,
    ) -> tuple[int, int, dict[str, int], int, float, float]:
        events, notes, rows, upto, load_s, index_s = self._bg_build(
            conn, selected, batch, reporter, maintenance_work_mem)
        for attempt in range(attempts):
            position = self._bg_switch(conn, selected, upto, before_switch)
            if position is not None:
                return events, notes, rows, position, load_s, index_s
            if between is not None and attempt + 1 < attempts:
                between()
        raise FabricError(f"blue-green switch refused {attempts} times (by its check or busy locks); the new tables "
                          "were kept as *_bg and are rebuilt by the next run")

    def _bg_build(
        self, conn: Connection[Any], selected: list[NoteProjection], batch: int, reporter: Reporter,
        maintenance_work_mem: str | None,
    ) -> tuple[int, int, dict[str, int], int, float, float]:
        """Phase 1: fill ``<table>_bg`` at a snapshot, without blocking anyone; returns
        (events, notes, rows, snapshot position, load seconds, index seconds). The
        snapshot is taken after :meth:`ProjectionEngine.safe_head` and the replay stops
        there: an id drawn before it by a writer still in flight would be below a
        later-committed head and never applied."""
        upto = self.engine.safe_head()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            partition_admin.create_shadow_tables(cur, selected, BG_SUFFIX)
            t0 = time.perf_counter()
            events, notes, rows = self._load(conn, cur, selected, upto, BG_SUFFIX, batch, reporter, "replay")
            load_s = time.perf_counter() - t0
            index_s = self._build_indexes(cur, selected, BG_SUFFIX, reporter, maintenance_work_mem)
        return events, notes, rows, upto, load_s, index_s

    def _bg_switch(
        self, conn: Connection[Any], selected: list[NoteProjection], upto: int,
        before_switch: SwitchCheck | None,
    ) -> int | None:
        """Phase 2, one transaction: ``before_switch(cur)`` first (it may lock and refuse:
        ``False`` rolls back and returns ``None``), then drop the live tables, rename the
        new ones, apply the events since ``upto`` and record the position (returned).
        A deferred projection (no writer applies it, so its exclusive lock does not
        quiesce them) stops at :meth:`ProjectionEngine.safe_head`; the runner goes on."""
        safe = self._safe_bound(selected)
        with conn.transaction() as tx, conn.cursor() as cur:
            if before_switch is not None and not before_switch(cur):
                raise psycopg.Rollback(tx)
            if not switch_locks(cur, self.engine, selected):
                raise psycopg.Rollback(tx)
            position = upto
            for p in selected:
                for table in p.tables:
                    new = table + BG_SUFFIX
                    self.copy_privileges(cur, table, new)  # every role keeps its grants (issue 27)
                    cur.execute(sql.SQL("DROP TABLE IF EXISTS {t}").format(t=sql.Identifier(table)))
                    cur.execute(sql.SQL("ALTER TABLE {a} RENAME TO {b}").format(
                        a=sql.Identifier(new), b=sql.Identifier(table)))
                    partitions.rename_children(cur, new, table)  # issue 25: <table>_bg_p<i> -> <table>_p<i>
                    for index in catalog.all_indexes(cur, table):
                        if index.startswith(new):
                            cur.execute(sql.SQL("ALTER INDEX {a} RENAME TO {b}").format(
                                a=sql.Identifier(index), b=sql.Identifier(table + index[len(new):])))
                new_pos = self.engine._apply_range(cur, p, upto, safe)  # noqa: SLF001
                position = max(position, new_pos)
                self.engine.set_position(cur, p.name, new_pos)
                self.engine.clear_error(cur, p.name)
            return position
        return None

    def _safe_bound(self, selected: Sequence[NoteProjection]) -> int | None:
        """``None`` when writers apply every selected projection (their exclusive locks
        make the visible head final), else :meth:`ProjectionEngine.safe_head`."""
        if all(self.engine.applied_inline(p) for p in selected):
            return None
        return self.engine.safe_head()

    def rebuild_into(
        self,
        projections: Sequence[NoteProjection],
        *,
        before_switch: SwitchCheck,
        between: Callable[[], None] | None = None,
        attempts: int = 20,
        batch: int = 2000,
        reporter: Reporter | None = None,
        maintenance_work_mem: str | None = None,
    ) -> RebuildReport:
        """A blue-green rebuild into other instances of engine projections (same names,
        e.g. the recall index under a new embedder and dimension, issue 19): build
        ``<table>_bg`` from the log while the live tables serve, then switch in one
        transaction that first runs ``before_switch(cur)``; when it returns ``False``
        the switch is rolled back, ``between()`` runs and the switch is tried again, at
        most ``attempts`` times (then ``FabricError``; nothing switched). The caller
        swaps the projection instances of its engine after this returns."""
        selected = list(projections)
        reporter = reporter or _Quiet()
        started = time.perf_counter()
        with self.connect() as conn, rebuild_locks(conn, self.engine, selected):
            report = self._blue_green(conn, selected, batch, reporter, maintenance_work_mem,
                                      before_switch, between, attempts)
        return RebuildReport(
            projections=[p.name for p in selected], blue_green=True, events=report[0],
            notes=report[1], rows=report[2], position=report[3],
            seconds=time.perf_counter() - started, load_seconds=report[4], index_seconds=report[5],
        )

    # ---------------------------------------------------------------- verify
    def verify(
        self,
        names: Sequence[str] | str | None = None,
        *,
        batch: int = 2000,
        show: int = 10,
        reporter: Reporter | None = None,
    ) -> list[VerifyReport]:
        """Replay the log into scratch tables (temporary, rolled back) and compare them with the
        live projections, one :class:`VerifyReport` per table (``ok`` when identical).

        Each projection is compared at its own tracked position, so a lagging
        projection is checked for what it claims to contain. ``show``: how many
        differing rows to describe. Raises ``ProjectionError`` when the log itself
        cannot be replayed, ``FabricError`` for an unknown name.
        """
        selected = self.select(names)
        reporter = reporter or _Quiet()
        out: list[VerifyReport] = []
        with self.connect() as conn, conn.transaction(force_rollback=True), conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            # Scratch tables are temporary tables (pg_temp first in the search path makes
            # it the creation schema): a role with SELECT and TEMP, no CREATE, can verify.
            cur.execute("SELECT set_config('search_path', 'pg_temp, ' || current_setting('search_path'), true)")
            head = catalog.head(cur, self.engine.events_table)
            by_position: dict[tuple[int, str], list[NoteProjection]] = {}
            cuts: dict[tuple[int, str], Cut | None] = {}
            for p in selected:
                pos = self.engine.position(p.name, cur)
                if self.engine.tenants_ahead(p.name, cur, pos):  # compare at each tenant's row
                    key = (self.engine.floor(p.name, cur), p.name)
                    cuts[key] = Cut(self.engine.trackers[p.name].tracking_table_name,
                                    self.engine.tenant_row(""))
                else:
                    key = (pos, "")
                    cuts[key] = None
                by_position.setdefault(key, []).append(p)
            for (position, _), group in sorted(by_position.items()):
                cut = cuts[(position, _)]
                for p in group:
                    for table in p.tables:
                        cur.execute(sql.SQL("DROP TABLE IF EXISTS {t}").format(
                            t=sql.Identifier(table + VERIFY_SUFFIX)))
                    p.create(cur, table_suffix=VERIFY_SUFFIX)
                    for table in p.tables:
                        catalog.drop_secondary_indexes(cur, table + VERIFY_SUFFIX)
                self._load(conn, cur, group, position, VERIFY_SUFFIX, batch, reporter, f"replay to {position}", cut)
                for p in group:
                    for table in p.tables:
                        report = compare(cur, p.name, table, table + VERIFY_SUFFIX, position, head, show)
                        problem = tracking_problem(cur, self.engine.trackers[p.name].tracking_table_name, p.name, head)
                        out.append(dataclasses.replace(report, problem=problem))
        return out

    # ------------------------------------------------------------ partitions
    def rebuild_partition(self, partition: int | None = None, *, tenant: str | None = None,
                          names: Sequence[str] | str | None = None, batch: int = 2000,
                          reporter: Reporter | None = None) -> PartitionRebuildReport:
        """Rebuild the rows of one tenant partition (issue 25): partition ``partition`` of
        a fabric made with ``partitions=N``, or the one holding ``tenant`` (one of the
        two), of the selected projections (default every one but the fabric-wide
        principals), in one transaction, while writers of the other partitions go on
        and the partition's own writers wait at their append
        (:mod:`memfabric.projections.partition_admin`). Raises ``FabricError`` (an
        unpartitioned fabric, a partition out of range, a fabric-wide projection
        named), ``LockTimeoutError``, ``ProjectionError`` (nothing changed)."""
        selected = partition_admin.selectable(self.select(names), named=not _every(names))
        with self.connect() as conn, rebuild_locks(conn, self.engine, selected):
            return partition_admin.rebuild(conn, self.engine, self.mapper, selected, partition, tenant,
                                           batch=batch, task=(reporter or _Quiet()).task)

    def verify_partition(self, partition: int | None = None, *, tenant: str | None = None,
                         names: Sequence[str] | str | None = None, batch: int = 2000, show: int = 10,
                         reporter: Reporter | None = None) -> list[VerifyReport]:
        """:meth:`verify` of one tenant partition's rows (arguments as
        :meth:`rebuild_partition`): a replay of the partition's events compared with
        the partition's live rows, one report per table; takes no lock."""
        selected = partition_admin.selectable(self.select(names), named=not _every(names))
        with self.connect() as conn:
            return partition_admin.verify(conn, self.engine, self.mapper, selected, partition, tenant,
                                          batch=batch, show=show, task=(reporter or _Quiet()).task)

    # ---------------------------------------------------------------- runner
    def run(
        self,
        dsn: str,
        *,
        once: bool = False,
        poll: float = 5.0,
        stop: Callable[[], bool] | None = None,
        on_catch_up: Callable[[dict[str, int]], None] | None = None,
        adopt: Callable[[], bool] | None = None,
        batch: int = 2000,
        on_batch: Callable[[str, int, int], None] | None = None,
    ) -> dict[str, int]:
        """Keep every projection caught up from this process.

        LISTENs on the events table's channel (eventsourcing NOTIFYs it at every
        insert) on a dedicated connection to ``dsn`` and catches up after each
        notification, and at least every ``poll`` seconds. ``once``: catch up once and
        return. ``stop()`` is checked after every wake-up. Returns the last positions.
        Raises ``ProjectionError`` (recorded for ``status``) when a projection stops on
        an event; the other projections are caught up first. ``adopt()``: called when a
        projection stopped on a vector of another dimension than its table's (a
        ``reembed`` switched the fabric since this runner started); when it returns True
        (it swapped in the projections of the recorded embedder) the catch-up is retried.
        ``batch``: events per projection transaction; ``on_batch(name, events,
        position)``: progress after each full batch of a long catch-up (issue 27).
        """
        def catch_up() -> dict[str, int]:
            try:
                return self.engine.catch_up(batch=batch, on_batch=on_batch)
            except ProjectionError as exc:
                if adopt is None or "dimension" not in str(exc.cause) or not adopt():
                    raise
            return self.engine.catch_up(batch=batch, on_batch=on_batch)

        if once:
            positions = catch_up()
            if on_catch_up is not None:
                on_catch_up(positions)
            return positions
        channel = self.engine.events_table.replace(".", "_")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("LISTEN {c}").format(c=sql.Identifier(channel)))
            positions = catch_up()
            if on_catch_up is not None:
                on_catch_up(positions)
            while not (stop is not None and stop()):
                for _ in conn.notifies(timeout=poll, stop_after=1):
                    pass
                positions = catch_up()
                if on_catch_up is not None:
                    on_catch_up(positions)
        return positions


def _every(names: Sequence[str] | str | None) -> bool:
    """Whether ``names`` selects every projection (``None``, ``"all"``)."""
    return names is None or names == "all" or (not isinstance(names, str) and "all" in names)

