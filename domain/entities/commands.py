"""``Entities``: the entity handle of a scope (``notes.entities``, issue 32).

See :mod:`memfabric.domain.entities` for the rules (locks, sealing, resumable merges)
and :mod:`memfabric.domain.entities.keys` for the match tiers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from memfabric.domain.entities import keys as ek
from memfabric.domain import visibility
from memfabric.domain.entities import (
    PREFETCH_SPARE,
    EntityCandidate,
    EntityRefInput,
    EntityView,
    MergeInput,
    MergeResult,
    PageInput,
    ResolveInput,
    UndoMergeInput,
    UpsertInput,
    UpsertResult,
    EntityContext,
    candidates,
    check_identifiers,
    group_of,
    load_entity,
    locate,
    lookup,
    new_entity_id,
    open_uow,
    rank,
    repoint_notes,
    view,
)
from memfabric.domain.entity import Entity, EntityError, IdentifierConflictError
from memfabric.domain.scope import Scope
from memfabric.domain.visibility import Visibility

if TYPE_CHECKING:
    from memfabric.domain.deps import Deps


class Entities:
    """Resolve, upsert, merge, undo and forget the entities visible from one scope."""

    def __init__(self, deps: Deps, scope: Scope, actor: str = "caller") -> None:
        self._deps = deps
        self.scope = scope
        self.actor = actor

    def _ctx(self, uow: Any = None) -> EntityContext:
        return EntityContext(self._deps, self.scope, uow)

    # ------------------------------------------------------------------ reads
    def resolve(self, surface: str, *, type: str | None = None,  # noqa: A002 - public API name
                limit: int = 5) -> list[EntityCandidate]:
        """Ranked candidates ``surface`` may name (``limit`` 1-50, default 5): tier
        ``identifier`` (the surface is an email, handle, url or phone of the entity),
        ``exact_name``, ``exact_alias``, ``normalised`` (same tokens in another order
        or joined, initial + surname) or ``fuzzy`` (token overlap, one-letter typos);
        only live entities visible from this scope, of ``type`` when given. No model.
        ``ValidationError`` for a bad surface, type or limit."""
        args = ResolveInput(surface=surface, type=type, limit=limit)
        ctx = self._ctx()
        ranked, found = lookup(ctx, args.surface, args.type, prefetch=args.limit + PREFETCH_SPARE)
        return list(candidates(ctx, ranked, args.limit, found=found))

    def match(self, surface: str, *, type: str | None = None,  # noqa: A002
              identifiers: Iterable[Any] = ()) -> EntityCandidate | None:
        """The entity :meth:`upsert` would resolve ``surface`` (and ``identifiers``) to
        without creating one, or ``None`` (nothing sure); writes nothing. Raises as
        :meth:`upsert` (``IdentifierConflictError`` when the identifiers name two)."""
        args = UpsertInput(surface=surface, type=type, identifiers=list(identifiers))
        ctx = self._ctx()
        ranked = rank(ctx, args.surface, args.type, _pairs(args))
        pick = _pick(ctx, ranked, _pairs(args), args.type)
        if pick is None:
            return None
        e, tier = pick
        score = next(c[2] for c in ranked if c[0] == e.entity_id)
        return EntityCandidate(e.entity_id, tier, score, e.type, e.display_name)

    def get(self, entity_id: str) -> EntityView:
        """The entity ``entity_id`` visible from this scope (merged ones too, with
        ``merged_into``); ``EntityNotFoundError`` otherwise, ``ValidationError`` for an
        id that is not 12 lower-case hex digits."""
        ctx = self._ctx()
        return view(load_entity(ctx, locate(ctx, EntityRefInput(entity=entity_id).entity)))

    def list(self, *, after: str | None = None, limit: int = 100) -> list[EntityView]:  # noqa: A003
        """Live entities visible from this scope by id, ``limit`` (1-1000) after entity id
        ``after``; ``ValidationError`` for a bad ``after`` or ``limit``."""
        args = PageInput(after=after, limit=limit)
        store = self._ctx().store
        page = store.page(self.scope, after=args.after, limit=args.limit)
        return [view(e) for e in store.load_many([r.aggregate_id for r in page])]

    # ----------------------------------------------------------------- writes
    def upsert(self, surface: str, *, type: str | None = None,  # noqa: A002
               identifiers: Iterable[Any] = (), visibility: Visibility = "resource") -> UpsertResult:
        """The entity ``surface`` names, created when none is sure.

        Auto-resolves only when exactly one visible entity matches at an auto tier
        (an identifier, or the exact name / alias with no identifier of the same kind
        that differs); then adds ``surface`` as an alias and the new identifiers.
        Otherwise creates an entity (``type`` default ``thing``, ``visibility`` default
        ``resource``) and reports the ranked others as merge candidates.
        ``identifiers``: ``(kind, value)`` pairs. Raises ``ValidationError``,
        ``IdentifierConflictError`` (an identifier of another entity of the group, or
        identifiers of two entities); nothing is written then."""
        args = UpsertInput(surface=surface, type=type, identifiers=list(identifiers), visibility=visibility)
        pairs = _pairs(args)
        locks = visibility_locks(self.scope, args.visibility)
        with open_uow(self._deps, locks) as uow:
            ctx = self._ctx(uow)
            ranked = rank(ctx, args.surface, args.type, pairs)
            pick = _pick(ctx, ranked, pairs, args.type)
            if pick is not None:
                e, tier = pick
                added = _enrich(ctx, e, args.surface, pairs)
                outcome = "resolved"
            else:
                e, tier, added, outcome = _create(ctx, args, pairs), None, [], "created"
            others = candidates(ctx, ranked, 5, skip=e.entity_id) if ranked else ()
            if e.pending_events:
                uow.add_aggregate(e)
            uow.commit()
        self._deps.store.await_position(uow.position)
        return UpsertResult(view(e), outcome, tier, others, tuple(added))

    def merge(self, winner: str, loser: str, *, reason: str = "caller",
              batch: int = 200) -> MergeResult:
        """Merge entity ``loser`` into ``winner``: the loser's names (its display name
        as an alias) and identifiers move to the winner, then every note about the
        loser is re-pointed to the winner, ``batch`` notes per transaction, each with
        a ``NoteEntityRepointed`` event whose cause is ``merge:<merge id>``. Resumable:
        the same call again finishes the notes left. Both must be live entities of
        one visibility group visible from this scope (a merge never widens what an
        entity's names are visible to). Raises ``ValidationError``,
        ``EntityNotFoundError``, ``EntityError``."""
        args = MergeInput(winner=winner, loser=loser, reason=reason, batch=batch)
        if args.winner == args.loser:
            raise EntityError("merge: an entity cannot be merged with itself")
        ctx = self._ctx()
        w, lo = locate(ctx, args.winner), locate(ctx, args.loser)
        if (w.visibility, group_of(w.scope, w.visibility)) != (lo.visibility, group_of(lo.scope, lo.visibility)):
            raise EntityError("merge: the two entities are of different visibility groups; "
                              "a merge would widen what the loser's names are visible to")
        merge_id = self._merge_names(args, w, lo)
        n, batches = repoint_notes(ctx, source=args.loser, target=args.winner, merge_id=merge_id,
                                   moved_by=None, cause=f"merge:{merge_id}", batch=args.batch)
        return MergeResult(merge_id, args.winner, args.loser, n, batches)

    def _merge_names(self, args: MergeInput, w: Any, lo: Any) -> str:
        """Step one of a merge (or the merge id of the one already done)."""
        with open_uow(self._deps, visibility_locks(w.scope, w.visibility)) as uow:
            ctx = self._ctx(uow)
            winner, loser = load_entity(ctx, w), load_entity(ctx, lo)
            if loser.merged_into == winner.entity_id and loser.merge_id is not None:
                return loser.merge_id  # resumed: the names moved already
            keys = [k for i, name in enumerate(loser.names) for k in ek.name_keys(name, i, alias=True)]
            keys += [ek.identifier_key(k, v) for k, v in loser.identifiers]
            merge_id = new_entity_id()
            winner.absorb(loser, merge_id=merge_id, keys=ctx.sealed_keys(keys), reason=args.reason,
                          cause=f"merge:{merge_id}")
            uow.add_aggregate(winner)
            uow.add_aggregate(loser)
            uow.commit()
        self._deps.store.await_position(uow.position)
        return merge_id

    def undo_merge(self, loser: str, *, batch: int = 200) -> MergeResult:
        """Undo the merge of entity ``loser``: the winner gives back what it took, then
        the notes that merge re-pointed go back (cause ``undo_merge:<merge id>``), in
        batches; resumable like :meth:`merge`. ``EntityError`` when ``loser`` is not
        merged (or its winner was merged since: undo that first)."""
        args = UndoMergeInput(loser=loser, batch=batch)
        ctx = self._ctx()
        lo = locate(ctx, args.loser)
        with open_uow(self._deps, visibility_locks(lo.scope, lo.visibility)) as uow:
            uctx = self._ctx(uow)
            lost = load_entity(uctx, lo)
            done = getattr(lost, "last_undone", None)
            if lost.merged_into is None and done is None:
                raise EntityError(f"undo_merge: entity {args.loser} is not merged")
            if lost.merged_into is not None:
                winner = load_entity(uctx, locate(uctx, lost.merged_into))
                merge_id = winner.give_back(lost, cause="undo_merge")
                uow.add_aggregate(winner)
                uow.add_aggregate(lost)
                winner_id = winner.entity_id
            else:
                assert done is not None
                merge_id, winner_id = done
            uow.commit()
        self._deps.store.await_position(uow.position)
        n, batches = repoint_notes(ctx, source=winner_id, target=args.loser, merge_id=merge_id,
                                   moved_by=merge_id, cause=f"undo_merge:{merge_id}", batch=args.batch)
        return MergeResult(merge_id, winner_id, args.loser, n, batches, undone=True)

    def forget(self, entity_id: str, *, requested_by: str | None = None) -> bool:
        """Tombstone entity ``entity_id`` and destroy its data key: its names,
        identifiers and lookup digests are erased from every event, its index rows
        deleted (one transaction). Returns whether it was forgotten now (False: already).
        Notes about it keep its id only. ``EntityNotFoundError`` when not visible."""
        ref = locate(self._ctx(), EntityRefInput(entity=entity_id).entity)
        with open_uow(self._deps, visibility_locks(ref.scope, ref.visibility)) as uow:
            e = load_entity(self._ctx(uow), ref)
            if e.forgotten:
                return False
            e.forget(reason="forgotten", requested_by=requested_by or self.actor)
            uow.add_aggregate(e)  # EntityForgotten shreds: the unit of work destroys the key
            uow.commit()
        self._deps.store.await_position(uow.position)
        return True


def erase_entities(deps: Deps, tenant_id: str, resource_id: str | None, thread_id: str | None,
                   requested_by: str, batch: int = 100) -> int:
    """Tombstone (key destroyed) every entity homed in a scope prefix, ``batch`` per
    transaction: ``erase_scope`` erases the names and identifiers of a scope too.
    Returns how many were forgotten."""
    store = getattr(deps, "entity_store", None)
    total = 0
    while store is not None:
        refs = store.homed(tenant_id, resource_id, thread_id, batch)
        if not refs:
            return total
        locks = {lock for r in refs for lock in visibility_locks(r.scope, r.visibility)}
        with open_uow(deps, list(locks)) as uow:
            for r in refs:
                e = uow.load_aggregate(r.aggregate_id)
                if isinstance(e, Entity) and not e.forgotten:
                    e.forget(reason="erase_scope", requested_by=requested_by)
                    uow.add_aggregate(e)
                    total += 1
            uow.commit()
        deps.store.await_position(uow.position)
    return total


def visibility_locks(scope: Scope, vis: str) -> list[Scope]:
    """The write locks an entity write of ``vis`` from ``scope`` takes (sorted)."""
    locks = visibility.write_locks(scope, visibility.of_consent({"visibility": vis}))
    return sorted(locks, key=lambda s: s.key)


def _pairs(args: UpsertInput) -> list[tuple[str, str]]:
    """The upsert's identifiers, plus the surface when it is one, deduplicated."""
    out = [(i.kind, i.value) for i in args.identifiers]
    parsed = ek.parse_identifier(args.surface)
    if parsed is not None:
        out.append(parsed)
    seen: set[tuple[str, str]] = set()
    kept = []
    for kind, value in out:
        norm = (kind, ek.norm_identifier(kind, value))
        if norm not in seen:
            seen.add(norm)
            kept.append((kind, value))
    return kept


def _pick(ctx: EntityContext, ranked: Sequence[tuple[str, str, float, Any]], pairs: Sequence[tuple[str, str]],
          type_: str | None) -> tuple[Entity, str] | None:
    """The entity an upsert resolves to (see :meth:`Entities.upsert`), or ``None``."""
    owners = {c[0] for c in ranked if c[1] == "identifier"}
    if len(owners) > 1:
        raise IdentifierConflictError(f"the identifiers name different entities ({', '.join(sorted(owners))}); "
                                      "merge them first")
    chosen = ek.auto_pick([(c[0], c[1], c[2]) for c in ranked])
    if chosen is None:
        return None
    tier = next(c[1] for c in ranked if c[0] == chosen)
    e = load_entity(ctx, locate(ctx, chosen))
    if tier != "identifier" and _contradicts(e, pairs):
        return None
    if type_ is not None and e.type != type_:
        return None
    return e, tier


def _contradicts(e: Entity, pairs: Sequence[tuple[str, str]]) -> bool:
    """Whether ``e`` has an identifier of a kind given in ``pairs`` with none of the
    given values (two people of one name with different emails stay apart)."""
    have: dict[str, set[str]] = {}
    for kind, value in e.identifiers:
        have.setdefault(kind, set()).add(ek.norm_identifier(kind, value))
    for kind, value in pairs:
        if kind in have and ek.norm_identifier(kind, value) not in have[kind]:
            return True
    return False


def _enrich(ctx: EntityContext, e: Entity, surface: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
    """Add ``surface`` as an alias (a name it does not have yet, not an identifier) and
    the identifiers of ``pairs`` it lacks; returns what was added."""
    added = []
    grp = group_of(e.scope, e.visibility)
    have = {(k, ek.norm_identifier(k, v)) for k, v in e.identifiers}
    new = [(k, v) for k, v in pairs if (k, ek.norm_identifier(k, v)) not in have]
    check_identifiers(ctx, grp, e.entity_id, new)
    norm = ek.norm_name(surface)
    if (ek.parse_identifier(surface) is None and norm
            and norm not in {ek.norm_name(n) for n in e.names}):
        e.add_alias(surface, ctx.sealed_keys(ek.name_keys(surface, e.next_source, alias=True)))
        added.append(f"alias:{surface}")
    for kind, value in new:
        e.add_identifier(kind, value, ctx.sealed_keys([ek.identifier_key(kind, value)]))
        added.append(f"identifier:{kind}")
    return added


def _create(ctx: EntityContext, args: UpsertInput, pairs: Sequence[tuple[str, str]]) -> Entity:
    """A new entity named ``args.surface`` with ``pairs`` (identifier conflicts checked)."""
    grp = group_of(ctx.scope, args.visibility)
    check_identifiers(ctx, grp, None, pairs)
    keys = ek.name_keys(args.surface, 0) + [ek.identifier_key(k, v) for k, v in pairs]
    if not keys:
        raise EntityError("upsert: the surface has no letter or digit to index")
    return Entity.create(scope=ctx.scope, entity_id=new_entity_id(), type=args.type or "thing",
                         visibility=args.visibility, name=args.surface,
                         identifiers=[[k, v] for k, v in pairs], keys=ctx.sealed_keys(keys))
