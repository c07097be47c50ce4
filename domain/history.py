"""Reading a note's past: ``get``, ``history`` (typed events) and ``lineage`` (the
supersession chain both ways, folds, links, tombstone). Read-only, outside any write."""

from __future__ import annotations

import dataclasses

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memfabric.domain import replay, visibility
from memfabric.domain.errors import NoteNotFoundError, ScopeError
from memfabric.domain.note import ERASED, Note, note_uuid, replaced_decision
from memfabric.domain.results import HistoryEntry, Lineage, MemoryNote, note_view
from memfabric.domain.scope import Scope

if TYPE_CHECKING:
    from memfabric.domain.deps import Deps

_ENVELOPE = ("originator_id", "originator_version", "timestamp", "originator_topic")


def locate(deps: Deps, scope: Scope, note_id: str) -> tuple[Scope, visibility.Visibility]:
    """Issue 16: where note ``note_id``, addressed from ``scope``, lives: ``(home,
    visibility)`` of the un-forgotten note of that id visible from ``scope``
    (``scope``'s own note first), else ``(scope, "thread")``, so a forgotten note is
    still addressed (its tombstone) from its own scope and an invisible one is not
    found. Raises ``ScopeError`` when several other scopes' notes visible from
    ``scope`` share the id (explicit ids): address it from its own scope then."""
    found = deps.store.resolve(scope, note_id)
    if not found:
        return scope, visibility.LEGACY_VISIBILITY
    (home, vis), *rest = found
    if home != scope and rest:
        homes = ", ".join(str(h) for h, _ in found)
        raise ScopeError(f"id: note {note_id!r} is visible from {scope} in several scopes ({homes});"
                         " address it from its own scope")
    return home, visibility.of_consent({"visibility": vis})


def lock_scopes(home: Scope, vis: visibility.Visibility) -> list[Scope]:
    """The write locks a change of a note of ``home`` and ``vis`` takes: those a write
    of ``vis`` from ``home`` takes (``visibility.write_locks``), so it is serialised
    with every write that may consolidate with the note."""
    return sorted(visibility.write_locks(home, vis), key=lambda s: s.key)


def load(deps: Deps, scope: Scope, note_id: str) -> Note:
    """The note ``note_id`` visible from ``scope`` (:func:`locate`); raises
    ``NoteNotFoundError`` when there is none."""
    home, _ = locate(deps, scope, note_id)
    note = deps.store.load(note_uuid(home, note_id))
    if note is None:
        raise NoteNotFoundError(f"no note {note_id!r} in scope {scope}")
    return note


def target_visible(deps: Deps, reader: Scope, home: Scope,
                   resolve: Callable[[Scope, str], Sequence[tuple[Scope, Any]]] | None = None,
                   ) -> Callable[[str], bool]:
    """``seen(to_id)``: whether the link target ``to_id`` of a note of ``home`` is visible
    from ``reader`` (always, from ``home`` itself; else one indexed lookup per target,
    cached per call). Read from another scope, a note's links keep only such targets,
    so a user-level note linked to a thread-only note of its thread does not show that
    note's id to another thread."""
    known: dict[str, bool] = {}

    def seen(to_id: str) -> bool:
        if reader == home:
            return True
        if to_id not in known:
            known[to_id] = any(h == home for h, _ in (resolve or deps.store.resolve)(reader, to_id))
        return known[to_id]
    return seen


def shown(deps: Deps, reader: Scope, home: Scope, view: MemoryNote,
          resolve: Callable[[Scope, str], Sequence[tuple[Scope, Any]]] | None = None) -> MemoryNote:
    """``view`` (of a note of ``home``) as ``reader`` may see it: its ``links`` as
    :func:`target_visible` allows, and ``supersedes`` (with the decision's ``note_id``)
    only when the note it replaced is visible from ``reader`` too (a user-level fact
    that replaced a thread-only note of its thread does not name it elsewhere)."""
    if home == reader or not (view.links or view.supersedes):
        return view
    seen = target_visible(deps, reader, home, resolve)  # a writer passes its unit of work's
    view = dataclasses.replace(view, links=tuple(lk for lk in view.links if seen(lk.id)))
    return unnamed_predecessor(view, seen)


def unnamed_predecessor(view: MemoryNote, seen: Callable[[str], bool]) -> MemoryNote:
    """``view`` without ``supersedes`` (and the decision's ``note_id``) when ``seen``
    refuses the note it replaced."""
    if view.supersedes and not seen(view.supersedes):
        return dataclasses.replace(view, supersedes=None, decision=_unnamed(view.decision, view.supersedes))
    return view


