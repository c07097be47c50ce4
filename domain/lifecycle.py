"""Lifecycle commands: forget (tombstone + crypto-shredding), legal hold, scope erasure,
and the file commands ``repoint`` / ``delete_path``.

A tombstone is a ``Forgotten`` event (keyed HMAC of the content, lineage ids, reason,
who asked); in the same unit of work the note's data key is destroyed and its
projection rows are deleted, so its content is unreadable from then on. A legal hold
is a ``Forgotten`` event with reason ``legal_hold``: content kept, never recalled.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from memfabric.domain import links, retention, working
from memfabric.domain.history import history, locate, lock_scopes
from memfabric.domain.errors import EventIntegrityError, FabricError, NoteNotFoundError, RetentionFloorError
from memfabric.domain.inputs import EraseScopeInput
from memfabric.domain.note import Note, note_uuid
from memfabric.domain.ports import UnitOfWork
from memfabric.domain.results import (
    EraseResult,
    NoteCounts,
    ForgetResult,
    MemoryNote,
    PathForgetResult,
    RepointResult,
    note_view,
)
from memfabric.domain.scope import Scope
from memfabric.domain.visibility import LEGACY_VISIBILITY, write_locks

if TYPE_CHECKING:
    from uuid import UUID

    from memfabric.domain.deps import Deps


@dataclass
class _Tally:
    """Note ids a tombstoning pass changed, by outcome."""

    deleted: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    already_held: list[str] = field(default_factory=list)
    floor: dict[str, datetime] = field(default_factory=dict)
    """Issue 30: regulated notes kept because their floor has not passed (id: its end)."""


Guard = Callable[[Note], "datetime | None"]
"""Issue 30: the end of a note's regulated floor when it forbids erasing it now, else ``None``."""


def floor_guard(deps: Deps, approval: str | None) -> Guard | None:
    """The guard of an erasure: none with an ``approval`` reference (a legal erasure),
    else the recorded retention settings' floor at ``deps.clock()``. The record is read
    here, so build the guard *before* the unit of work: read inside it, the record took a
    second pooled connection while the write held its locks (a pool of one waited for
    itself; a fresh user's finding, ``tests/integration/test_fresh_findings.py``)."""
    if approval is not None or deps.retention_store is None:
        return None
    config = deps.retention_store.config()

    def guard(note: Note) -> datetime | None:
        if not retention.regulated_label(note):
            return None
        return retention.under_floor(note, config.for_tenant(note.tenant_id), deps.clock())
    return guard


KEY_FAULT = "key_fault"
"""Tombstone cause of a note erased although its content could not be decrypted."""


def load_for_erasure(uow: UnitOfWork, aggregate_ids: Sequence[UUID],
                     ) -> tuple[list[Note], list[Note], list[UUID]]:
    """Replay the notes to tombstone: ``(readable, unreadable, failed)``. A note whose
    content cannot be decrypted (``EventIntegrityError``: key fault or changed sealed
    bytes) is replayed as if its keys were destroyed (``unreadable``), so it is still
    tombstoned and its key shredded; one whose events cannot be decoded even so is
    ``failed``. One bad note never stops the others (issue 17 defect 3)."""
    try:
        return uow.load_ids(aggregate_ids, fresh=True), [], []
    except EventIntegrityError:
        pass
    readable: list[Note] = []
    unreadable: list[Note] = []
    failed: list[UUID] = []
    for aid in aggregate_ids:
        try:
            readable += uow.load_ids([aid], fresh=True)
        except EventIntegrityError:
            try:
                unreadable += uow.load_unreadable([aid])
            except EventIntegrityError:
                failed.append(aid)
    return readable, unreadable, failed


