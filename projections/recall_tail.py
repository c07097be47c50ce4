"""The recall index's unindexed tail (issue 24): the HNSW index off the durable write.

A writer's recall-index row lands with ``indexed = false``; the HNSW index is *partial*
(``WHERE indexed``), so the write's commit never pays the graph insertion (0.8 ms of a
write's 2.7 ms of server time, measured on main). A background indexer
(``memfabric.adapters.postgres.tail.TailIndexer``) later flips batches of a tenant's
rows to ``indexed = true``, which inserts them into the graph outside every writer's
line. A recall through HNSW merges the graph's top ``limit`` over indexed rows with an
exact scan of the tenant's tail (a partial btree on ``(tenant_id, kind) WHERE NOT
indexed`` finds it), so it never misses an acknowledged write: the pattern turbopuffer
documents for its write-ahead log ("queries search the index and exhaustively scan the
unindexed tail"). An upsert of an existing row (fold, supersession, consent) sets
``indexed = false`` again, so the changed row leaves the graph until the indexer
re-admits it.

``indexed`` is index state, not projection content: :mod:`memfabric.projections.verify`
leaves it out of its comparison (a replay loads every row indexed, see
:func:`memfabric.projections.recall_index.copy_rows`).
"""

from __future__ import annotations

from typing import Any

from psycopg import Cursor, sql

from memfabric.projections import base

COLUMN = "indexed"
"""The row's index state: ``true`` once the row is in the HNSW graph."""

COLUMN_DDL = f", {COLUMN} boolean NOT NULL DEFAULT false"
"""Appended to :func:`memfabric.projections.recall_index.columns_ddl`."""


def migrate(cur: Cursor[Any], table: str) -> bool:
    """Give a recall-index table made before the tail its ``indexed`` column: existing
    rows are in the (then full) HNSW index, so they read ``true``; rows written from now
    on default to ``false``. The old full HNSW index keeps serving (the query's
    ``indexed`` condition filters it) and keeps being maintained inline until
    ``memfabric projections rebuild recall_index`` makes the partial one. Returns
    whether the column was added."""
    if not base.has_table(cur, table) or base.has_column(cur, table, COLUMN):
        return False
    t = sql.Identifier(table)
    cur.execute(sql.SQL("ALTER TABLE {t} ADD COLUMN indexed boolean NOT NULL DEFAULT true").format(t=t))
    cur.execute(sql.SQL("ALTER TABLE {t} ALTER COLUMN indexed SET DEFAULT false").format(t=t))
    return True


def index_ddl(table: str, name: str) -> list[sql.Composed]:
    """The partial HNSW index (cosine, m=16, ef_construction=64, ``WHERE indexed``,
    named ``<name>_hnsw``) and the tail's partial btree (``(tenant_id, kind) WHERE NOT
    indexed``, ``<name>_tail``)."""
    t = sql.Identifier(table)
    return [
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS {i} ON {t} USING hnsw (embedding vector_cosine_ops)"
            " WITH (m = 16, ef_construction = 64) WHERE indexed"
        ).format(i=sql.Identifier(f"{name}_hnsw"), t=t),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, kind) WHERE NOT indexed").format(
            i=sql.Identifier(f"{name}_tail"), t=t),
    ]


VECTOR_LIST = (
    # the graph's top ``limit`` over indexed rows, and the exact top ``limit`` of the
    # unindexed tail (OFFSET 0 keeps the HNSW index out of that branch), merged by distance
    "v AS MATERIALIZED (SELECT aggregate_id, dist FROM ("
    "(SELECT aggregate_id, embedding <=> %(q)b AS dist FROM {t} WHERE {w} AND indexed"
    " ORDER BY embedding <=> %(q)b LIMIT %(limit)s)"
    " UNION ALL (SELECT aggregate_id, dist FROM (SELECT aggregate_id, embedding <=> %(q)b AS dist"
    " FROM {t} WHERE {w} AND NOT indexed OFFSET 0) s ORDER BY dist LIMIT %(limit)s)"
    ") u ORDER BY dist LIMIT %(limit)s),"
    " vr AS (SELECT aggregate_id, row_number() OVER (ORDER BY dist, aggregate_id) AS rank FROM v)"
)
"""The vector list of a recall through HNSW (``{t}``: table, ``{w}``: the recall's
conditions; parameters ``q``, ``limit`` and those of ``{w}``): both branches run the same
scope, kind, validity, consent and access conditions inside SQL."""


def index_batch(cur: Cursor[Any], table: str, tenant_id: str, limit: int) -> int:
    """Put up to ``limit`` of ``tenant_id``'s tail rows into the HNSW graph (``UPDATE
    ... SET indexed = true``); rows another transaction holds (a writer's upsert, a
    second indexer) are skipped, never waited for. Returns how many rows were indexed."""
    t = sql.Identifier(table)
    cur.execute(sql.SQL(
        "UPDATE {t} SET indexed = true WHERE tenant_id = %(t)s AND aggregate_id IN ("
        "SELECT aggregate_id FROM {t} WHERE tenant_id = %(t)s AND NOT indexed"
        " LIMIT %(n)s FOR UPDATE SKIP LOCKED)").format(t=t), {"t": tenant_id, "n": limit})
    return max(cur.rowcount, 0)


def tail_size(cur: Cursor[Any], table: str, tenant_id: str | None = None) -> int:
    """Rows not yet in the HNSW graph (one tenant's, or all)."""
    where = sql.SQL("NOT indexed") if tenant_id is None else sql.SQL("tenant_id = %s AND NOT indexed")
    row = cur.execute(sql.SQL("SELECT count(*) FROM {t} WHERE {w}").format(
        t=sql.Identifier(table), w=where), () if tenant_id is None else (tenant_id,)).fetchone()
    if row is None:
        return 0
    return int(row["count"] if isinstance(row, dict) else row[0])
