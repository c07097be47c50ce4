"""``recall(entity=...)`` (issue 32): the notes about one entity, ranked as recall ranks.

The entity is named by its id or by a surface that resolves to exactly one entity
(``Entities.match``). Its notes are read from the entity index (``mf_entity_notes``:
notes whose subject key names the entity, whichever alias or identifier they were
stated under, merged entities' notes re-pointed to it); recall then ranks only those
(:func:`memfabric.domain.queries.recall` with ``only``) and every
explain row names the entity.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

from memfabric.domain import queries
from memfabric.domain.entity import EntityNotFoundError
from memfabric.domain.entities import EntityContext
from memfabric.domain.inputs import RecallInput
from memfabric.domain.results import RecallResult
from memfabric.domain.scope import Scope

if TYPE_CHECKING:
    from memfabric.domain.principal import AccessFilter
    from memfabric.domain.deps import Deps

NOTES_MAX = 2000
"""Notes about one entity a ``recall(entity=...)`` ranks at most."""

_ID = re.compile(r"^[0-9a-f]{12}$")


def entity_of(deps: Deps, scope: Scope, entity: str) -> str:
    """The id of the entity ``entity`` names from ``scope`` (an id visible from it, or a
    surface resolving to one entity); ``EntityNotFoundError`` otherwise."""
    if _ID.match(entity) and EntityContext(deps, scope).store.find(scope, entity):
        return entity
    from memfabric.domain.entities.commands import Entities  # noqa: PLC0415
    found = Entities(deps, scope).match(entity)
    if found is None:
        raise EntityNotFoundError(f"recall: {entity!r} names no one entity visible from {scope}")
    return found.id


def recall_entity(deps: Deps, scope: Scope, query: RecallInput, entity: str,
                  access: AccessFilter | None = None) -> RecallResult:
    """Recall ranking only the notes about ``entity`` (see the module doc); ``access``:
    a principal's filter (issue 33), inside the store's query as for any recall."""
    entity_id = entity_of(deps, scope, entity)
    ctx = EntityContext(deps, scope)
    notes = ctx.store.notes_of(scope.tenant_id, entity_id, merge_id=None, limit=NOTES_MAX)
    result = queries.recall(deps, scope, query, access, only={n.aggregate_id for n in notes})
    explain = [dataclasses.replace(e, entity=entity_id) for e in result.explain]
    return dataclasses.replace(result, explain=explain)
