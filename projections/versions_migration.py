"""Issue 31: bring a database made before the recall index carried ``recorded_from``.

Before, ``mf_note_versions`` held every version of a note, the current one included
(``recorded_to IS NULL``), beside its live recall-index row (the same columns). Now the
live row *is* the current version: it carries ``recorded_from`` (the state's latest
event time), and the versions tables keep only the closed versions
(:mod:`memfabric.projections.note_versions`). :func:`migrate` runs when the recall index
is created on open (:meth:`memfabric.projections.recall_index.RecallIndexProjection.create`),
once: it adds the column, fills it from each note's open version row and deletes the
open version rows and their edges, in the opener's transaction.

A live row without an open version row (the versions projection behind the recall
index, with a separate runner) keeps ``recorded_from`` ``NULL``: it is read at no
``known_at`` until ``memfabric projections rebuild recall_index`` writes it again
(``projections verify`` reports it meanwhile).
"""

from __future__ import annotations

from typing import Any

from psycopg import Cursor, sql

from memfabric.projections import base, tables

COLUMN = "recorded_from"

_FILL = ("UPDATE {ri} ri SET recorded_from = v.recorded_from FROM {v} v WHERE v.tenant_id = ri.tenant_id"
         " AND v.aggregate_id = ri.aggregate_id AND v.version = ri.version AND v.recorded_to IS NULL")
_DROP_EDGES = ("DELETE FROM {e} e USING {v} v WHERE v.tenant_id = e.tenant_id AND v.aggregate_id = e.from_aggregate_id"
               " AND v.version = e.from_version AND v.recorded_to IS NULL")
_DROP_ROWS = "DELETE FROM {v} WHERE recorded_to IS NULL"


def migrate(cur: Cursor[Any], table: str) -> bool:
    """Give recall-index table ``table`` (a live one, made before issue 31's write
    change) its ``recorded_from`` column, filled from the open rows of
    ``mf_note_versions`` (when that table exists), which are then deleted with their
    edges (see the module doc). Nothing when ``table`` does not exist or has the column.
    Returns whether anything changed."""
    if not base.has_table(cur, table) or base.has_column(cur, table, COLUMN):
        return False
    ri = sql.Identifier(table)
    cur.execute(sql.SQL("ALTER TABLE {ri} ADD COLUMN recorded_from timestamptz").format(ri=ri))
    if base.has_table(cur, tables.NOTE_VERSIONS):
        v, e = sql.Identifier(tables.NOTE_VERSIONS), sql.Identifier(tables.LINK_VERSIONS)
        cur.execute(sql.SQL(_FILL).format(ri=ri, v=v))
        if base.has_table(cur, tables.LINK_VERSIONS):
            cur.execute(sql.SQL(_DROP_EDGES).format(e=e, v=v))
        cur.execute(sql.SQL(_DROP_ROWS).format(v=v))
    return True
