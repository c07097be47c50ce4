"""The recall index's tail indexer (issue 24): puts a tenant's unindexed recall-index
rows into the HNSW graph in the background, outside every writer's transaction.

A write commits its recall-index row with ``indexed = false``
(:mod:`memfabric.projections.recall_tail`); recall through HNSW scans that tail exactly,
so nothing acknowledged is missed while the indexer lags. The indexer only works for
tenants whose recall goes through HNSW at all: a tenant of at most
``PostgresNoteStore.exact_search_max`` notes is searched exactly (recall 1.0) and never
needs the graph, so it never pays for it. Several processes may index the same tenant:
``FOR UPDATE SKIP LOCKED`` splits the rows between them.

A crash loses nothing: the flag is a row's state in PostgreSQL, an interrupted batch
rolls back and the next indexer takes it again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from psycopg import Cursor

from memfabric.projections import recall_index, recall_tail
from memfabric.projections.engine import ProjectionEngine

_log = logging.getLogger(__name__)

NeedsIndex = Callable[[Cursor[Any], str], bool]
"""``needs_index(cur, tenant)``: whether the tenant's recall goes through HNSW."""
KnownExact = Callable[[str], bool]
"""``known_exact(tenant)``: whether ``needs_index`` is already known (cached, no
statement) to say ``False`` for the tenant."""


class TailIndexer:
    """Background HNSW maintenance of the recall index, one daemon thread per fabric.

    ``want(tenants)`` (called after each committed write and each recall through HNSW)
    marks tenants whose tail may be non-empty and wakes the thread, which indexes each
    in batches of ``batch`` rows (default 256), one short transaction each, until the
    tail is empty; it then sleeps until woken or ``interval`` seconds (default 0.5)
    pass; after ``idle_exit`` seconds without work it ends. Each batch holds the recall projection's advisory lock *shared* (as writers
    do), so a blue-green rebuild's switch, which takes it exclusively, never runs
    beside it; a lock wait past the engine's ``lock_timeout`` fails the batch, which is
    retried after ``interval``. ``indexed``: rows indexed so far; ``last_error``: the
    last failure (logged, never raised to a writer); ``wakes``: wake-ups sent so far.

    ``known_exact`` (default: never known) filters ``want``: a tenant it names is
    neither marked nor does it wake the thread, which would only have found, without a
    statement, that the tenant needs no graph. So a write to a small tenant costs the
    writer's process no thread switch, no pool checkout and no GIL hand-off."""

    def __init__(self, datastore: Any, engine: ProjectionEngine, needs_index: NeedsIndex, *,
                 known_exact: KnownExact = lambda tenant: False,
                 interval: float = 0.5, batch: int = 256) -> None:
        self.datastore = datastore
        self.engine = engine
        self.needs_index = needs_index
        self.known_exact = known_exact
        self.interval = interval
        self.batch = batch
        self.idle_exit = 30.0
        """Seconds without work after which the thread ends (an idle fabric runs no thread)."""
        self.indexed = 0
        self.wakes = 0
        self.last_error: BaseException | None = None
        self._wanted: dict[str, int] = {}
        """Tenant → how many times it was wanted (a tenant is dropped only when no want
        arrived while its tail was being emptied)."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, tenants: Iterable[str]) -> None:
        """Mark ``tenants`` for indexing and wake the thread (started on first use),
        unless every one of them is :attr:`known_exact`."""
        wanted = [tenant for tenant in tenants if not self.known_exact(tenant)]
        if self._stop.is_set() or not wanted:
            return
        with self._lock:
            self.wakes += 1
            for tenant in wanted:
                self._wanted[tenant] = self._wanted.get(tenant, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memfabric-tail-indexer", daemon=True)
                self._thread.start()
        self._wake.set()

    def run_once(self, tenants: Iterable[str] | None = None) -> int:
        """Index the tails of ``tenants`` (default: every wanted one) until empty, in this
        thread; returns the rows indexed. Tenants that do not need the graph are skipped
        (see the module doc). Errors propagate."""
        with self._lock:
            todo = dict(self._wanted) if tenants is None else {t: self._wanted.get(t, 0) for t in tenants}
        total = 0
        for tenant, seen in todo.items():
            total += self._index_tenant(tenant)
            with self._lock:
                if self._wanted.get(tenant) == seen:
                    self._wanted.pop(tenant, None)
        return total

    def close(self) -> None:
        """Stop the thread (an interrupted batch rolls back; nothing is lost)."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10)

    # ------------------------------------------------------------------ inside
    def _run(self) -> None:
        idle = 0.0
        while not self._stop.is_set():
            woken = self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set() or (not woken and self._idle_exit(idle)):
                return
            idle = 0.0 if woken else idle + self.interval
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 - a background failure is logged and retried
                self.last_error = exc
                _log.warning("memfabric: the recall tail indexer failed (retried in %.1f s): %s", self.interval, exc)

    def _idle_exit(self, idle: float) -> bool:
        """Whether the thread ends: nothing wanted for :attr:`idle_exit` seconds (the
        next :meth:`want` starts a new one; decided under the lock ``want`` takes, so no
        want is stranded)."""
        with self._lock:
            if self._wanted or idle < self.idle_exit:
                return False
            self._thread = None
            return True

    def _index_tenant(self, tenant: str) -> int:
        """Batches of ``tenant`` until one comes back short (its tail is empty), or, in
        the background thread, until :meth:`close`."""
        with self.datastore.get_connection() as conn, conn.cursor() as cur:
            if not self.needs_index(cur, tenant):  # (cached: usually no statement at all)
                return 0
        total = 0
        background = threading.current_thread() is self._thread
        while not (background and self._stop.is_set()):
            n = self._batch(tenant)
            total += n
            self.indexed += n
            if n < self.batch:
                break
        return total

    def _batch(self, tenant: str) -> int:
        with self.datastore.transaction(commit=True) as cur:
            cur.execute("SELECT set_config('lock_timeout', %s, true), pg_advisory_xact_lock_shared(%s)",
                        (self.engine.timeout_setting(), self.engine.lock_key(recall_index.NAME)))
            return recall_tail.index_batch(cur, recall_index.TABLE, tenant, self.batch)
