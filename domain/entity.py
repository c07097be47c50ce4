"""The ``Entity`` aggregate (issue 32): a person, organisation, project, place or thing
of a scope, with its names and strong identifiers; every change is a domain event.

Event classes are stored by topic (``memfabric.domain.entity:Entity.EntityCreated`` ...):
this module path and the class names are part of the log format, never rename them.

Sealing: everything a caller wrote about an entity (display name, aliases,
identifiers, a merge's reason) and the keyed digests of its lookup keys travel in the
event field ``content``, a JSON object. ``content`` is one of
:data:`memfabric.domain.note.PROTECTED_FIELDS`, so the storage mapper seals it with the
entity's own data key exactly as it seals a note's content; ``forget`` destroys the
key (:class:`Entity.EntityForgotten` is the tombstone), after which every earlier
event's ``content`` reads :data:`~memfabric.domain.note.ERASED` and the replayed
entity has no name left. Plain: scope ids, entity id, ``type`` (a short label),
``visibility``, merge ids and times.

:class:`NoteEntityRepointed` is an event of a *note*: a merge (or its undo) moved the
note from one entity to another; its ``cause`` names the merge (``merge:<id>`` /
``undo_merge:<id>``), so the note's history shows it. Its ``inferred_subject`` (the
note's subject key now naming the new entity) is a protected field, sealed under the
note's key.
"""

from __future__ import annotations

from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate

from memfabric.domain.errors import FabricError
from memfabric.domain.scope import Scope
from memfabric.domain.shredding import Shredding

_ENTITY_NAMESPACE = uuid5(NAMESPACE_URL, "https://memfabric.dev/entity")

ENTITY_PREFIX = "entity:"
"""How a subject key names a resolved entity: ``entity:<entity id>`` replaces the text."""


class EntityError(FabricError):
    """An entity operation that cannot be done as asked (merging an entity with itself,
    an entity already merged, undoing a merge that is not the latest ...)."""


class EntityNotFoundError(EntityError, KeyError):
    """No entity with that id is visible from this scope."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "entity not found"


class IdentifierConflictError(EntityError):
    """An identifier (kind, value) already belongs to another entity of the same
    visibility group (identifiers are unique per group, kind and value)."""


def entity_uuid(scope: Scope, entity_id: str) -> UUID:
    """Aggregate id of entity ``entity_id`` whose home is ``scope``."""
    return uuid5(_ENTITY_NAMESPACE, f"{scope.key}#{entity_id}")


def _payload(content: Any) -> dict[str, Any]:
    """An event's sealed ``content`` as a dict (``{}`` once erased)."""
    return content if isinstance(content, dict) else {}


