"""The link graph (issue 15): one row per link edge of a live note. Table ``mf_link_graph``.

Columns: the source's and target's aggregate ids and note ids, the source's scope
columns, ``relation`` and ``weight``; primary key ``(from_aggregate_id,
to_aggregate_id, relation)``, btrees on ``from_aggregate_id`` and ``to_aggregate_id``.

Rows are a pure function of the *source* note (:func:`rows_for`): a forgotten or
held source has none, so its edges leave the graph in the transaction that forgets
or holds it. The *target's* state is honoured at query time: recall only follows an
edge (and only lists a link on a hit) when the target has a recall-index row that
passes every filter of the recall, and forgotten or held notes have no recall-index
row (deleted in the transaction that forgets or holds them). So a forgotten target
never comes back, and a rebuild from the log gives exactly the live rows.

Links are always within one scope (the target id is resolved in the source's scope),
so an edge's scope columns are both ends' scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from psycopg import Cursor, sql

from memfabric.domain.note import Note, note_uuid
from memfabric.projections import base, partitions, tables
from memfabric.projections.batch import BatchCursor

NAME = "link_graph"
TABLE = tables.LINK_GRAPH

COLUMNS: tuple[str, ...] = (
    "from_aggregate_id", "to_aggregate_id", "from_note_id", "to_note_id",
    "tenant_id", "resource_id", "thread_id", "relation", "weight",
)
"""Column order of a row tuple (also the COPY order)."""

_TYPES = ("uuid", "uuid", "text", "text", "text", "text", "text", "text", "float4")


def rows_for(note: Note) -> list[tuple[Any, ...]]:
    """The edges of a note: none when it is forgotten or held."""
    if not note.live:
        return []
    scope = note.scope
    out = []
    for link in {(lk["id"], lk.get("relation", "related")): lk for lk in note.links}.values():
        out.append((
            note.id, note_uuid(scope, link["id"]), note.note_id, link["id"],
            note.tenant_id, note.resource_id or "", note.thread_id or "",
            link.get("relation", "related"), float(link.get("weight", 1.0)),
        ))
    return out


COLUMNS_DDL = (
    " from_aggregate_id uuid NOT NULL, to_aggregate_id uuid NOT NULL,"
    " from_note_id text NOT NULL, to_note_id text NOT NULL, tenant_id text NOT NULL,"
    " resource_id text NOT NULL, thread_id text NOT NULL, relation text NOT NULL,"
    " weight real NOT NULL")
"""The table's columns; primary key ``(from_aggregate_id, to_aggregate_id, relation)``,
with the tenant when partitioned."""
KEY = ("from_aggregate_id", "to_aggregate_id", "relation")


def index_ddl(table: str = TABLE) -> list[sql.Composed]:
    """A btree on the target (incoming edges); the primary key serves the source."""
    return [sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (to_aggregate_id)").format(
        i=sql.Identifier(f"{table}_to"), t=sql.Identifier(table))]


def apply(cur: Cursor[Any] | BatchCursor, notes: Iterable[Note], table: str = TABLE) -> None:
    """Replace the edges of ``notes`` with their current ones. A note at version 1
    without links is skipped (no DELETE round trip): every projection of that one
    state wrote no edge, so there is none to replace (issue 18). Handed a
    :class:`~memfabric.projections.batch.BatchCursor` (issue 24), the replacement joins
    its batch as two writes on disjoint rows: the delete of the notes' edges that are
    not among the new ones, and the upsert of the new ones."""
    notes = list(notes)
    rows = [row for n in notes for row in rows_for(n)]
    stale = [(n.tenant_id, n.id) for n in notes if n.version > 1 or n.links]
    if not stale:
        return
    if isinstance(cur, BatchCursor):
        kept = list(zip(*((r[0], r[1], r[7]) for r in rows), strict=True)) if rows else [(), (), ()]
        params = [*base.delete_params(stale), *(list(col) for col in kept)]
        cur.batch.add_statement(_replace_template(table), params, lambda own: apply(own, notes, table))
        cur.batch.add(table, COLUMNS, rows, None, lambda own: None)
        return
    t = sql.Identifier(table)
    cur.execute(sql.SQL("DELETE FROM {t} WHERE tenant_id = ANY(%s) AND from_aggregate_id = ANY(%s)").format(t=t),
                base.delete_params(stale))
    if rows:
        cur.executemany(
            sql.SQL("INSERT INTO {t} ({cols}) VALUES ({ph})").format(
                t=t, cols=sql.SQL(", ").join(map(sql.Identifier, COLUMNS)),
                ph=sql.SQL(", ").join(sql.Placeholder() * len(COLUMNS))),
            rows)


def _replace_template(table: str) -> str:
    """The batched delete of :func:`apply`: the edges of the notes ``{1}`` (of tenants
    ``{0}``) other than the new ones (``{2}``, ``{3}``, ``{4}``: their key columns)."""
    t = sql.Identifier(table).as_string(None)
    return (f"DELETE FROM {t} WHERE tenant_id = ANY({{0}}::text[]) AND from_aggregate_id = ANY({{1}}::uuid[])"  # noqa: S608
            " AND (from_aggregate_id, to_aggregate_id, relation) NOT IN"
            " (SELECT * FROM unnest({2}::uuid[], {3}::uuid[], {4}::text[]))")


def copy_rows(cur: Cursor[Any], rows: Iterable[Sequence[Any]], table: str = TABLE) -> int:
    return base.copy_rows(cur, table, COLUMNS, _TYPES, rows)


def select_links(cur: Cursor[Any], ids: Sequence[UUID]) -> dict[UUID, list[dict[str, Any]]]:
    """The edges of the notes ``ids`` whose target still has a recall-index row."""
    rows = cur.execute(
        sql.SQL("SELECT g.from_aggregate_id, g.to_note_id, g.relation, g.weight FROM {g} g"
                " WHERE g.from_aggregate_id = ANY(%s) AND EXISTS (SELECT 1 FROM {r} x"
                " WHERE x.aggregate_id = g.to_aggregate_id)"
                " ORDER BY g.from_aggregate_id, g.to_note_id, g.relation").format(
            g=sql.Identifier(TABLE), r=sql.Identifier(tables.RECALL_INDEX)),
        (list(ids),)).fetchall()
    out: dict[UUID, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["from_aggregate_id"], []).append(
            {"id": r["to_note_id"], "relation": r["relation"], "weight": float(r["weight"])})
    return out


class LinkGraphProjection:
    """The link graph as a :class:`~memfabric.projections.base.NoteProjection`."""

    name = NAME
    tables: tuple[str, ...] = (TABLE,)
    write_side = False
    aggregate_types: tuple[type, ...] = (Note,)
    """The engine hands it ``Note`` aggregates only (not the conversation ledger's)."""
    batch_rows = True
    """May be handed a ``BatchCursor`` (its edges travel in a ``RowBatch``)."""

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        partitions.create_table(cur, TABLE + table_suffix, COLUMNS_DDL, KEY)
        if not table_suffix:
            self.create_indexes(cur)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        for stmt in index_ddl(TABLE + table_suffix):
            cur.execute(stmt)

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None:
        apply(cur, notes)

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int:
        rows = (row for n in notes for row in rows_for(n))
        return copy_rows(cur, rows, TABLE + table_suffix)
