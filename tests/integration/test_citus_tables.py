"""Issue 25: the Citus layout (``adapters/postgres/citus.py``) places every table a real fabric
has, with the columns the server reports (catches a table the unit test's DDL list
does not know about)."""

from __future__ import annotations

import re

import psycopg

from memfabric.adapters import access_log, open_fabric
from memfabric.adapters.postgres import citus
from memfabric.adapters.audit import CHAIN_DDL
from memfabric.adapters.postgres.retention import RETENTION_DDL


def test_the_layout_places_every_table_of_a_real_fabric(dsn: str) -> None:
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="a fact")
        notes.remember(kind="working", block="plan", content="a plan")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CHAIN_DDL)  # made by the first audit checkpoint
        conn.execute(RETENTION_DDL)  # made when retention settings are first recorded
        for ddl in access_log.DDL:  # made by the first governed call (issue 33)
            conn.execute(ddl)
        rows = conn.execute(
            "SELECT c.relname, array_agg(a.attname::text) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
            " WHERE c.relkind IN ('r', 'p') GROUP BY c.relname").fetchall()
    columns = {name: set(cols) for name, cols in rows}
    placed = {*citus.DISTRIBUTED, *citus.COORDINATOR, *citus.GAPS}
    assert set(columns) == placed
    for table, (column, key) in citus.DISTRIBUTED.items():
        assert column in columns[table] and set(key) <= columns[table], table
    lacking = {t for t, c in columns.items() if not c & {"tenant", "tenant_id"}}
    assert lacking == set(citus.GAPS) | set(citus.COORDINATOR)


def plain_part(ddl: list[str]) -> list[str]:
    """The statements of ``citus_ddl()`` that plain PostgreSQL runs (no Citus function)."""
    return [s for s in ddl if not s.startswith("--") and "citus" not in s and "create_distributed_table" not in s]


def test_the_key_rebuilds_run_on_postgresql(dsn: str) -> None:
    """The tenant-leading primary keys and unique index are valid on a fabric's tables."""
    with open_fabric(dsn) as fabric:
        fabric.scope("acme").remember(kind="fact", content="before the layout")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for ddl in access_log.DDL:  # made by the first governed call (issue 33)
            conn.execute(ddl)
        for statement in plain_part(citus.citus_ddl()):
            conn.execute(statement)  # type: ignore[arg-type]
        keys = dict(conn.execute(
            "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype = 'p' AND conrelid::regclass::text = ANY(%s)", (list(citus.DISTRIBUTED),)).fetchall())
    for table, (column, _) in citus.DISTRIBUTED.items():
        assert re.match(rf"PRIMARY KEY \({column}[,)]", keys[table]), (table, keys[table])


def test_writes_after_the_key_rebuilds(dsn: str) -> None:
    """Writes go on once the primary keys lead with the tenant: the projections' upserts
    name their key by constraint (``ON CONFLICT ON CONSTRAINT <table>_pkey``, issue 25),
    not by ``(aggregate_id)``, which matched no unique index after the rebuild."""
    with open_fabric(dsn) as fabric:
        fabric.scope("acme").remember(kind="fact", content="before the layout")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for ddl in access_log.DDL:  # made by the first governed call (issue 33)
            conn.execute(ddl)
        for statement in plain_part(citus.citus_ddl()):
            conn.execute(statement)  # type: ignore[arg-type]
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme")
        after = notes.remember(kind="fact", content="after the layout")
        assert after.outcome == "inserted"
        notes.forget(id=after.id)  # deletes and upserts of every projection
        assert [h.content for h in notes.recall("layout").hits] == ["before the layout"]
