"""The partition a tenant's recall reads, named in the statement (issue 25).

On a fabric made with ``open_fabric(..., partitions=N)`` the recall statement names the
tenant's partitions of the recall index and the link graph (``mf_recall_index_p<i>``,
``mf_link_graph_p<i>``, ``i`` = PostgreSQL's hash of the tenant modulo ``N``) instead of
the partitioned parents. Why: recall runs as a prepared statement, and PostgreSQL
switches a prepared statement to its cached generic plan only when that plan's
estimated cost is no more than the custom plans' average. A generic plan over a
partitioned parent keeps every partition (pruning waits for the parameters, at
executor start) and is costed over all ``N``, so PostgreSQL never chose it and planned
every partitioned recall afresh (measured: 0 generic plans in 40 runs against 35 of 40
on the plain layout; planning 2.5-3 ms of a 9-12 ms recall). Named directly, the
partition is a plain table to the planner: the generic plan is chosen as on the plain
layout, and a tenant's statement cannot touch another partition.

Each statement still says ``tenant_id = %(t)s``: the partition only narrows where the
rows are looked for, never which rows are admitted.

The partition count is read once per connection (a connection stays on one database,
whose layout is fixed at creation); a tenant's remainder depends only on the tenant and
the count, so it is kept per process. A partition keeps its name ``<table>_p<i>`` for
remainder ``i`` through every rebuild (:mod:`memfabric.projections.partitions`,
:mod:`memfabric.projections.partition_admin`), and a prepared statement that names it is
planned again by name when the table is replaced.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from psycopg import Connection, Cursor

from memfabric.projections import partitions, tables

RECALL_TABLES = (tables.RECALL_INDEX, tables.LINK_GRAPH)
"""The partitioned tables a recall statement names."""

REMAINDERS_MAX = 100_000
"""Tenants whose remainder is kept per process; past it the cache starts again."""

_counts: weakref.WeakKeyDictionary[Connection[Any], int] = weakref.WeakKeyDictionary()
_remainders: dict[tuple[int, str], int] = {}
_lock = threading.Lock()


def of_tenant(cur: Any, tenant: str) -> int | None:
    """The remainder of ``tenant``'s partition of :data:`RECALL_TABLES` when both are
    hash-partitioned alike (``N > 1`` partitions each), else ``None`` (the plain layout,
    or a cursor that is not psycopg's own, such as a ``known_at`` recall's
    :class:`~memfabric.projections.note_versions.RecordedCursor`, which rewrites the
    parents' names). At most two queries on the first call for a connection or tenant,
    none after."""
    if not isinstance(cur, Cursor):
        return None
    n = _count(cur)
    if n <= 1:
        return None
    key = (n, tenant)
    remainder = _remainders.get(key)
    if remainder is None:
        remainder = partitions.of_tenant(cur, tenant, tables.RECALL_INDEX)
        with _lock:
            if len(_remainders) >= REMAINDERS_MAX:
                _remainders.clear()
            _remainders[key] = remainder
    return remainder


def known_count(conn: Connection[Any], n: int) -> None:
    """Record that ``conn``'s database is laid out with ``n`` partitions (the fabric
    knows it at open), so :func:`of_tenant` never asks on that connection."""
    if n >= 1:
        with _lock:
            _counts[conn] = n


def relation(table: str, remainder: int | None) -> str:
    """``table``'s partition of ``remainder`` (``<table>_p<remainder>``), or ``table``
    itself when ``remainder`` is ``None``."""
    return table if remainder is None else partitions.partition_name(table, remainder)


def _count(cur: Cursor[Any]) -> int:
    """The partitions of :data:`RECALL_TABLES` on ``cur``'s connection: ``N`` when both
    have ``N``, else 1 (read once per connection)."""
    conn = cur.connection
    n = _counts.get(conn)
    if n is None:
        counts = {partitions.count(cur, t) for t in RECALL_TABLES}
        n = counts.pop() if len(counts) == 1 else 1
        if n == 0:  # not made yet: ask again next time
            return 0
        with _lock:
            _counts[conn] = n
    return n
