"""Issue 30: the retention store on PostgreSQL (the ``RetentionStore`` port): the
fabric's retention settings in ``mf_fabric_retention`` (one row, like the embedder
record ``mf_fabric_embedder``), the due-note queries of
:mod:`memfabric.projections.retention_index` and the replay of a due page on the log's
pool, and the setting of a sweep batch's transaction (:meth:`PostgresRetentionStore.prepare_erasure`)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from psycopg.rows import tuple_row

from memfabric.adapters.crypto import BatchKeys, SealingMapper, select_keys, shredding_topics
from memfabric.adapters.postgres import NoteLog
from memfabric.adapters.postgres.replays import events_query, replay_rows
from memfabric.adapters.postgres.uow import PostgresUnitOfWork
from memfabric.domain.errors import EventIntegrityError
from memfabric.domain.note import Note
from memfabric.domain.ports import DueRef, UnitOfWork
from memfabric.domain.retention import RetentionConfig, Windows
from memfabric.projections import retention_index, tables

RETENTION_DDL = (
    f"CREATE TABLE IF NOT EXISTS {tables.FABRIC_RETENTION} ("
    " singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),"
    " config jsonb NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())"
)


def recorded_retention(dsn: str) -> RetentionConfig | None:
    """The retention settings recorded in the database, or ``None`` (never recorded)."""
    with psycopg.connect(dsn) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (tables.FABRIC_RETENTION,)).fetchone()
        if not exists or exists[0] is None:
            return None
        row = conn.execute(f"SELECT config FROM {tables.FABRIC_RETENTION}").fetchone()  # noqa: S608
    return None if row is None else RetentionConfig.of(row[0])


def record_retention(dsn: str, config: RetentionConfig) -> None:
    """Record ``config`` (replacing the recorded settings: the last opener that names
    ``retention=`` sets them for every process)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RETENTION_DDL)
        conn.execute(
            f"INSERT INTO {tables.FABRIC_RETENTION} (config) VALUES (%s)"  # noqa: S608
            " ON CONFLICT (singleton) DO UPDATE SET config = EXCLUDED.config, recorded_at = now()",
            (json.dumps(config.to_json()),))


UNCOMPRESSED = (
    b"SELECT CASE WHEN current_setting('wal_compression') IN ('pglz', 'on')"
    b" AND (current_setting('is_superuser') = 'on' OR has_parameter_privilege('wal_compression', 'SET'))"
    b" THEN set_config('wal_compression', 'off', true) END"
)
"""``SET LOCAL wal_compression = off`` when the server compresses full-page images with
pglz (``on`` is pglz) and the role may change the setting (a superuser, or ``GRANT SET
ON PARAMETER wal_compression``; ``has_parameter_privilege``: PostgreSQL 15+, the
fabric's minimum); otherwise nothing. One statement, nothing read back."""


CONFIG_TTL = 5.0
"""Seconds a cached copy of the settings serves recall's per-class half-lives."""


class PostgresRetentionStore:
    """``RetentionStore`` on PostgreSQL: settings read from the database at every call
    (so a process sees what another recorded), due notes from ``mf_retention``."""

    def __init__(self, log: NoteLog, dsn: str) -> None:
        self.log = log
        self.dsn = dsn
        self._cache: tuple[float, RetentionConfig] | None = None

    def config(self, *, cached: bool = False) -> RetentionConfig:
        if cached and self._cache is not None and time.monotonic() - self._cache[0] < CONFIG_TTL:
            return self._cache[1]
        with self.log.datastore.get_connection() as conn:
            exists = conn.execute("SELECT to_regclass(%s) AS t", (tables.FABRIC_RETENTION,)).fetchone()
            row = None
            if exists and exists["t"] is not None:
                row = conn.execute(f"SELECT config FROM {tables.FABRIC_RETENTION}").fetchone()  # noqa: S608
        found = RetentionConfig() if row is None else RetentionConfig.of(row["config"])
        self._cache = (time.monotonic(), found)
        return found

    def record(self, config: RetentionConfig) -> None:
        record_retention(self.dsn, config)
        self._cache = None

    def classes(self, aggregate_ids: Sequence[UUID]) -> dict[UUID, str]:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return retention_index.select_classes(cur, aggregate_ids)

    def tenants(self, *, after: str | None) -> list[str]:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return retention_index.select_tenants(cur, after=after)

    def due(self, tenant_id: str, windows: Windows, now: datetime, *, after: UUID | None,
            limit: int) -> list[DueRef]:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return retention_index.select_due(cur, tenant_id, windows, now, after=after, limit=limit)

    def replay(self, tenant_id: str, aggregate_ids: Sequence[UUID]) -> list[Note] | None:
        """The notes replayed on a pooled connection (:func:`replay_page`); ``None`` when one cannot be decoded (a key fault or changed
        bytes: the unit of work's replay tombstones it as unreadable or reports it)."""
        if not aggregate_ids:
            return []
        try:
            with self.log.datastore.get_connection() as conn:
                return replay_page(conn, self.log.sealing_mapper, list(aggregate_ids), tenant_id)
        except EventIntegrityError:
            return None

    def prepare_erasure(self, uow: UnitOfWork) -> None:
        """Turn pglz full-page-image compression off for the batch's transaction
        (:data:`UNCOMPRESSED`), sent on the unit of work's wire with its locks, so the
        batch still commits in one round trip. Each note a sweep erases dirties pages of
        its own in four tables and their TOAST (its rows are spread over them), and the
        first change of a page after a checkpoint writes its full image to the WAL:
        pglz spent more on those images than the deletes themselves (a 20,000-note
        profile: 1,564 ms against 315 ms for the note-versions delete of 2,000 notes).
        The WAL of the batch is larger (about 8 kB per page); the checkpoint that
        ``max_wal_size`` triggers bounds it on disk. lz4 (when the server has it) is
        cheap and kept."""
        if isinstance(uow, PostgresUnitOfWork):
            uow.send_setting(UNCOMPRESSED)



def replay_page(conn: psycopg.Connection[Any], mapper: SealingMapper, ids: list[UUID],
                tenant_id: str) -> list[Note]:
    """The notes ``ids`` of tenant ``tenant_id`` replayed on ``conn`` in two statements:
    their events, then their keys (so a note committed between the two has its keys).
    Which notes have a tombstone (a missing key is then a shredding, not a fault) is read
    off the events already fetched, where ``select_notes`` asks the server a third time;
    a key missing otherwise is looked up again on ``conn`` with its tombstones (a note
    forgotten between the two statements, a key of another note). Raises
    ``EventIntegrityError`` as the replay does."""
    query, params = events_query(ids, [tenant_id])
    rows = conn.cursor(row_factory=tuple_row).execute(query, params).fetchall()
    keys = BatchKeys()
    keys.load(conn, [])  # nothing asked yet: a missing key is looked up on conn
    keys.keys = select_keys(conn, ids)
    keys.forgotten = tombstone_versions(rows)
    return replay_rows(rows, mapper.bound(keys), ids)


def tombstone_versions(rows: Sequence[Sequence[Any]]) -> dict[UUID, int]:
    """Per aggregate of the event ``rows`` ``(id, version, topic, state)``, the version of
    its latest event of :func:`~memfabric.adapters.crypto.shredding_topics` (what
    ``forgotten_versions`` reads from the log)."""
    topics = set(shredding_topics())
    found: dict[UUID, int] = {}
    for oid, version, topic, _ in rows:
        if topic in topics and version > found.get(oid, 0):
            found[oid] = int(version)
    return found
