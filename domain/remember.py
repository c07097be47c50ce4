"""The ``remember`` command: validate, embed, consolidate, record.

One write (a single note or a ``remember_many`` batch) runs in one unit of work:

1. outside the transaction: redact, embed (one embedder call), hash the tokens;
2. inside it: fetch the committed consolidation candidates of every item in one
   batched query (``UnitOfWork.neighbours``), then decide item by item against those
   and the batch's own notes (:class:`~memfabric.domain.consolidation.LocalIndex`), so
   the result equals remembering the items one by one;
3. commit: the events in decision order, with their projections, in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from memfabric.domain import consolidation, history, links, policy, retention, visibility, working
from memfabric.domain.consolidation import LocalIndex, Neighbour, NeighbourQuery
from memfabric.domain.entities.subjects import resolve_subjects
from memfabric.domain.errors import (
    GuardRefusedError,
    NoteExistsError,
    NoteForgottenError,
    NoteNotFoundError,
    NotSupportedError,
    SupersessionError,
)
from memfabric.domain.inputs import RememberInput, fresh_id
from memfabric.domain.note import Note
from memfabric.domain.ports import UnitOfWork
from memfabric.domain.results import MemoryNote, Outcome, note_view
from memfabric.domain.scope import Scope

if TYPE_CHECKING:
    from memfabric.domain.deps import Deps


def new_note_id() -> str:
    """A fresh 12-hex note id (random, from ``uuid4``; never of a block id's form)."""
    return fresh_id()


def vector_bytes(vector: np.ndarray) -> bytes:
    """A vector as stored in events: contiguous float32 bytes."""
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


@dataclass(frozen=True, slots=True)
class _Prepared:
    """An embedded item, ready to decide: its redacted text, neighbour query and
    whether it consolidates (consolidation on, no explicit id or ``supersedes``)."""

    item: RememberInput
    index: int
    text: str
    query: NeighbourQuery
    consolidate: bool


CHUNK_SIZE = 250
"""Default largest number of items one unit of work of ``remember_many`` writes: a write
holds its tenant's append lock and its scopes' locks to its COMMIT (issue 24: other
tenants never wait for it), so a batch is cut into units of at most this many items to
bound how long the same tenant's other writers wait (issue 17 defect 2)."""


def remember_many(
    deps: Deps, scope: Scope, items: Sequence[RememberInput], *,
    consolidate: bool | consolidation.Consolidation | None = None,
    chunk_size: int | None = CHUNK_SIZE,
) -> list[MemoryNote]:
    """Write ``items`` in order, in units of work of at most ``chunk_size`` items
    (``None``: all in one unit of work, holding the tenant's append lock for the whole
    batch). Each unit of work is atomic; a batch larger than ``chunk_size`` is atomic
    per chunk (the chunks before a failing one stay written). Later chunks see earlier
    ones committed, so the outcome equals remembering the items one by one.
    ``working`` items write their block and are never embedded. Raises what the item
    checks raise (``NoteExistsError``, ``NoteNotFoundError``, ``NoteForgottenError``,
    ``SupersessionError``, ``NotSupportedError``, block errors); nothing of the failing
    chunk is written then."""
    if any(item.kind == "episode" for item in items):
        raise NotSupportedError("kind 'episode' is a view over a conversation ledger and is not supported yet")
    if not items:
        return []
    if chunk_size is not None and chunk_size < 1:
        raise ValueError("chunk_size must be at least 1 (or None)")
    if chunk_size is not None and len(items) > chunk_size:
        out: list[MemoryNote] = []
        for start in range(0, len(items), chunk_size):
            out += remember_many(deps, scope, items[start:start + chunk_size],
                                 consolidate=consolidate, chunk_size=None)
        return out
    settings = (consolidate if isinstance(consolidate, consolidation.Consolidation)
                else deps.consolidation if consolidate is None
                else deps.consolidation.model_copy(update={"enabled": bool(consolidate)}))
    group = deps.group_commit
    if group is None or len(items) > GROUP_ITEMS:
        return _write_now(deps, scope, items, settings)
    return group.submit((scope.key, settings), items,
                        lambda batch: _write_now(deps, scope, batch, settings))


GROUP_ITEMS = 16
"""Writes of at most this many items go through the dependencies' group commit (issue 24,
:mod:`memfabric.domain.group_commit`); larger batches are their own transaction."""


def _write_now(deps: Deps, scope: Scope, items: Sequence[RememberInput],
               settings: consolidation.Consolidation) -> list[MemoryNote]:
    """One unit of work for ``items``, and read-your-writes before returning."""
    # issue 19: embedded again (and written once more) when a reembed switched the fabric
    # to another embedder between the embedding and the commit
    results, position = deps.adopting(lambda: _write_chunk(deps, scope, items, settings))
    deps.store.await_position(position)
    return results


def _write_chunk(deps: Deps, scope: Scope, items: Sequence[RememberInput],
                 settings: consolidation.Consolidation) -> tuple[list[MemoryNote], int]:
    """Embed and write one chunk in one unit of work; returns the notes and the position.
    A chunk that reads nothing else before its commit guards against entity keys
    instead of reading them (one round trip less, issue 24); when the guard refuses,
    nothing was written and the chunk is written again with the read."""
    try:
        return _write_once(deps, scope, items, settings, guard=True)
    except GuardRefusedError:
        return _write_once(deps, scope, items, settings, guard=False)


def _reads_nothing_else(items: Sequence[RememberInput], asking: Sequence[_Prepared],
                        workers: links.Workers | None) -> bool:
    """Whether a write of ``items`` reads nothing but the entity keys before its commit:
    no neighbour lookup, no live worker, no explicit id, link, target or working block;
    and is small (at most :data:`GROUP_ITEMS` items: a bulk chunk saves little by a
    round trip and would lose a whole chunk's work to a refused guard)."""
    return len(items) <= GROUP_ITEMS and not asking and workers is None and all(
        item.id is None and not item.links and item.supersedes is None and item.kind != "working"
        for item in items)


def _write_once(deps: Deps, scope: Scope, items: Sequence[RememberInput],
                settings: consolidation.Consolidation, *, guard: bool) -> tuple[list[MemoryNote], int]:
    """:func:`_write_chunk` in one unit of work; ``guard``: the entity keys may be
    guarded against rather than read (``resolve_subjects``), when nothing else is read."""
    prepared = _prepare(deps, items, settings.enabled)
    targets = _supersede_targets(deps, scope, items)
    locks = {*lock_scopes(scope, items), *(lock for _, locked in targets.values() for lock in locked)}
    with deps.unit_of_work(sorted(locks, key=lambda s: s.key)) as uow:
        now = datetime.now(timezone.utc)
        workers, asking, wanted = _neighbour_lookup(deps, scope, prepared)
        # issue 24: the neighbours of the keys as they are travel with the entity read
        uow.prefetch_neighbours(scope, [p.query for p in asking], now=now, per_query=wanted.per_query,
                                near=wanted.near)
        prepared = resolve_subjects(deps, uow, scope, prepared,  # issue 32: keys naming entities
                                    guard=guard and _reads_nothing_else(items, asking, workers))
        writer = _Writer(deps, uow, scope, now, prepared, settings.threshold)
        writer.homes = {nid: home for nid, (home, _) in targets.items()}
        results = [writer.write(i, item) for i, item in enumerate(items)]
        uow.commit()
    return results, uow.position


def lock_scopes(scope: Scope, items: Sequence[RememberInput]) -> list[Scope]:
    """The scopes whose write locks a write of ``items`` to ``scope`` takes: ``scope``
    itself and, per visibility its notes get, the locks of its consolidation group
    (:func:`memfabric.domain.visibility.write_locks`: ``(tenant, resource)`` for
    resource-visible notes, that and ``(tenant)`` for tenant-visible ones), so two
    writers of one group in two threads are serialised. The unit of work sorts them."""
    out = {scope}
    for item in items:
        if item.kind != "working":
            out |= visibility.write_locks(scope, item_visibility(item))
    return sorted(out, key=lambda s: s.key)


def _supersede_targets(deps: Deps, scope: Scope, items: Sequence[RememberInput],
                       ) -> dict[str, tuple[Scope, list[Scope]]]:
    """Issue 16: the home of each explicit ``supersedes`` target (any note visible from
    ``scope``, :func:`memfabric.domain.history.locate`) and the locks changing it takes."""
    out: dict[str, tuple[Scope, list[Scope]]] = {}
    for item in items:
        if item.supersedes is not None and item.supersedes not in out:
            home, vis = history.locate(deps, scope, item.supersedes)
            out[item.supersedes] = (home, history.lock_scopes(home, vis))
    return out


def item_visibility(item: RememberInput) -> visibility.Visibility:
    """The visibility a new note of ``item`` gets (the caller's, else the kind's
    default, :data:`memfabric.domain.visibility.DEFAULT_VISIBILITY`)."""
    given = item.consent.visibility if item.consent is not None else None
    return given or visibility.DEFAULT_VISIBILITY.get(item.kind, visibility.LEGACY_VISIBILITY)


def _consent(item: RememberInput) -> dict[str, Any] | None:
    """The consent stored on a new note of ``item`` (visibility always explicit)."""
    return visibility.stored_consent(item.kind, item.consent.model_dump() if item.consent else None)


def _stored_decision(why: dict[str, Any] | None) -> dict[str, Any] | None:
    """The decision recorded on the new note: without ``old_value``, a value read from
    the note it replaces, which that note's own ``Superseded`` event keeps under its
    key, so forgetting that note erases it (the write's result still shows it)."""
    if not why or "old_value" not in why:
        return why
    return {k: v for k, v in why.items() if k != "old_value"}


def _prepare(deps: Deps, items: Sequence[RememberInput], on: bool) -> dict[int, _Prepared]:
    """Redact, embed (one call) and hash every non-working item, by item index."""
    picked = [(i, item) for i, item in enumerate(items) if item.kind != "working"]
    texts = [deps.redact(item.text) or "" for _, item in picked]
    vectors = deps.embed(texts) if texts else np.zeros((0, deps.embedder.dim), np.float32)
    out = {}
    extractor = deps.subject_extractor
    for n, ((i, item), text) in enumerate(zip(picked, texts, strict=True)):
        inferred = (extractor.extract(text, kind=item.kind)
                    if extractor is not None and item.subject is None and item.kind == "fact" else None)
        query = NeighbourQuery(item.kind, vectors[n], policy.content_hash(text),
                               item.path, item.subject, inferred, item_visibility(item))
        asks = on and item.id is None and item.supersedes is None
        out[i] = _Prepared(item, n, text, query, asks)
    return out


class _Wanted(NamedTuple):
    """The neighbour lookup's ``per_query`` and ``near`` (``UnitOfWork.neighbours``)."""

    per_query: int
    near: bool


def _neighbour_lookup(deps: Deps, scope: Scope, prepared: dict[int, _Prepared],
                      ) -> tuple[links.Workers | None, list[_Prepared], _Wanted]:
    """The live workers of a write, the items that ask the consolidation index for
    neighbours and the lookup's ``per_query`` and ``near`` (issue 15: live workers reuse
    this lookup, every item asks, top-k nearest). Only workers that want nearest
    vectors (the similarity linker, evolution) ask for them: a write's decision never
    rests on similarity alone (:func:`memfabric.domain.consolidation.choose`), and the
    nearest-vector scan is the one part of the lookup whose cost grows with the scope."""
    workers = links.workers_for(deps, scope)
    asking = [p for p in prepared.values() if p.consolidate or workers is not None]
    k = workers.neighbours_wanted if workers is not None else 0
    return workers, asking, _Wanted(max(3, k), near=k > 0)


class _Writer:
    """Decides and records the items of one write inside its unit of work."""

    def __init__(self, deps: Deps, uow: UnitOfWork, scope: Scope, now: datetime,
                 prepared: dict[int, _Prepared], threshold: float) -> None:
        self.deps, self.uow, self.scope, self.now = deps, uow, scope, now
        self.prepared = prepared
        self.workers, asking, wanted = _neighbour_lookup(deps, scope, prepared)
        found = (uow.neighbours(scope, [p.query for p in asking], now=now, per_query=wanted.per_query,
                                near=wanted.near) if asking else [])
        self.stored = {p.index: cands for p, cands in zip(asking, found, strict=True)}
        self.threshold = threshold
        self.local = LocalIndex(deps.embedder.dim, len(prepared), scope=scope)
        if len(asking) > 1:
            self.local.prepare(np.stack([p.query.embedding for p in prepared.values()]), self.threshold)
        self.blocks = working.BlockWriter(deps, uow, scope)
        self.homes: dict[str, Scope] = {}
        """Home scope of each explicit ``supersedes`` target (default: the writer's)."""
        self.terms = (links.BatchTerms.lookup(uow, scope, [(p.item.kind, p.text) for p in prepared.values()], now,
                                              by_terms=self.workers.by_terms,
                                              latest=self.workers.adjacent)
                      if self.workers is not None and self.workers.needs_postings else None)

    def write(self, i: int, item: RememberInput) -> MemoryNote:
        if item.kind == "working":
            assert item.block is not None and item.content is not None
            return self.blocks.change(item.block, content=item.content)
        return self._note(self.prepared[i])

    # ---------------------------------------------------------------- notes
    def _note(self, p: _Prepared) -> MemoryNote:
        self._check_id(p.item)
        self._check_links(p.item)
        if p.item.supersedes is not None:
            old = self._explicit_target(p.item)
            return self._insert(p, "supersede", old, None, {"basis": "caller_supersedes",
                                                              "note_id": old.note_id})
        neighbour = self._neighbour(p) if p.consolidate else None
        outcome = consolidation.decide(p.query, neighbour, threshold=self.threshold,
                                       valid_from=p.item.valid_from, valid_to=p.item.valid_to)
        why = consolidation.reason(p.query, neighbour, outcome)
        if outcome in ("fold", "supersede"):
            assert neighbour is not None
            old = self._load(neighbour.note_id, neighbour.home)
            if outcome == "fold":
                return self._fold(p, old, why)
            return self._insert(p, "supersede", old, neighbour, why)
        return self._insert(p, outcome, None, neighbour, why)

    def _neighbour(self, p: _Prepared) -> Neighbour | None:
        local = self.local.candidates(p.query, self.now, threshold=self.threshold, item=p.index)
        # A stored candidate this write already changed is judged by its local state.
        stored = [c for c in self.stored.get(p.index, []) if c.note_id not in self.local]
        return consolidation.choose(p.query, [*local, *stored])

    def _load(self, note_id: str, home: Scope | None = None) -> Note:
        """The note ``note_id`` of ``home`` (default: the writer's scope)."""
        where = home or self.scope
        note = self.uow.load(where, note_id)
        if note is None:
            raise NoteNotFoundError(f"no note {note_id!r} in scope {where}")
        return note

    def _check_id(self, item: RememberInput) -> None:
        """``NoteExistsError`` when the explicit id names a note of this scope, or an
        un-forgotten note of another scope visible from it (issue 16: else by-id calls
        from a scope seeing both would be ambiguous)."""
        if item.id is None:
            return
        if self.uow.exists(self.scope, item.id):
            raise NoteExistsError(f"id: note {item.id!r} already exists in scope {self.scope}")
        seen = [home for home, _ in self.uow.resolve(self.scope, item.id) if home != self.scope]
        if seen:
            raise NoteExistsError(f"id: note {item.id!r} already exists in scope {seen[0]},"
                                  f" visible from {self.scope}; choose another id")

    def _check_links(self, item: RememberInput) -> None:
        for link in item.links:
            target = self.uow.load(self.scope, link.id)
            if target is None:
                elsewhere = [h for h, _ in self.uow.resolve(self.scope, link.id) if h != self.scope]
                if elsewhere:
                    raise links.LinkScopeError(
                        f"links: note {link.id!r} lives in scope {elsewhere[0]}, not in {self.scope}:"
                        " a link joins two notes of one scope (links across threads are not made)")
                raise NoteNotFoundError(f"links: no note {link.id!r} in scope {self.scope}")
            if not target.live:
                raise NoteForgottenError(f"links: note {link.id!r} is forgotten or held")

    def _explicit_target(self, item: RememberInput) -> Note:
        assert item.supersedes is not None
        try:
            old = self._load(item.supersedes, self.homes.get(item.supersedes))
        except NoteNotFoundError:
            raise NoteNotFoundError(f"supersedes: no note {item.supersedes!r} in scope {self.scope}") from None
        if not old.live:
            raise NoteForgottenError(f"supersedes: note {item.supersedes!r} is forgotten or held")
        expired = retention.expired_at(old)
        if expired is not None:
            raise SupersessionError(f"supersedes: note {old.note_id!r} expired at {expired.isoformat()};"
                                    " an expired note is never superseded")
        if old.superseded_by is not None:
            raise SupersessionError(
                f"supersedes: note {old.note_id!r} was already superseded by "
                f"{old.superseded_by!r}; supersede that note instead")
        if item.valid_from is not None and old.valid_from is not None and item.valid_from < old.valid_from:
            raise SupersessionError(
                f"valid_from: {item.valid_from.isoformat()} is before the superseded note's "
                f"valid_from {old.valid_from.isoformat()}")
        return old

    def _fold(self, p: _Prepared, old: Note, why: dict[str, Any] | None) -> MemoryNote:
        item = p.item
        old.fold(
            content=p.text, context=self.deps.redact(item.context), keywords=list(item.keywords),
            tags=list(item.tags), source_entry_ids=list(item.source_entry_ids),
            links=[link.model_dump() for link in item.links],
            embedding=vector_bytes(p.query.embedding), embedder_id=self.deps.embedder.id,
            token_count=policy.count_tokens(p.text), importance=item.importance,
            consent=_consent(item) if item.consent else None,
            t_ref=item.t_ref, valid_from=item.valid_from, valid_to=item.valid_to, cause="fold",
            decision=why,
        )
        if item.retention is not None:  # issue 30: a repeat naming another class changes it
            old.change_retention(retention=item.retention, requested_by="caller", cause="fold")
        self._track(old, p)
        return history.shown(self.deps, self.scope, old.scope, note_view(old, "folded", decision=why),
                             self.uow.resolve)  # on the unit of work's connection

    def _insert(self, p: _Prepared, outcome: consolidation.FoldOutcome, old: Note | None,
                neighbour: Neighbour | None, why: dict[str, Any] | None) -> MemoryNote:
        item = p.item
        note_id = item.id or new_note_id()
        valid_from = item.valid_from
        if outcome == "supersede" and valid_from is None:
            valid_from = self.now
        note = Note.remember(
            scope=self.scope, note_id=note_id, kind=item.kind, content=p.text, path=item.path,
            block=None, subject=item.subject, t_ref=item.t_ref, valid_from=valid_from,
            valid_to=item.valid_to, keywords=list(item.keywords), tags=list(item.tags),
            source_entry_ids=list(item.source_entry_ids), context=self.deps.redact(item.context),
            links=[link.model_dump() for link in item.links],
            supersedes=old.note_id if old is not None else None,
            importance=0.5 if item.importance is None else item.importance,
            consent=_consent(item),
            embedding=vector_bytes(p.query.embedding), embedder_id=self.deps.embedder.id,
            dim=self.deps.embedder.dim, token_count=policy.count_tokens(p.text), cause="caller",
            inferred_subject=consolidation.key_to_dict(p.query.inferred), decision=_stored_decision(why),
            retention=item.retention,
        )
        if outcome == "precede" and neighbour is not None:
            _close_before(note, neighbour)
        self._track(note, p)
        if old is not None:
            _close_superseded(old, note_id, valid_from or self.now, why)
            self.uow.add(old)
            self.local.touch(old)
        if self.workers is not None:
            skip = {old.note_id} if old is not None else set()
            own = [c for c in self.stored.get(p.index, []) if c.home in (None, self.scope)]
            links.run_workers(self.workers, self.uow, self.scope, note, p.query.embedding,
                              own, self.local, skip, self.terms)
        result: Outcome = {"supersede": "superseding", "precede": "preceding"}.get(outcome, "inserted")  # type: ignore[assignment]
        return note_view(note, result, decision=why)

    def _track(self, note: Note, p: _Prepared) -> None:
        self.uow.add(note)
        self.local.add(note, p.query.embedding, p.query.token_hash, p.index)


def _close_before(note: Note, neighbour: Neighbour) -> None:
    """Older news: the neighbour already replaced ``note``; close its window there."""
    if neighbour.valid_from is None:
        return
    if note.valid_to is None or note.valid_to > neighbour.valid_from:
        note.supersede(successor_id=neighbour.note_id, valid_to=neighbour.valid_from,
                       cause=f"supersession:{neighbour.note_id}",
                       decision=note.decision)


def _close_superseded(old: Note, successor_id: str, close_at: datetime,
                      why: dict[str, Any] | None = None) -> None:
    """Close ``old``'s window where its successor starts (never an inverted window:
    a successor starting before ``old`` leaves it an empty window)."""
    if old.valid_from is not None and close_at < old.valid_from:
        close_at = old.valid_from
    old.supersede(successor_id=successor_id, valid_to=close_at, cause=f"supersession:{successor_id}",
                  decision=why)
