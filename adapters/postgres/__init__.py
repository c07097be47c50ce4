"""PostgreSQL persistence for memfabric, built on ``eventsourcing.postgres``.

- :class:`PostgresFactory`: eventsourcing infrastructure factory (selected with
  ``PERSISTENCE_MODULE=memfabric.adapters.postgres:PostgresFactory``) that builds the
  sealing mapper and :class:`PostgresNoteRecorder`.
- :class:`PostgresNoteRecorder`: eventsourcing's application recorder (same table, plus a
  ``tenant`` column) that inserts events on a cursor of a transaction somebody else
  owns: the unit of work's (:meth:`PostgresNoteRecorder.insert_on`). Appends are ordered
  per tenant by the writer's tenant lock (``projections/engine.py``), not by
  eventsourcing's ``LOCK TABLE ... IN EXCLUSIVE MODE``, so tenants append concurrently.
- :class:`NoteLog`: the eventsourcing ``Application`` that holds the infrastructure
  (recorder, mapper, repository, snapshots); it never saves: writes go through
  :class:`memfabric.adapters.postgres.uow.PostgresUnitOfWork`.
- :class:`PostgresNoteStore`: the read side (``NoteStore`` port) on the projections.
- :func:`select_notes`: replay aggregates by id on a given cursor.
"""

from __future__ import annotations

import hmac
import os
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import numpy as np
import psycopg
from eventsourcing.application import Application
from eventsourcing.persistence import DataError as EventsourcingDataError
from eventsourcing.persistence import StoredEvent, Transcoder
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.postgres import PostgresFactory as _EventsourcingPostgresFactory
from memfabric.adapters.postgres.replicas import PRIMARY, ReplicaRouter
from memfabric.adapters.postgres.conninfo import CONNINFO_ENV, use_whole_dsn
from memfabric.adapters.postgres.pool import last_in_first_out
from memfabric.adapters.crypto import KEYS_DDL, BatchKeys, KeyStore, SealingMapper
from memfabric.adapters.postgres.counts import scope_counts
from memfabric.adapters.postgres.tail import TailIndexer
from memfabric.adapters.postgres.note_cache import NoteCache
from memfabric.adapters.postgres.vectors import VectorTypes as VectorTypes
from memfabric.adapters.postgres.replays import select_notes as select_notes
from memfabric.domain.errors import EmbedderChangedError, ProjectionLagError, ReadOnlyError
from memfabric.domain.note import Note
from memfabric.domain.ports import Candidate, ListQuery, NoteFilter, NoteRef
from memfabric.domain.results import NoteCounts
from memfabric.domain.scope import Scope
from memfabric.domain.working import BlockEntry
from memfabric.projections import note_scope, recall_hits, recall_index, tables, working_value
from memfabric.projections.engine import ProjectionEngine, advisory_key
from psycopg import Connection, Cursor, sql
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

T = TypeVar("T")

SECRETS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {tables.FABRIC_SECRET} ("
    " id smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1), secret bytea NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now())"
)
SECRETS_FORMAT_DDL = (
    f"ALTER TABLE {tables.FABRIC_SECRET} ADD COLUMN IF NOT EXISTS event_format smallint NOT NULL DEFAULT 1"
)
"""``event_format``: 2 for a fabric created by a release that tags every event (legacy
``MF1`` states are then refused), 1 for one created before (its old events stay
readable; new events are tagged all the same)."""

EF_SEARCH_MAX = 1000
"""pgvector's upper bound for ``hnsw.ef_search``."""
SIZE_TTL = 30.0
"""Seconds a tenant's counted size (exact search or HNSW) is reused."""


@contextmanager
def dimension_guard() -> Iterator[None]:
    """Turn pgvector's refusal of a vector of another dimension (``different vector
    dimensions`` / ``expected N dimensions``: an index migrated by ``reembed`` since this
    process opened the fabric) into ``EmbedderChangedError``, which recall and writes
    answer by adopting the recorded embedder and retrying once."""
    try:
        yield
    except (psycopg.DataError, EventsourcingDataError) as exc:  # eventsourcing re-raises as its own
        text = str(exc)
        if "vector dimensions" in text or ("expected" in text and "dimensions" in text):
            raise EmbedderChangedError(
                f"the index has another dimension than this process's embedder ({text.strip()}): "
                "the fabric's embedder changed (reembed)") from exc
        raise


