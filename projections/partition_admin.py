"""Rebuild and verify the projections of one tenant partition (issue 25).

On a fabric made with ``open_fabric(..., partitions=N)`` every tenant's events live in
one partition of the log, ``memfabric_events`` with remainder ``i`` (PostgreSQL's hash
of the tenant, :func:`memfabric.projections.partitions.of_tenant`). Rebuilding
partition ``i`` replays those events alone and replaces the rows they produce; the
other partitions' rows, events and tracking rows are not read, locked or written.

**Which rows are partition i's** (:data:`ROWS_BY_TENANT`, :data:`ROWS_BY_AGGREGATE`):
a table partitioned by tenant holds them in its partition of remainder ``i``; a plain
table with the aggregate's ``tenant_id`` holds them under the partition's tenants; a
table without a tenant column (the ledger's entries and observations) under the ids of
the partition's aggregates. The principals projection is fabric-wide
(:data:`FABRIC_WIDE`: a principal's events are in the partition of tenant ``""`` while
its grants name notes of every tenant): only a full rebuild rebuilds it.

**Locks** (in this order; writers of other partitions never wait):

1. ``rebuild:<projection>`` session advisory locks (held by the caller,
   :meth:`memfabric.projections.rebuild.ProjectionAdmin.rebuild_partition`): no other
   rebuild, blue-green switch or ``reembed`` of these projections runs meanwhile.
2. ``LOCK TABLE memfabric_events_p<i> IN SHARE MODE``: waits for the partition's
   writers in flight to commit and holds new ones at their append (an insert routed to
   partition ``i``) until the rebuild commits. Inserts into other partitions lock only
   the partition they are routed to, and ``SHARE`` does not conflict with the
   ``ACCESS SHARE`` that a generic plan of another tenant's read takes on every
   partition (PostgreSQL 18 locks every partition of a generic plan).
3. Each selected projection's advisory lock, *shared*, as a writer holds it: writers
   go on; a global catch-up or the projection runner (which take it exclusively and
   may write rows of any tenant) wait, so none writes an older state of one of the
   partition's notes over the rebuilt row after the rebuild has recorded its position.
4. ``DELETE`` of the partition's rows (``ROW EXCLUSIVE`` on the tables and a row lock
   on each deleted row: no ``TRUNCATE``, whose ``ACCESS EXCLUSIVE`` lock on a
   partition would stop every generic plan of every tenant), then ``COPY`` of the
   replayed states into the live tables (routed to partition ``i``; the indexes are
   maintained row by row, they are not dropped and built again as in a full rebuild),
   the recall index's rows as a writer's land, outside the HNSW graph (:func:`_copy`).

With the partition's appends held, a ``READ COMMITTED`` transaction sees one state of
the partition in every statement (nothing else writes its events, keys or rows), so
the replay has every event of the partition's tenants, and the tracking is recorded
for exactly those: each tenant's row (``memfabric|<tenant>``) is raised to the
tenant's newest event id (never lowered; none where the floor already covers it); the
floor, a position over every tenant, is left as it is.

**Verify** (:func:`verify`) replays the partition into scratch tables in a rolled-back
``REPEATABLE READ`` transaction, taking no lock, and compares them with the live rows of
the partition at the tracked positions (the floor and the tenants' rows).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import Connection, Cursor, sql

from memfabric.domain.errors import FabricError
from memfabric.projections import (catalog, entities, ledger, note_versions, partitions, principals, quarantine,
                                   recall_index, tables)
from memfabric.projections.base import NoteProjection, accepted
from memfabric.projections.engine import ProjectionEngine, bounded_locks
from memfabric.projections.replay import Cut, ReplayMapper, replay_notes
from memfabric.projections.verify import VerifyReport, compare, tracking_problem

__all__ = ["FABRIC_WIDE", "ROWS_BY_AGGREGATE", "ROWS_BY_TENANT", "PartitionRebuildReport", "Target",
           "locate", "rebuild", "rows_of", "selectable", "target", "verify"]

FABRIC_WIDE = frozenset({principals.NAME})
"""Projections whose rows do not follow the tenant of the events they come from (a
principal's grants name notes of every tenant): never rebuilt per partition."""

ROWS_BY_TENANT = frozenset({
    tables.RECALL_INDEX, tables.CONSOLIDATION_INDEX, tables.NOTE_SCOPE, tables.WORKING_VALUE,
    tables.LINK_GRAPH, tables.RETENTION, ledger.THREADS, tables.NOTE_VERSIONS, tables.LINK_VERSIONS,
    entities.ENTITIES, entities.KEYS, entities.NOTES,
})
"""Tables whose every row carries the tenant of the aggregate it comes from in
``tenant_id``: partition ``i``'s rows are those of its partition (a table partitioned
by tenant) or those of the partition's tenants (a plain table)."""

ROWS_BY_AGGREGATE = frozenset({ledger.ENTRIES, ledger.OBSERVATIONS})
"""Tables without a tenant column whose every row carries the id of the aggregate it
comes from in ``aggregate_id``: partition ``i``'s rows are those of its aggregates."""

assert note_versions.EDGES == tables.LINK_VERSIONS  # the same table under both names


Advance = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Target:
    """Partition ``remainder`` of ``count``: its events table (``events``, the log's
    partition) and its tenants with each one's newest notification id (``newest``)."""

    remainder: int
    count: int
    events: str
    newest: dict[str, int]


@dataclass(frozen=True, slots=True)
class PartitionRebuildReport:
    """Outcome of a partition's rebuild: the partition (``remainder`` of ``count``), its
    ``tenants``, the projections rebuilt, events replayed, notes (aggregates) loaded,
    rows loaded and rows deleted per projection, the tenant positions recorded
    (``tenant → notification id``), and seconds: ``lock_seconds`` waiting for the
    partition's writers in flight, ``seconds`` in all (the partition's writers waited at
    most this long)."""

    remainder: int
    count: int
    tenants: list[str]
    projections: list[str]
    events: int
    notes: int
    rows: dict[str, int]
    deleted: dict[str, int]
    positions: dict[str, int]
    lock_seconds: float
    seconds: float


def selectable(selected: Sequence[NoteProjection], *, named: bool) -> list[NoteProjection]:
    """The projections of ``selected`` a partition rebuild or verify covers: every one but
    :data:`FABRIC_WIDE`; when they were ``named`` by the caller, a fabric-wide one is a
    ``FabricError`` naming it. Every table of a covered projection must be in
    :data:`ROWS_BY_TENANT` or :data:`ROWS_BY_AGGREGATE` (else ``FabricError``: a new
    projection must say which rows are a partition's)."""
    wide = [p.name for p in selected if p.name in FABRIC_WIDE]
    if named and wide:
        raise FabricError(f"projection(s) {wide} are fabric-wide (rows of every tenant): rebuild them whole")
    out = [p for p in selected if p.name not in FABRIC_WIDE]
    unknown = [t for p in out for t in p.tables if t not in ROWS_BY_TENANT | ROWS_BY_AGGREGATE]
    if unknown:
        raise FabricError(f"table(s) {unknown} do not say which of their rows a partition holds"
                          " (memfabric.projections.partition_admin)")
    return out


def locate(cur: Cursor[Any], partition: int | None, tenant: str | None) -> tuple[int, int, str]:
    """``(remainder, count, events partition)`` of the partition to work on: ``partition``
    (its remainder) or the one holding ``tenant`` (exactly one of them); ``FabricError``
    when the fabric is not partitioned or ``partition`` is out of range."""
    if (partition is None) == (tenant is None):
        raise FabricError("name one partition (its number) or one tenant")
    n = partitions.count(cur, tables.EVENTS)
    if n <= 1:
        raise FabricError("the fabric is not partitioned (partitions=1): rebuild or verify it whole")
    remainder = partitions.of_tenant(cur, tenant) if tenant is not None else int(partition or 0)
    if not 0 <= remainder < n:
        raise FabricError(f"partition {remainder} does not exist: the fabric has partitions 0..{n - 1}")
    return remainder, n, partitions.child(cur, tables.EVENTS, remainder)


def target(cur: Cursor[Any], located: tuple[int, int, str]) -> Target:
    """The :class:`Target` of the partition :func:`locate` found: its tenants and their
    newest event ids, read now."""
    remainder, n, events = located
    rows = cur.execute(sql.SQL("SELECT tenant, max(notification_id) AS newest FROM {e} GROUP BY tenant").format(
        e=sql.Identifier(events))).fetchall()
    newest = {_at(r, "tenant", 0): int(_at(r, "newest", 1)) for r in rows}
    return Target(remainder, n, events, dict(sorted(newest.items())))


def _at(row: Any, key: str, i: int) -> Any:
    return row[key] if isinstance(row, dict) else row[i]


def rows_of(cur: Cursor[Any], table: str, t: Target) -> tuple[str, sql.Composable]:
    """``(relation, condition)``: where partition ``t``'s rows of live ``table`` are.
    A table partitioned by tenant: its partition of the same remainder, every row; a
    plain table of :data:`ROWS_BY_TENANT`: the rows of the partition's tenants; one of
    :data:`ROWS_BY_AGGREGATE`: the rows of the aggregates with events in the
    partition."""
    if partitions.count(cur, table) > 1:
        return partitions.child(cur, table, t.remainder), sql.SQL("true")
    if table in ROWS_BY_TENANT:
        return table, sql.SQL("tenant_id = ANY({})").format(sql.Literal(list(t.newest)))
    return table, sql.SQL("aggregate_id IN (SELECT originator_id FROM {e})").format(e=sql.Identifier(t.events))


# ------------------------------------------------------------------- rebuild
def rebuild(conn: Connection[Any], engine: ProjectionEngine, mapper: ReplayMapper,
            selected: Sequence[NoteProjection], partition: int | None, tenant: str | None, *,
            batch: int, task: Callable[[str, int | None], Advance]) -> PartitionRebuildReport:
    """Rebuild the rows of ``selected`` (already checked by :func:`selectable`, their
    ``rebuild:`` locks held by the caller) of one partition in one transaction on
    ``conn`` (see the module doc). ``task(label, total)`` → ``advance(n)``: progress.
    Raises ``LockTimeoutError`` when a lock wait passes the engine's ``lock_timeout``,
    ``ProjectionError`` when an event cannot be replayed (nothing changed)."""
    started = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        located = locate(cur, partition, tenant)
        with bounded_locks("partition rebuild"):
            cur.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(engine.timeout_setting())))
            cur.execute(sql.SQL("LOCK TABLE {e} IN SHARE MODE").format(e=sql.Identifier(located[2])))
            locked = time.perf_counter()
            for p in selected:
                cur.execute("SELECT pg_advisory_xact_lock_shared(%s)", (engine.lock_key(p.name),))
            cur.execute("SET LOCAL lock_timeout = 0")
        t = target(cur, located)
        deleted = {p.name: _delete(cur, p, t) for p in selected}
        events_n, notes, rows = _load(conn, cur, selected, t, mapper, batch, task, None, "")
        positions = _record(cur, engine, selected, t)
    return PartitionRebuildReport(
        remainder=t.remainder, count=t.count, tenants=list(t.newest), projections=[p.name for p in selected],
        events=events_n, notes=notes, rows=rows, deleted=deleted, positions=positions,
        lock_seconds=locked - started, seconds=time.perf_counter() - started)


