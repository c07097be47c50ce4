"""Tenant partitions (issue 25): native PostgreSQL hash partitioning by tenant.

A fabric is created with ``open_fabric(..., partitions=N)``. ``N = 1`` (the default)
is the plain layout of every earlier release; ``N > 1`` makes the events table and
every projection table that has a tenant column ``PARTITION BY HASH (<tenant>)`` with
``N`` partitions ``<table>_p0 .. <table>_p{N-1}``. The layout is recorded by the
database itself: the events table's partitions in ``pg_inherits`` (:func:`count`),
which every later DDL (a projection's table, a blue-green rebuild's shadow table) reads,
so a shadow table is partitioned like the live one and a later open can compare.

PostgreSQL wants the partition key in every primary key and unique index: a
partitioned table's primary key is its plain key plus the tenant column, *appended*
(``(aggregate_id, tenant_id)``), so a lookup by aggregate id alone still uses each
partition's key index, and a statement that names the tenant is pruned to one
partition. Upserts name the key by its constraint (``ON CONFLICT ON CONSTRAINT
<table>_pkey``), which is right for both layouts.

Tables without a tenant column (``mf_note_keys``, the ledger's entries and
observations, the quarantine, the tracking tables, the fabric-wide singletons) stay
plain tables in both layouts (see ``docs/scale-out.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Cursor, sql

from memfabric.projections import tables

MAX_PARTITIONS = 256
"""The most partitions ``open_fabric`` accepts."""


def count(cur: Cursor[Any], table: str = tables.EVENTS) -> int:
    """The partitions of ``table`` (in the current search path): 0 when it does not
    exist, 1 for a plain table, else the number of its partitions."""
    row = cur.execute(
        "SELECT c.oid IS NOT NULL AS e, p.partrelid IS NOT NULL AS p,"
        " (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid) AS n"
        " FROM (SELECT to_regclass(%s)::oid AS oid) c LEFT JOIN pg_partitioned_table p ON p.partrelid = c.oid",
        (table,)).fetchone()
    values = list(row.values()) if isinstance(row, dict) else list(row or (False, False, 0))
    exists, partitioned, n = values
    if not exists:
        return 0
    return int(n) if partitioned else 1


def of_fabric(cur: Cursor[Any]) -> int:
    """The fabric's partition count (its events table's, at least 1): what a new
    projection table is created with."""
    return max(1, count(cur, tables.EVENTS))


def primary_key(n: int, columns: Sequence[str], tenant: str = "tenant_id") -> sql.Composed:
    """``PRIMARY KEY (<columns>)``, with ``tenant`` appended when ``n > 1``."""
    cols = [*columns, tenant] if n > 1 and tenant not in columns else list(columns)
    return sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, cols)))


def clause(n: int, tenant: str = "tenant_id") -> sql.Composable:
    """`` PARTITION BY HASH (<tenant>)`` when ``n > 1``, else nothing."""
    if n <= 1:
        return sql.SQL("")
    return sql.SQL(" PARTITION BY HASH ({})").format(sql.Identifier(tenant))


def partition_name(table: str, i: int) -> str:
    """The name of partition ``i`` of ``table``."""
    return f"{table}_p{i}"


def create_partitions(cur: Cursor[Any], table: str, n: int) -> None:
    """``CREATE TABLE <table>_p<i> PARTITION OF <table> FOR VALUES WITH (MODULUS n,
    REMAINDER i)`` for each ``i`` (idempotent; nothing when ``n <= 1``)."""
    for i in range(n if n > 1 else 0):
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {p} PARTITION OF {t} FOR VALUES WITH (MODULUS {n}, REMAINDER {i})").format(
            p=sql.Identifier(partition_name(table, i)), t=sql.Identifier(table),
            n=sql.Literal(n), i=sql.Literal(i)))


def create_table(cur: Cursor[Any], table: str, columns: str, key: Sequence[str],
                 tenant: str = "tenant_id") -> int:
    """``CREATE TABLE IF NOT EXISTS <table> (<columns>, <primary key>)``, hash-partitioned
    by ``tenant`` into the fabric's partitions (:func:`of_fabric`) and with them made;
    ``columns``: the column definitions as SQL text (constants, no primary key);
    ``key``: the plain layout's primary key. Returns the partition count."""
    n = of_fabric(cur)
    cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {t} (" + columns + ", {pk}){by}").format(  # noqa: S608 - constants
        t=sql.Identifier(table), pk=primary_key(n, key, tenant), by=clause(n, tenant)))
    create_partitions(cur, table, n)
    name_primary_key(cur, table)
    return n