class PostgresNoteRecorder(PostgresApplicationRecorder):
    """eventsourcing's application recorder that inserts on a caller's cursor."""

    partitions: int = 1
    """Issue 25: hash partitions of a new events table (``open_fabric(partitions=N)``;
    1: eventsourcing's plain table). An existing table is left as it is."""

    def _create_events_table(self) -> None:
        """eventsourcing's ``create_table``, minus the ``CREATE TYPE`` of the stored-event
        composite type when that type already exists: eventsourcing runs it on every
        open and swallows the ``DuplicateObject``, which leaves an ERROR line in the
        server log each time."""
        with self.datastore.transaction(commit=False) as cur:
            row = cur.execute(
                "SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
                " WHERE t.typname = %s AND n.nspname = coalesce(nullif(%s, ''), current_schema())",
                (self.stored_event_type_name, self.datastore.schema or ""),
            ).fetchone()
        statements = self.sql_create_statements
        if self.partitions > 1:
            self.sql_create_statements = partitioned_events_ddl(self, statements)
        if row is None:
            try:
                super().create_table()
            finally:
                self.sql_create_statements = statements
            return
        self.sql_create_statements = [s for s in self.sql_create_statements if "CREATE TYPE" not in s.as_string()]
        try:
            super().create_table()
        finally:
            self.sql_create_statements = statements

    def create_table(self) -> None:
        """eventsourcing's table, then (issue 24) the ``tenant`` column and its index:
        see :func:`add_tenant_column`."""
        self._create_events_table()
        with self.datastore.transaction(commit=True) as cur:
            add_tenant_column(cur, self.events_table_name)

    def insert_on(self, cur: Cursor[Any], stored_events: Sequence[StoredEvent],
                  tenants: Sequence[str], *, notify: bool = False) -> list[int]:
        """Insert ``stored_events`` (``tenants[i]``: the tenant of event ``i``) in the
        transaction ``cur`` belongs to, in one statement (arrays, ``unnest WITH
        ORDINALITY``, ids drawn in the given order); returns their notification ids in
        order. The caller holds each tenant's lock and has a transaction id already
        (``ProjectionEngine.lock_statement``). ``notify``: also ``NOTIFY`` the
        channel (a deferred runner listens; it takes a database-wide lock at commit,
        so writers that project inline do not send it)."""
        return self.send_insert(cur, stored_events, tenants, notify=notify)()

    def send_insert(self, cur: Cursor[Any], stored_events: Sequence[StoredEvent],
                    tenants: Sequence[str], *, notify: bool = False) -> Callable[[], list[int]]:
        """:meth:`insert_on`, sent without waiting (pipeline mode): returns the function
        that fetches the notification ids."""
        if not stored_events:
            return list
        if notify:
            cur.execute(sql.SQL("NOTIFY {0}").format(sql.Identifier(self.channel_name)))
        cur.execute(self._insert_sql(), self.insert_params(stored_events, tenants), prepare=True)

        def fetch() -> list[int]:
            return [int(r["notification_id"] if isinstance(r, dict) else r[0]) for r in cur.fetchall()]
        return fetch

    def insert_params(self, stored_events: Sequence[StoredEvent], tenants: Sequence[str]) -> tuple[list[Any], ...]:
        """The five arrays of :meth:`_insert_sql`."""
        return ([e.originator_id for e in stored_events], [e.originator_version for e in stored_events],
                [e.topic for e in stored_events], [e.state for e in stored_events], list(tenants))

    def insert_sql(self) -> bytes:
        """The statement of :meth:`send_insert` (``%s``: the five arrays of :meth:`insert_params`)."""
        return self._insert_sql()

    def insert_values_sql(self, n: int) -> bytes:
        """:meth:`insert_sql` for ``n`` events as ``VALUES`` rows of five scalars each
        (``originator_id, originator_version, topic, state, tenant``; ids drawn in row order)."""
        t = sql.Identifier(self.datastore.schema, self.events_table_name).as_string(None)
        rows = ", ".join(["(%s::uuid, %s::bigint, %s::text, %s::bytea, %s::text)"] * n)
        return (f"INSERT INTO {t} (originator_id, originator_version, topic, state, tenant) VALUES {rows}"  # noqa: S608
                " RETURNING notification_id").encode()

    def _insert_sql(self) -> bytes:
        if self._insert_statement is None:
            self._insert_statement = sql.SQL(
                "INSERT INTO {t} (originator_id, originator_version, topic, state, tenant)"
                " SELECT o, v, tp, st, tn FROM unnest(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[], %s::text[])"
                " WITH ORDINALITY AS u(o, v, tp, st, tn, i) ORDER BY i RETURNING notification_id").format(
                t=sql.Identifier(self.datastore.schema, self.events_table_name)).as_bytes(None)
        return self._insert_statement

    _insert_statement: bytes | None = None


