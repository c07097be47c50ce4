"""The Citus layout of a memfabric database, as DDL (issue 25; see docs/scale-out.md).

Citus is not installable on the machines memfabric is developed on: nothing here is run
against a Citus cluster. :func:`citus_ddl` generates the statements an operator runs on
the coordinator after memfabric created its tables (``open_fabric`` once, as owner, and
one governed call if principals are used: ``mf_access_log`` is made by the first), and
``tests/unit/test_citus_layout.py`` checks them against the tables memfabric's own DDL
creates: every table is placed exactly once, every distributed table is distributed on
a tenant column its DDL has, and every primary key / unique index of a distributed table
is rebuilt to lead with that column (Citus requires the distribution column in each).

- :data:`DISTRIBUTED`: tables distributed by tenant, all in the co-location group of the
  events table (``tenant`` there, ``tenant_id`` elsewhere; all ``text``), so a tenant's
  log, projections and tracking live on one shard of one worker.
- :data:`COORDINATOR`: fabric-wide singletons that stay local tables on the coordinator.
- :data:`GAPS`: tables that have no tenant column yet, with what they need; they are not
  distributed by the generated DDL (it says so in comments) and ``GAPS`` is pinned by the
  unit test, so a new table without a tenant column fails it.
"""

from __future__ import annotations

from memfabric.projections import tables
from memfabric.projections.ledger import ENTRIES, OBSERVATIONS, THREADS
from memfabric.projections.entities import ENTITIES, KEY_PRIMARY, KEYS as ENTITY_KEYS, NOTES as ENTITY_NOTES
from memfabric.projections.principals import GRANTS, PRINCIPALS

ACCESS_LOG = "mf_access_log"
TENANT_HEADS = "mf_tenant_heads"
"""``memfabric.adapters.postgres.tenant_heads.HEADS_TABLE`` (issue 28): each tenant's event
count, kept by a statement-level trigger on the events table; co-located with it, the
trigger touches only the co-located shard (Citus runs it with ``citus.enable_unsafe_triggers``)."""
"""``memfabric.adapters.access_log.TABLE`` (issue 33; not imported: that module needs cryptography)."""

PROJECTIONS = ("recall_index", "working_value", "note_scope", "consolidation", "link_graph", "ledger",
               "retention", "principals", "entities", "note_versions")
"""The projections whose tracking tables exist (``ProjectionEngine`` names)."""

DISTRIBUTED: dict[str, tuple[str, tuple[str, ...]]] = {
    tables.EVENTS: ("tenant", ("tenant", "originator_id", "originator_version")),
    tables.RECALL_INDEX: ("tenant_id", ("tenant_id", "aggregate_id")),
    tables.CONSOLIDATION_INDEX: ("tenant_id", ("tenant_id", "aggregate_id")),
    tables.NOTE_SCOPE: ("tenant_id", ("tenant_id", "aggregate_id")),
    tables.WORKING_VALUE: ("tenant_id", ("tenant_id", "aggregate_id")),
    tables.LINK_GRAPH: ("tenant_id", ("tenant_id", "from_aggregate_id", "to_aggregate_id", "relation")),
    THREADS: ("tenant_id", ("tenant_id", "aggregate_id")),
    tables.RETENTION: ("tenant_id", ("tenant_id", "aggregate_id")),
    GRANTS: ("tenant_id", ("tenant_id", "principal", "aggregate_id")),
    ACCESS_LOG: ("tenant_id", ("tenant_id", "id")),
    tables.NOTE_VERSIONS: ("tenant_id", ("tenant_id", "aggregate_id", "version")),
    tables.LINK_VERSIONS: ("tenant_id", ("tenant_id", "from_aggregate_id", "from_version", "to_aggregate_id",
                                         "relation")),
    ENTITIES: ("tenant_id", ("tenant_id", "aggregate_id")),
    ENTITY_NOTES: ("tenant_id", ("tenant_id", "aggregate_id")),
    ENTITY_KEYS: ("tenant_id", KEY_PRIMARY),
    TENANT_HEADS: ("tenant", ("tenant",)),
}
"""Table → (distribution column, primary key rebuilt to lead with it)."""