def tombstone(uow: UnitOfWork, notes: Sequence[Note], *, hold: bool, requested_by: str,
              cause: str, unreadable: bool = False, guard: Guard | None = None,
              approval: str | None = None, swept_at: datetime | None = None) -> _Tally:
    """Give every live note of ``notes`` its ``Forgotten`` tombstone (reason
    ``legal_hold`` with ``hold``) in ``uow``, shredding the keys of the tombstoned (not
    held) ones. Forgotten notes are skipped; held notes stay as they are; with a
    ``guard`` (issue 30) a note it names a floor for is kept (``tally.floor``);
    ``approval`` is recorded in the tombstones; ``swept_at``: the ``now`` of the
    retention sweep erasing them, recorded with each note's class (the tombstone then
    stands for the note's expiry too: one event per erased note)."""
    tally = _Tally()
    in_flight = {note.id: note for note in notes}
    for note in notes:
        if note.forgotten:
            continue
        if note.held:
            tally.already_held.append(note.note_id)
            continue
        until = guard(note) if guard is not None and not hold else None
        if until is not None:
            tally.floor[note.note_id] = until
            continue
        if not hold:
            links.withdraw_contributions(uow, note, in_flight)
        digest = uow.content_hmac(note.content) if note.content is not None and not unreadable else None
        note.forget(content_hmac=digest, reason="legal_hold" if hold else "forgotten",
                    requested_by=requested_by, cause=cause, approval=None if hold else approval,
                    retention=None if swept_at is None else retention.class_of(note), at=swept_at)
        uow.add(note)
        (tally.held if hold else tally.deleted).append(note.note_id)
    return tally


def forget(deps: Deps, scope: Scope, note_id: str, *, hold: bool, requested_by: str,
           block: str | None = None, approval: str | None = None) -> ForgetResult:
    """Tombstone (or hold) one note visible from ``scope`` (issue 16: resolved by
    :func:`memfabric.domain.history.locate`; a block: of exactly ``scope``). Absent or
    already forgotten: ``deleted=0, held=False``; held: ``deleted=0, held=True``, left
    unchanged. Issue 30: a note with the regulated label before its floor raises
    ``RetentionFloorError`` naming the floor (nothing written) unless ``approval``
    names the legal erasure's approval reference (recorded in the tombstone)."""
    home, vis = (scope, LEGACY_VISIBILITY) if block is not None else locate(deps, scope, note_id)
    guard = floor_guard(deps, approval)  # before the unit of work: it reads the record
    with deps.unit_of_work(lock_scopes(home, vis)) as uow:
        if block is not None:  # issue 27: a block written before its id got its mark keeps its id
            note_id = working.erasure_block_id(uow, home, block)
        readable, unreadable, failed = load_for_erasure(uow, [note_uuid(home, note_id)])
        if failed:
            raise EventIntegrityError(f"note {note_id!r} of scope {home}: its events cannot be decoded,"
                                      " so it cannot be tombstoned (see `memfabric audit verify`)")
        found = readable or unreadable
        note = found[0] if found else None
        if block is not None:
            working.check_block_note(note, block)
        if note is None:
            return ForgetResult(id=note_id if block is None else None, block=block, deleted=0, held=False)
        tally = tombstone(uow, [note], hold=hold, requested_by=requested_by,
                          cause=KEY_FAULT if unreadable else "caller", unreadable=bool(unreadable),
                          guard=guard, approval=approval)
        if tally.floor:
            until = tally.floor[note.note_id]
            raise RetentionFloorError(
                f"note {note_id} is regulated: it cannot be erased before its floor ends at "
                f"{until.isoformat()} unless the erasure names an approval reference (approval=...)",
                floor=until)
        uow.commit()
    deps.store.await_position(uow.position)
    return ForgetResult(id=note_id if block is None else None, block=block,
                        deleted=len(tally.deleted), held=bool(tally.held or tally.already_held))


