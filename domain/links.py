"""Links (issue 15): the ``link``/``unlink`` commands and the two opt-in workers.

Commands. ``link(from_id, to_id, relation, weight)`` adds the edge
``{id: to_id, relation, weight}`` to the source note with a ``Linked`` event (the
same edge again replaces its weight); ``unlink(from_id, to_id, relation)`` removes it
with an ``Unlinked`` event (no edge: nothing written). Both ends are notes of the
source's scope (a link target is always resolved in the source's scope: a target
visible from the caller but stored in another scope raises ``LinkScopeError``); the source
must be live (``NoteNotFoundError`` / ``NoteForgottenError``), and for ``link`` the
target too; a note cannot link to itself (``LinkError``). Nothing is written when
it raises.

Workers (model-free, off by default, inert until attached). They run inline after a
write, inside the write's unit of work, only while a session is attached to the
written scope (``deps.gate.any_attached(scope.key)``) and the fabric is not
``passive``:

- **linker** (``LinkerSettings``: ``enabled``, ``top_k`` 1-32, ``floor``): a new note
  gets ``related`` edges to its ``top_k`` closest same-scope, same-kind, live and
  current neighbours whose cosine similarity is at least ``floor``
  (:data:`DEFAULT_FLOOR`); weight = the similarity (clipped to [0, 1]). The
  neighbours are those the write's consolidation lookup already fetched
  (``UnitOfWork.neighbours``, asked for ``top_k`` nearest) plus the notes written
  earlier in the same batch (``LocalIndex.nearest``): no extra query for
  consolidating writes. With ``by="terms"`` the neighbours are the notes sharing the
  rarest terms instead, and ``adjacent`` adds a ``follows`` edge (:class:`LinkerSettings`).
  Every worker edge goes to a note seen at least as widely as the new note
  (:func:`linkable`: a user-level note never links to a thread-only one, whose id its
  links would show to other threads).
- **evolution** (``EvolutionSettings``: ``enabled``, ``max_patches`` 1-32,
  ``max_bytes``): for the same neighbours (similarity ≥ ``floor``, nearest first, at
  most ``max_patches``, seen no more widely than the new note: :func:`patchable`) it
  unions the new note's keywords into the neighbour's and
  fills the neighbour's missing ``context`` with the new note's. It never touches
  content, validity, consent or source ids; a neighbour that would gain nothing is
  not patched; each patch's JSON is at most ``max_bytes`` bytes (keywords dropped,
  then the context cut, to fit). Each patch is an ``Evolved`` event on the neighbour
  with cause ``evolution:<new note id>:v<its version>`` whose ``contributed`` payload
  is sealed under the *new note's* key; the new note records the patched ids
  (``Contributed``). Forgetting the new note withdraws every patch (``Withdrawn`` on
  each patched note, re-projected in the same transaction) and destroys the key that
  sealed them, so what it contributed is unreadable everywhere (``docs/erasure.md``;
  limit: eventsourcing snapshots, which memfabric does not enable, would keep a copy).

The link graph projection (:mod:`memfabric.projections.link_graph`) drops the edges of a
forgotten or held *source* at once; a forgotten or held *target* is honoured at query
time (recall follows and lists only edges whose target has a recall-index row).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

import numpy as np

from memfabric.domain import link_terms, visibility
from memfabric.domain.errors import EventIntegrityError, FabricError, NoteForgottenError, NoteNotFoundError
from memfabric.domain.history import locate, lock_scopes
from memfabric.domain.note import Note, note_uuid
from memfabric.domain.results import MemoryNote, note_view
from memfabric.domain.scope import Scope
from memfabric.domain.settings import DEFAULT_FLOOR as DEFAULT_FLOOR  # re-exported names
from memfabric.domain.settings import MAX_WORKER_CAP as MAX_WORKER_CAP
from memfabric.domain.settings import EvolutionSettings as EvolutionSettings
from memfabric.domain.settings import LinkerSettings as LinkerSettings
from memfabric.domain.settings import worker_settings as worker_settings

if TYPE_CHECKING:
    from datetime import datetime

    from memfabric.domain.consolidation import LocalIndex, Neighbour
    from memfabric.domain.ports import UnitOfWork
    from memfabric.domain.deps import Deps


class LinkError(FabricError):
    """A link that cannot be made (a note linking to itself)."""


class LinkScopeError(LinkError):
    """The link target is visible from the caller's scope but lives in another scope
    than the source: a link joins two notes of one scope (its target id is resolved in
    the source's scope), so links across threads are not made."""


# ------------------------------------------------------------------- commands
def _live(uow: UnitOfWork, scope: Scope, note_id: str, what: str) -> Note:
    note = uow.load(scope, note_id)
    if note is None:
        raise NoteNotFoundError(f"{what}: no note {note_id!r} in scope {scope}")
    if not note.live:
        raise NoteForgottenError(f"{what}: note {note_id!r} is forgotten or held")
    return note


def _target_hidden(uow: UnitOfWork, scope: Scope, home: Scope, to_id: str) -> bool:
    """Whether the caller at ``scope`` must not see target ``to_id`` of ``home``: a
    caller addressing a note of another scope (one it sees, e.g. a user-level fact)
    links only to targets it sees too, so a thread-only note of ``home`` is not
    probed, linked or unlinked from another thread (it answers as absent)."""
    return home != scope and all(h != home for h, _ in uow.resolve(scope, to_id))


def _missing_target(uow: UnitOfWork, scope: Scope, home: Scope, from_id: str, to_id: str) -> FabricError:
    """The error for a target ``to_id`` absent from the source's ``home`` (or hidden
    from ``scope``, :func:`_target_hidden`): ``LinkScopeError`` when ``scope`` sees a
    note of that id in another scope, else ``NoteNotFoundError``."""
    elsewhere = [h for h, _ in uow.resolve(scope, to_id) if h != home]  # in the unit of work
    if elsewhere:
        return LinkScopeError(
            f"to_id: note {to_id!r} lives in scope {elsewhere[0]} and from_id {from_id!r} in"
            f" {home}: a link joins two notes of one scope (links across threads are not made)")
    return NoteNotFoundError(f"to_id: no note {to_id!r} in scope {home}")


def link(deps: Deps, scope: Scope, from_id: str, to_id: str, *, relation: str,
         weight: float) -> MemoryNote:
    """Add the edge ``from_id -> to_id`` (see the module doc)."""
    if from_id == to_id:
        raise LinkError(f"to_id: note {from_id!r} cannot link to itself")
    home, vis = locate(deps, scope, from_id)
    with deps.unit_of_work(lock_scopes(home, vis)) as uow:
        source = _live(uow, home, from_id, "from_id")
        if uow.load(home, to_id) is None or _target_hidden(uow, scope, home, to_id):
            raise _missing_target(uow, scope, home, from_id, to_id)
        _live(uow, home, to_id, "to_id")
        source.link([{"id": to_id, "relation": relation, "weight": float(weight)}], cause="caller")
        uow.add(source)
        uow.commit()
    deps.store.await_position(uow.position)
    return note_view(source, "linked")


def unlink(deps: Deps, scope: Scope, from_id: str, to_id: str, *,
           relation: str) -> MemoryNote:
    """Remove the edge ``from_id -> to_id`` of ``relation`` (absent: nothing written)."""
    home, vis = locate(deps, scope, from_id)
    with deps.unit_of_work(lock_scopes(home, vis)) as uow:
        source = _live(uow, home, from_id, "from_id")
        if uow.load(home, to_id) is None or _target_hidden(uow, scope, home, to_id):
            raise _missing_target(uow, scope, home, from_id, to_id)
        if any(lk["id"] == to_id and lk.get("relation", "related") == relation for lk in source.links):
            source.unlink([{"id": to_id, "relation": relation}], cause="caller")
            uow.add(source)
            uow.commit()
    deps.store.await_position(uow.position)
    return note_view(source, "unlinked")


# -------------------------------------------------------------------- workers
@dataclass(frozen=True, slots=True)
class Workers:
    """The workers live for one write (see :func:`workers_for`)."""

    linker: LinkerSettings | None
    evolution: EvolutionSettings | None

    @property
    def neighbours_wanted(self) -> int:
        """How many nearest neighbours the write's lookup must fetch."""
        by_vector = self.linker is not None and self.linker.by == "similarity"
        return max(self.linker.top_k if self.linker and by_vector else 0,
                   self.evolution.max_patches if self.evolution else 0)

    @property
    def by_terms(self) -> bool:
        """Whether the linker links by shared terms."""
        return self.linker is not None and self.linker.by == "terms"

    @property
    def adjacent(self) -> bool:
        """Whether the linker adds the ``follows`` edge (needs the newest note)."""
        return self.linker is not None and self.linker.adjacent > 0.0

    @property
    def needs_postings(self) -> bool:
        """Whether the write looks up :class:`BatchTerms` (shared terms, or the previous
        note of the adjacency edge)."""
        return self.by_terms or self.adjacent


class BatchTerms:
    """The shared-term linker's view of one write: the committed postings of the
    write's terms (one ``UnitOfWork.term_postings`` per kind) plus the notes the write
    has linked so far, so the later items of a batch see the earlier ones (their terms,
    and the newest of each kind for the adjacency edge)."""

    def __init__(self, stored: dict[str, link_terms.TermPostings]) -> None:
        self._stored = stored
        self._local: dict[tuple[str, str], list[str]] = {}
        self._at: dict[str, float] = {}
        self._count: dict[str, int] = {}
        self._last: dict[str, str] = {}

    @classmethod
    def lookup(cls, uow: UnitOfWork, scope: Scope, items: list[tuple[str, str | None]],
               now: datetime, *, by_terms: bool = True, latest: bool = False) -> BatchTerms:
        """Postings for ``items`` = ``(kind, content)`` of the write: one lookup per kind
        (``by_terms=False``: no terms; ``latest``: also the kind's newest note)."""
        wanted: dict[str, set[str]] = {}
        for kind, content in items:
            wanted.setdefault(kind, set()).update(link_terms.note_terms(content) if by_terms else ())
        return cls({kind: uow.term_postings(scope, kind, sorted(terms), now=now, latest=latest)
                    for kind, terms in wanted.items()})

    def previous(self, kind: str) -> str | None:
        """The note written just before, in this scope and ``kind``: the write's own
        latest of that kind, else the store's newest (``None`` in an empty scope)."""
        return self._last.get(kind) or self._stored.get(kind, _NO_POSTINGS).latest

    def edges(self, note: Note, k: int, skip: set[str]) -> list[tuple[str, float]]:
        """Up to ``k`` term edges of the new ``note`` (:func:`link_terms.term_edges`),
        then records ``note`` as an earlier note of the rest of the write."""
        stored = self._stored.get(note.kind, _NO_POSTINGS)
        terms = link_terms.note_terms(note.content)
        earlier: dict[str, list[str]] = {}
        for t in terms:
            ids = [*stored.ids.get(t, ()), *self._local.get((note.kind, t), ())]
            earlier[t] = [i for i in dict.fromkeys(ids) if i != note.note_id and i not in skip]
        n = stored.notes + self._count.get(note.kind, 0) + 1
        order = {**stored.ingested, **self._at}
        out = link_terms.term_edges(terms, earlier, n, k, order)
        for t in terms:
            self._local.setdefault((note.kind, t), []).append(note.note_id)
        self.record(note)
        return out

    def record(self, note: Note) -> None:
        """``note`` is now an earlier note of the rest of the write (and its kind's newest)."""
        self._at[note.note_id] = note.created_on.timestamp()
        self._count[note.kind] = self._count.get(note.kind, 0) + 1
        self._last[note.kind] = note.note_id


_NO_POSTINGS = link_terms.TermPostings(0, {}, {})


def note_time(note: Note) -> datetime:
    """The time of a note for the adjacency window: its ``t_ref``, else its write time."""
    return note.t_ref or note.created_on


def adjacent_edge(linker: LinkerSettings, note: Note, previous: Note | None) -> dict[str, Any] | None:
    """The ``follows`` edge of ``note`` to ``previous`` (see :class:`LinkerSettings`), or
    ``None`` (adjacency off, no previous note, or further apart than the window)."""
    if linker.adjacent <= 0.0 or previous is None or previous.note_id == note.note_id:
        return None
    apart = abs((note_time(note) - note_time(previous)).total_seconds())
    if apart > linker.adjacent_window:
        return None
    return {"id": previous.note_id, "relation": "follows", "weight": round(linker.adjacent, 6)}


def workers_for(deps: Deps, scope: Scope) -> Workers | None:
    """The live workers of a write to ``scope``: ``None`` unless one is enabled, the
    fabric is not passive and a session is attached to ``scope`` (the attach gate)."""
    linker = deps.linker if deps.linker.enabled else None
    evolution = deps.evolution if deps.evolution.enabled else None
    if (linker is None and evolution is None) or deps.passive:
        return None
    if not deps.gate.any_attached(scope.key):
        return None
    return Workers(linker, evolution)


def closest(note: Note, vector: np.ndarray, stored: list[Neighbour], local: LocalIndex,
            floor: float, k: int, skip: set[str]) -> list[tuple[str, float]]:
    """The ``k`` nearest live, current neighbours of a new note at similarity ≥
    ``floor``: stored candidates (the write's lookup) and the batch's own notes."""
    best: dict[str, float] = {}
    for nid, sim in local.nearest(vector, note.kind, k + len(skip) + 1):
        best[nid] = sim
    for c in stored:
        if c.note_id not in local:
            best.setdefault(c.note_id, c.similarity)
    out = [(nid, sim) for nid, sim in best.items()
           if nid != note.note_id and nid not in skip and sim >= floor]
    out.sort(key=lambda x: (-x[1], x[0]))
    return out[:k]


def _live_targets(uow: UnitOfWork, scope: Scope, near: list[tuple[str, float]]) -> list[tuple[Note, float]]:
    """The live, not superseded notes among ``near`` (one replay query for all)."""
    loaded = {n.note_id: n for n in uow.load_ids([note_uuid(scope, nid) for nid, _ in near])}
    out: list[tuple[Note, float]] = []
    for nid, w in near:
        other = loaded.get(nid)
        if other is not None and other.live and other.superseded_by is None:
            out.append((other, w))
    return out


def run_workers(workers: Workers, uow: UnitOfWork, scope: Scope, note: Note, vector: np.ndarray,
                stored: list[Neighbour], local: LocalIndex, skip: set[str],
                terms: BatchTerms | None = None) -> None:
    """Link and evolve for the new note ``note`` (see the module doc); ``terms``: the
    write's :class:`BatchTerms` when the linker links by shared terms."""
    cause = f"evolution:{note.note_id}:v{note.version}"  # the write's own event
    floor = min(s.floor for s in (workers.linker, workers.evolution) if s is not None)
    wanted = workers.neighbours_wanted
    targets = _live_targets(uow, scope, closest(note, vector, stored, local, floor, wanted, skip)) if wanted else []
    if workers.linker is not None:
        edges = linker_edges(workers.linker, uow, scope, note, targets, skip, terms)
        if edges:
            note.link(edges, cause="linker")
            uow.add(note)
    if workers.evolution is not None:
        patched: list[str] = []
        for other, sim in targets:
            if (len(patched) >= workers.evolution.max_patches or sim < workers.evolution.floor
                    or not patchable(note, other)):
                continue
            patch = evolution_patch(note, other, workers.evolution.max_bytes)
            if patch is None:
                continue
            other.contribute(source=note, patch=patch, cause=cause)
            uow.add(other)
            patched.append(other.note_id)
        if patched:
            note.record_contributions(patched, cause="evolution")
            uow.add(note)


def width(note: Note) -> int:
    """How far ``note`` is seen: 0 thread, 1 resource, 2 tenant (``visibility.ORDER``)."""
    return visibility.ORDER[visibility.of_consent(note.consent)]


def linkable(source: Note, target: Note) -> bool:
    """A worker links ``source`` to ``target`` only when the target is seen at least as
    widely: a note's links are read wherever the note is, so an edge from a user-level
    note to a thread-only one would show that note's id to other threads."""
    return width(target) >= width(source)


def patchable(source: Note, target: Note) -> bool:
    """Evolution patches ``target`` with what ``source`` holds only when the target is
    seen no more widely than the source, so a contribution never widens its reach."""
    return width(target) <= width(source)


def linker_edges(linker: LinkerSettings, uow: UnitOfWork, scope: Scope, note: Note,
                 targets: list[tuple[Note, float]], skip: set[str],
                 terms: BatchTerms | None) -> list[dict[str, Any]]:
    """The linker's edges of the new ``note``: up to ``top_k`` ``related`` ones (shared
    terms, or the nearest ``targets`` at similarity ≥ ``floor``), then the ``follows``
    edge (:func:`adjacent_edge`). Every target is loaded live and current, in one query."""
    previous = _previous(linker, terms, note, skip)
    found: list[tuple[str, float]] = []
    if linker.by == "terms" and terms is not None:
        found = terms.edges(note, linker.top_k, skip)
    elif terms is not None:
        terms.record(note)
    loaded = _loaded(uow, scope, note, found, previous)
    before = next((t for t, _ in loaded if t.note_id == previous), None)
    if linker.by == "terms" and terms is not None:
        found_ids = {nid for nid, _ in found}
        linked = [(t, w) for t, w in loaded if t.note_id in found_ids]
    else:
        linked = [(t, sim) for t, sim in targets if sim >= linker.floor and linkable(note, t)]
    edges = [related_edge(t, w) for t, w in linked][: linker.top_k]
    follows = adjacent_edge(linker, note, before)
    return [*edges, follows] if follows is not None else edges


def _previous(linker: LinkerSettings, terms: BatchTerms | None, note: Note, skip: set[str]) -> str | None:
    """The id of the note a ``follows`` edge may go to (the newest of ``note``'s kind
    before it, :meth:`BatchTerms.previous`), or ``None``: adjacency off, no postings, or
    that note is in ``skip``."""
    previous = terms.previous(note.kind) if terms is not None and linker.adjacent > 0.0 else None
    return None if previous in skip else previous


def _loaded(uow: UnitOfWork, scope: Scope, note: Note, found: list[tuple[str, float]],
            previous: str | None) -> list[tuple[Note, float]]:
    """The ``found`` targets and ``previous`` (weight 0), loaded live and current in
    one query, keeping those ``note`` may link to (:func:`linkable`)."""
    found_ids = {nid for nid, _ in found}
    wanted = [*found, *([(previous, 0.0)] if previous and previous not in found_ids else [])]
    if not wanted:
        return []
    return [(t, w) for t, w in _live_targets(uow, scope, wanted) if linkable(note, t)]


def related_edge(target: Note, weight: float) -> dict[str, Any]:
    """A ``related`` edge to ``target``, its weight clipped to [0, 1] and rounded to 6 places."""
    return {"id": target.note_id, "relation": "related", "weight": round(min(1.0, max(0.0, weight)), 6)}


def _size(patch: dict[str, Any]) -> int:
    return len(json.dumps(patch, separators=(",", ":"), ensure_ascii=False).encode())


def evolution_patch(source: Note, target: Note, max_bytes: int) -> dict[str, Any] | None:
    """What ``target`` gains from ``source`` (new keywords; ``source.context`` when
    ``target`` has none), at most ``max_bytes`` bytes of JSON; ``None`` when nothing."""
    patch: dict[str, Any] = {"keywords": [], "context": None}
    for kw in source.keywords:
        if kw in target.keywords or kw in patch["keywords"]:
            continue
        patch["keywords"].append(kw)
        if _size(patch) > max_bytes:
            patch["keywords"].pop()
            break
    if target.context is None and source.context:
        text = source.context
        while text and _size({**patch, "context": text}) > max_bytes:
            raw = text.encode()
            over = _size({**patch, "context": text}) - max_bytes
            text = raw[: max(0, min(len(raw) - 1, len(raw) - over))].decode("utf-8", "ignore")
        patch["context"] = text or None
    if not patch["keywords"] and patch["context"] is None:
        return None
    return patch


def withdraw_contributions(uow: UnitOfWork, note: Note, in_flight: dict[UUID, Note]) -> None:
    """Before ``note`` is forgotten: withdraw its evolution patches from the notes it
    patched (``in_flight``: notes this unit of work already holds, by aggregate id)."""
    for nid in getattr(note, "contributed_to", []):
        try:
            target = in_flight.get(note_uuid(note.scope, nid)) or uow.load(note.scope, nid)
        except EventIntegrityError:
            # the target cannot be decrypted (key fault): the patch is sealed under this
            # note's key, which the erasure shreds, so it is unreadable from then on anyway
            continue
        if target is None or target.forgotten:
            continue
        target.withdraw(source=note, cause=f"withdraw:{note.note_id}")
        uow.add(target)