def _delete(cur: Cursor[Any], p: NoteProjection, t: Target) -> int:
    """Delete partition ``t``'s rows of every table of ``p``; returns how many."""
    n = 0
    for table in p.tables:
        relation, where = rows_of(cur, table, t)
        cur.execute(sql.SQL("DELETE FROM {r} WHERE {w}").format(r=sql.Identifier(relation), w=where))
        n += max(cur.rowcount, 0)
    return n


def _load(conn: Connection[Any], cur: Cursor[Any], selected: Sequence[NoteProjection], t: Target,
          mapper: ReplayMapper, batch: int, task: Callable[[str, int | None], Advance], cut: Cut | None,
          suffix: str, upto: int | None = None) -> tuple[int, int, dict[str, int]]:
    """Replay the events of partition ``t`` (every one, or with ``upto``/``cut`` those
    the tracking covers) into the tables of ``selected`` (``<table><suffix>``, routed to
    the partition), leaving out the quarantined aggregates that still fail; returns
    (events, notes, rows per projection)."""
    last = max(t.newest.values(), default=0) if upto is None else upto
    total = catalog.count_upto(cur, t.events, last, cut)
    advance = task(f"replay partition {t.remainder}", total)
    rows = {p.name: 0 for p in selected}
    notes = 0
    for done in replay_notes(conn, t.events, mapper, last, batch=batch, label=",".join(rows), advance=advance,
                             cut=cut, skip=quarantine.ids(cur)):
        notes += len(done)
        for p in selected:
            rows[p.name] += _copy(cur, p, accepted(p, done), suffix)
    return total, notes, rows