PRIMARY_INCLUDE: dict[str, tuple[str, ...]] = {ENTITY_KEYS: ("ntok",)}
"""Table → the ``INCLUDE`` columns of its primary key (the entity keys' lookup index is
its primary key, read index-only, issue 32)."""

UNIQUE_INDEXES: dict[str, tuple[str, tuple[str, ...]]] = {
    tables.EVENTS: (f"{tables.EVENTS}_notification_id_idx", ("tenant", "notification_id")),
    ENTITY_KEYS: (f"{ENTITY_KEYS}_ident", ("tenant_id", "grp", "digest")),
}
"""Unique indexes of distributed tables, rebuilt with the distribution column: table →
(index, columns); :data:`PARTIAL` gives an index's predicate."""

PARTIAL: dict[str, str] = {f"{ENTITY_KEYS}_ident": "kind = 'id'"}
"""Index → the ``WHERE`` of a partial unique index (an entity identifier is unique per
visibility group, issue 32)."""

COORDINATOR: dict[str, str] = {
    tables.FABRIC_SECRET: "one row: the fabric secret (event tags, tombstone hashes); read once per process",
    tables.FABRIC_EMBEDDER: "one row: the embedder record every open checks",
    tables.AUDIT_CHAIN: "the tamper-evidence chain over the whole log (global notification order)",
    tables.PROJECTION_ERRORS: "one row per stopped projection (operator state)",
    tables.FABRIC_RETENTION: "one row: the retention windows every process's sweep uses",
    tables.SCHEMA_STAMP: "one row: the fingerprint of the schema the last writable open created",
    PRINCIPALS: "one row per principal (issue 33): its memory profile, read at every governed call",
}
"""Tables that stay local tables on the coordinator: table → why."""

GAPS: dict[str, str] = {
    tables.NOTE_KEYS: "per-note data keys: add tenant_id (the writer knows the note's tenant) and key the "
                      "primary key (tenant_id, originator_id, gen)",
    ENTRIES: "ledger entries: add tenant_id from the conversation's scope, primary key "
             "(tenant_id, aggregate_id, position)",
    OBSERVATIONS: "ledger observations: add tenant_id, primary key (tenant_id, aggregate_id, observation_id)",
    tables.QUARANTINE: "untrusted aggregates (issue 28): add tenant_id (from the event row's tenant column), "
                       "primary key (tenant_id, aggregate_id)",
    **{tables.tracking(p): "eventsourcing's tracking table keeps the tenant inside application_name "
                           "('<app>|<tenant>'): a tenant column (or one tracking table per tenant shard) is needed"
       for p in PROJECTIONS},
}
"""Tables without a tenant column yet: table → the change they need before distribution."""


def citus_ddl() -> list[str]:
    """The statements that lay a memfabric database out on Citus, in order: the
    extension, the primary keys and unique indexes rebuilt to lead with the tenant column,
    ``create_distributed_table`` of the events table, then every other distributed table
    co-located with it; coordinator tables and gaps as ``--`` comments."""
    out = ["CREATE EXTENSION IF NOT EXISTS citus"]
    out.append(f"ALTER TABLE {tables.EVENTS} ALTER COLUMN tenant SET NOT NULL")
    for table, (_, key) in DISTRIBUTED.items():
        include = f" INCLUDE ({', '.join(PRIMARY_INCLUDE[table])})" if table in PRIMARY_INCLUDE else ""
        out.append(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, ADD PRIMARY KEY ({', '.join(key)}){include}")
    for table, (index, columns) in UNIQUE_INDEXES.items():
        out.append(f"DROP INDEX {index}")
        where = f" WHERE {PARTIAL[index]}" if index in PARTIAL else ""
        out.append(f"CREATE UNIQUE INDEX {index} ON {table} ({', '.join(columns)}){where}")
    for table, (column, _) in DISTRIBUTED.items():
        colocate = "'none'" if table == tables.EVENTS else f"'{tables.EVENTS}'"
        out.append(f"SELECT create_distributed_table('{table}', '{column}', colocate_with => {colocate})")
    out.extend(f"-- {table} stays on the coordinator: {why}" for table, why in COORDINATOR.items())
    out.extend(f"-- {table} is not distributed yet: {why}" for table, why in GAPS.items())
    return out
