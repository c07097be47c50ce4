"""Table names: the write side's tables, and the names the projections' modules use.

The event log and key tables belong to the write side (``memfabric.adapters``); each
read model owns its tables (``memfabric.projections.<name>``) and tracks its position
in ``mf_<name>_tracking`` (eventsourcing's tracking table). Which tables the
projections own is not listed here but derived from the one projection registry
(:func:`memfabric.projections.registry.projection_tables`).
"""

from __future__ import annotations

EVENTS = "memfabric_events"
"""The event log (eventsourcing's application recorder table)."""

NOTE_KEYS = "mf_note_keys"
"""Per-note AES-GCM data keys; deleting a note's rows crypto-shreds it."""

FABRIC_SECRET = "mf_fabric_secret"
"""The fabric secret that keys tombstone content hashes."""

FABRIC_EMBEDDER = "mf_fabric_embedder"
"""The embedder the database was built with (id, dimension, parameters), written on
first open; later opens without an embedder use it, a different one is refused."""

PROJECTION_ERRORS = "mf_projection_errors"
"""Where a projection that stopped on an event is recorded."""

QUARANTINE = "mf_quarantine"
"""Aggregates whose events do not authenticate or decode, left out of the projections
(issue 28): :mod:`memfabric.projections.quarantine`."""

AUDIT_CHAIN = "mf_audit_chain"
"""Checkpoints of the SHA-256 tamper-evidence chain over the log."""

FABRIC_RETENTION = "mf_fabric_retention"
"""Issue 30: the fabric's retention windows (``RetentionConfig``), read at every sweep
and regulated-floor check so every process decides with the same values."""

SCHEMA_STAMP = "mf_schema_stamp"
"""Issue 24: the fingerprint of the schema the last writable open created (one row), so
a later open by the same code skips the DDL phase, whose ``CREATE INDEX IF NOT EXISTS``
would wait for every in-flight write and queue every later one behind it."""

RECALL_INDEX = "mf_recall_index"
CONSOLIDATION_INDEX = "mf_consolidation"
NOTE_SCOPE = "mf_note_scope"
WORKING_VALUE = "mf_working_value"
LINK_GRAPH = "mf_link_graph"
RETENTION = "mf_retention"
NOTE_VERSIONS = "mf_note_versions"
"""Issue 31: every recallable state of every note with its transaction-time range."""
LINK_VERSIONS = "mf_link_versions"
"""Issue 31: the link edges of each row of :data:`NOTE_VERSIONS`."""

INDEX_STATE_COLUMNS = frozenset({"indexed"})
"""Columns that record index state, not projection content (issue 24: the recall
index's ``indexed``, see :mod:`memfabric.projections.recall_tail`): a replay loads its
rows indexed, a live table holds a tail, and ``projections verify`` compares neither."""


def tracking(projection: str) -> str:
    """The tracking table of projection ``projection``."""
    return f"mf_{projection}_tracking"

