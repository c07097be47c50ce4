"""Read replicas (issue 25): which server a read is served by.

:class:`ReplicaRouter` sends the reads that decide no write (recall, list, count, get,
history, lineage, the conversation ledger's reads) to a PostgreSQL streaming standby and
keeps everything else on the primary (writes, and every read of a unit of work, which
runs on the unit of work's own primary connection).

- **Read-your-writes.** After each committed write the fabric records the primary's
  WAL insert position (:meth:`ReplicaRouter.note_write`, ``pg_current_wal_insert_lsn()``
  read after COMMIT returned, so it is at or past the commit record). A replica read
  first makes sure the standby has replayed that position
  (``pg_last_wal_replay_lsn()``; the replayed position is cached, it only moves
  forward), polling up to ``max_wait`` seconds (default 0.2); past that the read is
  served by the primary. A read served by a replica therefore never returns a state
  older than this fabric's last write.
- **Health.** A replica that cannot be reached, or whose lag exceeds ``max_lag``
  seconds, is skipped for ``backoff`` seconds (default 2.0) and then tried again. Lag is
  measured against samples of the primary's WAL position (one after each of this
  fabric's writes, one per health check, at most every ``check_every`` seconds): the
  lag of a replica is how long ago the primary was at a position the replica has not
  replayed yet (0 when it has replayed all the primary had at the last sample). A read that fails on a replica (connection lost, or
  cancelled by a recovery conflict) is run again on the primary: a replica going down
  never fails a read.
- **Where.** :meth:`ReplicaRouter.last_served_by` names the server of this thread's
  last routed read: ``"primary"`` or ``"replica:<host>:<port>"``.

Connections to replicas are kept in a small per-replica stack (autocommit, dict rows
like eventsourcing's pool, pgvector's types registered by the caller's ``prepare``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg import Connection
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

T = TypeVar("T")

PRIMARY = "primary"

ENV_REPLICAS = "MEMFABRIC_REPLICA_DSNS"
"""Comma-separated replica DSNs, used by ``open_fabric`` when ``replicas`` is not given."""


def replicas_from_env(given: Sequence[str] | None) -> list[str]:
    """``given`` when not ``None``, else the DSNs of ``$MEMFABRIC_REPLICA_DSNS``
    (comma-separated, blanks dropped)."""
    if given is not None:
        return [d for d in given if d.strip()]
    return [d.strip() for d in os.environ.get(ENV_REPLICAS, "").split(",") if d.strip()]


def lsn_int(lsn: str | None) -> int:
    """A ``pg_lsn`` text (``"16/B374D848"``) as an integer; ``None`` is 0."""
    if not lsn:
        return 0
    high, low = str(lsn).split("/")
    return (int(high, 16) << 32) | int(low, 16)


def server_name(dsn: str) -> str:
    """``replica:<host>:<port>`` of a DSN (the socket directory for a Unix socket)."""
    info = conninfo_to_dict(dsn)
    return f"replica:{info.get('host') or 'localhost'}:{info.get('port') or 5432}"


@dataclass
class Replica:
    """One standby: its DSN, idle connections, replayed position and health."""

    dsn: str
    name: str
    idle: list[Connection[Any]] = field(default_factory=list)
    replayed: int = 0
    """Highest replayed LSN seen (``pg_last_wal_replay_lsn()``; monotonic)."""
    skip_until: float = 0.0
    """``time.monotonic()`` before which the replica is skipped (down or lagging)."""
    lag: float | None = None
    """Seconds of lag at the last health check (``None``: not measured / down)."""
    checked_at: float = 0.0
    error: str | None = None


class ReplicaRouter:
    """Routes read-only work between the primary and replicas (see the module doc).

    ``primary``: a context manager factory giving a pooled primary connection.
    ``dsns``: replica DSNs. ``prepare``: called on every new replica connection
    (pgvector's types). ``max_wait``/``max_lag``/``backoff``/``check_every``: seconds."""

    def __init__(self, primary: Callable[[], Any], dsns: Sequence[str], *,
                 prepare: Callable[[Connection[Any]], None] | None = None,
                 max_wait: float = 0.2, max_lag: float = 5.0, backoff: float = 2.0,
                 check_every: float = 0.5, connect_timeout: int = 2, max_idle: int = 8) -> None:
        self.primary = primary
        self.replicas = [Replica(dsn=d, name=server_name(d)) for d in dsns]
        self.prepare = prepare
        self.max_wait, self.max_lag, self.backoff = max_wait, max_lag, backoff
        self.check_every, self.connect_timeout, self.max_idle = check_every, connect_timeout, max_idle
        self.written = 0
        """Highest primary WAL position after one of this fabric's writes."""
        self._samples: deque[tuple[float, int]] = deque(maxlen=256)
        """(monotonic time, primary WAL insert position) samples for the lag."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self._next = 0
        self.fallbacks = 0
        """Reads meant for a replica that the primary served (waited too long, down, lag)."""

    # ---------------------------------------------------------------- writes
    def note_write(self, conn: Connection[Any] | None = None) -> None:
        """Record the primary's WAL insert position after a committed write (on ``conn``,
        else a pooled primary connection). No-op without replicas."""
        if not self.replicas:
            return
        if conn is None:
            with self.primary() as pconn:
                lsn = self._primary_lsn(pconn)
        else:
            lsn = self._primary_lsn(conn)
        with self._lock:
            self.written = max(self.written, lsn)
            self._samples.append((time.monotonic(), lsn))

    @staticmethod
    def _primary_lsn(conn: Connection[Any]) -> int:
        row = conn.execute("SELECT pg_current_wal_insert_lsn()::text AS lsn").fetchone()
        return lsn_int(_col(row, "lsn"))

    # ----------------------------------------------------------------- reads
    def run(self, read: Callable[[Connection[Any]], T]) -> T:
        """``read(conn)`` on a replica that has replayed this fabric's last write (else
        on the primary); a replica error reruns it on the primary."""
        for replica in self._candidates():
            conn = self._borrow(replica)
            if conn is None:
                continue
            try:
                if not self._caught_up(replica, conn):
                    self._give_back(replica, conn)
                    break  # waited max_wait already: the primary serves this read
                result = read(conn)
            except psycopg.errors.SerializationFailure:
                # "canceling statement due to conflict with recovery": the standby
                # replayed a change this read's snapshot needed; the primary answers
                self._give_back(replica, conn)
                break
            except psycopg.OperationalError as exc:
                self._down(replica, conn, exc)
                continue
            self._give_back(replica, conn)
            self._local.served = replica.name
            return result
        if self.replicas:
            with self._lock:
                self.fallbacks += 1
        with self.primary() as conn:
            result = read(conn)
        self._local.served = PRIMARY
        return result

    def last_served_by(self) -> str:
        """Where this thread's last routed read was served (``"primary"`` before any)."""
        return str(getattr(self._local, "served", PRIMARY))

    def _candidates(self) -> Iterator[Replica]:
        """Healthy replicas, round-robin; each health-checked when due."""
        n = len(self.replicas)
        if not n:
            return
        with self._lock:
            start, self._next = self._next, (self._next + 1) % n
        now = time.monotonic()
        for i in range(n):
            replica = self.replicas[(start + i) % n]
            if replica.skip_until > now:
                continue
            if now - replica.checked_at >= self.check_every and not self._healthy(replica):
                continue
            yield replica

    def _caught_up(self, replica: Replica, conn: Connection[Any]) -> bool:
        """Whether ``replica`` has replayed :attr:`written`, polling up to ``max_wait``."""
        target = self.written
        if replica.replayed >= target:
            return True
        deadline = time.monotonic() + self.max_wait
        pause = 0.0005
        while True:
            replica.replayed = max(replica.replayed, _replay_lsn(conn))
            if replica.replayed >= target:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    # ---------------------------------------------------------------- health
    def _healthy(self, replica: Replica) -> bool:
        """Sample the primary's position, measure ``replica``'s lag; skip it for
        ``backoff`` seconds when it is down or lags more than ``max_lag``."""
        now = time.monotonic()
        replica.checked_at = now
        try:
            with self.primary() as pconn:
                self._samples.append((now, self._primary_lsn(pconn)))
        except psycopg.Error:
            return True  # the primary's own trouble is not the replica's
        conn = self._borrow(replica)
        if conn is None:
            return False
        try:
            replica.replayed = max(replica.replayed, _replay_lsn(conn))
        except psycopg.OperationalError as exc:
            self._down(replica, conn, exc)
            return False
        self._give_back(replica, conn)
        replica.lag = self._lag(replica.replayed, now)
        if replica.lag > self.max_lag:
            replica.skip_until = now + self.backoff
            replica.error = f"lagging {replica.lag:.1f}s (max {self.max_lag}s)"
            return False
        replica.error = None
        return True

    def _lag(self, replayed: int, now: float) -> float:
        """Seconds since the oldest sampled primary position the replica has not replayed."""
        behind = [t for t, lsn in self._samples if lsn > replayed]
        return now - min(behind) if behind else 0.0

    def status(self) -> list[dict[str, Any]]:
        """Each replica's ``{"name", "dsn", "lag_s", "replayed_lsn", "state", "error"}``
        after a fresh health check (``state``: ``"ok"``, ``"skipped"``)."""
        out = []
        for replica in self.replicas:
            replica.skip_until = 0.0
            ok = self._healthy(replica)
            out.append({"name": replica.name, "dsn": safe_dsn(replica.dsn),
                        "lag_s": None if replica.lag is None else round(replica.lag, 3),
                        "replayed_lsn": _lsn_text(replica.replayed) if replica.replayed else None,
                        "state": "ok" if ok else "skipped", "error": replica.error})
        return out

    # ----------------------------------------------------------- connections
    def _borrow(self, replica: Replica) -> Connection[Any] | None:
        with self._lock:
            if replica.idle:
                return replica.idle.pop()
        try:
            conn = psycopg.connect(replica.dsn, autocommit=True, row_factory=dict_row,
                                   connect_timeout=self.connect_timeout)
            if self.prepare is not None:
                self.prepare(conn)
        except psycopg.Error as exc:
            self._down(replica, None, exc)
            return None
        return conn

    def _give_back(self, replica: Replica, conn: Connection[Any]) -> None:
        with self._lock:
            if len(replica.idle) < self.max_idle and not conn.closed:
                replica.idle.append(conn)
                return
        conn.close()

    def _down(self, replica: Replica, conn: Connection[Any] | None, exc: BaseException) -> None:
        """Skip ``replica`` for ``backoff`` seconds and drop its connections."""
        replica.skip_until = time.monotonic() + self.backoff
        replica.lag, replica.error = None, " ".join(str(exc).split())[:200]
        with self._lock:
            dropped, replica.idle = replica.idle, []
        for c in [*dropped, *([conn] if conn is not None else [])]:
            c.close()

    def close(self) -> None:
        """Close every idle replica connection."""
        for replica in self.replicas:
            with self._lock:
                dropped, replica.idle = replica.idle, []
            for c in dropped:
                c.close()


def _replay_lsn(conn: Connection[Any]) -> int:
    row = conn.execute("SELECT pg_last_wal_replay_lsn()::text AS lsn").fetchone()
    return lsn_int(_col(row, "lsn"))


def _col(row: Any, name: str) -> Any:
    if row is None:
        return None
    return row[name] if isinstance(row, dict) else row[0]


def _lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def safe_dsn(dsn: str) -> str:
    """``dsn`` without its password."""
    info = conninfo_to_dict(dsn)
    info.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in info.items())


def topology(primary: str, replicas: list[str]) -> dict[str, object]:
    """``{"primary": ..., "replicas": [ReplicaRouter.status() rows]}`` for ``primary``."""
    def connect():  # type: ignore[no-untyped-def]
        return psycopg.connect(primary, autocommit=True)
    router = ReplicaRouter(connect, replicas)
    try:
        return {"primary": safe_dsn(primary), "replicas": router.status()}
    finally:
        router.close()
