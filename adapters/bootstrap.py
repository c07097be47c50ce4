"""Composition root: ``open_fabric`` wires the domain service to PostgreSQL.

Following cosmicpython's ``bootstrap``: the only place that knows every adapter.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from types import TracebackType
from datetime import datetime
from typing import Annotated, Any

import psycopg
from memfabric.adapters.postgres.conninfo import CONNINFO_ENV
from memfabric.adapters.postgres.embedded import EmbeddedPostgres, resolve_dsn
from memfabric.adapters.postgres.embedder_record import EMBEDDER_DDL as EMBEDDER_DDL  # re-exported
from memfabric.adapters.postgres.embedder_record import check_dim, choose_embedder, record_embedder
from memfabric.adapters.postgres.embedder_record import recorded_embedder as recorded_embedder  # re-exported
from memfabric.adapters.embedders import embedder_from_name
from memfabric.adapters.postgres.entities import PostgresEntityStore
from memfabric.adapters.postgres.ledger import PostgresLedgerStore
from memfabric.adapters.postgres import NoteLog, PostgresFactory, PostgresNoteStore, backfill_tenants
from memfabric.adapters.postgres.tail import TailIndexer
from memfabric.adapters.postgres import tenant_heads
from memfabric.adapters.postgres.schema_stamp import stamp
from memfabric.adapters.postgres.open_checks import (
    ensure_extension, fabric_partitions, keep_grants, read_only_reason as read_only_reason, require_extension,
    require_log, schema_to_make)
from memfabric.adapters.postgres.uow import PostgresUnitOfWork, cursor_loader
from memfabric.adapters.reembed import ReembedReport, reembed, new_projections
from memfabric.adapters.replaying import ReplayingMapper
from memfabric.adapters.postgres.roles import copy_privileges
from memfabric.adapters.postgres.replicas import ReplicaRouter, replicas_from_env, safe_dsn
from memfabric.adapters.postgres.retention import PostgresRetentionStore
from memfabric.adapters.tools import MemoryTools
from memfabric.domain.consolidation import Consolidation
from memfabric.domain.errors import FabricError, ReadOnlyError, SettingsError
from memfabric.domain.inputs import EraseScopeInput, Limits
from memfabric.domain.links import EvolutionSettings, LinkerSettings, worker_settings
from memfabric.domain.notes import Notes
from memfabric.domain.ports import Embedder
from memfabric.domain.results import EraseResult
from memfabric.domain.retention import RetentionConfig
from memfabric.domain.sweep import BATCH_SIZE, Progress, SweepResult
from memfabric.domain.scope import Scope
from memfabric.domain.deps import Deps, EmbedderSlot
from memfabric.domain.service import MemoryService
from memfabric.projections import quarantine, tables
from memfabric.projections.engine import LOCK_TIMEOUT, ProjectionEngine, advisory_key, bounded_locks
from memfabric.adapters.principals_store import wire_postgres
from memfabric.projections.partitions import MAX_PARTITIONS, count as partition_count
from memfabric.adapters.postgres.known_at import PostgresKnownAtStore
from memfabric.projections.registry import default_projections
from psycopg.conninfo import conninfo_to_dict
from pydantic import ConfigDict, Field, StrictBool, StringConstraints, validate_call

_log = logging.getLogger(__name__)


def _env_from_dsn(dsn: str, pool_size: int, max_overflow: int, ddl: bool) -> dict[str, str]:
    """The ``NoteLog`` environment of ``dsn``; ``ddl``: whether its recorder creates the
    log's tables (``CREATE_TABLE``), false for a read-only or stamped open."""
    info = conninfo_to_dict(dsn)
    return {
        "PERSISTENCE_MODULE": "memfabric.adapters.postgres:PostgresFactory",
        "POSTGRES_DBNAME": str(info.get("dbname") or info.get("user") or "postgres"),
        "POSTGRES_HOST": str(info.get("host") or "localhost"),
        "POSTGRES_PORT": str(info.get("port") or "5432"),
        "POSTGRES_USER": str(info.get("user") or os.environ.get("USER", "postgres")),
        "POSTGRES_PASSWORD": str(info.get("password") or ""),
        "POSTGRES_POOL_SIZE": str(pool_size),
        "POSTGRES_MAX_OVERFLOW": str(max_overflow),
        "POSTGRES_CONN_MAX_AGE": "3600",
        "POSTGRES_ENABLE_DB_FUNCTIONS": "no",  # never: tailing readers would miss events
        "POSTGRES_LOCK_TIMEOUT": "0",
        "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": "0",
        "CREATE_TABLE": "yes" if ddl else "no",
        CONNINFO_ENV: dsn,  # the pool connects with the whole DSN (adapters/postgres/conninfo.py)
    }


