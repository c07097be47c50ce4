"""``notes.entities`` (issue 32): resolve, upsert, merge and undo entities of a scope.

Every write runs in one unit of work holding the write locks of the entity's
visibility group (:func:`memfabric.domain.visibility.write_locks`), reads the entity
index (:mod:`memfabric.projections.entities`) on that unit of work's connection,
and raises before anything is written (pydantic ``ValidationError`` for bad input,
:class:`~memfabric.domain.entity.EntityError` and its subclasses otherwise). Names
and identifiers are never stored outside the entity's sealed events: the index holds
keyed digests (see :mod:`memfabric.domain.entities.keys`).

A merge is resumable: step one moves the loser's names and identifiers to the winner
(one transaction, ``EntitiesMerged`` on both), then the notes about the loser are
re-pointed in batches (one transaction per batch, a ``NoteEntityRepointed`` event on
each note with cause ``merge:<merge id>``). Calling ``merge`` again with the same pair
after an interruption continues with the notes left. ``undo_merge`` runs the same two
steps backwards.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Protocol, cast
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from memfabric.domain.entities import keys as ek
from memfabric.domain import visibility
from memfabric.domain.entity import (
    ENTITY_PREFIX,
    Entity,
    EntityError,
    EntityNotFoundError,
    IdentifierConflictError,
    NoteEntityRepointed,
    note_entity,
)
from memfabric.domain.inputs import reject_nul
from memfabric.domain.scope import Scope
from memfabric.domain.subjects.key import MAX_KEY_CHARS
from memfabric.domain.visibility import Visibility

if TYPE_CHECKING:
    from memfabric.domain.deps import Deps

DIGEST_CHARS = 32
"""Hex characters kept of a key's HMAC-SHA256 (128 bits)."""

PER_KEY = 50
"""Entities a resolution reads per lookup key at most."""

PER_FUZZY_KEY = 10
"""... per single-token key (``tok``/``del``: a common first name is shared by many)."""

PREFETCH_SPARE = 2
"""Entities beyond a resolve's ``limit`` whose events its lookup brings along: the store
guesses the ranking (:func:`memfabric.domain.entities.keys.score` in SQL), and a
rounding tie at the cut may order two candidates differently; a candidate outside the
guess costs one more statement, never a different result."""

MERGE_BATCH = 200
"""Notes re-pointed per transaction by a merge or its undo."""

Surface = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]
TypeLabel = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,39}$")]
EntityId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12}$")]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return reject_nul(value)


class IdentifierInput(_Input):
    """An identifier ``(kind, value)``: ``kind`` a label (``email``, ``phone``, ``handle``,
    ``url`` or a host's own, see :data:`~memfabric.domain.entities.keys.IDENTIFIER_KIND`);
    ``value`` 1-320 characters, which a built-in kind checks the shape of
    (:func:`~memfabric.domain.entities.keys.identifier_problem`)."""

    kind: Annotated[str, StringConstraints(pattern=ek.IDENTIFIER_KIND.pattern)]
    value: Annotated[str, StringConstraints(min_length=1, max_length=320, strip_whitespace=True)]

    @model_validator(mode="after")
    def _shaped(self) -> IdentifierInput:
        problem = ek.identifier_problem(self.kind, self.value)
        if problem is not None:
            raise ValueError(f"identifier {self.kind} {self.value!r}: {problem}")
        return self


class ResolveInput(_Input):
    surface: Surface
    type: TypeLabel | None = None
    limit: Annotated[int, Field(ge=1, le=50)] = 5


