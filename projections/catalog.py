"""Catalog reads and small statements rebuild and verify share (indexes, columns,
primary keys, the log head, counts)."""

from __future__ import annotations

from typing import Any

from psycopg import Cursor, sql

from memfabric.projections.replay import Cut, upto_where


def head(cur: Cursor[Any], events_table: str) -> int:
    row = cur.execute(
        sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {t}").format(t=sql.Identifier(events_table))
    ).fetchone()
    return int(first(row))


def first(row: Any) -> Any:
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def count_upto(cur: Cursor[Any], events_table: str, upto: int, cut: Cut | None = None) -> int:
    where, params = upto_where(upto, cut)
    row = cur.execute(
        sql.SQL("SELECT count(*) FROM {t} e WHERE {w}").format(t=sql.Identifier(events_table), w=where), params,
    ).fetchone()
    return int(first(row))


def secondary_indexes(cur: Cursor[Any], table: str) -> list[str]:
    """Indexes of ``table`` that back no constraint (safe to drop before a bulk load)."""
    rows = cur.execute(
        "SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid"
        " WHERE x.indrelid = to_regclass(%s)"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid)",
        (table,),
    ).fetchall()
    return [first(r) for r in rows]


def all_indexes(cur: Cursor[Any], table: str) -> list[str]:
    rows = cur.execute(
        "SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid"
        " WHERE x.indrelid = to_regclass(%s)",
        (table,),
    ).fetchall()
    return [first(r) for r in rows]


def drop_secondary_indexes(cur: Cursor[Any], table: str) -> None:
    for index in secondary_indexes(cur, table):
        cur.execute(sql.SQL("DROP INDEX {i}").format(i=sql.Identifier(index)))


def columns(cur: Cursor[Any], table: str) -> list[str]:
    rows = cur.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s)"
        " AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (table,),
    ).fetchall()
    return [first(r) for r in rows]


def primary_key(cur: Cursor[Any], table: str) -> list[str]:
    rows = cur.execute(
        "SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
        " JOIN pg_attribute a ON a.attnum = k.attnum"
        " WHERE i.indrelid = to_regclass(%s) AND i.indisprimary AND a.attrelid = i.indrelid"
        " ORDER BY k.n",
        (table,),
    ).fetchall()
    return [first(r) for r in rows]


def set_work_mem(cur: Cursor[Any], maintenance_work_mem: str | None) -> None:
    if maintenance_work_mem:
        cur.execute("SELECT set_config('maintenance_work_mem', %s, true)", (maintenance_work_mem,))
