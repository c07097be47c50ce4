"""What an open checks and prepares in the database before it builds the log (the
helpers of :func:`memfabric.adapters.bootstrap.open_fabric`): pgvector, whether the role
may write (issue 27), the partition count (issue 25), whether this code's schema is in
place (issue 24, :mod:`memfabric.adapters.postgres.schema_stamp`) and the grants of
tables made after the roles' grants (issue 27)."""

from __future__ import annotations

from typing import Any

import psycopg

from memfabric.adapters.postgres.schema_stamp import fingerprint, stamped
from memfabric.domain.errors import FabricError, PartitionsMismatchError
from memfabric.projections import tables
from memfabric.projections.partitions import count as partition_count

__all__ = ["ensure_extension", "fabric_partitions", "keep_grants", "read_only_reason", "require_extension",
           "require_log", "schema_to_make"]


def ensure_extension(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        have = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        if have:
            return
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise FabricError(
                "the pgvector extension is missing and could not be created "
                f"(ask an administrator to run CREATE EXTENSION vector): {exc}"
            ) from exc


def read_only_reason(conn: psycopg.Connection[Any]) -> str | None:
    """Why the connecting role can only read this fabric, or ``None`` when it may write
    (or the log does not exist yet: the first open creates it). Issue 27: checked on
    every writable open, so an auditor's ``open_fabric(dsn)`` reads instead of failing
    on DDL. Today's rule: a writer needs ``INSERT`` on the event log and ``CREATE`` on
    its schema or ownership of the log (the open runs idempotent DDL)."""
    row = conn.execute(
        "SELECT current_user, has_table_privilege(c.oid, 'INSERT'),"
        " pg_has_role(c.relowner, 'USAGE') OR has_schema_privilege(c.relnamespace, 'CREATE')"
        " FROM pg_class c WHERE c.oid = to_regclass(%s)", (tables.EVENTS,)).fetchone()
    if row is None:
        return None
    user, insert, ddl = row
    if not insert:
        return f"role {user!r} may not INSERT into {tables.EVENTS} (docs/roles.md)"
    if not ddl:
        return f"role {user!r} neither owns {tables.EVENTS} nor may CREATE in its schema (docs/roles.md)"
    return None


def keep_grants(conn: psycopg.Connection[Any]) -> list[str]:
    """Issue 27, on every writable open: a memfabric table with no grant while the log
    has some (created after the roles' grants, e.g. by a newer version) gets the log's
    owner and ``SELECT`` grants (:func:`memfabric.adapters.postgres.roles.share_new_tables`).
    Returns the tables shared; a role that may not change them shares nothing."""
    from memfabric.adapters.postgres.roles import share_new_tables  # noqa: PLC0415
    try:
        with conn.transaction(), conn.cursor() as cur:
            return share_new_tables(cur)
    except psycopg.errors.InsufficientPrivilege:
        return []


def require_extension(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
            raise FabricError("the pgvector extension is missing (a read-only open never creates it)")


def require_log(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s)", (tables.EVENTS,)).fetchone()
    if not row or row[0] is None:
        raise FabricError(f"no memfabric log ({tables.EVENTS}) in this database: a read-only open "
                          "never creates one (open it once for writing, as its owner)")


def fabric_partitions(conn: psycopg.Connection[Any], requested: int | None) -> int:
    """The partition count the fabric on ``conn`` is (or will be) laid out with: the
    events table's (:func:`memfabric.projections.partitions.count`) when it exists,
    else ``requested`` (default 1). Raises ``PartitionsMismatchError`` when both exist
    and differ."""
    with conn.cursor() as cur:
        existing = partition_count(cur, tables.EVENTS)
    if existing and requested is not None and requested != existing:
        raise PartitionsMismatchError(
            f"this database was created with partitions={existing}; open_fabric(partitions={requested}) cannot "
            "change it (open it without partitions, or with partitions=" + str(existing) + ")")
    return existing or requested or 1


def schema_to_make(ddl_lock: psycopg.Connection[Any], read_only: bool, partitions: int, dim: int) -> str | None:
    """The schema stamp a writable open writes after its DDL phase, or ``None`` when it
    runs none: a read-only open, or a database this code already stamped (issue 24,
    :mod:`memfabric.adapters.postgres.schema_stamp`)."""
    if read_only:
        return None
    schema = fingerprint(partitions=partitions, dim=dim)
    return None if stamped(ddl_lock) == schema else schema
