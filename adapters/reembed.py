"""Embedder migration as events, without downtime (issue 19): ``memfabric reembed``.

:func:`reembed` moves an open fabric to another embedder (another model, another
dimension) while it keeps serving:

1. **Passes** append, per note that still has content (live or under legal hold, kinds
   ``fact``/``procedure``/``file``), one ``Note.Reembedded`` event carrying the content's
   vector under the new embedder (float32 bytes, sealed with the note's data key like
   every vector) and the embedder id. Each batch (``batch`` notes, default 256) is one
   unit of work holding its scopes' write locks, so a concurrent write to the same note
   is ordered before or after it, never lost. A forgotten note has no content left: it
   gets no event. The first pass walks every note of the note-scope index; each later
   pass only the notes with a ``Remembered``/``Folded`` event (the events that bring a
   vector of the old embedder) since the previous pass.
2. **Blue-green build** of the recall index and the consolidation index under the new
   embedder and dimension (``ProjectionAdmin.rebuild_into``: ``<table>_bg`` filled from
   the log, vectors taken from the ``Reembedded`` events, no embedder call), while
   recall and writes keep using the live tables and the old embedder.
3. **Switch**, one transaction: lock the events table (writers wait), find the notes
   written since the last pass that lack a vector of the new embedder; more than
   ``batch`` of them: roll back, run another pass and try again (at most ``attempts``
   times); else append their ``Reembedded`` events right there, record the new embedder
   in ``mf_fabric_embedder``, swap the tables, apply the events since the build, commit.
   Readers switch atomically at that commit.

Writes during the migration embed with the old embedder as before; the passes catch
them up before the switch, and the switch itself the last few. After the switch
this process uses the new embedder; another process that still has the fabric open
notices at its next recall or write whose vector has the old dimension (the index
refuses it), adopts the recorded embedder and retries once
(``EmbedderChangedError`` reaches the caller only if that fails too).

**One partition at a time** (issue 25, a fabric made with ``partitions=N``):
``reembed(fabric, embedder, partition=i)`` (or ``tenant=``) runs the first pass over the
notes of partition ``i``'s tenants only and stops there: no build, no switch, the fabric
keeps serving with its embedder. The embedding (the costly part) can so be spread
partition by partition, each call resumable; the final ``reembed`` without a partition
finds those notes done (``already``), embeds the rest and switches every partition at
once: the recall index is one partitioned table with one vector dimension, and the
embedder record is one per fabric, so a fabric never serves two embedders.

Resume: the passes skip notes that already have a vector of the new embedder, so a run
killed anywhere (even with SIGKILL) and started again appends no duplicate event and
finishes; left-over ``*_bg`` tables are rebuilt. A later rebuild reads the vectors from
the events and never calls an embedder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import numpy as np
import psycopg
from eventsourcing.utils import get_topic
from psycopg import Cursor, sql

from memfabric.adapters.crypto import TransactionKeys
from memfabric.adapters.postgres.embedder_record import embedder_params
from memfabric.adapters.postgres import select_notes
from memfabric.domain.errors import EmbedderError, FabricError
from memfabric.domain.note import Note, vector_for
from memfabric.domain.ports import Embedder
from memfabric.domain.scope import Scope
from memfabric.projections import partition_admin, tables
from memfabric.adapters.replaying import ReplayingMapper
from memfabric.projections.base import NoteProjection
from memfabric.projections.rebuild import ProjectionAdmin, RebuildReport, Reporter
from memfabric.projections.registry import vector_projections

__all__ = ["ReembedReport", "Reembedder", "embedder_params", "new_projections", "reembed"]

Fabric = Any
"""An open ``memfabric.adapters.bootstrap.Fabric`` (not imported: bootstrap imports this
module; issue 34 removed the cycle)."""

KINDS = ("fact", "procedure", "file")

SWITCH_LOCK_TIMEOUT = "200ms"
"""How long the switch waits for each of its table locks before it rolls back and tries
again; below the server's ``deadlock_timeout`` (1 s by default), so a writer caught
between the switch's locks never gets a deadlock error: the switch gives way first."""
"""Kinds whose notes carry a vector."""