def partitioned_events_ddl(recorder: PostgresApplicationRecorder, statements: Sequence[Any]) -> list[Any]:
    """eventsourcing's create statements with the events table hash-partitioned by
    ``tenant`` into ``recorder.partitions`` (issue 25): the primary key
    ``(originator_id, originator_version, tenant)`` (an aggregate's tenant never changes,
    so it is as unique as eventsourcing's, and a replay by id still uses each
    partition's key index), ``notification_id``'s index not unique (PostgreSQL wants the
    partition key in a unique one; the sequence keeps the ids unique) and the partitions
    ``<table>_p<i>``; no autovacuum storage parameters (a partitioned table has none)."""
    n = getattr(recorder, "partitions", 1)
    schema, table = sql.Identifier(recorder.datastore.schema), sql.Identifier(recorder.events_table_name)
    out: list[Any] = []
    for s in statements:
        text = s.as_string()
        if text.startswith("CREATE TABLE IF NOT EXISTS") and "originator_version bigint" in text:
            out.append(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {s}.{t} (originator_id uuid NOT NULL, originator_version bigint NOT NULL,"
                " topic text, state bytea, notification_id bigserial, tenant text NOT NULL,"
                " PRIMARY KEY (originator_id, originator_version, tenant)) PARTITION BY HASH (tenant)").format(
                s=schema, t=table))
            out.extend(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {s}.{p} PARTITION OF {s}.{t} FOR VALUES WITH (MODULUS {n}, REMAINDER {i})"
            ).format(s=schema, t=table, p=sql.Identifier(f"{recorder.events_table_name}_p{i}"),
                     n=sql.Literal(n), i=sql.Literal(i)) for i in range(n))
        elif text.startswith("CREATE UNIQUE INDEX"):
            out.append(sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {s}.{t} (notification_id)").format(
                i=sql.Identifier(recorder.notification_id_index_name), s=schema, t=table))
        else:
            out.append(s)
    return out


def add_tenant_column(cur: Cursor[Any], events_table: str) -> None:
    """Give the events table its ``tenant`` column (the tenant id of each event's
    aggregate; what the per-tenant order and catch-up select on) and the index
    ``(tenant, notification_id)``, idempotently. A log written before issue 24 has
    NULL there until :func:`backfill_tenants` fills it on open."""
    t = sql.Identifier(events_table)
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("mf-ddl"),))
    cur.execute(sql.SQL("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS tenant text").format(t=t))
    cur.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant, notification_id)").format(
        i=sql.Identifier(events_table + "_tenant_idx"), t=t))


def backfill_tenants(datastore: Any, mapper: Any, events_table: str, batch: int = 5000) -> int:
    """Fill ``tenant`` on the events of a log written before issue 24: each
    aggregate's tenant from the plain fields of its first event (the scope is not
    sealed). Returns how many aggregates were filled. Idempotent; cheap (one indexed
    probe) when nothing is missing."""
    from memfabric.adapters.postgres.event_rows import plain_fields  # noqa: PLC0415
    t = sql.Identifier(events_table)
    done = 0
    while True:
        with datastore.transaction(commit=True) as cur:
            rows = cur.execute(sql.SQL(
                "SELECT originator_id, state FROM {t} WHERE originator_version = 1 AND originator_id IN"
                " (SELECT DISTINCT originator_id FROM {t} WHERE tenant IS NULL LIMIT %s)").format(t=t),
                (batch,)).fetchall()
            if not rows:
                return done
            ids, tenants = [], []
            for row in rows:
                fields = plain_fields(mapper, bytes(row["state"]))
                ids.append(row["originator_id"])
                tenants.append(str(fields.get("tenant_id") or ""))
            cur.execute(sql.SQL(
                "WITH f AS (UPDATE {t} e SET tenant = u.tn FROM unnest(%s::uuid[], %s::text[]) AS u(o, tn)"
                " WHERE e.originator_id = u.o AND e.tenant IS NULL RETURNING e.tenant)"
                " SELECT tenant, count(*) FROM f GROUP BY tenant ORDER BY tenant").format(t=t), (ids, tenants))
            _count_backfilled(cur, cur.fetchall())
            done += len(ids)