class UpsertInput(_Input):
    surface: Surface
    type: TypeLabel | None = None
    identifiers: Annotated[list[IdentifierInput], Field(max_length=50)] = []
    visibility: Visibility = "resource"

    @field_validator("identifiers", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        """``("email", "x@y")`` pairs (or mappings) as identifier inputs."""
        if isinstance(value, list | tuple):
            return [{"kind": v[0], "value": v[1]} if isinstance(v, list | tuple) and len(v) == 2 else v
                    for v in value]
        return value


class MergeInput(_Input):
    winner: EntityId
    loser: EntityId
    reason: Annotated[str, StringConstraints(min_length=1, max_length=500)] = "caller"
    batch: Annotated[int, Field(ge=1, le=5000)] = MERGE_BATCH


class EntityRefInput(_Input):
    """One entity named by its id (12 lower-case hex digits), as ``get`` and ``forget`` take it."""

    entity: EntityId


class UndoMergeInput(_Input):
    """``undo_merge``'s arguments: the merged entity's id and the notes per batch (1-5,000)."""

    loser: EntityId
    batch: Annotated[int, Field(ge=1, le=5000)] = MERGE_BATCH


class PageInput(_Input):
    """``list``'s page: after entity id ``after`` (``None``: from the first), ``limit`` 1-1,000."""

    after: EntityId | None = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 100


# ------------------------------------------------------------------ results
@dataclass(frozen=True, slots=True)
class EntityView:
    """An entity as its reader sees it (names read from its sealed events)."""

    id: str
    type: str
    display_name: str | None
    aliases: tuple[str, ...]
    identifiers: tuple[tuple[str, str], ...]
    visibility: str
    scope: Scope
    merged_into: str | None = None
    forgotten: bool = False


@dataclass(frozen=True, slots=True)
class EntityCandidate:
    """One resolution candidate: ``tier`` (identifier, exact_name, exact_alias,
    normalised, fuzzy) and ``score`` in [0, 1]."""

    id: str
    tier: str
    score: float
    type: str
    display_name: str | None


@dataclass(frozen=True, slots=True)
class UpsertResult:
    """``outcome``: ``resolved`` (an existing entity, auto-resolved at ``tier``) or
    ``created``; ``candidates``: the other entities the surface may be (merge
    candidates); ``added``: what the upsert added (``alias:…`` / ``identifier:kind``)."""

    entity: EntityView
    outcome: str
    tier: str | None
    candidates: tuple[EntityCandidate, ...] = ()
    added: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MergeResult:
    """A merge (or undo): ``merge_id``, the two entity ids, ``repointed`` notes and the
    ``batches`` (transactions) that moved them."""

    merge_id: str
    winner: str
    loser: str
    repointed: int
    batches: int
    undone: bool = False


@dataclass(frozen=True, slots=True)
class KeyHit:
    """A key row the entity index returned."""

    aggregate_id: UUID
    entity_id: str
    digest: str
    source: int
    ntok: int


@dataclass(frozen=True, slots=True)
class EntityRef:
    """Where an entity lives: aggregate id, home scope, visibility, merged into."""

    aggregate_id: UUID
    scope: Scope
    visibility: str
    merged_into: str | None = None
    type: str = "thing"


@dataclass(frozen=True, slots=True)
class NoteAbout:
    """A note about an entity: aggregate id, home, visibility, note id."""

    aggregate_id: UUID
    scope: Scope
    visibility: str
    note_id: str


Ask = tuple[str, int, str, int]
"""One key a lookup reads: ``(digest, at most n key rows, kind, token index)`` (the kind
and token index of the probe's key, see :class:`memfabric.domain.entities.keys.Probe`)."""


def _none(aggregate_ids: Sequence[UUID]) -> list[Entity] | None:
    return None


@dataclass(frozen=True, slots=True)
class Lookup:
    """What a lookup of a surface's keys found: per entity id its aggregate id and
    :class:`~memfabric.domain.entities.keys.Match`; ``replay(ids)``: the entities ``ids``
    replayed from events that came with the lookup, in order, or ``None`` unless every
    one of them did (then the caller loads them)."""

    matches: dict[str, tuple[UUID, ek.Match]]
    replay: Callable[[Sequence[UUID]], list[Entity] | None] = _none


def lookup_by_keys(store: EntityStore, reader: Scope, asks: Sequence[Ask], type_: str | None,
                   uow: Any = None) -> Lookup:
    """A :class:`Lookup` (no events) from ``store.keys`` (in ``uow``'s transaction when
    given): the key rows tallied per entity."""
    code = {d: (kind, tok) for d, _, kind, tok in asks}
    rows = store.keys(reader, [(d, n) for d, n, _, _ in asks], type_, uow)
    aggregate = {r.entity_id: r.aggregate_id for r in rows}
    matches = ek.tally((r.entity_id, *code[r.digest], r.source, r.ntok) for r in rows)
    return Lookup({e: (aggregate[e], m) for e, m in matches.items()})


class EntityUnitOfWork(Protocol):
    """What entity writes need of a unit of work (both backends' units of work have it;
    the ledger uses the same ``*_aggregate`` methods)."""

    def __enter__(self) -> EntityUnitOfWork: ...

    def __exit__(self, *exc: object) -> None: ...

    def load_aggregate(self, aggregate_id: UUID) -> Any: ...

    def add_aggregate(self, aggregate: Any) -> None: ...


    def load_ids(self, aggregate_ids: Sequence[UUID]) -> list[Any]: ...

    def add(self, note: Any) -> None: ...

    def commit(self) -> None: ...

    def content_hmac(self, text: str) -> str: ...

    @property
    def position(self) -> int: ...


def open_uow(deps: Deps, locks: Sequence[Scope]) -> EntityUnitOfWork:
    """A unit of work holding ``locks`` (sorted), typed for entity writes."""
    return cast(EntityUnitOfWork, deps.unit_of_work(sorted(locks, key=lambda s: s.key)))


class EntityStore(Protocol):
    """The entity index (``mf_entity_*``), read in ``uow``'s transaction when given."""

    def keys(self, reader: Scope, digests: Sequence[tuple[str, int]], type_: str | None,
             uow: Any = None) -> list[KeyHit]:
        """Key rows of live entities visible from ``reader`` per ``(digest, at most n
        entities)``, of ``type_`` when given."""
        ...

    def lookup(self, reader: Scope, asks: Sequence[Ask], type_: str | None, *, ntok: int,
               prefetch: int = 0) -> Lookup:
        """What the keys ``asks`` find among the live entities visible from ``reader``
        (of ``type_`` when given; ``ntok``: the surface's token count), outside any unit
        of work; with ``prefetch`` > 0 the events of the ``prefetch`` entities likely to
        rank first may come along (:attr:`Lookup.replay`)."""
        ...

    def load_many(self, aggregate_ids: Sequence[UUID]) -> list[Entity]:
        """The entities ``aggregate_ids`` replayed (absent ones skipped), in order."""
        ...

    def owner(self, grp: str, digest: str, uow: Any = None) -> str | None: ...

    def find(self, reader: Scope, entity_id: str, uow: Any = None) -> list[EntityRef]: ...

    def page(self, reader: Scope, *, after: str | None, limit: int) -> list[EntityRef]:
        """Live entities visible from ``reader`` by entity id, after ``after``."""
        ...

    def homed(self, tenant_id: str, resource_id: str | None, thread_id: str | None,
              limit: int) -> list[EntityRef]:
        """Un-forgotten entities whose home is in a scope prefix (``None``: any part)."""
        ...

    def notes_of(self, tenant_id: str, entity_id: str, *, merge_id: str | None,
                 limit: int) -> list[NoteAbout]: ...

    def load(self, aggregate_id: UUID) -> Entity | None: ...


def view(e: Entity) -> EntityView:
    """The :class:`EntityView` of an entity."""
    return EntityView(e.entity_id, e.type, e.display_name, tuple(e.aliases),
                      tuple((k, v) for k, v in e.identifiers), e.visibility, e.scope, e.merged_into,
                      e.forgotten)


def new_entity_id() -> str:
    return os.urandom(6).hex()


@dataclass
class EntityContext:
    """What one call works with: the dependencies, the reader's scope, the unit of work."""

    deps: Deps
    scope: Scope
    uow: Any = None
    digests: dict[str, str] = field(default_factory=dict)

    @property
    def store(self) -> EntityStore:
        store = getattr(self.deps, "entity_store", None)
        if store is None:
            raise EntityError("this fabric has no entity index")
        return store  # type: ignore[no-any-return]

    def digest(self, text: str) -> str:
        found = self.digests.get(text)
        if found is None:
            source = self.uow if self.uow is not None else self.deps.store
            found = self.digests[text] = source.content_hmac(text)[:DIGEST_CHARS]
        return found

    def sealed_keys(self, keys: Sequence[ek.Key]) -> list[list[Any]]:
        """``[kind, digest, source, ntok]`` of each key (the event's sealed form)."""
        return [[k.kind, self.digest(k.digest_input()), k.source, k.ntok] for k in keys]


Ranked = tuple[str, str, float, UUID]
"""A ranked entity: ``(entity id, tier, score, aggregate id)``."""


def rank(ctx: EntityContext, surface: str, type_: str | None,
         identifiers: Sequence[tuple[str, str]] = ()) -> list[Ranked]:
    """Ranked ``(entity id, tier, score, aggregate id)`` of the live entities visible from the
    context's scope that ``surface`` (and ``identifiers``) may name, best first."""
    return lookup(ctx, surface, type_, identifiers)[0]


def lookup(ctx: EntityContext, surface: str, type_: str | None, identifiers: Sequence[tuple[str, str]] = (),
           *, prefetch: int = 0) -> tuple[list[Ranked], Lookup]:
    """:func:`rank` and the :class:`Lookup` it ranked (outside a unit of work, with the
    events of about ``prefetch`` entities likely to rank first, see
    :meth:`EntityStore.lookup`; in one, from ``EntityStore.keys`` on its connection)."""
    p = ek.probe(surface, identifiers)
    asks = [(ctx.digest(text), PER_FUZZY_KEY if kind in ek.FUZZY_KINDS else PER_KEY, kind, tok)
            for text, (kind, tok) in p.keys.items()]
    if ctx.uow is None:
        found = ctx.store.lookup(ctx.scope, asks, type_, ntok=p.ntok, prefetch=prefetch)
    else:
        found = lookup_by_keys(ctx.store, ctx.scope, asks, type_, ctx.uow)
    scored: list[Ranked] = []
    for entity_id, (aggregate_id, m) in found.matches.items():
        got = ek.score(p, m)
        if got is not None:
            scored.append((entity_id, got[0], got[1], aggregate_id))
    scored.sort(key=lambda c: (-c[2], ek.TIERS.index(c[1]), c[0]))
    return scored, found


def locate(ctx: EntityContext, entity_id: str) -> EntityRef:
    """The entity ``entity_id`` visible from the context's scope (its own first);
    ``EntityNotFoundError`` otherwise."""
    found = ctx.store.find(ctx.scope, entity_id, ctx.uow)
    if not found:
        raise EntityNotFoundError(f"no entity {entity_id!r} visible from {ctx.scope}")
    return found[0]


def load_entity(ctx: EntityContext, ref: EntityRef) -> Entity:
    """The entity aggregate of ``ref`` (in the unit of work when there is one)."""
    found = ctx.uow.load_aggregate(ref.aggregate_id) if ctx.uow is not None else ctx.store.load(ref.aggregate_id)
    if not isinstance(found, Entity):
        raise EntityNotFoundError(f"entity {ref.aggregate_id} is not in the log")
    return found


def candidates(ctx: EntityContext, ranked: Sequence[tuple[str, str, float, Any]], limit: int,
               skip: str | None = None, found: Lookup | None = None) -> tuple[EntityCandidate, ...]:
    """The first ``limit`` ranked entities as candidates (names read from the log: from
    the events that came with ``found`` when all of theirs did, else in one replay of
    them all)."""
    picked = [c for c in ranked if c[0] != skip][:limit]
    ids = [c[3] for c in picked]
    loaded: list[Entity] | None
    if ctx.uow is not None:
        loaded = [a for a in map(ctx.uow.load_aggregate, ids) if isinstance(a, Entity)]
    else:
        loaded = found.replay(ids) if found is not None else None
        if loaded is None:
            loaded = ctx.store.load_many(ids)
    by_id = {e.id: e for e in loaded}
    return tuple(EntityCandidate(c[0], c[1], c[2], by_id[c[3]].type, by_id[c[3]].display_name)
                 for c in picked if c[3] in by_id)


def group_of(scope: Scope, vis: str) -> str:
    """The key of the visibility group an entity of ``scope`` and ``vis`` belongs to."""
    return visibility.lock_scope(scope, visibility.of_consent({"visibility": vis})).key


def check_identifiers(ctx: EntityContext, grp: str, owner: str | None,
                      identifiers: Sequence[tuple[str, str]]) -> None:
    """``IdentifierConflictError`` when an identifier belongs to an entity of group
    ``grp`` other than ``owner`` (``None``: a new entity)."""
    for kind, value in identifiers:
        held = ctx.store.owner(grp, ctx.digest(ek.identifier_key(kind, value).digest_input()), ctx.uow)
        if held is not None and held != owner:
            raise IdentifierConflictError(
                f"identifier {kind} already belongs to entity {held} (identifiers are unique per "
                "visibility group, kind and value); merge the entities instead")


def rewritten_key(key: dict[str, Any] | None, entity_id: str) -> dict[str, Any] | None:
    """A note's subject key naming entity ``entity_id`` instead."""
    if not isinstance(key, dict):
        return None
    entity = ENTITY_PREFIX + entity_id
    return {**key, "entity": entity, "key": f"{entity}|{key.get('attribute', '')}"[:MAX_KEY_CHARS]}


def repoint_notes(ctx: EntityContext, *, source: str, target: str, merge_id: str, moved_by: str | None,
                  cause: str, batch: int) -> tuple[int, int]:
    """Move the notes about ``source`` (moved by merge ``moved_by`` when given) to
    ``target``, ``batch`` per transaction; returns ``(notes, batches)``."""
    total = batches = 0
    while True:
        rows = ctx.store.notes_of(ctx.scope.tenant_id, source, merge_id=moved_by, limit=batch)
        if not rows:
            return total, batches
        locks = {s for r in rows for s in visibility.write_locks(
            r.scope, visibility.of_consent({"visibility": r.visibility}))}
        with open_uow(ctx.deps, list(locks)) as uow:
            moved = 0
            for note in uow.load_ids([r.aggregate_id for r in rows]):
                if note.forgotten or note_entity(note) != source:
                    continue
                note.trigger_event(NoteEntityRepointed, entity_id=target, previous=source,
                                   merge_id=merge_id, cause=cause,
                                   inferred_subject=rewritten_key(note.inferred_subject, target))
                uow.add(note)
                moved += 1
            uow.commit()
        ctx.deps.store.await_position(uow.position)
        total, batches = total + moved, batches + 1
        if moved == 0:
            return total, batches  # rows the index still lists but the log has moved on