VECTOR_TOPICS = [get_topic(Note.Remembered), get_topic(Note.Folded)]
"""Events that bring a vector of the embedder that wrote them."""


@dataclass(frozen=True, slots=True)
class ReembedReport:
    """Outcome of :func:`reembed`: the new and previous embedder (id, dimension), how many
    ``Reembedded`` events were appended (``notes``) and how many notes already had a
    vector of the new embedder (``already``: a resumed run), the passes, the switch
    attempts, seconds spent embedding and in total, and the blue-green rebuild's report
    (``None`` when the fabric already used that embedder, or for one partition's pass);
    ``partition``: the partition a ``partition=``/``tenant=`` call embedded (its
    remainder), else ``None``."""

    embedder_id: str
    dim: int
    previous_embedder_id: str
    previous_dim: int
    notes: int
    already: int
    passes: int
    switch_attempts: int
    embed_seconds: float
    seconds: float
    rebuild: RebuildReport | None
    partition: int | None = None

    @property
    def rows_per_second(self) -> float:
        """Notes re-embedded (events appended) per second of the whole migration."""
        return self.notes / self.seconds if self.seconds > 0 else 0.0


class _Quiet:
    def task(self, description: str, total: int | None, unit: str = "events") -> Callable[[int], None]:
        return lambda n: None


def new_projections(embedder: Embedder, mapper: Any = None) -> list[NoteProjection]:
    """The registered projections that store vectors
    (:func:`memfabric.projections.registry.vector_projections`), configured for
    ``embedder``; ``mapper``: the fabric's sealing mapper (wrapped in a
    :class:`~memfabric.adapters.replaying.ReplayingMapper` unless it is one), with which
    the note versions replay notes (issue 31)."""
    if mapper is not None and not hasattr(mapper, "batch_keys"):
        mapper = ReplayingMapper(mapper)
    return vector_projections(embedder, mapper)


def _needs(note: Note, embedder_id: str) -> bool:
    """Whether ``note`` has content and a vector, but none of ``embedder_id``."""
    return (note.kind in KINDS and not note.forgotten and note.content is not None
            and note.embedding is not None and vector_for(note, embedder_id) is None)


class _Building:
    """A projection under the new embedder during the blue-green build: notes that
    still lack a vector of that embedder (written since the last pass) get no row in
    the bulk load; the switch applies their ``Reembedded`` events (all after the build's
    snapshot) with the strict projection."""

    def __init__(self, inner: Any, embedder_id: str) -> None:
        self.inner = inner
        self.embedder_id = embedder_id
        self.name: str = inner.name
        self.tables: tuple[str, ...] = inner.tables
        self.write_side: bool = inner.write_side

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        self.inner.create(cur, table_suffix=table_suffix)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        self.inner.create_indexes(cur, table_suffix=table_suffix)

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None:
        self.inner.apply(cur, notes)

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int:
        ready = [n for n in notes if not _needs(n, self.embedder_id)]
        return int(self.inner.copy(cur, ready, table_suffix=table_suffix))


def _scope(row: Any) -> Scope:
    return Scope(tenant_id=row[1], resource_id=row[2] or None, thread_id=row[3] or None)


