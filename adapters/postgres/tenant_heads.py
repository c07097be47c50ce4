"""Per-tenant event counts kept by the append itself (issue 28 item 3).

A gap in notification ids after the last audit checkpoint is normal: a rolled-back
append consumed sequence values. It is also what deleting an event leaves. To tell the
two apart, every committed append counts its events per tenant in ``mf_tenant_heads``
in the same transaction::

    mf_tenant_heads (tenant text PRIMARY KEY, events bigint NOT NULL)

kept by a statement-level ``AFTER INSERT`` trigger on the events table (its transition
table ``new_rows``: one upsert per statement, the tenants in sorted order), so every
path that appends (a unit of work, a bulk import, the sweep, the ledger, eventsourcing's
own recorder) is counted and a rollback takes its count back with its events. A
tenant's appends already queue behind its advisory lock, so its row adds no wait.

``audit verify`` (:func:`miscounted`) compares each tenant's events with its count in
one snapshot: fewer events than counted means events were deleted (reported, never
checkpointed), more means rows were inserted past the trigger. Whoever can also rewrite
``mf_tenant_heads`` (or drop the trigger) defeats this check as they could the tracking
rows; the checkpoints' chain, anchored outside the database, still shows the change.

A log created before the table gets it on its next writable open (:func:`ensure`):
the events are counted under a ``SHARE ROW EXCLUSIVE`` lock on the events table (an
append waits for the count, once). Events whose ``tenant`` is NULL (a log from before
issue 24 that is not backfilled yet) are not counted; the backfill runs first on open.
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection, sql
from psycopg.rows import tuple_row

from memfabric.projections.engine import advisory_key

HEADS_TABLE = "mf_tenant_heads"
FUNCTION = "mf_count_tenant_events"
TRIGGER = "mf_tenant_heads_count"

DDL = f"CREATE TABLE IF NOT EXISTS {HEADS_TABLE} (tenant text PRIMARY KEY, events bigint NOT NULL)"
_FUNCTION = (
    "CREATE OR REPLACE FUNCTION mf_count_tenant_events() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " INSERT INTO mf_tenant_heads AS h (tenant, events)"
    " SELECT tenant, count(*) FROM new_rows WHERE tenant IS NOT NULL GROUP BY tenant ORDER BY tenant"
    " ON CONFLICT (tenant) DO UPDATE SET events = h.events + excluded.events;"
    " RETURN NULL; END $$"
)


def ensure(datastore: Any, events_table: str) -> bool:
    """Create the counts table, its trigger on ``events_table`` and, when the trigger is
    new, count the events already there (one transaction, under the DDL advisory lock).
    Idempotent: one catalogue probe when everything exists. Returns whether it created
    the trigger."""
    with datastore.transaction(commit=True) as cur:
        if _has_trigger(cur, events_table):
            return False
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("mf-ddl"),))
        if _has_trigger(cur, events_table):
            return False
        table = sql.Identifier(events_table)
        cur.execute(sql.SQL("LOCK TABLE {t} IN SHARE ROW EXCLUSIVE MODE").format(t=table))
        cur.execute(DDL)
        cur.execute(_FUNCTION)
        cur.execute(sql.SQL(
            "CREATE TRIGGER {g} AFTER INSERT ON {t} REFERENCING NEW TABLE AS new_rows"
            " FOR EACH STATEMENT EXECUTE FUNCTION {f}()").format(
            g=sql.Identifier(TRIGGER), t=table, f=sql.Identifier(FUNCTION)))
        cur.execute(f"DELETE FROM {HEADS_TABLE}")  # noqa: S608 - constant name
        cur.execute(sql.SQL(
            "INSERT INTO {h} (tenant, events) SELECT tenant, count(*) FROM {t}"
            " WHERE tenant IS NOT NULL GROUP BY tenant").format(h=sql.Identifier(HEADS_TABLE), t=table))
        return True


def _has_trigger(cur: Any, events_table: str) -> bool:
    row = cur.execute(
        "SELECT 1 FROM pg_trigger WHERE tgname = %s AND tgrelid = to_regclass(%s)",
        (TRIGGER, events_table)).fetchone()
    return row is not None


def miscounted(conn: Connection[Any], events_table: str) -> list[tuple[str, int, int]]:
    """``(tenant, events found, events counted)`` for each tenant whose events in
    ``events_table`` differ from its count in ``mf_tenant_heads`` (run it in the
    snapshot that reads the log). Empty when the table does not exist (a log no
    writable open has upgraded yet: nothing to compare)."""
    cur = conn.cursor(row_factory=tuple_row)
    exists = cur.execute("SELECT to_regclass(%s) IS NOT NULL", (HEADS_TABLE,)).fetchone()
    if not exists or not exists[0]:
        return []
    rows = cur.execute(sql.SQL(
        "SELECT coalesce(e.tenant, h.tenant), coalesce(e.n, 0), coalesce(h.events, 0)"
        " FROM (SELECT tenant, count(*) AS n FROM {t} WHERE tenant IS NOT NULL GROUP BY tenant) e"
        " FULL JOIN {h} h ON h.tenant = e.tenant WHERE e.n IS DISTINCT FROM h.events ORDER BY 1").format(
        t=sql.Identifier(events_table), h=sql.Identifier(HEADS_TABLE))).fetchall()
    return [(str(t), int(found), int(counted)) for t, found, counted in rows]


__all__ = ["DDL", "FUNCTION", "HEADS_TABLE", "TRIGGER", "ensure", "miscounted"]
