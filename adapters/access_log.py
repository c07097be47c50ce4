"""The access log (issue 33): one record per governed call, written in the background.

:class:`BufferedAccessLog` is the ``AccessLogPort``: :meth:`~BufferedAccessLog.record`
puts the record in a bounded in-process buffer (``capacity`` records, default 10,000)
and returns; a daemon thread drains it into a sink in batches: a batch closes
``interval`` seconds (default 0.5 s) after its first record, at 500 records, or at a
:meth:`~BufferedAccessLog.flush`, so a busy reader costs one INSERT per interval, not
one per call. A full buffer makes the caller wait up to
``block_timeout`` (1 s) for room, then the record is dropped and counted in
:attr:`~BufferedAccessLog.dropped` (never silently: also a warning on the
``memfabric.access`` logger).

**What a crash can lose**: the records still in the buffer, i.e. the calls of the last
``interval`` (0.5 s) before the process died (more only if the sink was down or slower
than the callers), at most ``capacity`` records; the
calls themselves (their writes) are durable regardless. ``close()`` (called when the
fabric closes) and every query flush the buffer first.

The ids a call served are sealed (AES-GCM under a key derived from the fabric secret,
the record's time and principal as associated data); only a query with ``with_ids``
unseals them. Sinks: :class:`PostgresAccessSink` (table ``mf_access_log``, retention
class ``operational``) and :class:`MemoryAccessSink`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from psycopg import sql

from memfabric.domain.access import AccessRecord

LOG = logging.getLogger("memfabric.access")
TABLE = "mf_access_log"
BATCH = 500


class Sealer:
    """Seals and unseals the ids of a record (AES-GCM, key = HMAC(secret, "access-log"))."""

    def __init__(self, secret: Callable[[], bytes]) -> None:
        self._secret = secret
        self._key: bytes | None = None

    def _aead(self) -> AESGCM:
        if self._key is None:
            self._key = hmac.new(self._secret(), b"memfabric access-log ids", hashlib.sha256).digest()
        return AESGCM(self._key)

    @staticmethod
    def _aad(r: AccessRecord) -> bytes:
        return f"{r.principal}|{r.at.isoformat()}".encode()

    def seal(self, r: AccessRecord) -> bytes | None:
        if not r.ids:
            return None
        nonce = os.urandom(12)
        return nonce + self._aead().encrypt(nonce, json.dumps(list(r.ids)).encode(), self._aad(r))

    def unseal(self, r: AccessRecord, sealed: bytes | None) -> AccessRecord:
        if sealed is None:
            return r
        ids = json.loads(self._aead().decrypt(sealed[:12], sealed[12:], self._aad(r)))
        return replace(r, ids=tuple(ids))


class AccessSink(Protocol):
    """Where batches of records are stored and read back."""

    def write(self, records: Sequence[AccessRecord]) -> None: ...

    def query(self, *, principal: str | None, since: datetime | None, until: datetime | None,
              outcome: str | None, limit: int, with_ids: bool) -> list[AccessRecord]: ...

    def purge(self, cutoffs: dict[str, datetime], *, tenant_id: str | None,
              exclude: Sequence[str] = (), dry_run: bool = False) -> int: ...


class BufferedAccessLog:
    """The ``AccessLogPort`` over a sink (see the module doc)."""

    def __init__(self, sink: AccessSink, *, capacity: int = 10_000, interval: float = 0.5,
                 block_timeout: float = 1.0) -> None:
        self.sink = sink
        self.interval = interval
        self.block_timeout = block_timeout
        self.dropped = 0
        self.failed = 0
        """Records a sink write refused (e.g. a read-only role); logged as warnings."""
        self._queue: queue.Queue[AccessRecord] = queue.Queue(maxsize=capacity)
        self._flushing = threading.Event()
        self._idle = threading.Condition()
        self._pending = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="memfabric-access-log", daemon=True)
            self._thread.start()

    def record(self, record: AccessRecord) -> None:
        """Queue ``record`` (see the module doc for a full buffer)."""
        self._start()
        with self._idle:
            self._pending += 1
        try:
            self._queue.put(record, timeout=self.block_timeout)
        except queue.Full:
            self.dropped += 1
            self._done(1)
            LOG.warning("access log buffer full: a record of %s was dropped", record.principal)

    def _done(self, n: int) -> None:
        with self._idle:
            self._pending -= n
            self._idle.notify_all()

    def _run(self) -> None:
        while not self._closed or not self._queue.empty():
            try:
                first = self._queue.get(timeout=self.interval)
            except queue.Empty:
                continue
            batch = self._collect(first)
            try:
                self.sink.write(batch)
            except Exception as exc:  # noqa: BLE001 - a log write must never break a reader
                self.failed += len(batch)
                LOG.warning("access log: %d records not written: %s", len(batch), exc)
            finally:
                self._done(len(batch))

    def _collect(self, first: AccessRecord) -> list[AccessRecord]:
        """``first`` and the records that follow it, at most :data:`BATCH`: those that
        arrive within :attr:`interval` (one write per interval under load), or, while a
        flush waits, those already queued (taken without waiting, so a flush writes the
        buffer in batches of up to :data:`BATCH`, not a record at a time)."""
        batch = [first]
        deadline = time.monotonic() + self.interval
        while len(batch) < BATCH:
            try:
                if self._flushing.is_set():
                    batch.append(self._queue.get_nowait())
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                batch.append(self._queue.get(timeout=left))
            except queue.Empty:
                break
        return batch

    def flush(self, timeout: float = 5.0) -> None:
        """Write every record queued so far now (waits at most ``timeout`` s)."""
        self._flushing.set()
        try:
            with self._idle:
                self._idle.wait_for(lambda: self._pending <= 0, timeout=timeout)
        finally:
            self._flushing.clear()

    def query(self, *, principal: str | None, since: datetime | None, until: datetime | None,
              outcome: str | None, limit: int, with_ids: bool) -> list[AccessRecord]:
        self.flush()
        return self.sink.query(principal=principal, since=since, until=until, outcome=outcome,
                               limit=limit, with_ids=with_ids)

    def purge(self, cutoffs: dict[str, datetime], *, tenant_id: str | None,
              exclude: Sequence[str] = (), dry_run: bool = False) -> int:
        """Flush, then delete the records each class's cutoff has passed (see
        :meth:`memfabric.domain.access.AccessLogPort.purge`)."""
        self.flush()
        return self.sink.purge(cutoffs, tenant_id=tenant_id, exclude=exclude, dry_run=dry_run)

    def close(self) -> None:
        """Flush, then stop the writer thread."""
        self.flush()
        self._closed = True
        if self._thread is not None:
            self._thread.join(timeout=5.0)


class MemoryAccessSink:
    """Records in a list (the in-memory backend), ids sealed as in PostgreSQL."""

    def __init__(self, sealer: Sealer) -> None:
        self.sealer = sealer
        self.rows: list[tuple[AccessRecord, bytes | None]] = []
        self._lock = threading.Lock()

    def write(self, records: Sequence[AccessRecord]) -> None:
        sealed = [(replace(r, ids=()), self.sealer.seal(r)) for r in records]
        with self._lock:
            self.rows.extend(sealed)

    def query(self, *, principal: str | None, since: datetime | None, until: datetime | None,
              outcome: str | None, limit: int, with_ids: bool) -> list[AccessRecord]:
        with self._lock:
            rows = list(self.rows)
        out = [self.sealer.unseal(r, s) if with_ids else r for r, s in sorted(rows, key=lambda x: x[0].at)
               if (principal is None or r.principal == principal) and (since is None or r.at >= since)
               and (until is None or r.at < until) and (outcome is None or r.outcome == outcome)]
        return out[:limit]

    def purge(self, cutoffs: dict[str, datetime], *, tenant_id: str | None,
              exclude: Sequence[str] = (), dry_run: bool = False) -> int:
        def due(r: AccessRecord) -> bool:
            cutoff = cutoffs.get(r.retention)
            mine = r.tenant_id == tenant_id if tenant_id is not None else r.tenant_id not in exclude
            return cutoff is not None and mine and r.at < cutoff

        with self._lock:
            gone = sum(1 for r, _ in self.rows if due(r))
            if not dry_run:
                self.rows = [(r, s) for r, s in self.rows if not due(r)]
        return gone


_COLUMNS = ("at", "principal", "operation", "outcome", "tenant_id", "resource_id", "thread_id",
            "kinds", "served", "rule", "query_hash", "query_text", "retention", "ids_sealed")

DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigserial PRIMARY KEY, at timestamptz NOT NULL,"
    " principal text NOT NULL, operation text NOT NULL, outcome text NOT NULL,"
    " tenant_id text NOT NULL, resource_id text NOT NULL, thread_id text NOT NULL,"
    " kinds text[] NOT NULL, served integer NOT NULL, rule text, query_hash text, query_text text,"
    " retention text NOT NULL DEFAULT 'operational', ids_sealed bytea)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_principal ON {TABLE} (principal, at)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_at ON {TABLE} (at)",
)


class PostgresAccessSink:
    """Records in ``mf_access_log`` (one multi-row INSERT per batch, on a pooled
    connection of its own, outside any caller's transaction)."""

    def __init__(self, connection: Callable[[], Any], sealer: Sealer) -> None:
        self._connection = connection
        self.sealer = sealer
        self._created = False

    def create(self) -> None:
        """Make the table (idempotent); done at the first write, so a fabric without
        principals never has it."""
        if self._created:
            return
        with self._connection() as conn:
            for stmt in DDL:
                conn.execute(stmt)
        self._created = True

    def write(self, records: Sequence[AccessRecord]) -> None:
        rows = [(r.at, r.principal, r.operation, r.outcome, r.tenant_id, r.resource_id, r.thread_id,
                 list(r.kinds), r.served, r.rule, r.query_hash, r.query_text, r.retention,
                 self.sealer.seal(r)) for r in records]
        self.create()
        stmt = sql.SQL("INSERT INTO {t} ({c}) VALUES ({v})").format(
            t=sql.Identifier(TABLE), c=sql.SQL(", ").join(map(sql.Identifier, _COLUMNS)),
            v=sql.SQL(", ").join(sql.Placeholder() * len(_COLUMNS)))
        with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(stmt, rows)

    def query(self, *, principal: str | None, since: datetime | None, until: datetime | None,
              outcome: str | None, limit: int, with_ids: bool) -> list[AccessRecord]:
        conds: list[sql.Composable] = [sql.SQL("TRUE")]
        for column, op, value in (("principal", "=", principal), ("at", ">=", since),
                                  ("at", "<", until), ("outcome", "=", outcome)):
            if value is not None:
                conds.append(sql.SQL("{} " + op + " {}").format(sql.Identifier(column), sql.Literal(value)))
        stmt = sql.SQL("SELECT {c} FROM {t} WHERE {w} ORDER BY at, id LIMIT {n}").format(
            c=sql.SQL(", ").join(map(sql.Identifier, _COLUMNS)), t=sql.Identifier(TABLE),
            w=sql.SQL(" AND ").join(conds), n=sql.Literal(limit))
        with self._connection() as conn, conn.cursor() as cur:
            found = cur.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (TABLE,)).fetchone()
            rows = cur.execute(stmt).fetchall() if found and found["found"] else []
        out = []
        for row in rows:
            sealed = row.pop("ids_sealed")
            rec = AccessRecord(**{**row, "kinds": tuple(row["kinds"])})
            out.append(self.sealer.unseal(rec, bytes(sealed) if sealed is not None else None)
                       if with_ids else rec)
        return out

    def purge(self, cutoffs: dict[str, datetime], *, tenant_id: str | None,
              exclude: Sequence[str] = (), dry_run: bool = False) -> int:
        """One statement: ``DELETE`` (``dry_run``: ``count(*)``) of the records of each
        class in ``cutoffs`` older than its cutoff, of ``tenant_id`` or of every tenant
        not in ``exclude``; uses the ``at`` index."""
        if not cutoffs:
            return 0
        classes, times = list(cutoffs), [cutoffs[c] for c in cutoffs]
        who = (sql.SQL("tenant_id = {}").format(sql.Literal(tenant_id)) if tenant_id is not None
               else sql.SQL("tenant_id <> ALL({})").format(sql.Literal(list(exclude))))
        due = sql.SQL("FROM {t} l JOIN unnest({c}::text[], {a}::timestamptz[]) AS w(retention, cutoff)"
                      " ON l.retention = w.retention WHERE l.at < w.cutoff AND {who}").format(
            t=sql.Identifier(TABLE), c=sql.Literal(classes), a=sql.Literal(times), who=who)
        with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            found = cur.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (TABLE,)).fetchone()
            if not (found and found["found"]):
                return 0
            if dry_run:
                row = cur.execute(sql.SQL("SELECT count(*) AS n ") + due).fetchone()
                return int(row["n"]) if row else 0
            cur.execute(sql.SQL("DELETE FROM {t} WHERE id IN (SELECT l.id ").format(t=sql.Identifier(TABLE))
                        + due + sql.SQL(")"))
            return int(cur.rowcount)
