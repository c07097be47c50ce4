"""The working-value projection: one row per live working block, in ``mf_working_value``.

A scope's working value (``Notes.working_value()``) is the set of its rows, shaped as
``{"_fabric": {"blocks": {LABEL: {"content", "updated_at", "version"}}}}``. A row is a
pure function of its ``Note`` aggregate's state
(:func:`memfabric.domain.working.block_entry`), so the value after inline updates and
the value after a replay of the log from zero are identical; forgotten and held blocks
have no row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timezone
from typing import Any

from psycopg import Cursor, sql

from memfabric.domain.note import Note
from memfabric.domain.scope import Scope
from memfabric.domain.working import BlockEntry, block_entry
from memfabric.projections import base, partitions, tables
from memfabric.projections.base import split_rows, write_rows

NAME = "working_value"
TABLE = tables.WORKING_VALUE

COLUMNS: tuple[str, ...] = (
    "aggregate_id", "tenant_id", "resource_id", "thread_id", "block", "note_id",
    "content", "updated_at", "version",
)
"""Column order of a row tuple (also the COPY order)."""

_TYPES = ["uuid", "text", "text", "text", "text", "text", "text", "timestamptz", "int4"]


def row_for(note: Note) -> tuple[Any, ...] | None:
    """The row of a note, or ``None`` when it must have none (see ``block_entry``)."""
    entry = block_entry(note)
    if entry is None:
        return None
    return (
        note.id, note.tenant_id, note.resource_id or "", note.thread_id or "", note.block,
        note.note_id, entry["content"], entry["updated_at"], entry["version"],
    )


def apply(cur: Cursor[Any], notes: Iterable[Note], table: str = TABLE) -> None:
    """Upsert or delete the rows of the working notes among ``notes`` (others are skipped)."""
    upserts, deletes = split_rows((n for n in notes if n.kind == "working"), row_for)
    write_rows(cur, table, COLUMNS, upserts, deletes)


def copy_rows(cur: Cursor[Any], rows: Iterable[Sequence[Any]], table: str = TABLE) -> int:
    """Bulk-load rows with ``COPY ... FROM STDIN (FORMAT BINARY)``; returns the count."""
    return base.copy_rows(cur, table, COLUMNS, _TYPES, rows)


def select_blocks(cur: Cursor[Any], scope: Scope, table: str = TABLE) -> dict[str, BlockEntry]:
    """The blocks of exactly ``scope`` (one indexed read), by label."""
    rows = cur.execute(
        sql.SQL(
            "SELECT block, content, updated_at, version FROM {t}"
            " WHERE tenant_id = %s AND resource_id = %s AND thread_id = %s"
        ).format(t=sql.Identifier(table)),
        scope.sql(),
    ).fetchall()
    return {
        r["block"]: BlockEntry(
            content=r["content"],
            updated_at=r["updated_at"].astimezone(timezone.utc),
            version=int(r["version"]),
        )
        for r in rows
    }


class WorkingValueProjection:
    """The working value as a :class:`~memfabric.projections.base.NoteProjection`."""

    name = NAME
    tables: tuple[str, ...] = (TABLE,)
    write_side = True
    batch_rows = True
    """Writes through ``write_rows`` alone (its rows may travel in a ``RowBatch``)."""

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        partitions.create_table(
            cur, TABLE + table_suffix,
            " aggregate_id uuid NOT NULL, tenant_id text NOT NULL,"
            " resource_id text NOT NULL, thread_id text NOT NULL, block text NOT NULL,"
            " note_id text NOT NULL, content text NOT NULL,"
            " updated_at timestamptz NOT NULL, version integer NOT NULL", ["aggregate_id"])
        if not table_suffix:
            self.create_indexes(cur)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        name = TABLE + table_suffix
        cur.execute(
            sql.SQL(
                "CREATE UNIQUE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, resource_id, thread_id, block)"
            ).format(i=sql.Identifier(f"{name}_scope"), t=sql.Identifier(name))
        )

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None:
        apply(cur, notes)

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int:
        rows = (r for r in map(row_for, notes) if r is not None)
        return copy_rows(cur, rows, TABLE + table_suffix)
