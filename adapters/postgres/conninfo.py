"""The whole DSN on every connection memfabric opens (issue 28, defect 2).

eventsourcing's ``PostgresDatastore`` builds its pool from five environment values
(``POSTGRES_DBNAME/HOST/PORT/USER/PASSWORD``), so every other libpq parameter of the
DSN — ``application_name``, ``options`` (``-c statement_timeout=...``, ``-c role=...``),
``sslmode``, ``sslrootcert``, ``sslcert``, ``target_session_attrs``, several hosts ... —
was lost on the pool that carries events, keys and the secret. :func:`use_whole_dsn`
points that pool at the DSN itself before it opens.
"""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

CONNINFO_ENV = "MEMFABRIC_CONNINFO"
"""The environment key (of the ``NoteLog`` application's env, not the process's) that
carries the DSN to :class:`memfabric.adapters.postgres.PostgresFactory`."""


def use_whole_dsn(datastore: Any, dsn: str | None) -> None:
    """Make the (not yet opened) pool of eventsourcing's ``datastore`` connect with
    ``dsn`` — every parameter of it — instead of the five values eventsourcing keeps.
    ``None``/empty: unchanged (a ``NoteLog`` built from ``POSTGRES_*`` values alone).
    The pool keeps eventsourcing's ``dict_row`` rows, its ``configure`` callback and its
    password callback (``POSTGRES_GET_PASSWORD_TOPIC``), which sets ``password`` per
    connection and so wins over the DSN's. Raises ``psycopg.ProgrammingError`` for a DSN
    libpq cannot parse."""
    if not dsn:
        return
    conninfo_to_dict(dsn)  # parse now: a bad DSN fails here, not on the first write
    pool = datastore.pool
    pool.conninfo = dsn
    pool.kwargs = {"row_factory": dict_row}