def _copy(cur: Cursor[Any], p: NoteProjection, notes: list[Any], suffix: str) -> int:
    """``p.copy`` of ``notes`` into ``<table><suffix>``. Into the live recall index (a
    rebuild, no suffix) a row lands as a writer's row does, ``indexed = false``
    (:mod:`memfabric.projections.recall_tail`): no HNSW insertion per row in the
    rebuild's transaction (measured: two thirds of a partition rebuild's time); the
    tail indexer admits the rows of a tenant that recalls through HNSW (past
    ``exact_search_max`` notes), woken by its next recall, which meanwhile scans them
    exactly. Returns the rows copied."""
    if not suffix and isinstance(p, recall_index.RecallIndexProjection):
        return p.copy(cur, notes, indexed=False)
    return p.copy(cur, notes, table_suffix=suffix)


def _record(cur: Cursor[Any], engine: ProjectionEngine, selected: Sequence[NoteProjection],
            t: Target) -> dict[str, int]:
    """Raise each partition tenant's tracking row of every projection in ``selected`` to
    the tenant's newest event id (``GREATEST`` with the row it has; no row where the
    floor covers the tenant already); returns the positions recorded."""
    recorded: dict[str, int] = {}
    for p in selected:
        floor = engine.floor(p.name, cur)
        due = {k: v for k, v in t.newest.items() if v > floor}
        if due:
            cur.execute(sql.SQL(
                "INSERT INTO {t} AS t (application_name, notification_id)"
                " SELECT %s || x.tenant, x.newest FROM unnest(%s::text[], %s::bigint[]) AS x(tenant, newest)"
                " ON CONFLICT (application_name) DO UPDATE"
                " SET notification_id = GREATEST(t.notification_id, EXCLUDED.notification_id)").format(
                    t=sql.Identifier(engine.trackers[p.name].tracking_table_name)),
                (engine.tenant_row(""), list(due), list(due.values())))
        recorded.update(due)
    return recorded


