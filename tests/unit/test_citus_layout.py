"""Issue 25: the generated Citus DDL (``adapters/postgres/citus.py``) names the tenant column of
every table memfabric creates, checked against memfabric's own DDL (recorded from the
projections' ``create`` and the adapters' DDL constants, no server needed)."""

from __future__ import annotations

import re
from typing import Any


from memfabric.adapters.postgres import citus
from memfabric.adapters.postgres import schema_stamp, tenant_heads
from memfabric.adapters.audit import CHAIN_DDL
from memfabric.adapters.bootstrap import EMBEDDER_DDL
from memfabric.adapters.crypto import KEYS_DDL
from memfabric.adapters.postgres import SECRETS_DDL, SECRETS_FORMAT_DDL, add_tenant_column
from memfabric.adapters.postgres.retention import RETENTION_DDL
from memfabric.projections import quarantine, tables
from memfabric.projections.consolidation_index import ConsolidationIndexProjection
from memfabric.projections.engine import ERRORS_DDL
from memfabric.projections.ledger import LedgerProjection
from memfabric.projections.link_graph import LinkGraphProjection
from memfabric.projections.note_scope import NoteScopeProjection
from memfabric.projections.recall_index import RecallIndexProjection
from memfabric.projections.retention_index import RetentionIndexProjection
from memfabric.projections.working_value import WorkingValueProjection
from memfabric.projections.principals import PrincipalsProjection
from memfabric.projections.entities import EntitiesProjection
from memfabric.projections.note_versions import NoteVersionsProjection
from memfabric.adapters import access_log

EVENTS_COLUMNS = {"originator_id", "originator_version", "topic", "state", "notification_id"}
"""eventsourcing's application recorder table (``PostgresApplicationRecorder``)."""

TRACKING_COLUMNS = {"application_name", "notification_id"}
"""eventsourcing's tracking table (``PostgresTrackingRecorder``)."""


class Recorder:
    """A cursor that records the statements it is given (and answers nothing)."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def execute(self, query: Any, params: Any = None, **_: Any) -> Recorder:
        text = query if isinstance(query, str) else query.as_string(None)
        self.statements.append(" ".join(text.split()))
        return self

    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[Any]:
        return []


def created_columns() -> dict[str, set[str]]:
    """Every table memfabric's DDL creates → its columns (``ALTER ... ADD COLUMN`` included)."""
    cur = Recorder()
    for projection in (RecallIndexProjection(384, "hash-384"), WorkingValueProjection(), NoteScopeProjection(),
                       ConsolidationIndexProjection(384, "hash-384"), LinkGraphProjection(), LedgerProjection(),
                       RetentionIndexProjection(), PrincipalsProjection(), EntitiesProjection(),
                       NoteVersionsProjection(384, "hash-384", None)):
        projection.create(cur)  # type: ignore[arg-type]
    for ddl in (KEYS_DDL, SECRETS_DDL, SECRETS_FORMAT_DDL, EMBEDDER_DDL, ERRORS_DDL, CHAIN_DDL, RETENTION_DDL,
                quarantine.DDL, tenant_heads.DDL, schema_stamp.STAMP_DDL, *access_log.DDL):
        cur.execute(ddl)
    add_tenant_column(cur, tables.EVENTS)  # type: ignore[arg-type]
    found: dict[str, set[str]] = {tables.EVENTS: set(EVENTS_COLUMNS)}
    found |= {tables.tracking(p): set(TRACKING_COLUMNS) for p in citus.PROJECTIONS}
    for text in cur.statements:
        if m := re.match(r'CREATE TABLE IF NOT EXISTS "?(\w+)"? \((.*)\)$', text):
            body = re.sub(r"\([^()]*(\([^()]*\))?[^()]*\)", "", m.group(2))  # drop (...) groups
            found[m.group(1)] = {c.split()[0] for c in body.split(",")
                                 if c.split() and c.split()[0].upper() not in ("PRIMARY", "UNIQUE", "CHECK")}
        elif m := re.match(r'ALTER TABLE "?(\w+)"? ADD COLUMN IF NOT EXISTS (\w+)', text):
            found.setdefault(m.group(1), set()).add(m.group(2))
    return found


def test_the_recorded_ddl_is_what_the_server_gets() -> None:
    """The recorder sees the projections' real statements (a guard on the parser)."""
    cols = created_columns()
    assert {"tenant_id", "aggregate_id", "embedding", "tsv"} <= cols[tables.RECALL_INDEX]
    assert "tenant" in cols[tables.EVENTS] and "gen" in cols[tables.NOTE_KEYS]
    assert "PRIMARY" not in cols[tables.LINK_GRAPH]


def test_every_table_is_placed_once() -> None:
    placed = [*citus.DISTRIBUTED, *citus.COORDINATOR, *citus.GAPS]
    assert len(placed) == len(set(placed))
    assert set(placed) == set(created_columns())


def test_the_ddl_names_the_tenant_column_of_every_distributed_table() -> None:
    cols = created_columns()
    ddl = citus.citus_ddl()
    for table, (column, key) in citus.DISTRIBUTED.items():
        assert column in ("tenant", "tenant_id") and column in cols[table], table
        assert key[0] == column and set(key) <= cols[table], table
        colocate = "'none'" if table == tables.EVENTS else f"'{tables.EVENTS}'"
        assert f"SELECT create_distributed_table('{table}', '{column}', colocate_with => {colocate})" in ddl
        include = citus.PRIMARY_INCLUDE.get(table, ())
        assert set(include) <= cols[table], table
        tail = f" INCLUDE ({', '.join(include)})" if include else ""
        assert f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, ADD PRIMARY KEY ({', '.join(key)}){tail}" in ddl
    for table, (index, columns) in citus.UNIQUE_INDEXES.items():
        assert columns[0] == citus.DISTRIBUTED[table][0] and f"DROP INDEX {index}" in ddl


def test_a_table_without_a_tenant_column_is_a_listed_gap() -> None:
    """Every table with data of one tenant carries a tenant column, except the listed
    gaps: a new table without one fails here until it gets one (or is listed, with the
    change it needs, in ``citus.GAPS`` and docs/scale-out.md)."""
    cols = created_columns()
    lacking = {t for t, c in cols.items() if not c & {"tenant", "tenant_id"}} - set(citus.COORDINATOR)
    assert lacking == set(citus.GAPS)
    assert all(f"-- {t} is not distributed yet" in " ".join(citus.citus_ddl()) for t in citus.GAPS)


def test_the_access_log_table_name_is_the_adapters() -> None:
    assert citus.ACCESS_LOG == access_log.TABLE
