"""The retention sweep (issue 30): ``fabric.sweep(now)`` applies the retention rules of
:mod:`memfabric.domain.retention` to every note due at ``now``.

How it runs:

- the notes that may be due are paged from the retention index
  (``RetentionStore.due``), tenant by tenant in ``aggregate_id`` order, ``batch_size``
  at a time;
- each page's notes are replayed outside any unit of work, the next page read while the
  current one is written (:mod:`memfabric.domain.sweep_pages`);
- each batch is one unit of work holding the write locks of the scopes it touches (and
  of their consolidation groups, as ``erase_scope`` takes them), nothing held across
  batches; :func:`~memfabric.domain.retention.decide` decides each note on its replay
  and the append carries the versions that replay saw, so a write that landed on one
  of them since makes the append fail (``ConflictError``), and the batch is decided
  again on a replay inside its unit of work (a write that landed meanwhile is
  honoured; a store whose log checks no versions replays there always): ``Expired``
  events, ``Forgotten`` tombstones with cause ``retention`` that carry the note's class
  and the sweep's ``now`` and expire it too (one event per erased note; keys destroyed,
  as by ``forget``), nothing for held and floor-kept notes; with decay configured
  (:class:`~memfabric.domain.retention.Decay`), ``ImportanceDecayed`` for idle notes;
- the sweep's progress (cursor and counts so far) is an event of a ``Sweep`` aggregate
  (id: the tenant filter and ``now``) committed in the batch's own transaction, so a
  sweep killed at any point resumes at the next call with the same ``now`` where its
  last committed batch stopped, and its totals are exact; once complete, a call with
  the same ``now`` returns the recorded totals and changes nothing. A sweep that finds
  nothing due writes nothing at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate

from memfabric.domain import retention as rules
from memfabric.domain.errors import ConflictError, SettingsError
from memfabric.domain.lifecycle import KEY_FAULT, load_for_erasure, tombstone
from memfabric.domain.note import Note
from memfabric.domain.ports import DueRef, UnitOfWork
from memfabric.domain.scope import Scope
from memfabric.domain.sweep_ledger import sweep_conversations
from memfabric.domain.sweep_pages import Fetch, Page, pages
from memfabric.domain.visibility import write_locks

if TYPE_CHECKING:
    from memfabric.domain.deps import Deps

_SWEEP_NAMESPACE = uuid5(NAMESPACE_URL, "https://memfabric.dev/sweep")

REQUESTED_BY = rules.SWEEP_REQUESTED_BY
"""``requested_by`` of the tombstones a sweep writes (their cause is ``retention``)."""

BATCH_SIZE = 500
"""Default notes per batch (one unit of work each). At 100,000 notes (10% due) batches
of 500 erased 1,764-2,107 due notes/s against 1,184-1,968/s with 200, main and this
code alike, interleaved (Dec 3 2026 19:16-19:27 UTC, load 2.8-6.3), and another
tenant's worst write during a sweep was 95-724 ms with 500 and 90-1,299 ms with 200
over every run of that day's A/Bs: the waits over 1 s (1,332 ms with 500 at 15:20,
1,299 ms with 200 at 18:59) came under load average 4.2-8 from other jobs, not with
one batch size (docs/retention.md, Measured)."""


def sweep_uuid(tenant_id: str | None, now: datetime) -> UUID:
    """Aggregate id of the sweep of ``tenant_id`` (``None``: every tenant) at ``now``."""
    return uuid5(_SWEEP_NAMESPACE, f"{tenant_id or '*'}#{now.isoformat()}")


class Sweep(Aggregate):
    """The progress of one sweep: ``cursor`` (tenant, last aggregate id done), exact
    ``counts`` ``{class: {outcome: n}}``, ``batches``, ``complete``."""

    class Started(Aggregate.Created):
        """A sweep of ``tenant_id`` (``None``: all) at ``now`` began."""

        tenant_id: str | None
        now: datetime

    class BatchSwept(Aggregate.Event):
        """One batch committed: its counts and the cursor after it."""

        cursor_tenant: str
        cursor_id: str | None
        counts: dict[str, dict[str, int]]

        def apply(self, sweep: Sweep) -> None:
            sweep.cursor = (self.cursor_tenant, self.cursor_id)
            for cls, outcomes in self.counts.items():
                for outcome, n in outcomes.items():
                    sweep.counts[cls][outcome] += n
            sweep.batches += 1

    class ConversationsSwept(Aggregate.Event):
        """Issue 30: ``count`` conversations of ``cursor_tenant`` erased in one batch
        (the note cursor unchanged)."""

        cursor_tenant: str
        cursor_id: str | None
        count: int

        def apply(self, sweep: Sweep) -> None:
            sweep.cursor = (self.cursor_tenant, self.cursor_id)
            sweep.conversations = getattr(sweep, "conversations", 0) + self.count
            sweep.batches += 1

    class Completed(Aggregate.Event):
        """Every due note was seen."""

        def apply(self, sweep: Sweep) -> None:
            sweep.complete = True

    def __init__(self, *, tenant_id: str | None, now: datetime) -> None:
        self.tenant_id = tenant_id
        self.now = now
        self.cursor: tuple[str, str | None] | None = None
        self.counts = rules.empty_counts()
        self.batches = 0
        self.complete = False
        self.conversations = 0

    @classmethod
    def start(cls, tenant_id: str | None, now: datetime) -> Sweep:
        return cls._create(cls.Started, id=sweep_uuid(tenant_id, now), tenant_id=tenant_id, now=now)

    def record_batch(self, cursor_tenant: str, cursor_id: UUID | None,
                     counts: dict[str, dict[str, int]]) -> None:
        self.trigger_event(self.BatchSwept, cursor_tenant=cursor_tenant,
                           cursor_id=None if cursor_id is None else str(cursor_id), counts=counts)

    def record_conversations(self, cursor_tenant: str, cursor_id: UUID | None, count: int) -> None:
        self.trigger_event(self.ConversationsSwept, cursor_tenant=cursor_tenant,
                           cursor_id=None if cursor_id is None else str(cursor_id), count=count)

    def finish(self) -> None:
        self.trigger_event(self.Completed)


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What a sweep did, exactly. ``counts``: ``{class: {outcome: n}}`` for every class
    and outcome (:data:`memfabric.domain.retention.OUTCOMES`) over the whole sweep at
    ``now`` (earlier, interrupted calls with the same ``now`` included); ``totals``: per
    outcome; ``changed``: notes this call expired or forgot; ``batches``: units of work
    of the whole sweep; ``complete``: every due note was seen (``False``: ``limit``
    stopped it, call again with the same ``now``); ``resumed``: an earlier call with
    this ``now`` had committed batches; ``dry_run``: nothing was written (the counts
    are what a sweep would do now); ``failed``: ids of notes whose events could not be
    decoded (untouched); ``conversations``: conversation ledgers erased because their
    class window closed (:mod:`memfabric.domain.sweep_ledger`); ``access_records``:
    access-log records (issue 33) deleted because their class window (``operational``
    by default) had closed, counted by the call that completed the sweep."""

    now: datetime
    tenant_id: str | None
    counts: dict[str, dict[str, int]]
    changed: int
    batches: int
    complete: bool
    resumed: bool
    dry_run: bool
    failed: tuple[str, ...] = ()
    totals: dict[str, int] = field(default_factory=dict)
    conversations: int = 0
    access_records: int = 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``now`` in ISO 8601)."""
        out = dataclasses.asdict(self)
        out["now"] = self.now.isoformat()
        out["failed"] = list(self.failed)
        return out


Progress = Callable[[int], None]
"""Called with the number of notes each batch examined."""


def _totals(counts: dict[str, dict[str, int]]) -> dict[str, int]:
    return {o: sum(counts[c][o] for c in rules.CLASSES) for o in rules.OUTCOMES}


@dataclass
class _Run:
    deps: Deps
    now: datetime
    tenant_id: str | None
    dry_run: bool
    batch_size: int
    progress: Progress | None
    config: rules.RetentionConfig
    record: Sweep | None = None
    counts: dict[str, dict[str, int]] = field(default_factory=rules.empty_counts)
    changed: int = 0
    batches: int = 0
    failed: list[str] = field(default_factory=list)
    conversations: int = 0
    access_records: int = 0

    def open_record(self) -> Sweep:
        """The sweep's progress record: the one loaded or started, else a new one."""
        return self.record or Sweep.start(self.tenant_id, self.now)