def release_hold(deps: Deps, scope: Scope, note_id: str, *, requested_by: str) -> MemoryNote:
    """Lift the legal hold of note ``note_id``: one ``HoldReleased`` event; in the same
    unit of work its projection rows come back, so it is recalled and listed again.
    The hold's ``Forgotten`` event stays in the history. Raises ``NoteNotFoundError``
    (absent), ``NoteForgottenError`` (tombstoned), ``NotHeldError`` (not held). The
    note is any one visible from ``scope`` (issue 16)."""
    home, vis = locate(deps, scope, note_id)
    with deps.unit_of_work(lock_scopes(home, vis)) as uow:
        note = uow.load(home, note_id)
        if note is None:
            raise NoteNotFoundError(f"no note {note_id!r} in scope {scope}")
        note.release_hold(requested_by=requested_by)
        uow.add(note)
        uow.commit()
    deps.store.await_position(uow.position)
    return note_view(note, "released")


def set_retention(deps: Deps, scope: Scope, note_id: str, target: str, *, requested_by: str,
                  approval: str | None = None) -> MemoryNote:
    """Issue 30: move note ``note_id`` (any one visible from ``scope``) to retention
    class ``target``: one ``RetentionChanged`` event (none when it already has that
    class). Raises ``NoteNotFoundError`` (absent), ``NoteForgottenError``
    (tombstoned), ``RetentionError`` (a note with the regulated label into a longer
    class without ``approval``, recorded in the event when given)."""
    home, vis = locate(deps, scope, note_id)
    with deps.unit_of_work(lock_scopes(home, vis)) as uow:
        note = uow.load(home, note_id)
        if note is None:
            raise NoteNotFoundError(f"no note {note_id!r} in scope {scope}")
        note.change_retention(retention=target, requested_by=requested_by, approval=approval)
        uow.add(note)
        uow.commit()
    deps.store.await_position(uow.position)
    return note_view(note, "retained")


def forget_block(deps: Deps, scope: Scope, label: str, *, hold: bool,
                 requested_by: str, approval: str | None = None) -> ForgetResult:
    """Tombstone (or hold) working block ``label`` of ``scope`` (floor as in :func:`forget`)."""
    return forget(deps, scope, working.block_note_id(scope, label), hold=hold,
                  requested_by=requested_by, block=label, approval=approval)


def delete_path(deps: Deps, scope: Scope, path: str, *, hold: bool,
                requested_by: str) -> PathForgetResult:
    """Tombstone (or hold) every ``file`` note of ``scope`` recorded against ``path``
    (``RetentionFloorError``, nothing written, when one is regulated before its floor)."""
    guard = floor_guard(deps, None)  # before the unit of work: it reads the record
    with deps.unit_of_work([scope]) as uow:
        notes = _by_path(uow, scope, path)
        tally = tombstone(uow, notes, hold=hold, requested_by=requested_by, cause="delete_path",
                          guard=guard)
        if tally.floor:
            nid, until = next(iter(tally.floor.items()))
            raise RetentionFloorError(f"note {nid} on {path!r} is regulated: it cannot be erased before "
                                      f"its floor ends at {until.isoformat()} (forget it with approval=...)",
                                      floor=until)
        uow.commit()
    deps.store.await_position(uow.position)
    return PathForgetResult(path=path, deleted=tuple(tally.deleted),
                            held=tuple(tally.held + tally.already_held))


def repoint(deps: Deps, scope: Scope, from_path: str, to_path: str) -> RepointResult:
    """Move the live ``file`` notes of ``scope`` on ``from_path`` to ``to_path``
    (one ``Repointed`` event each, nothing re-embedded); held notes stay."""
    with deps.unit_of_work([scope]) as uow:
        notes = _by_path(uow, scope, from_path)
        moved = [n for n in notes if n.live and n.kind == "file"]
        for note in moved:
            note.repoint(to_path=to_path)
            uow.add(note)
        uow.commit()
    deps.store.await_position(uow.position)
    return RepointResult(from_path=from_path, to_path=to_path,
                         repointed=tuple(n.note_id for n in moved),
                         held=tuple(n.note_id for n in notes if n.held))