class RoutedUnitOfWork(PostgresUnitOfWork):
    """A unit of work that, once committed with events, records the primary's WAL
    position in the fabric's :class:`ReplicaRouter` (read-your-writes on replicas)."""

    router: ReplicaRouter

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        super().__exit__(exc_type, exc, tb)
        if exc_type is None and self.position > 0:
            self.router.note_write()


class Fabric:
    """An open memory fabric: a service on one database. Use as a context manager.

    - ``scope(tenant_id, resource_id=None, thread_id=None)`` → :class:`Notes`
    - ``catch_up()`` brings projections to the log head.
    - ``close()`` releases the pool and, for the embedded default, this process's use
      of the server.
    """

    def __init__(self, service: MemoryService, log: NoteLog, store: PostgresNoteStore,
                 engine: ProjectionEngine, dsn: str, embedded: EmbeddedPostgres | None) -> None:
        self.service = service
        self.log = log
        self.store = store
        self.engine = engine
        self.dsn = dsn
        self._embedded = embedded
        self.embedded_server: EmbeddedPostgres | None = embedded
        """The embedded server this fabric reads (also when a caller started it, as the
        admin commands do); closed by :meth:`close` only when ``open_fabric`` started it."""
        self.replay_mapper = ReplayingMapper(log.sealing_mapper)
        """What rebuild and verify replay the log with (``memfabric.projections.replay.ReplayMapper``)."""
        self.copy_privileges = copy_privileges
        """What a blue-green switch gives each new table (``ProjectionAdmin``, issue 27)."""
        self._closed = False
        self.read_only = False
        """``open_fabric(read_only=True)``, or a role that may not write the log: every
        write raises ``ReadOnlyError``."""
        self.read_only_reason: str | None = None
        """Why a plain open fell back to read-only (the role's missing privilege), else ``None``."""

    def scope(self, tenant_id: str, resource_id: str | None = None, thread_id: str | None = None) -> Notes:
        """The handle of one scope; raises ``pydantic.ValidationError`` for bad ids."""
        return Notes(self.service, Scope(tenant_id=tenant_id, resource_id=resource_id, thread_id=thread_id),
                     tools=MemoryTools)

    def erase_scope(
        self, tenant_id: str, resource_id: str | None = None, thread_id: str | None = None,
        hold: bool = False, *, requested_by: str = "operator", batch_size: int = 100,
        approval: str | None = None,
    ) -> EraseResult:
        """Tombstone every un-forgotten note of a scope prefix and return exact counts.

        ``resource_id``/``thread_id`` ``None`` means every resource / thread of the
        tenant (``erase_scope("acme")`` erases the whole tenant, ``erase_scope("acme",
        "user-1")`` one resource with all its threads). Notes of every kind are found
        through the note-scope index (``mf_note_scope``), ``batch_size`` (1-1000,
        default 100) per write transaction, each holding the write locks of the scopes
        it touches; each note gets a ``Forgotten`` tombstone (``requested_by`` recorded,
        cause ``erase_scope``), its key is destroyed and its projection rows deleted.
        With ``hold=True`` the notes are put under legal hold instead (content kept,
        never recalled). Notes already held are counted in ``already_held`` and kept.
        Other tenants, resources and threads are never touched. Projections are caught
        up first, so the erasure also covers notes a separate runner has not projected yet.

        Issue 30: regulated notes before their floor are kept (``floor_kept``) unless
        ``approval`` names the legal erasure's approval reference (recorded in each
        tombstone).

        Returns :class:`~memfabric.domain.results.EraseResult`. Raises
        ``pydantic.ValidationError`` (naming the field) for a bad id, ``hold``,
        ``requested_by``, ``batch_size`` or ``approval``; nothing is written then.
        """
        self._writable("erase_scope")
        args = EraseScopeInput(
            tenant_id=tenant_id, resource_id=resource_id, thread_id=thread_id, hold=hold,
            requested_by=requested_by, batch_size=batch_size, approval=approval,
        )
        self.engine.catch_up()
        result = self.service.erase_scope(args)
        if args.hold:
            return result
        n = self._erase_conversations(args.tenant_id, args.resource_id, args.thread_id,
                                      args.requested_by)
        from memfabric.domain.entities.commands import erase_entities  # noqa: PLC0415 - issue 32
        erase_entities(self.service.deps, args.tenant_id, args.resource_id, args.thread_id, args.requested_by)
        return dataclasses.replace(result, conversations=n)

    def _erase_conversations(self, tenant_id: str, resource_id: str | None,
                             thread_id: str | None, requested_by: str) -> int:
        """Issue 14: erasing a scope prefix also shreds the conversation ledgers of its
        threads (``Erased`` tombstone, key destroyed). Returns how many were erased."""
        from memfabric.domain.conversation import erase_conversations  # noqa: PLC0415
        return erase_conversations(self.service.deps, tenant_id, resource_id, thread_id, requested_by)

    def sweep(self, now: datetime | None = None, *, tenant: str | None = None, limit: int | None = None,
              dry_run: bool = False, batch_size: int = BATCH_SIZE,
              progress: Progress | None = None) -> SweepResult:
        """Issue 30: apply the retention rules at ``now`` (timezone-aware; default: now,
        UTC) to the notes of ``tenant`` (``None``: every tenant), at most ``limit`` due
        notes this call; batched (``batch_size`` per unit of work, no lock across
        batches), resumable (a killed sweep continues at the next call with the same
        ``now``), idempotent (a completed sweep called again with its ``now`` changes
        nothing). ``progress(n)`` is called after each batch. Returns
        :class:`~memfabric.domain.sweep.SweepResult` with exact counts per class and
        outcome; see ``docs/retention.md``. Projections are caught up first."""
        if not dry_run:
            self._writable("sweep")
            self.engine.catch_up()
        return self.service.sweep(now, tenant=tenant, limit=limit, dry_run=dry_run,
                                  batch_size=batch_size, progress=progress)

    def reembed(self, embedder: Embedder | str, *, batch: int = 256, reporter: Any = None,
                attempts: int = 20, partition: int | None = None, tenant: str | None = None) -> ReembedReport:
        """Migrate this fabric to another embedder without downtime (issue 19): a
        ``Reembedded`` event per note with content, a blue-green rebuild of the recall and
        consolidation indexes under the new dimension, an atomic switch that records the
        new embedder; resumable. ``embedder``: an embedder or a name for
        :func:`~memfabric.adapters.embedders.embedder_from_name`. ``partition`` or
        ``tenant`` (a partitioned fabric, issue 25): only embed that partition's notes,
        no switch (a later call without them switches). Returns a
        :class:`~memfabric.adapters.reembed.ReembedReport`; errors: see
        :func:`memfabric.adapters.reembed.reembed`."""
        try:
            target = embedder_from_name(embedder) if isinstance(embedder, str) else embedder
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        except ImportError as exc:
            raise FabricError(f"embedder {embedder!r}: its package is not installed: {exc}") from None
        return reembed(self, target, batch=batch, reporter=reporter, attempts=attempts, partition=partition,
                       tenant=tenant)

    def use_embedder(self, embedder: Embedder, projections: Sequence[Any]) -> None:
        """Serve with ``embedder`` and the given projection instances (same names as the
        engine's, e.g. the recall index under the new dimension) from now on; what
        ``reembed`` calls right after its switch commits."""
        by_name = {p.name: p for p in projections}
        self.engine.projections = [by_name.get(p.name, p) for p in self.engine.projections]
        self.service.embedders.use(embedder)

    def adopt_recorded_embedder(self) -> bool:
        """Read the embedder the database records and, when another process migrated the
        fabric to it since this one opened, serve with it (built by name) from now on.
        Returns whether the embedder changed. Called by recall and writes when a vector
        of the old dimension meets the new index (``EmbedderChangedError``)."""
        recorded = recorded_embedder(self.dsn)
        if recorded is None or recorded["id"] == str(self.service.embedder.id):
            return False
        embedder = choose_embedder(None, recorded)
        self.use_embedder(embedder, new_projections(embedder, self.log.sealing_mapper))
        return True

    def served_by(self) -> str:
        """Where this thread's last read was served: ``"primary"`` or
        ``"replica:<host>:<port>"`` (issue 25)."""
        return self.store.last_served_by()

    def topology(self) -> dict[str, Any]:
        """``{"primary": <dsn without password>, "replicas": [...], "partitions": N}``,
        each replica's name, lag in seconds, replayed LSN and state after a fresh health
        check (:meth:`ReplicaRouter.status`); ``partitions``: the tenant hash partitions
        of the events table (1: the plain layout; issue 25)."""
        router = self.store.router
        return {"primary": safe_dsn(self.dsn), "replicas": [] if router is None else router.status(),
                "partitions": self.partitions()}

    def partitions(self) -> int:
        """The tenant hash partitions the fabric was created with (1: not partitioned)."""
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return max(1, partition_count(cur, tables.EVENTS))

    def catch_up(self) -> dict[str, int]:
        """Apply every event the projections have not seen; returns their positions."""
        self._writable("catch_up")
        return self.engine.catch_up()

    def _writable(self, what: str) -> None:
        if self.read_only:
            why = self.read_only_reason or "open_fabric(read_only=True)"
            raise ReadOnlyError(f"{what}: this fabric is open read-only ({why})")

    @property
    def principals(self) -> Any:
        """Issue 33: the principal registry (``memfabric.domain.access.Principals``):
        ``define(agent_id, profile)``, ``get``, ``list``; see ``docs/access.md``."""
        return self.service.access

    def access_log(self, **query: Any) -> Any:
        """Issue 33: access records, oldest first (``principal=``, ``since=``,
        ``until=``, ``outcome=``, ``limit=``, ``with_ids=``; see ``Principals.access_log``)."""
        return self.service.access.access_log(**query)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.service.access is not None:
            self.service.access.log.close()  # issue 33: flush the access records
        try:
            if self.store.tail is not None:
                self.store.tail.close()
            if self.store.router is not None:
                self.store.router.close()
            self.log.close()
        finally:
            if self._embedded is not None:
                self._embedded.close()

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@validate_call(config=ConfigDict(arbitrary_types_allowed=True))
def open_fabric(
    dsn: Annotated[str, StringConstraints(min_length=1)] | None = None,
    *,
    embedder: Embedder | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    consolidate: StrictBool | Consolidation | dict[str, Any] = True,
    limits: Limits | dict[str, Any] | None = None,
    redactor: Callable[[str], str] | None = None,
    require_consent: StrictBool = False,
    inline_projections: StrictBool = True,
    await_projections: StrictBool = True,
    catch_up: StrictBool = True,
    working_validator: Any = None,
    pool_size: Annotated[int, Field(ge=1, le=64)] = 2,
    max_overflow: Annotated[int, Field(ge=0, le=256)] = 8,
    subjects: Any = True,
    session_id: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None,
    linker: LinkerSettings | dict[str, Any] | None = None,
    evolution: EvolutionSettings | dict[str, Any] | None = None,
    passive: StrictBool = False,
    read_only: StrictBool = False,
    lock_timeout: Annotated[float, Field(gt=0, le=3600)] = LOCK_TIMEOUT,
    retention: RetentionConfig | dict[str, Any] | None = None,
    replicas: Sequence[Annotated[str, StringConstraints(min_length=1)]] | None = None,
    replica_max_wait: Annotated[float, Field(ge=0, le=30)] = 0.2,
    replica_max_lag: Annotated[float, Field(gt=0, le=3600)] = 5.0,
    partitions: Annotated[int, Field(strict=True, ge=1, le=MAX_PARTITIONS)] | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Fabric:
    """Open a fabric.

    - ``dsn``: libpq URI/DSN of a PostgreSQL 15+ server with pgvector (every parameter,
      ``application_name``, ``options``, ``sslmode`` ..., is used by every connection,
      the event-log pool included: :mod:`memfabric.adapters.postgres.conninfo`); default
      ``$MEMFABRIC_DSN``; with neither, the embedded PostgreSQL 18 in ``data_dir``
      (default ``$MEMFABRIC_HOME/pg`` or the user data dir) is started or joined.
    - ``embedder``: any object with ``id``, ``dim``, ``embed(texts)``; default
      ``HashEmbedder(384)``, or the embedder recorded in the database
      (``mf_fabric_embedder``, written on first open) built from its id. An embedder other
      than the recorded one raises ``FabricError`` naming both.
    - ``consolidate``: ``True`` (default), ``False`` or ``{"threshold": 0.85}``.
    - ``session_id``: only the session with this id may ``attach`` (default: any session).
    - ``subjects``: the subject extractor whose inferred key decides when a
      subject-less fact supersedes another (``memfabric.domain.subjects``): default
      ``RuleSubjectExtractor()``; any object with ``extract(text, *, kind)`` returning a
      ``SubjectKey`` or ``None``; ``None``/``False`` turns inference off (then only exact
      repeats, ``path``, an explicit ``subject`` or ``supersedes`` consolidate; cosine
      similarity never supersedes).
    - ``limits``: ``{"max_entry_text_chars": 8000}``.
    - ``redactor``: ``str -> str`` applied to content and context before embedding and
      sealing. ``require_consent``: recall only notes with granted consent.
    - ``inline_projections``: project in the writer's transaction (default). With
      ``False`` run ``memfabric projections run`` elsewhere; every write then waits
      (up to 30 s, ``TimeoutError``) for the runner to reach its events, so the next
      recall sees them (read-your-writes) — unless ``await_projections=False``.
    - ``catch_up``: bring the projections to the log head on open (default). Admin
      tools pass ``False`` so that a projection stopped on an event (``ProjectionError``)
      does not prevent opening the fabric to inspect or rebuild it.
    - ``working_validator``: a pydantic model class or a callable that sees the working
      value every block write or append would produce (``Notes.working_value()``
      shape) and rejects it by failing validation, raising or returning ``False``
      (``ValidatorRejectedError``; nothing is stored).

    - ``linker`` / ``evolution`` (issue 15, :mod:`memfabric.domain.links`): opt-in,
      model-free write-path workers, e.g. ``linker={"enabled": True, "top_k": 3}``,
      ``evolution={"enabled": True, "max_patches": 8}`` (caps 32; off by default). They
      run only while a session is attached to the written scope and not ``passive``.
    - ``lock_timeout``: seconds any lock wait may last (default 30; opening, every
      write, catch-up and rebuild): past it the call raises ``LockTimeoutError`` and
      writes nothing. Runtime lock keys are keyed by the fabric secret, so a session
      that cannot read it cannot take a writer's lock (issue 28).
    - ``read_only``: open for reading only, e.g. as an auditor role with nothing but
      ``SELECT`` (docs/roles.md): no DDL, no extension creation, no catch-up, no embedder
      record, no secret read or created; every write (``remember``, ``forget``,
      ``erase_scope``, ``catch_up`` ...) raises ``ReadOnlyError`` and nothing is written.
      Projections are read as they are (possibly behind the log head). A role that may
      not write the log (no ``INSERT`` on ``memfabric_events``, see
      :func:`read_only_reason`) is opened read-only without asking, with one warning
      line on the ``memfabric.adapters.bootstrap`` logger (``fabric.read_only_reason``
      says why); reads never need DDL.

    - ``retention`` (issue 30, :mod:`memfabric.domain.retention`): the class windows,
      e.g. ``{"operational": "90d", "regulated": {"floor": "7y", "ceiling": "10y"},
      "tenants": {"acme": {"ephemeral": "2h"}}}``; recorded in the database
      (``mf_fabric_retention``, replacing the recorded settings) so every process's
      sweep and floor check use the same values. Omitted: the recorded settings (or the
      defaults: ephemeral 1d, operational 90d, durable and regulated never). Ignored
      with ``read_only``.
    - ``replicas`` (issue 25): DSNs of streaming standbys of ``dsn`` (default
      ``$MEMFABRIC_REPLICA_DSNS``, comma-separated). Recall, list, count, get, history,
      lineage and the conversation ledger's reads go to a replica that has replayed this
      fabric's last write (waiting up to ``replica_max_wait`` seconds, default 0.2, then
      the primary serves the read); a replica that is down or lags more than
      ``replica_max_lag`` seconds (default 5) is skipped and retried after 2 s. Writes
      and the reads a write decides on stay on the primary. ``Fabric.served_by()``,
      ``RecallResult.served_by`` and ``NotePage.served_by`` say where a read was served
      (``adapters/postgres/replicas.py``).
    - ``partitions`` (issue 25, :mod:`memfabric.projections.partitions`): at creation,
      hash-partition the events table and the projection tables by tenant into this
      many partitions (1..256; 1, the default, is the plain layout). Fixed at creation:
      ``None`` (default) opens a database with the layout it has, another count than
      it has raises ``PartitionsMismatchError`` before anything is written.
    - ``clock``: "now" of retention decisions (the floor check, a sweep without
      ``now``); default: the wall clock, UTC. Tests pass a fake one.

    Raises ``FabricError`` when pgvector is missing or the embedder's dimension differs
    from the index; ``pydantic.ValidationError`` for bad settings.
    """
    # settings first: a bad one raises before any server, table or record is made
    workers = worker_settings(linker, evolution, passive)
    retention_config = None if retention is None else RetentionConfig.of(retention)
    consolidation = Consolidation.of(consolidate)
    limits_model = limits if isinstance(limits, Limits) else Limits.model_validate(limits or {})
    dsn, embedded = resolve_dsn(dsn, data_dir)
    try:
        # One opener at a time creates tables: eventsourcing's and the projections' DDL
        # is not safe to race (concurrent CREATE ... IF NOT EXISTS can fail). An open by
        # the code that made the schema skips that DDL (schema_stamp: it would wait for
        # every in-flight write and stall every later one).
        with psycopg.connect(dsn, autocommit=True) as ddl_lock:
            reason = None if read_only else read_only_reason(ddl_lock)
            if reason is not None:  # issue 27: an auditor's plain open reads instead of failing on DDL
                read_only = True
                _log.warning("memfabric: opened read-only: %s", reason)
            if not read_only:
                with bounded_locks("open_fabric (another process holds the open lock)"):
                    ddl_lock.execute("SELECT set_config('lock_timeout', %s, false), pg_advisory_lock(%s)",
                                     (f"{int(lock_timeout * 1000)}ms", advisory_key("mf-open")))
                ensure_extension(dsn)
            else:
                require_extension(dsn)
                require_log(dsn)
            partitions = fabric_partitions(ddl_lock, partitions)
            recorded = recorded_embedder(dsn)
            embedder = choose_embedder(embedder, recorded)
            schema = schema_to_make(ddl_lock, read_only, partitions, embedder.dim)
            log = NoteLog({**_env_from_dsn(dsn, pool_size, max_overflow, ddl=schema is not None),
                           PostgresFactory.PARTITIONS: str(partitions)})
            store = PostgresNoteStore(log)
            store.vectors.partitions = partitions  # issue 25: known at open, never asked per connection
            replica_dsns = replicas_from_env(replicas)
            if replica_dsns:
                store.router = ReplicaRouter(log.datastore.get_connection, replica_dsns,
                                             prepare=store.vectors.ensure, max_wait=replica_max_wait,
                                             max_lag=replica_max_lag)
            engine = ProjectionEngine(
                log.datastore, log.name, tables.EVENTS,
                default_projections(embedder, ReplayingMapper(log.sealing_mapper)),  # issue 34: the registry
                quarantine.quarantining(cursor_loader(log), log.sealing_mapper),  # issue 28
            )
            engine.prepare = store.vectors.ensure  # catch-up connections need pgvector's types
            engine.inline_all = inline_projections
            check_dim(log.datastore, embedder.dim)
            if read_only:
                store.read_only = True
                log.sealing_mapper.read_only = True  # tags unchecked without the secret (see crypto)
            else:
                if recorded is None:
                    record_embedder(dsn, embedder)
                _prepare_writable(log, engine, store, ddl_lock, schema)
                engine.lock_timeout = lock_timeout
            if not inline_projections and await_projections:
                store.awaited_engine = engine  # writes wait for the separate runner

            def unit_of_work(scopes: Sequence[Scope]) -> PostgresUnitOfWork:
                if read_only:
                    raise ReadOnlyError(f"this fabric is open read-only ({reason or 'open_fabric(read_only=True)'}): "
                                        "nothing is written")
                if store.router is None:
                    return PostgresUnitOfWork(log, engine, store.vectors, store.secret, scopes,
                                              inline_all=inline_projections)
                uow = RoutedUnitOfWork(log, engine, store.vectors, store.secret, scopes,
                                       inline_all=inline_projections)
                uow.router = store.router
                return uow

            retention_store = PostgresRetentionStore(log, dsn)  # issue 30
            deps = Deps.build(
                unit_of_work=unit_of_work, store=store,
                embedder=EmbedderSlot(embedder, lambda: fabric.adopt_recorded_embedder()),
                consolidation=consolidation, limits=limits_model, redactor=redactor,
                require_consent=require_consent, working_validator=working_validator,
                subject_extractor=subjects, session_id=session_id, clock=clock, **workers,
                known_at_store=lambda known_at: PostgresKnownAtStore(  # issue 31
                    store, known_at, live_in_step=inline_projections),
                ledger_store=PostgresLedgerStore(log, store.router),  # issue 14: the conversation ledger
                retention_store=retention_store,
                entity_store=PostgresEntityStore(log),  # issue 32
            )
            service = MemoryService(deps.replace(access=wire_postgres(deps, store)))  # issue 33
            if retention_config is not None and not read_only:
                retention_store.record(retention_config)
            if not read_only:  # the open lock is not held across catch-up
                ddl_lock.execute("SELECT pg_advisory_unlock(%s)", (advisory_key("mf-open"),))
            if catch_up and not read_only:
                engine.catch_up()
            fabric = Fabric(service, log, store, engine, dsn, embedded)
            fabric.read_only = read_only
            fabric.read_only_reason = reason
            return fabric
    except BaseException:
        if embedded is not None:
            embedded.close()
        raise


def _prepare_writable(log: NoteLog, engine: ProjectionEngine, store: PostgresNoteStore,
                      ddl_lock: psycopg.Connection[Any], schema: str | None) -> None:
    """A writable open's schema and write-side wiring. ``schema``: the stamp to write
    after the DDL phase, or ``None`` when the database already carries this code's
    stamp (issue 24: then no DDL runs, so the open waits for no write and stalls none).
    The DDL phase: the projections' and tracking tables, the quarantine, the counted
    appends' trigger (issue 28), the stamp, the grants of new tables (issue 27)."""
    if schema is not None:
        engine.create()
        with log.datastore.transaction(commit=True) as cur:
            quarantine.create(cur)
    engine.lock_secret = store.secret()  # created or read now, so no write needs a second connection
    backfill_tenants(log.datastore, log.sealing_mapper, tables.EVENTS)  # logs before issue 24
    if schema is not None:
        tenant_heads.ensure(log.datastore, tables.EVENTS)  # issue 28: counted appends
        stamp(ddl_lock, schema)  # before keep_grants: its table gets the grants too
        keep_grants(ddl_lock)
    store.tail = TailIndexer(log.datastore, engine, store.needs_hnsw,  # issue 24: HNSW off the write
                             known_exact=store.known_exact)
    engine.on_commit = store.tail.want


