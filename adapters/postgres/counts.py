"""Issue 27 item 5: the notes of a scope prefix by state on PostgreSQL, without content.

:func:`scope_counts` answers :class:`~memfabric.domain.results.NoteCounts` in two
statements:

- ``live``, ``superseded`` and ``held`` from the retention index (``mf_retention``:
  one row per un-forgotten note of any kind, write side, so exact after every write);
- ``forgotten`` from the log itself: the tenant's ``Forgotten`` events (the btree
  ``(tenant, notification_id)`` of the events table, filtered on ``topic``) whose note
  has no retention row any more (a legal hold's tombstone leaves the row; a working
  block written again after its erasure has one again). With only a tenant given it is
  a count in SQL; with a resource or thread the scope is read from each such event's
  clear fields (never content, never a key). Cost: one pass over the tenant's events
  in the index, no projection to keep and nothing on the write path.
"""

from __future__ import annotations

from typing import Any

from psycopg import Cursor
from psycopg.rows import tuple_row

from memfabric.adapters.postgres.event_rows import plain_fields
from memfabric.domain.results import NoteCounts
from memfabric.projections import tables
from memfabric.projections.base import prefix_where

FORGOTTEN_TOPIC = "memfabric.domain.note:Note.Forgotten"
"""The stored topic of ``Note.Forgotten`` (stable: old logs keep it)."""




def scope_counts(cur: Cursor[Any], mapper: Any, tenant_id: str, resource_id: str | None,
                 thread_id: str | None) -> NoteCounts:
    """The notes of a scope prefix (``None`` = every resource / thread; ``''`` = the
    notes without one), every kind, by state. ``mapper``: the log's sealing mapper
    (reads the clear fields of a stored ``Forgotten`` state)."""
    cur = cur.connection.cursor(row_factory=tuple_row)
    where, params = prefix_where(tenant_id, resource_id, thread_id)
    row = cur.execute(
        "SELECT count(*) FILTER (WHERE NOT held AND NOT superseded),"  # noqa: S608 - fixed names
        " count(*) FILTER (WHERE NOT held AND superseded), count(*) FILTER (WHERE held)"
        f" FROM {tables.RETENTION} WHERE {where}", params).fetchone()
    live, superseded, held = (int(n) for n in row) if row else (0, 0, 0)
    return NoteCounts(live=live, superseded=superseded, held=held,
                      forgotten=_forgotten(cur, mapper, tenant_id, resource_id, thread_id))


_GONE = (
    f"FROM {tables.EVENTS} e WHERE e.tenant = %s AND e.topic = %s AND NOT EXISTS"  # noqa: S608
    f" (SELECT 1 FROM {tables.RETENTION} r WHERE r.aggregate_id = e.originator_id)"
)


def _forgotten(cur: Cursor[Any], mapper: Any, tenant_id: str, resource_id: str | None,
               thread_id: str | None) -> int:
    """Forgotten notes of the prefix: distinct aggregates with a ``Forgotten`` event and
    no un-forgotten row."""
    if resource_id is None and thread_id is None:
        row = cur.execute(f"SELECT count(DISTINCT e.originator_id) {_GONE}",  # noqa: S608
                          (tenant_id, FORGOTTEN_TOPIC)).fetchone()
        return int(row[0]) if row else 0
    rows = cur.execute(f"SELECT DISTINCT ON (e.originator_id) e.state {_GONE}"  # noqa: S608
                       " ORDER BY e.originator_id", (tenant_id, FORGOTTEN_TOPIC)).fetchall()
    n = 0
    for (state,) in rows:
        f = plain_fields(mapper, bytes(state))
        if ((resource_id is None or (f.get("resource_id") or "") == resource_id)
                and (thread_id is None or (f.get("thread_id") or "") == thread_id)):
            n += 1
    return n
