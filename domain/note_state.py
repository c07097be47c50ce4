"""What a note's events do to its state: the merge rules of a fold (annotations unioned,
consent narrowed, the validity window widened), the evolution patches a note holds and
withdraws, and the erasure a tombstone applies. Pure functions of ``(note, event)``,
called by the ``apply`` methods of the events in :mod:`memfabric.domain.note`, whose
docstrings give each rule; re-exported there (``vector_for``, ``narrower_consent``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

    from memfabric.domain.note import Note

_VISIBILITY_ORDER = {"thread": 0, "resource": 1, "tenant": 2}


def union(old: list[Any], new: list[Any]) -> list[Any]:
    """``old`` then the items of ``new`` it lacks, in order."""
    out = list(old)
    for item in new:
        if item not in out:
            out.append(item)
    return out


def union_links(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Link edges of both, one per ``(id, relation)``; an edge of ``new`` wins."""
    by_key = {(link["id"], link.get("relation", "related")): link for link in old}
    for link in new:
        by_key[(link["id"], link.get("relation", "related"))] = link
    return list(by_key.values())


def contributions(note: Note) -> dict[str, dict[str, Any]]:
    """The evolution patches a note holds, by source aggregate id (older snapshots
    have no such attribute)."""
    found = getattr(note, "contributions", None)
    if found is None:
        found = note.contributions = {}
    return found


def vectors(note: Note) -> dict[str, bytes]:
    """The note's vectors by embedder id other than its write-time one (issue 19; older
    snapshots have no such attribute)."""
    found = getattr(note, "vectors", None)
    if found is None:
        found = note.vectors = {}
    return found


def vector_for(note: Note, embedder_id: str | None) -> bytes | None:
    """The note's float32 vector for embedder ``embedder_id``: the write-time one when it
    was written by that embedder (or when ``embedder_id`` is ``None``), else the one a
    ``Reembedded`` event gave it, else ``None``."""
    if embedder_id is None or note.embedder_id == embedder_id or note.embedding is None:
        return note.embedding
    return vectors(note).get(embedder_id)


def narrower_consent(
    old: dict[str, Any] | None, new: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Merge consents on a fold without ever widening visibility or granting more.

    Visibility becomes the narrower of the two; ``granted`` is True only if both are;
    purposes are intersected when both are given.
    """
    if new is None:
        return old
    if old is None:
        return new
    vis = min(
        (old.get("visibility", "thread"), new.get("visibility", "thread")),
        key=lambda v: _VISIBILITY_ORDER[v],
    )
    granted_old, granted_new = old.get("granted"), new.get("granted")
    if granted_old is False or granted_new is False:
        granted: bool | None = False
    elif granted_old is None or granted_new is None:
        granted = None
    else:
        granted = True
    purposes_old, purposes_new = old.get("purposes") or [], new.get("purposes") or []
    if purposes_old and purposes_new:
        purposes = [p for p in purposes_old if p in purposes_new]
    else:
        purposes = purposes_old or purposes_new
    return {"visibility": vis, "granted": granted, "purposes": purposes}


def fold(note: Note, e: Note.Folded) -> None:
    """``Note.Folded``: new content wins, annotations unioned, consent narrowed, the
    window widened to cover both (a bound the write did not give is kept)."""
    note.content = e.content
    if e.context is not None:
        note.context = e.context
    note.keywords = union(note.keywords, e.keywords)
    note.tags = union(note.tags, e.tags)
    note.source_entry_ids = union(note.source_entry_ids, e.source_entry_ids)
    note.links = union_links(note.links, e.links)
    if e.embedding is not None:
        note.embedding = e.embedding
        note.embedder_id = e.embedder_id
        note.vectors = {}  # the content changed: vectors of other embedders are stale
    note.token_count = e.token_count
    if e.importance is not None:
        note.importance = e.importance
    note.consent = narrower_consent(note.consent, e.consent)
    if e.t_ref is not None:
        note.t_ref = e.t_ref
    if e.valid_from is not None and note.valid_from is not None:
        note.valid_from = min(note.valid_from, e.valid_from)
    if e.valid_to is not None and note.valid_to is not None:
        note.valid_to = max(note.valid_to, e.valid_to)
    note.fold_count += 1
    note.updated_at = e.timestamp
    note.written_at = e.timestamp


def evolve(note: Note, e: Note.Evolved) -> None:
    """``Note.Evolved``: context replaced when given, keywords and tags unioned, and a
    readable patch of a contributing note (``source``) recorded and merged."""
    if e.context is not None:
        note.context = e.context
    note.keywords = union(note.keywords, e.keywords)
    note.tags = union(note.tags, e.tags)
    if e.source is not None and isinstance(e.contributed, dict):
        patch = e.contributed
        contributions(note)[e.source] = patch
        note.keywords = union(note.keywords, list(patch.get("keywords") or []))
        if note.context is None and patch.get("context"):
            note.context = patch["context"]
    note.updated_at = e.timestamp


def withdraw(note: Note, e: Note.Withdrawn) -> None:
    """``Note.Withdrawn``: the patch of ``e.source`` leaves (its keywords no other patch
    gave, its context when it is still the note's)."""
    held = contributions(note)
    patch = held.pop(e.source, None)
    if patch:
        kept = {k for other in held.values() for k in other.get("keywords") or []}
        drop = set(patch.get("keywords") or []) - kept
        note.keywords = [k for k in note.keywords if k not in drop]
        if patch.get("context") is not None and note.context == patch["context"]:
            note.context = None
    note.updated_at = e.timestamp


def expire(note: Note, at: datetime) -> None:
    """The note expired at ``at`` (``Note.Expired``, or a retention sweep's tombstone):
    no longer current from ``at`` on, its validity window (not a working block's) closed
    there when it ran later."""
    note.expired_at = at
    if note.kind != "working" and (note.valid_to is None or at < note.valid_to):
        note.valid_to = at


def erase(note: Note, e: Note.Forgotten) -> None:
    """``Note.Forgotten`` (not a hold): the note is forgotten and its protected state
    cleared (content, context, keywords, vectors, path, patches); a working block's
    version advances."""
    note.forgotten = True
    note.forgotten_at = e.timestamp
    note.content_hmac = e.content_hmac
    note.content = None
    note.context = None
    note.keywords = []
    note.embedding = None
    note.vectors = {}
    note.path = None
    note.contributions = {}
    if note.kind == "working":
        note.block_version += 1