def sweep(deps: Deps, now: datetime | None = None, *, tenant: str | None = None,
          limit: int | None = None, dry_run: bool = False, batch_size: int = BATCH_SIZE,
          progress: Progress | None = None) -> SweepResult:
    """Apply the retention rules at ``now`` (default: ``deps.clock()``, UTC) to the
    notes of ``tenant`` (``None``: every tenant), examining at most ``limit`` due notes
    in this call (``None``: all), ``batch_size`` (1-10000) per unit of work. See the
    module doc; returns :class:`SweepResult`. Raises ``SettingsError`` for a naive
    ``now``, a ``limit`` below 1 or a bad ``batch_size``, ``pydantic.ValidationError``
    for a malformed tenant id; nothing is written then."""
    if tenant is not None:
        Scope(tenant_id=tenant)  # the tenant id rules (ValidationError)
    now = deps.clock() if now is None else now
    if not isinstance(now, datetime) or now.tzinfo is None:
        raise SettingsError(f"now: give a timezone-aware datetime, not {now!r}")
    if limit is not None and (not _is_int(limit) or limit < 1):
        raise SettingsError(f"limit: a whole number of at least 1, not {limit!r}")
    if not _is_int(batch_size) or not 1 <= batch_size <= 10000:
        raise SettingsError(f"batch_size: a whole number between 1 and 10000, not {batch_size!r}")
    store = deps.retention_store
    if store is None:
        raise SettingsError("this fabric has no retention store")
    run = _Run(deps, now, tenant, dry_run, batch_size, progress, store.config())
    if not dry_run:
        run.record = _load_record(deps, tenant, now)
        if run.record is not None and run.record.complete:
            return _result(run, complete=True)
    cursor = run.record.cursor if run.record is not None else None
    complete = _walk(run, cursor, limit)
    if complete:
        run.access_records = _purge_access_log(run)
    if complete and not dry_run and run.record is not None:
        _finish(run)  # a sweep that found nothing due writes nothing
    return _result(run, complete=complete)