def _count_backfilled(cur: Cursor[Any], counts: Sequence[Any]) -> None:
    """Add the events a backfill gave a tenant to that tenant's count (issue 28,
    :mod:`memfabric.adapters.postgres.tenant_heads`: the append's trigger counted them
    under no tenant), when the counts exist; without them the first count includes them."""
    from memfabric.adapters.postgres.tenant_heads import HEADS_TABLE  # noqa: PLC0415
    rows = [(r["tenant"], r["count"]) if isinstance(r, dict) else (r[0], r[1]) for r in counts]
    exists = cur.execute("SELECT to_regclass(%s) IS NOT NULL AS e", (HEADS_TABLE,)).fetchone()
    if not rows or not exists or not (exists["e"] if isinstance(exists, dict) else exists[0]):
        return
    cur.execute(sql.SQL(
        "INSERT INTO {h} AS h (tenant, events) SELECT * FROM unnest(%s::text[], %s::bigint[])"
        " ON CONFLICT (tenant) DO UPDATE SET events = h.events + excluded.events").format(
        h=sql.Identifier(HEADS_TABLE)), ([t for t, _ in rows], [int(n) for _, n in rows]))


def _as_text(statement: Any) -> str:
    """A statement eventsourcing composed (``sql.Composable`` or ``str``) as plain text."""
    return statement if isinstance(statement, str) else str(statement.as_string())


class PostgresFactory(_EventsourcingPostgresFactory):
    """eventsourcing ``PostgresFactory`` with memfabric's recorder and sealing mapper."""

    application_recorder_class = PostgresNoteRecorder

    PARTITIONS = "MEMFABRIC_PARTITIONS"
    """Environment key: the hash partitions of a new events table (issue 25)."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        use_whole_dsn(self.datastore, self.env.get(CONNINFO_ENV))  # issue 28: every DSN parameter
        last_in_first_out(self.datastore)  # issue 24: a thread keeps the connection it used last
        self.keys = KeyStore(self.datastore)

    def _new_recorder(self) -> PostgresNoteRecorder:
        """eventsourcing's ``application_recorder`` (table ``<app>_events``), with the
        partition count set before its ``create_table``."""
        recorder = PostgresNoteRecorder(datastore=self.datastore,
                                        events_table_name=(self.env.name.lower() or "stored") + "_events")
        recorder.partitions = int(self.env.get(self.PARTITIONS) or 1)
        if self.env_create_table():
            recorder.create_table()
        return recorder

    def mapper(self, transcoder: Transcoder | None = None, mapper_class: Any = None) -> SealingMapper:  # type: ignore[override]
        assert transcoder is not None
        return SealingMapper(transcoder, self.keys)

    def application_recorder(self) -> PostgresNoteRecorder:
        recorder = self._new_recorder()
        if not self.env_create_table():
            return recorder  # a read-only or stamped open runs no DDL (the role may lack CREATE)
        with self.datastore.transaction(commit=True) as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("mf-ddl"),))
            cur.execute(KEYS_DDL)
            cur.execute(SECRETS_DDL)
            cur.execute(SECRETS_FORMAT_DDL)
        return recorder


Factory = PostgresFactory


class NoteLog(Application[UUID]):
    """The event log's infrastructure, from eventsourcing: ``factory`` (datastore, key
    store), ``recorder``, sealing ``mapper``, ``repository`` and ``snapshots``. Built from
    the environment by :func:`memfabric.adapters.bootstrap.open_fabric`."""

    name = "memfabric"

    @property
    def note_recorder(self) -> PostgresNoteRecorder:
        assert isinstance(self.recorder, PostgresNoteRecorder)
        return self.recorder

    @property
    def sealing_mapper(self) -> SealingMapper:
        assert isinstance(self.mapper, SealingMapper)
        return self.mapper

    @property
    def datastore(self) -> Any:
        factory = self.factory
        assert isinstance(factory, PostgresFactory)
        return factory.datastore

    @property
    def keys(self) -> KeyStore:
        factory = self.factory
        assert isinstance(factory, PostgresFactory)
        return factory.keys

    @property
    def note_cache(self) -> NoteCache:
        """This process's committed note states (:mod:`.note_cache`), made on first use."""
        found = self.__dict__.get("_note_cache")
        if found is None:
            found = self.__dict__["_note_cache"] = NoteCache()
        return found