def _by_path(uow: UnitOfWork, scope: Scope, path: str) -> list[Note]:
    found = (uow.load(scope, nid) for nid in uow.note_ids_by_path(scope, path))
    return [n for n in found if n is not None]


def erase_scope(deps: Deps, args: EraseScopeInput) -> EraseResult:
    """Tombstone (or hold) every un-forgotten note of a scope prefix, ``batch_size``
    notes per unit of work (each holding the write locks of the scopes it touches and
    of their consolidation groups, ``visibility.write_locks``). Issue 30: regulated
    notes before their floor are kept (``floor_kept``, and in ``remaining``) unless
    ``args.approval`` names a legal erasure's approval reference."""
    t, r, th = args.tenant_id, args.resource_id, args.thread_id
    deleted = held = already_held = batches = floor_kept = 0
    guard = None if args.hold else floor_guard(deps, args.approval)
    states = {"live": 0, "superseded": 0, "held": 0}
    unread: list[str] = []
    failed: list[str] = []
    after = None
    while page := deps.store.notes_in_scope(t, r, th, after=after, limit=args.batch_size):
        after = page[-1]
        already_held += sum(1 for ref in page if ref.held)
        targets = [ref for ref in page if not ref.held]
        if not targets:
            continue
        # issue 16: with the group locks of every visibility, so no writer of another
        # thread folds into a note while its batch tombstones it
        locks = {lock for ref in targets for lock in write_locks(ref.scope, "tenant")}
        with deps.unit_of_work(sorted(locks, key=lambda s: s.key)) as uow:
            notes, bad, lost = load_for_erasure(uow, [ref.aggregate_id for ref in targets])
            for note in (*notes, *bad):
                states[_state(note)] += 1
            tally = tombstone(uow, notes, hold=args.hold, requested_by=args.requested_by,
                              cause="erase_scope", guard=guard, approval=args.approval)
            bad_tally = tombstone(uow, bad, hold=args.hold, requested_by=args.requested_by,
                                  cause=KEY_FAULT, unreadable=True, guard=guard, approval=args.approval)
            uow.commit()
        names = {ref.aggregate_id: ref.note_id for ref in targets}
        unread += bad_tally.deleted + bad_tally.held
        failed += [names[a] for a in lost]
        for attr in ("deleted", "held", "already_held"):
            getattr(tally, attr).extend(getattr(bad_tally, attr))
        deps.store.await_position(uow.position)
        batches += 1
        floor_kept += len(tally.floor) + len(bad_tally.floor)
        deleted += len(tally.deleted)
        held += len(tally.held)
        already_held += len(tally.already_held)  # held by someone else meanwhile
    left = deps.store.counts_in_scope(t, r, th)
    found = NoteCounts(live=states["live"], superseded=states["superseded"], held=already_held, forgotten=deleted)
    return EraseResult(tenant_id=t, resource_id=r, thread_id=th, deleted=deleted, held=held,
                       already_held=already_held, remaining=left.live + left.superseded, batches=batches,
                       unreadable=tuple(unread), failed=tuple(failed), floor_kept=floor_kept,
                       found=found, left=left)


def _state(note: Note) -> str:
    """``held``, ``superseded`` or ``live``: an un-forgotten note's state (NoteCounts)."""
    if note.held:
        return "held"
    return "superseded" if note.superseded_by else "live"


def verify_content(deps: Deps, scope: Scope, note_id: str, text: str) -> bool:
    """True when ``text`` matches the tombstone's keyed hash (constant-time compare).
    Raises ``NoteNotFoundError`` when the note is absent, ``FabricError`` when it has
    no tombstone."""
    tomb = next((h.fields for h in reversed(history(deps, scope, note_id)) if h.type == "Forgotten"), None)
    if tomb is None:
        raise FabricError(f"id: note {note_id!r} has no tombstone")
    expected = tomb.get("content_hmac") or ""
    return hmac.compare_digest(expected, deps.store.content_hmac(text))