def _purge_access_log(run: _Run) -> int:
    """Issue 33: delete the access records whose class window closed before ``now``
    (each record carries its class, ``operational`` by default; per-tenant windows
    apply to their tenant). The access log is a side table, not an event: the delete
    is the whole of it. ``0`` on a fabric without principals."""
    access = run.deps.access
    log = getattr(access, "log", None)
    if log is None:
        return 0

    def cutoffs(tenant_id: str | None) -> dict[str, datetime]:
        windows = run.config.for_tenant(tenant_id)
        spans = {c: windows.window(c) for c in rules.ERASABLE}
        return {c: run.now - span for c, span in spans.items() if span is not None}

    if run.tenant_id is not None:
        return int(log.purge(cutoffs(run.tenant_id), tenant_id=run.tenant_id, dry_run=run.dry_run))
    overridden = sorted(run.config.tenants)
    gone = sum(int(log.purge(cutoffs(t), tenant_id=t, dry_run=run.dry_run)) for t in overridden)
    return gone + int(log.purge(cutoffs(None), tenant_id=None, exclude=overridden, dry_run=run.dry_run))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _walk(run: _Run, cursor: tuple[str, str | None] | None, limit: int | None) -> bool:
    """Page and process the due notes from ``cursor``; ``True`` when all were seen,
    ``False`` when ``limit`` notes were examined first."""
    budget = limit
    start = cursor[0] if cursor else None
    after = UUID(cursor[1]) if cursor and cursor[1] else None
    if run.tenant_id is not None:
        pending = [run.tenant_id]
    else:
        pending = ([start] if start is not None else []) + _tenants(run, start)
    for tenant_id in pending:
        windows = run.config.for_tenant(tenant_id)
        for page in pages(_fetcher(run, tenant_id, windows), after, run.batch_size, budget):
            _batch(run, tenant_id, windows, page)
            after = page.refs[-1].aggregate_id
            if budget is not None:
                budget -= len(page.refs)
        if budget == 0:
            return False
        sweep_conversations(run, tenant_id, windows, after)
        after = None
    return True


def _fetcher(run: _Run, tenant_id: str, windows: rules.Windows) -> Fetch:
    """The page reader of :func:`memfabric.domain.sweep_pages.pages`: due refs from the
    retention index and their notes replayed outside a unit of work."""
    store = run.deps.retention_store
    assert store is not None

    def fetch(after: UUID | None, size: int) -> Page:
        refs = store.due(tenant_id, windows, run.now, after=after, limit=size)
        return Page(refs, store.replay(tenant_id, [ref.aggregate_id for ref in refs]) if refs else [])
    return fetch


def _tenants(run: _Run, after: str | None) -> list[str]:
    """Every tenant with notes or a live conversation, sorted, after ``after``."""
    store = run.deps.retention_store
    assert store is not None
    ledgers = run.deps.ledger_store
    found = set(store.tenants(after=after)) | set(ledgers.live_tenants(after=after) if ledgers else ())
    return sorted(found)


def _batch(run: _Run, tenant_id: str, windows: rules.Windows, page: Page) -> None:
    """Decide and apply one page in one unit of work (read-only for a dry run): on the
    notes replayed with the page when there are, else (and again, when another write
    took one of their versions meanwhile: ``ConflictError``, rolled back) on the notes
    replayed in the unit of work."""
    if page.notes is not None:
        try:
            _write(run, tenant_id, windows, page.refs, page.notes)
            return
        except ConflictError:
            if run.record is not None:  # its pending batch event was rolled back
                run.record = _load_record(run.deps, run.tenant_id, run.now)
    _write(run, tenant_id, windows, page.refs, None)