def hide_predecessors(deps: Deps, reader: Scope, views: list[MemoryNote]) -> list[MemoryNote]:
    """Recall hits / list items as ``reader`` may see them: a note of another scope
    names the note it replaced only when that one is visible from ``reader`` (one
    lookup per such hit; hits of ``reader``'s own scope are untouched)."""
    return [unnamed_predecessor(v, target_visible(deps, reader, v.scope))
            if v.supersedes and v.scope != reader else v for v in views]


def _unnamed(decision: dict[str, Any] | None, note_id: str) -> dict[str, Any] | None:
    """``decision`` without the id (and value) of the note ``note_id`` it replaced."""
    if not decision or decision.get("note_id") != note_id:
        return decision
    return {k: v for k, v in decision.items() if k not in ("note_id", "old_value")}


def get(deps: Deps, scope: Scope, note_id: str) -> MemoryNote:
    """The note ``note_id`` visible from ``scope`` (``NoteNotFoundError`` when absent);
    its ``links`` as :func:`target_visible` allows."""
    note = load(deps, scope, note_id)
    return shown(deps, scope, note.scope, note_view(note, "read"))


def history(deps: Deps, scope: Scope, note_id: str) -> list[HistoryEntry]:
    """Every event of the note visible from ``scope`` (:func:`locate`) in version order
    (``NoteNotFoundError`` when absent; ``EventIntegrityError`` naming the note and the
    version when one is missing from the middle of its events)."""
    home, _ = locate(deps, scope, note_id)
    events = list(deps.store.stored_events(note_uuid(home, note_id)))
    if not events:
        raise NoteNotFoundError(f"no note {note_id!r} in scope {scope}")
    replay.check_versions(f"note {note_id!r} of scope {home}", (e.originator_version for e in events))
    entries = _timed([_entry(event) for event in events], events)
    if home == scope:
        return entries
    seen = target_visible(deps, scope, home)
    return [_hide_ids(e, seen, home) for e in entries]


_ID_CAUSES = ("supersession:", "evolution:", "withdraw:")
"""Causes that name another note: ``supersession:<id>``, ``evolution:<id>:v<n>``,
``withdraw:<id>`` (the id of the successor / the contributing note)."""


def _hide_ids(entry: HistoryEntry, seen: Callable[[str], bool], home: Scope) -> HistoryEntry:
    """``entry`` (of a note of ``home``) with every note id ``seen`` refuses taken out
    (issue 28, defect 5): ``links`` items (``{"id": ...}``), ``note_ids``
    (``Contributed``), ``link_ids`` (``Forgotten``), ``supersedes`` /
    ``superseded_by`` / ``successor_id`` (then ``None``), the decision's ``note_id``
    (with its ``old_value``), the id in ``cause`` (kept as its prefix, e.g.
    ``supersession``) and ``source`` (the aggregate id of a contributing note:
    ``None`` unless it is the note the cause names and that one is seen)."""
    fields = dict(entry.fields)
    _hide_listed(fields, seen)
    _hide_named(fields, seen)
    named = _cause_note(fields.get("cause"))
    if named is not None and not seen(named):
        fields["cause"] = str(fields["cause"]).split(":", 1)[0]
    if isinstance(fields.get("source"), str) and fields["source"]:
        if named is None or not seen(named) or str(note_uuid(home, named)) != fields["source"]:
            fields["source"] = None
    return entry if fields == entry.fields else dataclasses.replace(
        entry, fields=fields, cause=str(fields.get("cause", entry.cause)))


def _hide_listed(fields: dict[str, Any], seen: Callable[[str], bool]) -> None:
    """In place: the ``links`` items (``{"id": ...}``), ``note_ids`` and ``link_ids``
    of an event's ``fields`` that ``seen`` refuses taken out."""
    links = fields.get("links")
    if isinstance(links, list) and links:
        fields["links"] = [lk for lk in links if not isinstance(lk, dict) or seen(str(lk.get("id")))]
    for name in ("note_ids", "link_ids"):
        ids = fields.get(name)
        if isinstance(ids, list) and ids:
            fields[name] = [i for i in ids if seen(str(i))]