class Reembedder:
    """One migration of ``fabric`` to ``embedder`` (see the module doc); :meth:`run`."""

    def __init__(self, fabric: Fabric, embedder: Embedder, *, batch: int = 256,
                 reporter: Reporter | None = None, attempts: int = 20) -> None:
        if not 1 <= batch <= 10_000:
            raise FabricError("batch: must be between 1 and 10000")
        self.fabric = fabric
        self.embedder = embedder
        self.batch = batch
        self.reporter = reporter or _Quiet()
        self.attempts = attempts
        self.target = str(embedder.id)
        self.appended = 0
        self.already = 0
        self.passes = 0
        self.switches = 0
        self.embed_seconds = 0.0
        self.position = 0
        self.tenants: list[str] | None = None
        """The tenants whose notes the passes walk (one partition's), ``None``: every one."""

    # ----------------------------------------------------------------- reads
    def _head(self, cur: Cursor[Any]) -> int:
        row = cur.execute(sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {t}").format(
            t=sql.Identifier(tables.EVENTS))).fetchone()
        if row is None:
            return 0
        return int(row[0] if not isinstance(row, dict) else next(iter(row.values())))

    def _rows(self, query: sql.Composed, params: Sequence[Any], cur: Cursor[Any] | None = None) -> list[Any]:
        if cur is not None:
            return [tuple(r.values()) if isinstance(r, dict) else r for r in cur.execute(query, params).fetchall()]
        with self.fabric.store.connection() as conn, conn.cursor() as c:
            return self._rows(query, params, c)

    def _tenant_filter(self) -> tuple[sql.Composable, list[Any]]:
        """``(condition, params)`` keeping the rows of :attr:`tenants` (none: every row)."""
        if self.tenants is None:
            return sql.SQL("true"), []
        return sql.SQL("tenant_id = ANY(%s)"), [self.tenants]

    def _page(self, after: UUID | None) -> list[Any]:
        """The next ``batch`` notes of the note-scope index after ``after`` (aggregate order)."""
        where, params = self._tenant_filter()
        return self._rows(sql.SQL(
            "SELECT aggregate_id, tenant_id, resource_id, thread_id FROM {t}"
            " WHERE kind = ANY(%s) AND {w} AND (%s::uuid IS NULL OR aggregate_id > %s::uuid)"
            " ORDER BY aggregate_id LIMIT %s").format(t=sql.Identifier(tables.NOTE_SCOPE), w=where),
            (list(KINDS), *params, after, after, self.batch))

    def _changed(self, after: int, upto: int, cur: Cursor[Any] | None = None) -> list[Any]:
        """Notes (with their scope) with a vector-bringing event in ``(after, upto]``."""
        return self._rows(sql.SQL(
            "SELECT s.aggregate_id, s.tenant_id, s.resource_id, s.thread_id FROM {s} s"
            " WHERE s.kind = ANY(%s) AND s.aggregate_id IN (SELECT originator_id FROM {e}"
            " WHERE notification_id > %s AND notification_id <= %s AND topic = ANY(%s))"
            " ORDER BY s.aggregate_id").format(s=sql.Identifier(tables.NOTE_SCOPE), e=sql.Identifier(tables.EVENTS)),
            (list(KINDS), after, upto, VECTOR_TOPICS), cur)

    def _count(self) -> int:
        where, params = self._tenant_filter()
        rows = self._rows(sql.SQL("SELECT count(*) FROM {t} WHERE kind = ANY(%s) AND {w}").format(
            t=sql.Identifier(tables.NOTE_SCOPE), w=where), (list(KINDS), *params))
        return int(rows[0][0])

    # ---------------------------------------------------------------- writes
    def _embed(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            out = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbedderError(f"embedder {self.target!r} returned no float vectors: {exc}") from exc
        self.embed_seconds += time.perf_counter() - t0
        if out.shape != (len(texts), int(self.embedder.dim)) or not np.isfinite(out).all():
            raise EmbedderError(f"embedder {self.target!r} returned shape {out.shape} or non-finite values, "
                                f"expected {(len(texts), int(self.embedder.dim))} finite floats")
        return out

    def _process(self, refs: list[Any]) -> None:
        """Append the missing ``Reembedded`` events of the notes ``refs`` (one unit of work)."""
        if not refs:
            return
        scopes = list({_scope(r).key: _scope(r) for r in refs}.values())
        with self.fabric.service.unit_of_work(scopes) as uow:
            notes = uow.load_ids([r[0] for r in refs])
            todo = [n for n in notes if _needs(n, self.target)]
            self.already += sum(1 for n in notes if n.kind in KINDS and not n.forgotten
                                and n.content is not None and not _needs(n, self.target))
            if not todo:
                return
            vectors = self._embed([n.content or "" for n in todo])
            for note, vector in zip(todo, vectors, strict=True):
                note.reembed(embedding=np.ascontiguousarray(vector, dtype=np.float32).tobytes(),
                             embedder_id=self.target, dim=int(self.embedder.dim))
                uow.add(note)
            uow.commit()
        self.appended += len(todo)

    def first_pass(self) -> None:
        """Every note of the note-scope index, in aggregate order."""
        self.position = self.fabric.engine.safe_head()  # ids below are final (tenants append concurrently)
        advance = self.reporter.task(f"reembed → {self.target}", self._count(), "notes")
        after: UUID | None = None
        while refs := self._page(after):
            self._process(refs)
            advance(len(refs))
            after = refs[-1][0]
        self.passes += 1

    def catch_up_pass(self) -> None:
        """The notes written or folded since the previous pass."""
        upto = self.fabric.engine.safe_head()
        refs = self._changed(self.position, upto)
        for start in range(0, len(refs), self.batch):
            self._process(refs[start:start + self.batch])
        self.position = upto
        self.passes += 1

    # ---------------------------------------------------------------- switch
    def check_and_record(self, cur: Cursor[Any]) -> bool:
        """In the switch transaction: lock the events table (writers wait until the
        commit), refuse (``False``) while a note written since the last pass lacks a
        vector of the new embedder, else record the new embedder (``True``)."""
        self.switches += 1
        if not self._lock_for_switch(cur):
            return False
        refs = self._changed(self.position, self._head(cur), cur)
        if refs:
            notes = select_notes(cur, self.fabric.log.sealing_mapper, [r[0] for r in refs])
            todo = [n for n in notes if _needs(n, self.target)]
            if len(todo) > self.batch:
                return False  # too many to embed while writers wait: another pass first
            self._append_locked(cur, todo)
        cur.execute(sql.SQL(
            "INSERT INTO {t} (embedder_id, dim, params) VALUES (%s, %s, %s)"
            " ON CONFLICT (singleton) DO UPDATE SET embedder_id = EXCLUDED.embedder_id,"
            " dim = EXCLUDED.dim, params = EXCLUDED.params, recorded_at = now()").format(
            t=sql.Identifier(tables.FABRIC_EMBEDDER)),
            (self.target, int(self.embedder.dim), json.dumps(embedder_params(self.embedder))))
        return True

    def _lock_for_switch(self, cur: Cursor[Any]) -> bool:
        """Take every projection's advisory lock (writers hold them shared from the first
        statement of their unit of work), then lock the live consolidation and recall
        tables (the switch drops them) and the events table (no append can commit until
        the switch does), in that order: a writer either finishes before the switch or
        waits at its first statement, holding nothing the switch needs.
        Each wait is bounded by :data:`SWITCH_LOCK_TIMEOUT` (a writer that skipped the
        read can still cross the switch); ``False`` when one ran out: the switch is rolled
        back and retried after another pass."""
        cur.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(SWITCH_LOCK_TIMEOUT)))
        try:
            for p in self.fabric.engine.projections:  # writers hold these shared from their first statement
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (self.fabric.engine.lock_key(p.name),))
            for table in (tables.CONSOLIDATION_INDEX, tables.RECALL_INDEX):
                cur.execute(sql.SQL("LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE").format(t=sql.Identifier(table)))
            cur.execute(sql.SQL("LOCK TABLE {t} IN EXCLUSIVE MODE").format(t=sql.Identifier(tables.EVENTS)))
        except psycopg.errors.LockNotAvailable:
            return False
        cur.execute("SET LOCAL lock_timeout = 0")
        return True

    def _append_locked(self, cur: Cursor[Any], notes: list[Note]) -> None:
        """Under the switch's events-table lock (no other append can commit before this
        transaction does): the ``Reembedded`` events of the last few notes written since
        the previous pass, sealed and appended on the switch's own cursor. A writer that
        had loaded one of them meets a taken version (``ConflictError``) and, the
        embedder having changed, retries once with the new one."""
        if not notes:
            return
        keys = TransactionKeys(cur.connection, self.fabric.log.keys)
        keys.preload([n.id for n in notes])
        mapper = self.fabric.log.sealing_mapper.bound(keys)
        vectors = self._embed([n.content or "" for n in notes])
        for note, vector in zip(notes, vectors, strict=True):
            note.reembed(embedding=np.ascontiguousarray(vector, dtype=np.float32).tobytes(),
                         embedder_id=self.target, dim=int(self.embedder.dim))
        pending = [(n.scope.tenant_id, e) for n in notes for e in n.collect_events()]
        stored = [mapper.to_stored_event(e) for _, e in pending]
        cur.execute("SELECT pg_current_xact_id()")  # a transaction id before any notification id
        self.fabric.log.note_recorder.insert_on(cur, stored, [t for t, _ in pending])
        self.appended += len(notes)

    def run_partition(self, partition: int | None, tenant: str | None) -> ReembedReport:
        """The first pass over one partition's notes (``partition``, or the one holding
        ``tenant``), no build, no switch (module doc); ``FabricError`` as
        :func:`memfabric.projections.partition_admin.locate`."""
        started = time.perf_counter()
        old = self.fabric.service.embedder
        with self.fabric.store.connection() as conn, conn.cursor() as cur:
            located = partition_admin.locate(cur, partition, tenant)
            self.tenants = list(partition_admin.target(cur, located).newest)
        if str(old.id) != self.target:
            self.first_pass()
        return self._report(old, started, None, located[0])

    def _report(self, old: Embedder, started: float, rebuild: RebuildReport | None,
                partition: int | None = None) -> ReembedReport:
        return ReembedReport(
            embedder_id=self.target, dim=int(self.embedder.dim), previous_embedder_id=str(old.id),
            previous_dim=int(old.dim), notes=self.appended, already=self.already, passes=self.passes,
            switch_attempts=self.switches, embed_seconds=self.embed_seconds,
            seconds=time.perf_counter() - started, rebuild=rebuild, partition=partition)

    def run(self) -> ReembedReport:
        """Passes, blue-green build, switch (see the module doc)."""
        started = time.perf_counter()
        old = self.fabric.service.embedder
        report = None
        if str(old.id) != self.target:
            self.first_pass()
            self.catch_up_pass()
            projections = new_projections(self.embedder, self.fabric.log.sealing_mapper)
            admin = ProjectionAdmin.for_fabric(self.fabric)
            building: list[NoteProjection] = [_Building(p, self.target) for p in projections]
            report = admin.rebuild_into(building, before_switch=self.check_and_record,
                                        between=self.catch_up_pass, attempts=self.attempts,
                                        reporter=self.reporter)
            self.fabric.use_embedder(self.embedder, projections)
        return self._report(old, started, report)