class Entity(Aggregate):
    """An entity of a scope. State: scope ids, ``entity_id``, ``type``, ``visibility``,
    ``names`` (``[display name, *aliases]``), ``identifiers`` (``[[kind, value]]``),
    ``keys`` (``[[kind, digest, source, ntok]]``: lookup digests; source: the number the
    name got when it was added, 0 the display name, -1 an identifier), ``merged_into``/``merge_id`` (a loser),
    ``absorbed`` (a winner: per merge id what it took), ``forgotten``."""

    class EntityCreated(Aggregate.Created):
        """An entity was created (``content``: ``{names, identifiers, keys}``)."""

        tenant_id: str
        resource_id: str | None
        thread_id: str | None
        entity_id: str
        type: str
        visibility: str
        content: Any
        cause: str

    class AliasAdded(Aggregate.Event):
        """Another name of the entity (``content``: ``{alias, keys}``)."""

        content: Any
        cause: str

        def apply(self, e: Entity) -> None:
            data = _payload(self.content)
            if "alias" in data:
                e.names.append(data["alias"])
                e.keys.extend(data.get("keys") or [])
                e.next_source += 1

    class IdentifierAdded(Aggregate.Event):
        """A strong identifier of the entity (``content``: ``{identifier, keys}``)."""

        content: Any
        cause: str

        def apply(self, e: Entity) -> None:
            data = _payload(self.content)
            if "identifier" in data:
                e.identifiers.append(list(data["identifier"]))
                e.keys.extend(data.get("keys") or [])

    class EntitiesMerged(Aggregate.Event):
        """Entity ``loser_id`` was merged into ``winner_id`` (merge ``merge_id``). On the
        winner (``role="winner"``) ``content`` holds what it took: ``{names,
        identifiers, keys, reason}``; on the loser ``{reason}``."""

        merge_id: str
        winner_id: str
        loser_id: str
        role: str
        content: Any
        cause: str

        def apply(self, e: Entity) -> None:
            data = _payload(self.content)
            if self.role == "loser":
                e.merged_into, e.merge_id = self.winner_id, self.merge_id
                e.last_undone = None
                return
            names = list(data.get("names") or [])
            keys = [list(k) for k in data.get("keys") or []]
            e.names.extend(names)
            e.identifiers.extend(list(i) for i in data.get("identifiers") or [])
            e.keys.extend(keys)
            e.next_source = max([e.next_source, *(k[2] + 1 for k in keys)])
            e.absorbed[self.merge_id] = {"loser_id": self.loser_id, "names": names,
                                         "identifiers": list(data.get("identifiers") or []), "keys": keys}

    class MergeUndone(Aggregate.Event):
        """Merge ``merge_id`` was undone: the winner gives back what it took, the loser
        is its own entity again."""

        merge_id: str
        winner_id: str
        loser_id: str
        role: str
        cause: str

        def apply(self, e: Entity) -> None:
            if self.role == "loser":
                e.merged_into, e.merge_id = None, None
                e.last_undone = (self.merge_id, self.winner_id)
                return
            took = e.absorbed.pop(self.merge_id, None)
            if not took:
                return
            for name in took["names"]:
                if name in e.names[1:]:
                    e.names.remove(name)
            e.identifiers = [i for i in e.identifiers if i not in took["identifiers"]]
            e.keys = [k for k in e.keys if k not in took["keys"]]

    class EntityForgotten(Aggregate.Event, Shredding):
        """The tombstone: the entity's data key is destroyed with this event, so its
        names and identifiers are erased from every earlier event."""

        entity_id: str
        tenant_id: str
        resource_id: str | None
        thread_id: str | None
        reason: str
        requested_by: str
        cause: str

        def apply(self, e: Entity) -> None:
            e.forgotten = True
            e.names, e.identifiers, e.keys, e.absorbed = [], [], [], {}

    def __init__(self, *, tenant_id: str, resource_id: str | None, thread_id: str | None,
                 entity_id: str, type: str, visibility: str, content: Any,  # noqa: A002
                 cause: str) -> None:
        data = _payload(content)
        self.tenant_id, self.resource_id, self.thread_id = tenant_id, resource_id, thread_id
        self.entity_id = entity_id
        self.type = type
        self.visibility = visibility
        self.names: list[str] = list(data.get("names") or [])
        self.identifiers: list[list[str]] = [list(i) for i in data.get("identifiers") or []]
        self.keys: list[list[Any]] = [list(k) for k in data.get("keys") or []]
        self.next_source = len(self.names)
        """The source number the next name gets (names are numbered once, never renumbered)."""
        self.merged_into: str | None = None
        self.merge_id: str | None = None
        self.absorbed: dict[str, dict[str, Any]] = {}
        self.last_undone: tuple[str, str] | None = None
        """``(merge id, winner id)`` of the latest undone merge of this entity (a loser)."""
        self.forgotten = False

    # ----------------------------------------------------------------- commands
    @classmethod
    def create(cls, *, scope: Scope, entity_id: str, type: str, visibility: str,  # noqa: A002
               name: str, identifiers: list[list[str]], keys: list[list[Any]],
               cause: str = "caller") -> Entity:
        """A new entity of ``scope`` named ``name`` with ``identifiers`` and lookup ``keys``."""
        return cls._create(
            cls.EntityCreated, id=entity_uuid(scope, entity_id), tenant_id=scope.tenant_id,
            resource_id=scope.resource_id, thread_id=scope.thread_id, entity_id=entity_id,
            type=type, visibility=visibility, cause=cause,
            content={"names": [name], "identifiers": identifiers, "keys": keys})

    @property
    def scope(self) -> Scope:
        return Scope(tenant_id=self.tenant_id, resource_id=self.resource_id, thread_id=self.thread_id)

    @property
    def display_name(self) -> str | None:
        return self.names[0] if self.names else None

    @property
    def aliases(self) -> list[str]:
        return self.names[1:]

    @property
    def live(self) -> bool:
        """Neither forgotten nor merged into another entity."""
        return not self.forgotten and self.merged_into is None

    @property
    def listed(self) -> bool:
        """Not forgotten (merged or not): the entity has an ``mf_entities`` row."""
        return not self.forgotten

    def _check_live(self) -> None:
        if self.forgotten:
            raise EntityNotFoundError(f"entity {self.entity_id} was forgotten")
        if self.merged_into is not None:
            raise EntityError(f"entity {self.entity_id} was merged into {self.merged_into}")

    def add_alias(self, alias: str, keys: list[list[Any]], cause: str = "caller") -> None:
        self._check_live()
        source = self.next_source
        self.trigger_event(self.AliasAdded, cause=cause, content={
            "alias": alias, "keys": [[k[0], k[1], source, k[3]] for k in keys]})

    def add_identifier(self, kind: str, value: str, keys: list[list[Any]], cause: str = "caller") -> None:
        self._check_live()
        self.trigger_event(self.IdentifierAdded, cause=cause,
                           content={"identifier": [kind, value], "keys": keys})

    def absorb(self, loser: Entity, *, merge_id: str, keys: list[list[Any]], reason: str,
               cause: str = "caller") -> None:
        """Take ``loser``'s names (its display name becomes an alias) and identifiers
        (``keys``: their lookup keys, source ``i`` for ``loser.names[i]``, -1 for an
        identifier) and mark ``loser`` merged: one ``EntitiesMerged`` event on each."""
        self._check_live()
        loser._check_live()
        base = self.next_source
        keys = [[k[0], k[1], base + k[2] if k[2] >= 0 else -1, k[3]] for k in keys]
        self.trigger_event(self.EntitiesMerged, merge_id=merge_id, winner_id=self.entity_id,
                           loser_id=loser.entity_id, role="winner", cause=cause,
                           content={"names": list(loser.names), "identifiers": list(loser.identifiers),
                                    "keys": keys, "reason": reason})
        loser.trigger_event(loser.EntitiesMerged, merge_id=merge_id, winner_id=self.entity_id,
                            loser_id=loser.entity_id, role="loser", cause=cause, content={"reason": reason})

    def give_back(self, loser: Entity, cause: str = "caller") -> str:
        """Undo the merge of ``loser`` into this entity (``MergeUndone`` on both);
        returns the merge id. ``EntityError`` when ``loser`` is not merged into it or a
        later merge took this entity elsewhere."""
        if self.forgotten or loser.forgotten:
            raise EntityNotFoundError("undo_merge: one of the two entities was forgotten")
        if loser.merged_into != self.entity_id or loser.merge_id not in self.absorbed:
            raise EntityError(f"undo_merge: entity {loser.entity_id} is not merged into {self.entity_id}")
        if self.merged_into is not None:
            raise EntityError(f"undo_merge: entity {self.entity_id} was itself merged into "
                              f"{self.merged_into}; undo that merge first")
        merge_id = loser.merge_id
        for agg in (self, loser):
            agg.trigger_event(agg.MergeUndone, merge_id=merge_id, winner_id=self.entity_id,
                              loser_id=loser.entity_id, role="winner" if agg is self else "loser",
                              cause=cause)
        return merge_id

    def forget(self, *, reason: str, requested_by: str, cause: str = "caller") -> None:
        if self.forgotten:
            return
        self.trigger_event(self.EntityForgotten, entity_id=self.entity_id, tenant_id=self.tenant_id,
                           resource_id=self.resource_id, thread_id=self.thread_id, reason=reason,
                           requested_by=requested_by, cause=cause)


class NoteEntityRepointed(Aggregate.Event):
    """A note's entity changed because of a merge or its undo: ``entity_id`` (now),
    ``previous``, ``merge_id``; ``inferred_subject`` is the note's subject key naming the
    new entity (sealed; erased with the note)."""

    entity_id: str
    previous: str | None
    merge_id: str
    inferred_subject: dict[str, Any] | None
    cause: str

    def apply(self, note: Any) -> None:
        if isinstance(self.inferred_subject, dict):
            note.inferred_subject = self.inferred_subject
        note.entity_merge = self.merge_id
        note.updated_at = self.timestamp


def note_entity(note: Any) -> str | None:
    """The entity id a note is about (its subject key names ``entity:<id>``), or ``None``."""
    key = getattr(note, "inferred_subject", None)
    if not isinstance(key, dict):
        return None
    entity = key.get("entity")
    if isinstance(entity, str) and entity.startswith(ENTITY_PREFIX):
        return entity[len(ENTITY_PREFIX):]
    return None