def _hide_named(fields: dict[str, Any], seen: Callable[[str], bool]) -> None:
    """In place: ``supersedes`` / ``superseded_by`` / ``successor_id`` that ``seen``
    refuses set to ``None``, and the decision's ``note_id`` (with its ``old_value``)
    taken out."""
    for name in ("supersedes", "superseded_by", "successor_id"):
        other = fields.get(name)
        if isinstance(other, str) and other and not seen(other):
            fields[name] = None
    decision = fields.get("decision")
    if isinstance(decision, dict) and isinstance(decision.get("note_id"), str) and not seen(decision["note_id"]):
        fields["decision"] = _unnamed(decision, decision["note_id"])


def _cause_note(cause: Any) -> str | None:
    """The note id a cause of :data:`_ID_CAUSES` names, else ``None``."""
    if not isinstance(cause, str) or not cause.startswith(_ID_CAUSES):
        return None
    return cause.split(":")[1] or None


def _timed(entries: list[HistoryEntry], events: Sequence[Any]) -> list[HistoryEntry]:
    """``entries`` with each one's valid time (issue 31): the note's ``valid_from`` /
    ``valid_to`` after its event (replayed in order)."""
    out: list[HistoryEntry] = []
    state: Any = None
    for entry, event in zip(entries, events, strict=True):
        state = replay.step(event, state)
        out.append(dataclasses.replace(entry, valid_from=getattr(state, "valid_from", None),
                                       valid_to=getattr(state, "valid_to", None)))
    return out


def _entry(event: Any) -> HistoryEntry:
    fields = {k: v for k, v in vars(event).items() if k not in _ENVELOPE}
    erased = tuple(fields.pop("_erased", ()))
    for name in erased:
        fields[name] = ERASED
    if type(event).__name__ == "Superseded" and isinstance(fields.get("decision"), dict):
        fields["decision"] = replaced_decision(fields["decision"])  # events before issue 28
    return HistoryEntry(version=event.originator_version, type=type(event).__name__,
                        timestamp=event.timestamp, cause=str(fields.get("cause", "caller")),
                        fields=fields, erased=erased)


def lineage(deps: Deps, scope: Scope, note_id: str) -> Lineage:
    """Predecessors and successors along ``supersedes`` (both directions), folds,
    links and the tombstone of ``note_id``. Cycles cannot arise: a note can only
    supersede a note that existed before it, and each step is checked."""
    note = load(deps, scope, note_id)
    seen = {note.note_id}
    preds = _walk(deps, scope, note, seen, lambda n: n.supersedes)
    succs = _walk(deps, scope, note, seen, lambda n: n.superseded_by)
    events = history(deps, scope, note_id)
    tomb = None
    if note.forgotten or note.held:  # the latest tombstone (a block can be rewritten)
        tomb = next((h.fields for h in reversed(events) if h.type == Note.Forgotten.__name__), None)
    shown_target = target_visible(deps, scope, note.scope)
    chain = [_chain_row(n, shown_target) for n in [*reversed(preds), note, *succs]]
    return Lineage(id=note_id, predecessors=[n.note_id for n in preds],
                   successors=[n.note_id for n in succs],
                   folds=[h.timestamp for h in events if h.type == "Folded"],
                   links=[lk for lk in note.links if shown_target(lk["id"])], tombstone=tomb, chain=chain,
                   promoted_from=getattr(note, "promoted_from", None))


def _walk(deps: Deps, scope: Scope, start: Note, seen: set[str], step: Any) -> list[Note]:
    """The notes along ``step`` from ``start``, each resolved from ``scope`` (issue 16:
    a chain may cross threads); the walk stops before a note ``scope`` cannot see."""
    out: list[Note] = []
    cur = start
    while (nxt := step(cur)) and nxt not in seen:
        seen.add(nxt)
        try:
            cur = load(deps, scope, nxt)
        except NoteNotFoundError:
            break
        out.append(cur)
    return out


def _chain_row(n: Note, seen: Callable[[str], bool]) -> dict[str, Any]:
    """One row of a lineage chain; ``reason`` (the decision) without the id of a
    replaced note ``seen`` refuses."""
    reason = getattr(n, "decision", None)
    if n.supersedes and not seen(n.supersedes):
        reason = _unnamed(reason, n.supersedes)
    return {"id": n.note_id, "valid_from": n.valid_from, "valid_to": n.valid_to,
            "ingested_at": n.created_on, "recorded_at": n.modified_on, "version": n.version,
            "forgotten": n.forgotten, "held": n.held,
            "content": n.content, "folds": n.fold_count, "reason": reason}
