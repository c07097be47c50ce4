"""The note-scope index: one row per un-forgotten note of any kind, held or not.

It answers the two questions erasure needs without touching content:

- which notes does a scope prefix hold (``erase_scope`` pages through it by
  ``(resource_id, thread_id, aggregate_id)``), including held notes and kinds that have
  no recall-index row (``working``);
- which ``file`` notes of a scope are recorded against a path (``repoint`` and
  ``delete_path`` select on ``path``, never on content).

Rows are a pure function of the ``Note`` aggregate's state (:func:`row_for`); a
forgotten note has no row, so neither its path nor any other field outlives the
tombstone here. Table ``mf_note_scope``, tracking table ``mf_note_scope_tracking``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from psycopg import Cursor, sql

from memfabric.domain.note import Note
from memfabric.domain.ports import NoteRef
from memfabric.domain.scope import Scope, stored_scope
from memfabric.projections import partitions, tables
from memfabric.domain.visibility import Visibility, of_consent
from memfabric.projections.base import add_visibility, copy_rows, prefix_where, split_rows, write_rows

NAME = "note_scope"
TABLE = tables.NOTE_SCOPE

COLUMNS: tuple[str, ...] = (
    "aggregate_id", "tenant_id", "resource_id", "thread_id", "note_id", "kind", "path", "held",
    "visibility",
)
"""Column order of a row tuple (also the COPY order)."""


def row_for(note: Note) -> tuple[Any, ...] | None:
    """The row of a note, or ``None`` once it is forgotten."""
    if not note.listed:
        return None
    return (
        note.id,
        note.tenant_id,
        note.resource_id or "",
        note.thread_id or "",
        note.note_id,
        note.kind,
        note.path if note.kind == "file" else None,
        bool(note.held),
        of_consent(note.consent),
    )


def apply(cur: Cursor[Any], notes: Iterable[Note], table: str = TABLE) -> None:
    """Upsert or delete the rows of ``notes`` (their current aggregate state)."""
    upserts, deletes = split_rows(notes, row_for)
    write_rows(cur, table, COLUMNS, upserts, deletes)


_TYPES = ("uuid", "text", "text", "text", "text", "text", "text", "bool", "text")


class NoteScopeProjection:
    """The note-scope index as a :class:`~memfabric.projections.base.NoteProjection`."""

    name = NAME
    tables: tuple[str, ...] = (TABLE,)
    write_side = True
    batch_rows = True
    """Writes through ``write_rows`` alone (its rows may travel in a ``RowBatch``)."""

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        partitions.create_table(
            cur, TABLE + table_suffix,
            " aggregate_id uuid NOT NULL, tenant_id text NOT NULL,"
            " resource_id text NOT NULL, thread_id text NOT NULL, note_id text NOT NULL,"
            " kind text NOT NULL, path text, held boolean NOT NULL, visibility text", ["aggregate_id"])
        add_visibility(cur, TABLE + table_suffix)
        if not table_suffix:
            self.create_indexes(cur)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        table = TABLE + table_suffix
        t = sql.Identifier(table)
        cur.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, resource_id, thread_id, aggregate_id)"
            ).format(i=sql.Identifier(f"{table}_scope"), t=t)
        )
        cur.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, resource_id, thread_id, path)"
                " WHERE path IS NOT NULL"
            ).format(i=sql.Identifier(f"{table}_path"), t=t)
        )
        cur.execute(  # issue 16: a note id resolved from any scope that sees it
            sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, note_id)").format(
                i=sql.Identifier(f"{table}_note_id"), t=t)
        )

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None:
        apply(cur, notes)

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int:
        rows = (r for r in map(row_for, notes) if r is not None)
        return copy_rows(cur, TABLE + table_suffix, COLUMNS, _TYPES, rows)




def select_page(
    cur: Cursor[Any], tenant_id: str, resource_id: str | None, thread_id: str | None,
    *, after: NoteRef | None, limit: int,
) -> list[NoteRef]:
    """Up to ``limit`` un-forgotten notes of a scope prefix (``None`` = any resource /
    thread), keyset-paged by ``(resource_id, thread_id, aggregate_id)`` after ``after``."""
    where, params = prefix_where(tenant_id, resource_id, thread_id)
    if after is not None:
        where += " AND (resource_id, thread_id, aggregate_id) > (%s, %s, %s)"
        params += [after.scope.resource_id or "", after.scope.thread_id or "", after.aggregate_id]
    rows = cur.execute(
        f"SELECT aggregate_id, tenant_id, resource_id, thread_id, note_id, held FROM {TABLE}"  # noqa: S608
        f" WHERE {where} ORDER BY resource_id, thread_id, aggregate_id LIMIT %s",
        [*params, limit],
    ).fetchall()
    return [
        NoteRef(aggregate_id=row["aggregate_id"],
                scope=stored_scope(row["tenant_id"], row["resource_id"], row["thread_id"]),
                note_id=row["note_id"], held=row["held"])
        for row in rows
    ]


def ids_by_path(cur: Cursor[Any], scope: Scope, path: str) -> list[str]:
    """Ids of the un-forgotten ``file`` notes of exactly ``scope`` on ``path``, sorted."""
    rows = cur.execute(
        f"SELECT note_id FROM {TABLE} WHERE tenant_id = %s AND resource_id = %s"  # noqa: S608
        " AND thread_id = %s AND path = %s ORDER BY note_id", (*scope.sql(), path)).fetchall()
    return [row["note_id"] for row in rows]


def resolve(cur: Cursor[Any], scope: Scope, note_id: str, limit: int = 3) -> list[tuple[Scope, Visibility]]:
    """Issue 16: the homes (and visibilities) of the un-forgotten notes ``note_id`` seen
    from ``scope`` (:func:`memfabric.domain.visibility.visible`, in SQL), ``scope``'s
    own note first, at most ``limit`` (btree ``(tenant_id, note_id)``)."""
    t, r, th = scope.sql()
    rows = cur.execute(
        f"SELECT tenant_id, resource_id, thread_id, visibility FROM {TABLE}"  # noqa: S608
        " WHERE tenant_id = %(t)s AND note_id = %(id)s AND ((resource_id = %(r)s AND thread_id = %(th)s)"
        " OR visibility = 'tenant' OR (visibility = 'resource' AND resource_id = %(r)s AND %(r)s <> ''))"
        " ORDER BY (resource_id = %(r)s AND thread_id = %(th)s) DESC, resource_id, thread_id LIMIT %(k)s",
        {"t": t, "r": r, "th": th, "id": note_id, "k": limit}).fetchall()
    return [(stored_scope(row["tenant_id"], row["resource_id"], row["thread_id"]), of_consent({"visibility": row["visibility"]}))
            for row in rows]


def select_kind(cur: Cursor[Any], scope: Scope, kind: str) -> list[tuple[UUID, bool]]:
    """``(aggregate id, held)`` of the un-forgotten notes of kind ``kind`` of exactly
    ``scope`` (issue 31: the working notes a ``known_at`` working value replays)."""
    rows = cur.execute(
        f"SELECT aggregate_id, held FROM {TABLE} WHERE tenant_id = %s AND resource_id = %s"  # noqa: S608
        " AND thread_id = %s AND kind = %s ORDER BY aggregate_id", [*scope.sql(), kind]).fetchall()
    return [(row["aggregate_id"], bool(row["held"])) for row in rows]
