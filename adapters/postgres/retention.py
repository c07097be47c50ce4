"""Issue 30: the retention store on PostgreSQL (the ``RetentionStore`` port): the
fabric's retention settings in ``mf_fabric_retention`` (one row, like the embedder
record ``mf_fabric_embedder``) and the due-note queries of
:mod:`memfabric.projections.retention_index` on the log's pool."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

import psycopg

from memfabric.adapters.postgres import NoteLog
from memfabric.domain.ports import DueRef
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