def name_primary_key(cur: Cursor[Any], table: str) -> None:
    """Give ``table``'s primary key constraint the name upserts name as their conflict
    target, ``<table>_pkey`` (PostgreSQL's default), when it has another (a key rebuilt
    by hand under another name); nothing otherwise."""
    row = cur.execute("SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'p'",
                      (table,)).fetchone()
    name = None if row is None else (row["conname"] if isinstance(row, dict) else row[0])
    if name is not None and name != f"{table}_pkey":
        cur.execute(sql.SQL("ALTER TABLE {t} RENAME CONSTRAINT {a} TO {b}").format(
            t=sql.Identifier(table), a=sql.Identifier(name), b=sql.Identifier(f"{table}_pkey")))


def children(cur: Cursor[Any], table: str) -> list[str]:
    """The partitions of ``table`` by name (none for a plain table)."""
    rows = cur.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname", (table,)).fetchall()
    return [r["relname"] if isinstance(r, dict) else r[0] for r in rows]


def rename_children(cur: Cursor[Any], old: str, new: str) -> None:
    """After ``ALTER TABLE old RENAME TO new``: rename its partitions ``old_p<i>`` to
    ``new_p<i>`` and their indexes whose names start with the old partition name (a
    blue-green switch, so the next rebuild's shadow partitions are free to make)."""
    for child in children(cur, new):
        if not child.startswith(old + "_p"):
            continue
        renamed = new + child[len(old):]
        cur.execute(sql.SQL("ALTER TABLE {a} RENAME TO {b}").format(a=sql.Identifier(child), b=sql.Identifier(renamed)))
        rows = cur.execute("SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid"
                           " WHERE x.indrelid = to_regclass(%s)", (renamed,)).fetchall()
        for r in rows:
            index = r["relname"] if isinstance(r, dict) else r[0]
            if index.startswith(child):
                cur.execute(sql.SQL("ALTER INDEX {a} RENAME TO {b}").format(
                    a=sql.Identifier(index), b=sql.Identifier(renamed + index[len(child):])))


def child(cur: Cursor[Any], table: str, remainder: int) -> str:
    """The partition of hash-partitioned ``table`` that holds remainder ``remainder``
    (read from its bound, ``FOR VALUES WITH (modulus n, remainder r)``, not from its
    name); ``LookupError`` when there is none."""
    for row in cur.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)", (table,)).fetchall():
        name, bound = (row["relname"], row["bound"]) if isinstance(row, dict) else row
        if f"remainder {remainder})" in bound:
            return str(name)
    raise LookupError(f"{table} has no partition of remainder {remainder}")


def of_tenant(cur: Cursor[Any], tenant: str, table: str = tables.EVENTS) -> int:
    """The remainder of the partition of ``table`` that holds ``tenant`` (PostgreSQL's
    own hash, ``satisfies_hash_partition``), whether or not it has written anything;
    0 for a plain table."""
    n = count(cur, table)
    if n <= 1:
        return 0
    row = cur.execute(
        "SELECT r FROM generate_series(0, %s - 1) r WHERE satisfies_hash_partition(to_regclass(%s)::oid, %s, r, %s::text)",
        (n, table, n, tenant)).fetchone()
    assert row is not None  # every value satisfies exactly one remainder
    return int(row["r"] if isinstance(row, dict) else row[0])