# -------------------------------------------------------------------- verify
def verify(conn: Connection[Any], engine: ProjectionEngine, mapper: ReplayMapper,
           selected: Sequence[NoteProjection], partition: int | None, tenant: str | None, *,
           batch: int, show: int, task: Callable[[str, int | None], Advance]) -> list[VerifyReport]:
    """Replay partition ``partition`` (or ``tenant``'s) into scratch tables and compare
    them with the partition's live rows of each table of ``selected``, at the positions
    the tracking records (the floor, each tenant's row); one report per table. Takes no
    lock; the transaction is rolled back."""
    out: list[VerifyReport] = []
    with conn.transaction(force_rollback=True), conn.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SELECT set_config('search_path', 'pg_temp, ' || current_setting('search_path'), true)")
        t = target(cur, locate(cur, partition, tenant))
        head = catalog.head(cur, tables.EVENTS)
        by_floor: dict[int, list[NoteProjection]] = {}
        for p in selected:
            by_floor.setdefault(engine.floor(p.name, cur), []).append(p)
        for floor, group in sorted(by_floor.items()):
            create_shadow_tables(cur, group, SCRATCH)
            cut = Cut(engine.trackers[group[0].name].tracking_table_name, engine.tenant_row(""))
            _load(conn, cur, group, t, mapper, batch, task, cut, SCRATCH, upto=floor)
            out.extend(r for p in group for r in _compare_tables(cur, engine, p, t, floor, head, show))
    return out


SCRATCH = "_vp"
"""Suffix of a partition verify's scratch tables (temporary, rolled back)."""


def create_shadow_tables(cur: Cursor[Any], group: Sequence[NoteProjection], suffix: str) -> None:
    """Each projection of ``group``'s tables made afresh as ``<table><suffix>``, without
    their secondary indexes (a loader builds them after loading): a partition verify's
    scratch tables and a blue-green rebuild's shadow tables."""
    for p in group:
        for table in p.tables:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {t}").format(t=sql.Identifier(table + suffix)))
        p.create(cur, table_suffix=suffix)
        for table in p.tables:
            catalog.drop_secondary_indexes(cur, table + suffix)


def _compare_tables(cur: Cursor[Any], engine: ProjectionEngine, p: NoteProjection, t: Target, floor: int,
                    head: int, show: int) -> list[VerifyReport]:
    """One report per table of ``p``: the partition's live rows against the scratch
    table (which holds the partition's replay only)."""
    problem = tracking_problem(cur, engine.trackers[p.name].tracking_table_name, p.name, head)
    out = []
    for table in p.tables:
        relation, where = rows_of(cur, table, t)
        report = compare(cur, p.name, relation, table + SCRATCH, floor, head, show, live_where=where)
        out.append(dataclasses.replace(report, problem=problem))
    return out
