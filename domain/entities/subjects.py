"""Subject keys that name a resolved entity (issue 32): the write path's hook.

Before a write decides, every ``fact`` item whose subject is known — the entity of its
inferred :class:`~memfabric.domain.subjects.SubjectKey` ("Maria moved to Porto" →
``maria``) or its explicit ``subject`` — is resolved against the entity index in the
write's own transaction (one batched lookup for the whole write). When exactly one
visible entity holds that surface at an auto tier (an identifier, its exact name or
an exact alias: :func:`memfabric.domain.entities.keys.auto_pick`), the key's entity
becomes ``entity:<id>``. So "Maria Lopez lives in Lisbon" and "Maria moved to Porto"
(``Maria`` an alias of the same entity) fill one slot and the second supersedes the
first; two entities that share a display name leave that name unresolved (the text
stays the key, as without entities). An explicit ``subject`` still consolidates by
its own string; its note only records the entity it is about.

The note's entity is then read from its key (:func:`memfabric.domain.entity.note_entity`)
by the entity index's ``mf_entity_notes`` rows, which merges re-point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from memfabric.domain.entities import keys as ek
from memfabric.domain.entities import PER_KEY, EntityContext
from memfabric.domain.entity import ENTITY_PREFIX
from memfabric.domain.subjects.key import SubjectKey
from memfabric.domain.subjects.text import norm_value

if TYPE_CHECKING:
    from memfabric.domain.deps import Deps
    from memfabric.domain.scope import Scope

P = TypeVar("P")

UNRESOLVED = frozenset({"self", "user", "i", "me", "we"})
"""Subject-key entities never looked up (the speaker's own slots)."""


PLACEHOLDER = "Entityref"
"""Stands in for a leading identifier while the subject extractor reads the sentence."""


def _surface(item: Any, key: SubjectKey | None) -> str | None:
    """The surface a fact item's subject is stated under, or ``None``."""
    if item.kind != "fact":
        return None
    if item.subject is not None:
        return str(item.subject)
    if key is None or key.entity in UNRESOLVED or key.entity.startswith(ENTITY_PREFIX):
        return None
    return key.entity


def identifier_subject(deps: Deps, p: Any) -> tuple[str, SubjectKey] | None:
    """A fact stated under a leading identifier ("maria@acme.example works at Initech",
    "@mlopez moved to Porto"), which no extractor rule reads as a name: the identifier
    and the key the extractor gives with a placeholder name in its place."""
    extractor = deps.subject_extractor
    if extractor is None or p.item.kind != "fact" or p.item.subject is not None or p.query.inferred is not None:
        return None
    head, _, rest = p.text.strip().partition(" ")
    head = head.rstrip(",:;")
    if not rest or ek.parse_identifier(head) is None:
        return None
    key = extractor.extract(f"{PLACEHOLDER} {rest}", kind="fact")
    if key is None or key.entity != PLACEHOLDER.lower():
        return None
    return head, key


def resolve_subjects(deps: Deps, uow: Any, scope: Scope, prepared: Mapping[int, P]) -> dict[int, P]:
    """``prepared`` (``remember._Prepared`` by item index) with the subject keys of the
    items whose subject resolves to one entity naming that entity (see the module doc);
    unchanged without an entity index or when nothing resolves. One index lookup."""
    store = getattr(deps, "entity_store", None)
    if store is None:
        return dict(prepared)
    asks: dict[int, str] = {}
    keys: dict[int, SubjectKey] = {}
    for i, p in prepared.items():
        surface = _surface(p.item, p.query.inferred)  # type: ignore[attr-defined]
        stated = identifier_subject(deps, p) if surface is None else None
        if stated is not None:
            surface, keys[i] = stated
        if surface is not None:
            asks[i] = surface
    if not asks:
        return dict(prepared)
    ctx = EntityContext(deps, scope, uow)
    exact = {i: {ctx.digest(t): t for t in ek.probe(s, exact_only=True).keys} for i, s in asks.items()}
    by_digest = _rows_by_digest(store, scope, uow, sorted({d for ds in exact.values() for d in ds}))
    out = dict(prepared)
    for i, digests in exact.items():
        if not any(d in by_digest for d in digests):
            continue  # none of its exact keys is in the index: nothing to pick (issue 24: no fuzzy probe)
        chosen = _pick(ek.probe(asks[i]), digests, by_digest)
        if chosen is not None:
            out[i] = _named(prepared[i], chosen, keys.get(i))
    return out


def _rows_by_digest(store: Any, scope: Scope, uow: Any, wanted: list[str]) -> dict[str, list[Any]]:
    """The entity-key rows of the digests ``wanted`` (one index lookup, ``PER_KEY`` rows
    each; none asked when empty), by digest."""
    rows = store.keys(scope, [(d, PER_KEY) for d in wanted], None, uow) if wanted else []
    by_digest: dict[str, list[Any]] = {}
    for r in rows:
        by_digest.setdefault(r.digest, []).append(r)
    return by_digest


def _pick(probe: ek.Probe, digests: Mapping[str, str], by_digest: Mapping[str, list[Any]]) -> str | None:
    """The entity id the exact-key matches of one subject (``digests``: digest -> key text)
    resolve to: the candidates scored (``entity_keys.score``), ranked by score, tier and
    id, and picked only when one wins clearly (``entity_keys.auto_pick``), else ``None``."""
    hits = [(r.entity_id, text, r.source, r.ntok) for d, text in digests.items() for r in by_digest.get(d, [])]
    ranked = []
    for entity_id, m in ek.collect(probe, hits).items():
        got = ek.score(probe, m)
        if got is not None:
            ranked.append((entity_id, got[0], got[1]))
    ranked.sort(key=lambda c: (-c[2], ek.TIERS.index(c[1]), c[0]))
    return ek.auto_pick(ranked)


def _named(p: P, entity_id: str, stated: SubjectKey | None = None) -> P:
    """``p`` with its query's subject key (``stated``: the one read with a placeholder)
    naming entity ``entity_id``."""
    query = p.query  # type: ignore[attr-defined]
    item = p.item  # type: ignore[attr-defined]
    old = stated or query.inferred
    entity = ENTITY_PREFIX + entity_id
    if item.subject is not None or old is None:
        key = SubjectKey(entity=entity, attribute="", value=norm_value(p.text), rule="explicit")  # type: ignore[attr-defined]
    else:
        key = dataclasses.replace(old, entity=entity)
    return dataclasses.replace(p, query=dataclasses.replace(query, inferred=key))  # type: ignore[type-var]
