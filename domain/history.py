"""Reading a note's past: ``get``, ``history`` (typed events) and ``lineage`` (the
supersession chain both ways, folds, links, tombstone). Read-only, outside any write."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfabric.domain.errors import NoteNotFoundError
from memfabric.domain.note import ERASED, Note, note_uuid
from memfabric.domain.results import HistoryEntry, Lineage, MemoryNote, note_view
from memfabric.domain.scope import Scope

if TYPE_CHECKING:
    from memfabric.domain.service import MemoryService

_ENVELOPE = ("originator_id", "originator_version", "timestamp", "originator_topic")


def load(svc: MemoryService, scope: Scope, note_id: str) -> Note:
    """The note's aggregate; raises ``NoteNotFoundError`` when ``scope`` has none."""
    note = svc.store.load(note_uuid(scope, note_id))
    if note is None:
        raise NoteNotFoundError(f"no note {note_id!r} in scope {scope}")
    return note


def get(svc: MemoryService, scope: Scope, note_id: str) -> MemoryNote:
    """The note ``note_id`` of ``scope`` (``NoteNotFoundError`` when absent)."""
    return note_view(load(svc, scope, note_id), "read")


def history(svc: MemoryService, scope: Scope, note_id: str) -> list[HistoryEntry]:
    """Every event of the note in version order (``NoteNotFoundError`` when absent)."""
    events = list(svc.store.stored_events(note_uuid(scope, note_id)))
    if not events:
        raise NoteNotFoundError(f"no note {note_id!r} in scope {scope}")
    return [_entry(event) for event in events]


def _entry(event: Any) -> HistoryEntry:
    fields = {k: v for k, v in vars(event).items() if k not in _ENVELOPE}
    erased = tuple(fields.pop("_erased", ()))
    for name in erased:
        fields[name] = ERASED
    return HistoryEntry(version=event.originator_version, type=type(event).__name__,
                        timestamp=event.timestamp, cause=str(fields.get("cause", "caller")),
                        fields=fields, erased=erased)


def lineage(svc: MemoryService, scope: Scope, note_id: str) -> Lineage:
    """Predecessors and successors along ``supersedes`` (both directions), folds,
    links and the tombstone of ``note_id``. Cycles cannot arise: a note can only
    supersede a note that existed before it, and each step is checked."""
    note = load(svc, scope, note_id)
    seen = {note.note_id}
    preds = _walk(svc, scope, note, seen, lambda n: n.supersedes)
    succs = _walk(svc, scope, note, seen, lambda n: n.superseded_by)
    events = history(svc, scope, note_id)
    tomb = None
    if note.forgotten or note.held:  # the latest tombstone (a block can be rewritten)
        tomb = next((h.fields for h in reversed(events) if h.type == "Forgotten"), None)
    chain = [_chain_row(load(svc, scope, nid)) for nid in [*reversed(preds), note.note_id, *succs]]
    return Lineage(id=note_id, predecessors=preds, successors=succs,
                   folds=[h.timestamp for h in events if h.type == "Folded"],
                   links=list(note.links), tombstone=tomb, chain=chain,
                   promoted_from=getattr(note, "promoted_from", None))


def _walk(svc: MemoryService, scope: Scope, start: Note, seen: set[str], step: Any) -> list[str]:
    out: list[str] = []
    cur = start
    while (nxt := step(cur)) and nxt not in seen:
        seen.add(nxt)
        out.append(nxt)
        cur = load(svc, scope, nxt)
    return out


def _chain_row(n: Note) -> dict[str, Any]:
    return {"id": n.note_id, "valid_from": n.valid_from, "valid_to": n.valid_to,
            "ingested_at": n.created_on, "forgotten": n.forgotten, "held": n.held,
            "content": n.content, "folds": n.fold_count,
            "reason": getattr(n, "decision", None)}