def reembed(fabric: Fabric, embedder: Embedder, *, batch: int = 256, reporter: Reporter | None = None,
            attempts: int = 20, partition: int | None = None, tenant: str | None = None) -> ReembedReport:
    """Migrate ``fabric`` to ``embedder`` without downtime (module doc): returns a
    :class:`ReembedReport`. A fabric already on that embedder is left alone (report with
    ``rebuild=None``). ``batch``: notes per unit of work (1-10000, default 256);
    ``reporter``: progress (notes/s and ETA, then the rebuild's events and indexes);
    ``attempts``: switch attempts while writes keep arriving (default 20);
    ``partition``/``tenant``: only the first pass over that partition's notes (one of
    the two; module doc), ``FabricError`` on an unpartitioned fabric or a partition out
    of range.

    Raises ``ReadOnlyError`` for a read-only fabric, ``EmbedderError`` when the embedder
    returns a wrong shape or non-finite values (the notes done so far keep their events:
    run again to resume), ``FabricError`` when the switch was refused ``attempts`` times
    (nothing switched; run again), ``ProjectionError`` when the log cannot be replayed."""
    fabric._writable("reembed")  # noqa: SLF001
    job = Reembedder(fabric, embedder, batch=batch, reporter=reporter, attempts=attempts)
    if partition is not None or tenant is not None:
        return job.run_partition(partition, tenant)
    return job.run()
