"""The schema stamp (issue 24): skip a writable open's DDL when this code made the schema.

Every writable ``open_fabric`` used to run the whole DDL phase: eventsourcing's
``CREATE UNIQUE INDEX IF NOT EXISTS`` on the events table, the projections' and
tracking tables' ``CREATE INDEX IF NOT EXISTS``, the trigger of
:mod:`~memfabric.adapters.postgres.tenant_heads`. PostgreSQL takes each statement's
table lock *before* it sees that the index exists (``SHARE`` for an index, ``SHARE ROW
EXCLUSIVE`` for a trigger), so an open waited for every in-flight write (a 3,000-note
import for its whole length) and every later write of every tenant queued behind that
open. The events table's index is created with eventsourcing's lock timeout (none), so
such an open did not even time out.

The stamp is one row, ``mf_schema_stamp.fingerprint``: the SHA-256 of

- the source of the modules that hold memfabric's DDL (``memfabric.projections``,
  ``memfabric.adapters.postgres``, ``memfabric.adapters.bootstrap``), read from the
  installed files (:func:`code_fingerprint`);
- the installed ``eventsourcing`` version (its table DDL);
- the fabric's partition count and the embedder's dimension (the shape of the events
  table and of the recall index's vector column).

A writable open reads the stamp under the open lock; when it equals this process's
fingerprint the DDL phase is skipped, otherwise it runs (as before this module) and the
stamp is written at its end, in its own statement after every DDL succeeded: an open
killed halfway leaves the old stamp, and the next open runs the phase again. Any change
to those modules (a new index, another version of memfabric) changes the fingerprint, so
the first open of new code migrates as it always did. What the stamp does not see: a
table or index dropped by hand behind memfabric's back: :func:`clear` makes the next writable open run
the DDL phase.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
from pathlib import Path
from typing import Any

import psycopg

from memfabric.projections import tables

__all__ = ["STAMP_DDL", "clear", "code_fingerprint", "fingerprint", "stamp", "stamped"]

STAMP_DDL = (
    f"CREATE TABLE IF NOT EXISTS {tables.SCHEMA_STAMP} ("
    " singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),"
    " fingerprint text NOT NULL, stamped_at timestamptz NOT NULL DEFAULT now())"
)

_PACKAGES = ("memfabric.projections", "memfabric.adapters.postgres")
_MODULES = ("memfabric.adapters.bootstrap",)


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 (hex) of the DDL-holding source files (sorted by name, each name and its
    bytes) and the installed ``eventsourcing`` version; computed once per process."""
    files: list[Path] = []
    for name in _PACKAGES:
        files += sorted(Path(str(importlib.import_module(name).__file__)).parent.glob("*.py"))
    files += [Path(str(importlib.import_module(name).__file__)) for name in _MODULES]
    digest = hashlib.sha256(importlib.metadata.version("eventsourcing").encode())
    for f in files:
        digest.update(b"\0" + f.name.encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def fingerprint(*, partitions: int, dim: int) -> str:
    """The stamp of a schema made by this code with ``partitions`` event partitions and
    a ``dim``-dimensional recall index: ``"<code sha256>/p<partitions>/d<dim>"``."""
    return f"{code_fingerprint()}/p{int(partitions)}/d{int(dim)}"


def stamped(conn: Any) -> str | None:
    """The stamp in the database, or ``None`` (no stamp table: a database created
    before this module, or never opened writable)."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (tables.SCHEMA_STAMP,)).fetchone()
    if not row or not row[0]:
        return None
    try:
        found = conn.execute(f"SELECT fingerprint FROM {tables.SCHEMA_STAMP}").fetchone()  # noqa: S608
    except psycopg.errors.InsufficientPrivilege:  # a role that may not read it: run the DDL phase
        return None
    return None if found is None else str(found[0])


def stamp(conn: Any, value: str) -> None:
    """Record ``value`` as the schema's stamp (creating the one-row table); ``conn`` in
    autocommit mode, after every DDL statement of the open committed. A role that may
    not write it records nothing (its next open runs the DDL phase again)."""
    try:
        conn.execute(STAMP_DDL)
        conn.execute(
            f"INSERT INTO {tables.SCHEMA_STAMP} (fingerprint) VALUES (%s)"  # noqa: S608
            " ON CONFLICT (singleton) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, stamped_at = now()",
            (value,),
        )
    except psycopg.errors.InsufficientPrivilege:
        return


def clear(conn: Any) -> None:
    """Forget the stamp, so the next writable open runs the whole DDL phase (after a
    table or index was dropped by hand)."""
    if stamped(conn) is not None:
        conn.execute(f"DELETE FROM {tables.SCHEMA_STAMP}")  # noqa: S608
