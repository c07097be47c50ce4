"""The sweep's conversation phase (issue 30): the conversation ledgers follow a class.

A thread's conversation is one ``Conversation`` aggregate sealed with one data key, so
its entries cannot outlive each other: the whole conversation follows the class
``Windows.ledger`` (default ``operational``, per fabric and per tenant). Its window
runs from its *last write*: the time of its last entry, or of its newest observation
when later (:func:`last_write`). Once it has closed (for ``regulated``: the ceiling;
``durable`` or no window: never), the sweep erases the conversation exactly as
``erase_scope`` does (``Erased`` tombstone with cause ``retention``, key destroyed);
the thread can be written again afterwards.

After a tenant's notes, its due conversations are paged from the ledger's thread table
(``LedgerStore.due_threads``), ``batch_size`` per unit of work holding their thread
scopes' write locks; each one is replayed and decided again in it (an entry appended
meanwhile keeps it), and the count is a ``Sweep.ConversationsSwept`` event committed in
the same transaction, so a sweep killed at any point resumes with exact totals (an
erased conversation is never due again).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from memfabric.domain import retention as rules
from memfabric.domain.ledger import Conversation
from memfabric.domain.scope import Scope

if TYPE_CHECKING:
    from memfabric.domain.sweep import _Run

CAUSE = "retention"


def last_write(conv: Conversation) -> datetime | None:
    """When the conversation was last written: its last entry's time, or its newest
    observation's when later (``None``: neither)."""
    times = [o.created_at for o in conv.observations.values()]
    if conv.entries:
        times.append(max(conv.entries, key=lambda e: e.position).timestamp)
    return max(times) if times else None


def due(conv: Conversation | None, windows: rules.Windows, now: datetime) -> bool:
    """Whether the sweep at ``now`` erases ``conv`` (live, and its class window since
    :func:`last_write` has closed)."""
    span = windows.window(windows.ledger)
    if conv is None or span is None or windows.ledger == "durable":
        return False
    if not (conv.entries or conv.observations or conv.reflections or conv.work_scopes):
        return False
    wrote = last_write(conv)
    return wrote is None or wrote + span <= now


def sweep_conversations(run: _Run, tenant_id: str, windows: rules.Windows,
                        cursor_id: UUID | None) -> None:
    """Erase the due conversations of ``tenant_id`` (see the module doc); ``cursor_id``:
    the note cursor the progress records keep. Counts go to ``run.conversations``."""
    store = run.deps.ledger_store
    span = windows.window(windows.ledger)
    if store is None or span is None or windows.ledger == "durable":
        return
    after: UUID | None = None
    while page := store.due_threads(tenant_id, run.now - span, after=after, limit=run.batch_size):
        _batch(run, tenant_id, windows, page, cursor_id)
        after = page[-1][0]
        if len(page) < run.batch_size:
            return


def _batch(run: _Run, tenant_id: str, windows: rules.Windows,
           page: list[tuple[UUID, str | None, str]], cursor_id: UUID | None) -> None:
    scopes = sorted({Scope(tenant_id=tenant_id, resource_id=r, thread_id=th) for _, r, th in page},
                    key=lambda s: s.key)
    uow: Any
    with run.deps.unit_of_work([] if run.dry_run else scopes) as uow:
        erased = 0
        for aggregate_id, _, _ in page:
            conv = uow.load_aggregate(aggregate_id)
            if not isinstance(conv, Conversation) or not due(conv, windows, run.now):
                continue
            erased += 1
            if not run.dry_run:
                conv.erase(requested_by=rules.SWEEP_REQUESTED_BY, cause=CAUSE)
                uow.add_aggregate(conv)  # Erased shreds: the unit of work destroys the key
        if erased and not run.dry_run:
            record = run.open_record()
            record.record_conversations(tenant_id, cursor_id, erased)
            uow.add_aggregate(record)
            uow.commit()
            run.record = record
    run.conversations += erased
    run.batches += 1 if erased else 0