class PostgresNoteStore:
    """The ``NoteStore`` port on PostgreSQL + pgvector: recall, working value, scope
    paging, history, and the fabric secret."""

    exact_search_max: int = 20_000
    """Tenants with at most this many indexed notes are searched exactly (btree scan and
    sort, recall 1.0); larger ones through HNSW with iterative scan. 0 disables."""

    await_timeout: float = 30.0
    """Seconds a write waits for the separate runner (``inline_projections=False``)."""

    def __init__(self, log: NoteLog, *, ef_search: int = 100) -> None:
        self.log = log
        self.datastore = log.datastore
        self.vectors = VectorTypes()
        self.ef_search = ef_search
        self.awaited_engine: ProjectionEngine | None = None
        self._secret: bytes | None = None
        self.read_only = False
        """Set by ``open_fabric(read_only=True)``: the secret is never created or read."""
        self._sizes: dict[str, tuple[float, int]] = {}
        self._hnsw_ef: weakref.WeakKeyDictionary[Connection[Any], int] = weakref.WeakKeyDictionary()
        """The ``hnsw.ef_search`` this store set on each pooled connection (session)."""
        self.router: ReplicaRouter | None = None
        """Issue 25: set by ``open_fabric(replicas=...)``; recall, list, count, load and
        history are then served by a replica that has replayed this fabric's writes."""
        self.tail: TailIndexer | None = None
        """Issue 24: set by ``open_fabric`` (not read-only): puts the recall index's
        unindexed tail into the HNSW graph in the background (``adapters/postgres/tail.py``)."""

    @contextmanager
    def connection(self) -> Iterator[Connection[Any]]:
        """A pooled connection with pgvector's types registered."""
        with self.datastore.get_connection() as conn:
            self.vectors.ensure(conn)
            yield conn

    def routed(self, read: Callable[[Connection[Any]], T]) -> T:
        """``read(conn)`` on a replica through :attr:`router` (see
        ``adapters/postgres/replicas.py``), else on a pooled primary connection."""
        if self.router is None:
            with self.connection() as conn:
                return read(conn)
        return self.router.run(read)

    def last_served_by(self) -> str:
        """Where this thread's last routed read was served: ``"primary"`` or
        ``"replica:<host>:<port>"``."""
        return PRIMARY if self.router is None else self.router.last_served_by()

    # ------------------------------------------------------------------ recall
    def recall(
        self, scope: Scope, *, embedding: np.ndarray | None, query: str | None,
        kinds: Sequence[str], as_of: datetime, limit: int, require_consent: bool,
        filters: NoteFilter | None = None,
        expand: int = 0,
    ) -> list[Candidate]:
        """:func:`memfabric.projections.recall_index.select_candidates`, one statement
        (one round trip, no transaction block): exact search for a tenant of at most
        :attr:`exact_search_max` notes (recall 1.0), else HNSW with
        ``hnsw.iterative_scan = relaxed_order`` and ``hnsw.ef_search`` =
        ``min(1000, max(ef_search, limit))``, set on the pooled connection once
        (:meth:`_hnsw_settings`), over the indexed rows merged with an exact scan of the
        unindexed tail (issue 24, :mod:`memfabric.projections.recall_tail`)."""
        def read(conn: Connection[Any]) -> list[Candidate]:
            with conn.cursor() as cur:
                exact = embedding is not None and self._tenant_size(cur, scope.tenant_id) <= self.exact_search_max
                if embedding is not None and not exact:
                    self._hnsw_settings(conn, min(EF_SEARCH_MAX, max(self.ef_search, limit)))
                    if self.tail is not None:  # a tail written by a runner or another process
                        self.tail.want([scope.tenant_id])
                return recall_index.select_candidates(
                    cur, scope, embedding=embedding, query=query, kinds=kinds, as_of=as_of,
                    limit=limit, require_consent=require_consent, filters=filters,
                    expand=expand, exact=exact)
        with dimension_guard():
            return self.routed(read)

    def hit_links(self, scope: Scope, aggregate_ids: Sequence[UUID],
                  filters: NoteFilter | None = None) -> dict[UUID, list[dict[str, Any]]]:
        """:func:`memfabric.projections.recall_hits.select_links` (one statement, routed
        like the recall it follows; ``filters.access``: issue 33)."""
        return self.routed(lambda conn: recall_hits.select_links(conn.cursor(), scope, aggregate_ids, filters))

    def hits(self, scope: Scope, aggregate_ids: Sequence[UUID], filters: NoteFilter | None = None,
             complete: Sequence[UUID] = ()) -> tuple[dict[UUID, list[dict[str, Any]]], dict[UUID, dict[str, Any]]]:
        """:func:`memfabric.projections.recall_hits.select_hits` (one statement, routed
        like :meth:`hit_links`)."""
        return self.routed(lambda conn: recall_hits.select_hits(conn.cursor(), scope, aggregate_ids, filters, complete))

    def _hnsw_settings(self, conn: Connection[Any], ef: int) -> None:
        """Session settings of HNSW recall on ``conn`` (autocommit, pooled): iterative
        scan (pgvector 0.8: keeps scanning past ``ef_search`` until ``limit`` rows pass
        the filters, so no recall returns fewer rows than match) and ``ef`` (pgvector
        accepts up to 1000). Sent only when they differ from what this store last set
        on that connection; re-sent when the connection is inside a transaction block
        (a session SET there would be undone by a rollback) — then as ``SET LOCAL``."""
        if conn.info.transaction_status != TransactionStatus.IDLE:
            conn.execute(sql.SQL("SET LOCAL hnsw.iterative_scan = relaxed_order;"
                                 " SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef)))
            return
        if self._hnsw_ef.get(conn) == ef:
            return
        conn.execute(sql.SQL("SET hnsw.iterative_scan = relaxed_order; SET hnsw.ef_search = {}").format(
            sql.Literal(ef)))
        self._hnsw_ef[conn] = ef

    def list_notes(
        self, query: ListQuery, *, after: tuple[datetime, UUID] | None, limit: int,
    ) -> list[Candidate]:
        """:func:`memfabric.projections.recall_index.select_page` (keyset, one statement)."""
        return self.routed(lambda conn: recall_index.select_page(conn.cursor(), query, after=after, limit=limit))

    def count_notes(self, query: ListQuery) -> int:
        return self.routed(lambda conn: recall_index.count_rows(conn.cursor(), query))

    def scopes_with(self, *, tenant_id: str | None, tags: Sequence[str]) -> list[Scope]:
        with self.connection() as conn, conn.cursor() as cur:
            return recall_index.select_scopes(cur, tenant_id=tenant_id, tags=tags)

    def needs_hnsw(self, cur: Cursor[Any], tenant_id: str) -> bool:
        """Whether recall of ``tenant_id`` goes through HNSW (it has more than
        :attr:`exact_search_max` notes, counted as :meth:`_tenant_size` does): only then
        does the tail indexer put its rows into the graph."""
        return self._tenant_size(cur, tenant_id) > self.exact_search_max

    def known_exact(self, tenant_id: str) -> bool:
        """Whether the cached size of :meth:`_tenant_size` (no statement) says recall of
        ``tenant_id`` is exact, so :meth:`needs_hnsw` would say ``False``; ``False`` when
        nothing fresh is cached. The tail indexer is not woken for such a tenant."""
        hit = self._sizes.get(tenant_id)
        return hit is not None and time.monotonic() - hit[0] < SIZE_TTL and hit[1] <= self.exact_search_max

    def _tenant_size(self, cur: Cursor[Any], tenant_id: str) -> int:
        """Indexed notes of a tenant, counted up to ``exact_search_max + 1`` and cached
        for :data:`SIZE_TTL` s (it only chooses the search strategy, never filters)."""
        now = time.monotonic()
        hit = self._sizes.get(tenant_id)
        if hit is not None and now - hit[0] < SIZE_TTL:
            return hit[1]
        size = recall_index.tenant_size(cur, tenant_id, self.exact_search_max + 1)
        self._sizes[tenant_id] = (now, size)
        return size

    # ------------------------------------------------------------ projections
    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        with self.connection() as conn, conn.cursor() as cur:
            return working_value.select_blocks(cur, scope)

    def notes_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None,
        *, after: NoteRef | None, limit: int,
    ) -> list[NoteRef]:
        with self.connection() as conn, conn.cursor() as cur:
            return note_scope.select_page(cur, tenant_id, resource_id, thread_id, after=after, limit=limit)

    def counts_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None
    ) -> NoteCounts:
        """Issue 27: :func:`memfabric.adapters.postgres.counts.scope_counts`."""
        with self.connection() as conn, conn.cursor() as cur:
            return scope_counts(cur, self.log.sealing_mapper, tenant_id, resource_id, thread_id)

    def resolve(self, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
        """:func:`memfabric.projections.note_scope.resolve` (one indexed query)."""
        with self.connection() as conn, conn.cursor() as cur:
            return list(note_scope.resolve(cur, scope, note_id))

    # -------------------------------------------------------------------- log
    def load(self, aggregate_id: UUID) -> Note | None:
        """The aggregate replayed (routed); a replica that lacks it (written by another
        process, not replayed yet) is asked again on the primary."""
        def read(conn: Connection[Any]) -> list[Note]:
            return select_notes(conn.cursor(), self.log.sealing_mapper, [aggregate_id])
        found = self.routed(read)
        if not found and self.router is not None:
            with self.connection() as conn:
                found = read(conn)
        return found[0] if found else None

    def stored_events(self, aggregate_id: UUID) -> Iterator[Any]:
        """The aggregate's domain events in version order (routed; keys read on the
        same server)."""
        def read(conn: Connection[Any]) -> list[Any]:
            batch = BatchKeys()
            batch.load(conn, [aggregate_id])
            mapper = self.log.sealing_mapper.bound(batch)
            rows = conn.cursor(row_factory=tuple_row).execute(
                sql.SQL("SELECT originator_id, originator_version, topic, state FROM {t}"
                        " WHERE originator_id = %s ORDER BY originator_version").format(
                    t=sql.Identifier(tables.EVENTS)), (aggregate_id,)).fetchall()
            return [mapper.to_domain_event(StoredEvent(o, v, tp, bytes(st))) for o, v, tp, st in rows]
        yield from self.routed(read)

    def await_position(self, position: int, timeout: float | None = None) -> None:
        """Read-your-writes without inline projections: block until every deferred
        projection has tracked ``position`` (kept by a separate ``memfabric projections
        run``). No-op when projections run inline. Raises ``ProjectionLagError`` (a
        ``TimeoutError``; the write itself is committed) after ``timeout`` seconds."""
        engine = self.awaited_engine
        if engine is None or position <= 0:
            return
        timeout = self.await_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        pause = 0.002
        while min(engine.position(p.name) for p in engine.deferred()) < position:
            if time.monotonic() > deadline:
                raise ProjectionLagError(
                    f"the write is committed (notification {position}) but the projections did "
                    f"not reach it in {timeout}s; is `memfabric projections run` running?")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        if self.router is not None:
            self.router.note_write()  # the runner's rows are past the writer's commit

    # ---------------------------------------------------------------- secrets
    def secret(self) -> bytes:
        """The fabric secret (32 random bytes created on first use, kept in
        ``mf_fabric_secret``): keys the tombstone content hashes and the events'
        authentication tags. Loading it arms the log's mapper: every event written is
        tagged, every tagged event read is checked, and in a fabric created by this
        release an untagged event is refused (see ``adapters/crypto.py``)."""
        if self._secret is None:
            if self.read_only:
                raise ReadOnlyError("this fabric is open read-only: the fabric secret is not read")
            with self.datastore.transaction(commit=True) as cur:
                cur.execute(
                    f"INSERT INTO {tables.FABRIC_SECRET} (id, secret, event_format) VALUES (1, %s, 2)"  # noqa: S608
                    " ON CONFLICT (id) DO NOTHING", (os.urandom(32),))
                row = cur.execute(
                    f"SELECT secret, event_format FROM {tables.FABRIC_SECRET} WHERE id = 1").fetchone()  # noqa: S608
            self._secret = bytes(row["secret"])
            mapper = self.log.sealing_mapper
            mapper.secret, mapper.require_tags = self._secret, int(row["event_format"]) >= 2
        return self._secret

    def content_hmac(self, text: str) -> str:
        return hmac.digest(self.secret(), text.encode(), "sha256").hex()