def _write(run: _Run, tenant_id: str, windows: rules.Windows, refs: list[DueRef],
           notes: list[Note] | None) -> None:
    """One unit of work over ``refs``: ``notes`` replayed already, or ``None`` to
    replay them in it (:func:`~memfabric.domain.lifecycle.load_for_erasure`)."""
    counts = rules.empty_counts()
    locks = [] if run.dry_run else sorted(
        {lock for scope in {ref.scope for ref in refs} for lock in write_locks(scope, "tenant")},
        key=lambda s: s.key)
    store = run.deps.retention_store
    assert store is not None
    with run.deps.unit_of_work(locks) as uow:
        if not run.dry_run:
            store.prepare_erasure(uow)
        if notes is None:
            readable, unreadable, lost = load_for_erasure(uow, [ref.aggregate_id for ref in refs])
        else:
            readable, unreadable, lost = notes, [], []
        names = {ref.aggregate_id: ref.note_id for ref in refs}
        run.failed += [names[a] for a in lost]
        changed = _apply(uow, readable, windows, run.now, counts, unreadable=False)
        changed += _apply(uow, unreadable, windows, run.now, counts, unreadable=True)
        if not run.dry_run:
            record = run.open_record()
            record.record_batch(tenant_id, refs[-1].aggregate_id, counts)
            _add_record(uow, record)
            uow.commit()
            run.record = record
    if not run.dry_run:
        run.deps.store.await_position(uow.position)
        run.changed += changed
    for cls, outcomes in counts.items():
        for outcome, n in outcomes.items():
            run.counts[cls][outcome] += n
    run.batches += 1
    if run.progress is not None:
        run.progress(len(refs))


def _apply(uow: UnitOfWork, notes: list[Note], windows: rules.Windows, now: datetime,
           counts: dict[str, dict[str, int]], *, unreadable: bool) -> int:
    """Expire and forget what is due among ``notes`` (counted in ``counts``); returns
    how many were changed."""
    doomed: list[Note] = []
    changed = 0
    for note in notes:
        outcome = rules.decide(note, windows, now)
        if outcome is None:
            lowered = rules.decide_decay(note, windows, now)
            if lowered is not None:
                note.decay_importance(importance=lowered, at=now)
                uow.add(note)
                counts[rules.class_of(note)]["decayed"] += 1
                changed += 1
            continue
        counts[rules.class_of(note)][outcome] += 1
        if outcome not in ("expired", "forgotten"):
            continue
        changed += 1
        if outcome == "forgotten":  # its tombstone records its expiry (one event)
            doomed.append(note)
            continue
        reason = "retention" if rules.window_closed(note, windows, now) else "interval"
        note.expire(reason=reason, at=now)
        uow.add(note)
    if doomed:
        tombstone(uow, doomed, hold=False, requested_by=REQUESTED_BY,
                  cause=KEY_FAULT if unreadable else "retention", unreadable=unreadable, swept_at=now)
    return changed


def _load_record(deps: Deps, tenant_id: str | None, now: datetime) -> Sweep | None:
    with deps.unit_of_work([]) as uow:
        found = uow.load_aggregate(sweep_uuid(tenant_id, now))  # type: ignore[attr-defined]
    return found if isinstance(found, Sweep) else None


def _add_record(uow: UnitOfWork, record: Sweep) -> None:
    uow.add_aggregate(record)  # type: ignore[attr-defined]


def _finish(run: _Run) -> None:
    """Record that the sweep is complete."""
    with run.deps.unit_of_work([]) as uow:
        record = run.record
        assert record is not None
        record.finish()
        _add_record(uow, record)
        uow.commit()
    run.record = record


def _result(run: _Run, *, complete: bool) -> SweepResult:
    record = run.record
    counts = record.counts if record is not None and not run.dry_run else run.counts
    batches = record.batches if record is not None and not run.dry_run else run.batches
    resumed = record is not None and record.batches > run.batches
    conversations = (getattr(record, "conversations", 0) if record is not None and not run.dry_run
                     else run.conversations)
    return SweepResult(now=run.now, tenant_id=run.tenant_id, counts=counts, changed=run.changed,
                       batches=batches, complete=complete, resumed=resumed, dry_run=run.dry_run,
                       failed=tuple(run.failed), totals=_totals(counts), conversations=conversations,
                       access_records=run.access_records)
