"""The retention index (issue 30): one row per un-forgotten note of any kind, held or
not, with what a sweep needs to find the notes due at a time ``now`` without touching
content. Table ``mf_retention``, tracking table ``mf_retention_tracking``.

Columns: scope, ``note_id``, ``kind``, ``retention`` (the class), ``regulated`` (the
regulated label), ``written_at`` (where the windows start), ``valid_to``,
``superseded``, ``expired``, ``held``, ``visibility`` (the write locks of a batch),
``importance`` and ``decayed_at`` (the importance decay of idle notes).
Rows are a pure function of the ``Note`` aggregate's state (:func:`row_for`); a
forgotten note has none. A btree on ``(tenant_id, aggregate_id)`` serves the keyset
pages of :func:`select_due` (one pass over a tenant's rows per sweep).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor, sql

from memfabric.domain import retention as rules
from memfabric.domain.note import Note
from memfabric.domain.ports import DueRef
from memfabric.domain.scope import stored_scope
from memfabric.domain.visibility import of_consent
from memfabric.projections import base, partitions, tables
from memfabric.projections.base import copy_rows, split_rows, write_rows

NAME = "retention"
TABLE = tables.RETENTION

COLUMNS: tuple[str, ...] = (
    "aggregate_id", "tenant_id", "resource_id", "thread_id", "note_id", "kind", "retention",
    "regulated", "written_at", "valid_to", "superseded", "expired", "held", "visibility",
    "importance", "decayed_at",
)
"""Column order of a row tuple (also the COPY order)."""

_TYPES = ("uuid", "text", "text", "text", "text", "text", "text", "bool", "timestamptz",
          "timestamptz", "bool", "bool", "bool", "text", "float8", "timestamptz")


def row_for(note: Note) -> tuple[Any, ...] | None:
    """The row of a note, or ``None`` once it is forgotten."""
    if not note.listed:
        return None
    return (
        note.id, note.tenant_id, note.resource_id or "", note.thread_id or "", note.note_id,
        note.kind, rules.class_of(note), rules.regulated_label(note), rules.written_at(note),
        note.valid_to, note.superseded_by is not None, rules.expired_at(note) is not None,
        bool(note.held), of_consent(note.consent), float(note.importance),
        getattr(note, "decayed_at", None),
    )


def apply(cur: Cursor[Any], notes: Iterable[Note], table: str = TABLE) -> None:
    """Upsert or delete the rows of ``notes`` (their current aggregate state)."""
    upserts, deletes = split_rows(notes, row_for)
    write_rows(cur, table, COLUMNS, upserts, deletes)


class RetentionIndexProjection:
    """The retention index as a :class:`~memfabric.projections.base.NoteProjection`
    (write side: the sweep decides on it)."""

    name = NAME
    tables: tuple[str, ...] = (TABLE,)
    write_side = True
    batch_rows = True
    """Writes through ``write_rows`` alone (its rows may travel in a ``RowBatch``)."""

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        if not table_suffix:
            rebuild_older(cur)
        partitions.create_table(
            cur, TABLE + table_suffix,
            " aggregate_id uuid NOT NULL, tenant_id text NOT NULL, resource_id text NOT NULL,"
            " thread_id text NOT NULL, note_id text NOT NULL, kind text NOT NULL,"
            " retention text NOT NULL, regulated boolean NOT NULL, written_at timestamptz NOT NULL,"
            " valid_to timestamptz, superseded boolean NOT NULL, expired boolean NOT NULL,"
            " held boolean NOT NULL, visibility text NOT NULL, importance double precision NOT NULL,"
            " decayed_at timestamptz", ["aggregate_id"])
        if not table_suffix:
            self.create_indexes(cur)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        table = TABLE + table_suffix
        cur.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, aggregate_id)").format(
            i=sql.Identifier(f"{table}_tenant"), t=sql.Identifier(table)))

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None:
        apply(cur, notes)

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int:
        rows = (r for r in map(row_for, notes) if r is not None)
        return copy_rows(cur, TABLE + table_suffix, COLUMNS, _TYPES, rows)


def rebuild_older(cur: Cursor[Any]) -> bool:
    """A table of a release before the importance decay (no ``decayed_at``) is dropped
    with its tracking rows, so the catch-up on open builds it again from the log, as
    for a new projection (every row is a pure function of its note). Returns whether it
    was dropped."""
    if not base.has_table(cur, TABLE) or base.has_column(cur, TABLE, "decayed_at"):
        return False
    cur.execute(sql.SQL("DROP TABLE {t}").format(t=sql.Identifier(TABLE)))
    cur.execute(sql.SQL("DELETE FROM {t}").format(t=sql.Identifier(tables.tracking(NAME))))
    return True


def due_sql(windows: rules.Windows, now: datetime) -> tuple[str, dict[str, Any]]:
    """The ``WHERE`` condition (and its parameters) of the rows that may be due at
    ``now`` under ``windows``: a superset of :func:`memfabric.domain.retention.decide`
    (held and floor-kept rows included, so they are counted)."""
    parts = ["(NOT expired AND NOT superseded AND valid_to IS NOT NULL AND valid_to <= %(now)s)"]
    params: dict[str, Any] = {"now": now}
    for cls in rules.CLASSES:
        span = windows.window(cls)
        if span is None:
            continue
        params[f"w_{cls}"] = now - span
        extra = "" if cls in rules.ERASABLE else " AND NOT expired"
        parts.append(f"(retention = '{cls}' AND written_at <= %(w_{cls})s{extra})")
    if windows.decay is not None:  # idle since the bound, above the floor (retention.Decay)
        params |= {"d_idle": now - windows.decay.after, "d_floor": windows.decay.floor,
                   "d_kinds": list(rules.DECAY_KINDS)}
        parts.append("(NOT held AND NOT superseded AND NOT expired AND kind = ANY(%(d_kinds)s)"
                     " AND importance > %(d_floor)s AND written_at <= %(d_idle)s"
                     " AND (decayed_at IS NULL OR decayed_at <= %(d_idle)s))")
    return "(" + " OR ".join(parts) + ")", params


def select_due(cur: Cursor[Any], tenant_id: str, windows: rules.Windows, now: datetime, *,
               after: UUID | None, limit: int) -> list[DueRef]:
    """Up to ``limit`` rows of ``tenant_id`` that may be due at ``now``, in
    ``aggregate_id`` order after ``after`` (keyset paging)."""
    where, params = due_sql(windows, now)
    params |= {"t": tenant_id, "after": after, "k": limit}
    # the keyset bound stays a plain range condition (no ``IS NULL OR``), so each page
    # starts in the (tenant_id, aggregate_id) btree where the last one stopped
    start = "" if after is None else " AND aggregate_id > %(after)s"
    rows = cur.execute(
        f"SELECT aggregate_id, tenant_id, resource_id, thread_id, note_id, visibility FROM {TABLE}"  # noqa: S608
        f" WHERE tenant_id = %(t)s{start} AND {where} ORDER BY tenant_id, aggregate_id LIMIT %(k)s",
        params).fetchall()
    return [DueRef(aggregate_id=r["aggregate_id"],
                   scope=stored_scope(r["tenant_id"], r["resource_id"], r["thread_id"]),
                   note_id=r["note_id"], visibility=r["visibility"]) for r in rows]


def select_tenants(cur: Cursor[Any], *, after: str | None) -> list[str]:
    """The tenants with rows, sorted, after ``after`` (a loose index scan)."""
    rows = cur.execute(
        f"WITH RECURSIVE t AS (SELECT min(tenant_id) AS v FROM {TABLE}"  # noqa: S608
        " WHERE %(after)s::text IS NULL OR tenant_id > %(after)s::text"
        f" UNION ALL SELECT (SELECT min(tenant_id) FROM {TABLE} WHERE tenant_id > t.v) FROM t"  # noqa: S608
        " WHERE t.v IS NOT NULL) SELECT v FROM t WHERE v IS NOT NULL", {"after": after}).fetchall()
    return [r["v"] for r in rows]


def select_classes(cur: Cursor[Any], aggregate_ids: Sequence[UUID]) -> dict[UUID, str]:
    """The class of each note among ``aggregate_ids`` that has a row (primary key)."""
    rows = cur.execute(f"SELECT aggregate_id, retention FROM {TABLE} WHERE aggregate_id = ANY(%s)",  # noqa: S608
                       (list(aggregate_ids),)).fetchall()
    return {r["aggregate_id"]: r["retention"] for r in rows}
