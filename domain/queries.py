"""The read queries over :class:`~memfabric.domain.deps.Deps`: ``recall`` (ranked live
notes, :mod:`~memfabric.domain.ranking`), ``list_notes`` (keyset pages,
:mod:`~memfabric.domain.browse`) and ``count_notes``. Each reads the
:class:`~memfabric.domain.ports.NoteStore` (as recorded at ``known_at`` when asked,
issue 31) and never writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from memfabric.domain import browse, history, policy, ranking
from memfabric.domain.deps import Deps
from memfabric.domain.inputs import ListInput, RecallInput, Scoring
from memfabric.domain.ports import ListQuery, NoteFilter
from memfabric.domain.principal import AccessFilter
from memfabric.domain.results import NotePage, RecallResult
from memfabric.domain.scope import Scope

OVERSAMPLE = 4
"""Candidates fetched per requested hit (each list), before re-ranking."""

MIN_CANDIDATES = 40
"""Candidates fetched per list at the least."""

ONLY_OVERSAMPLE, ONLY_MAX = 10, 2000
"""Issue 32: candidates fetched per list per note of a ``recall(entity=...)``, at most."""


def recall(deps: Deps, scope: Scope, query: RecallInput, access: AccessFilter | None = None, *,
           only: Collection[UUID] | None = None) -> RecallResult:
    """Ranked live notes visible from ``scope`` (see ``Notes.recall``); ``access``
    (issue 33): a principal's filter, inside the store's query; ``only``: rank only
    these aggregates (issue 32: the notes about an entity) among the candidates,
    fetching ``ONLY_OVERSAMPLE`` times as many per list as there are of them (at most
    ``ONLY_MAX``): in a scope of more notes an entity's note far from the query in
    both lists can be missed; ``query.known_at`` (issue 31): as recorded then. Run
    once more after adopting the recorded embedder (:meth:`Deps.adopting`)."""
    return deps.adopting(lambda: _recall(deps.at(query.known_at), scope, query, access, only))


def _recall(deps: Deps, scope: Scope, query: RecallInput, access: AccessFilter | None,
            only: Collection[UUID] | None) -> RecallResult:
    as_of = query.as_of or query.known_at or datetime.now(timezone.utc)
    limit = max(query.top_k * OVERSAMPLE, MIN_CANDIDATES, min(ONLY_MAX, ONLY_OVERSAMPLE * len(only or ())))
    candidates = _candidates(deps, scope, query, access, as_of, limit)
    if only is not None:
        candidates = [c for c in candidates if c.aggregate_id in only]
    served = served_by(deps.store)
    if "episode" in query.kinds and query.mode != "vector":  # issue 14: ledger episodes
        from memfabric.domain import episodes  # noqa: PLC0415
        recorded = as_of if query.known_at is None else min(as_of, query.known_at)  # issue 31
        candidates = [*candidates, *episodes.candidates(
            deps.ledger_store, scope, query.query, as_of=recorded, limit=limit,
            require_consent=deps.require_consent)]
    how = _ranking(deps, scope, query, as_of, candidates)
    filters = None if access is None else NoteFilter(access=access)
    result = ranking.rank(candidates, how, lambda ids, complete: deps.store.hits(scope, ids, filters, complete))
    if any(h.supersedes and h.scope != scope for h in result.hits):
        result = dataclasses.replace(result, hits=history.hide_predecessors(deps, scope, list(result.hits)))
    return dataclasses.replace(result, served_by=served)


def _candidates(deps: Deps, scope: Scope, query: RecallInput, access: AccessFilter | None,
                as_of: datetime, limit: int) -> list[Any]:
    """The store's candidates of ``query``: ``limit`` per list (vector and lexical, as
    ``query.mode`` asks), linked notes expanded when ``expand_links``."""
    embedding = deps.embed([query.query])[0] if query.mode != "lexical" else None
    return list(deps.store.recall(
        scope, embedding=embedding, query=query.query if query.mode != "vector" else None,
        kinds=query.kinds, as_of=as_of, limit=limit, require_consent=deps.require_consent,
        filters=filters_of(query.tags, query.subject, query.min_importance, access),
        **({"expand": limit} if query.expand_links else {})))


def _ranking(deps: Deps, scope: Scope, query: RecallInput, as_of: datetime,
             candidates: Sequence[Any]) -> ranking.Ranking:
    """How ``query``'s candidates are ranked (the embedder's ``vector_weight`` unless
    the scoring names one; per-class half-lives, issue 30)."""
    scoring = query.scoring or Scoring()
    weight = scoring.vector_weight
    if weight is None:
        weight = float(getattr(deps.embedder, "vector_weight", policy.DEFAULT_VECTOR_WEIGHT))
    return ranking.Ranking(mode=query.mode, as_of=as_of, scoring=scoring, vector_weight=weight,
                           top_k=query.top_k, budget=query.budget,
                           expand=query.top_k if query.expand_links else 0,
                           min_relevance=query.min_relevance,
                           half_life_of=half_lives(deps, scope, scoring, candidates))


def half_lives(deps: Deps, scope: Scope, scoring: Scoring, candidates: Sequence[Any]) -> dict[Any, timedelta]:
    """Issue 30: the recency half-life of each candidate whose retention class has one
    configured for ``scope``'s tenant (none when the query names its own
    ``half_life``, or nothing is configured: then no lookup is made)."""
    store = deps.retention_store
    if store is None or "half_life" in scoring.model_fields_set or not candidates:
        return {}
    per_class = store.config(cached=True).for_tenant(scope.tenant_id).half_life
    if not per_class:
        return {}
    classes = store.classes([c.aggregate_id for c in candidates])
    return {aid: per_class[cls] for aid, cls in classes.items() if cls in per_class}


def list_query(deps: Deps, scope: Scope, args: ListInput, access: AccessFilter | None = None) -> ListQuery:
    """The store query of ``Notes.list`` / ``Notes.count`` arguments."""
    return ListQuery(scope=scope, kinds=tuple(args.kinds),
                     filters=filters_of(args.tags, args.subject, None, access) or NoteFilter(),
                     valid_at=args.valid_at, include_superseded=args.include_superseded,
                     require_consent=deps.require_consent)


def list_notes(deps: Deps, scope: Scope, args: ListInput, access: AccessFilter | None = None) -> NotePage:
    """One keyset page of the notes visible from ``scope`` (see ``Notes.list``)."""
    view = deps.at(args.known_at)
    page = browse.page(view.store, list_query(deps, scope, args, access), cursor=args.cursor,
                       limit=args.limit)
    page = dataclasses.replace(page, served_by=served_by(deps.store))
    if any(n.supersedes and n.scope != scope for n in page.items):
        page = dataclasses.replace(page, items=history.hide_predecessors(view, scope, list(page.items)))
    return page


def count_notes(deps: Deps, scope: Scope, args: ListInput, access: AccessFilter | None = None) -> int:
    """How many notes ``Notes.list`` would list over every page."""
    return deps.at(args.known_at).store.count_notes(list_query(deps, scope, args, access))


def filters_of(tags: Sequence[str], subject: str | None, min_importance: float | None,
               access: AccessFilter | None = None) -> NoteFilter | None:
    """The store filter of a query's ``tags`` / ``subject`` / ``min_importance`` /
    ``access`` (``None`` when it names none)."""
    if not tags and subject is None and min_importance is None and access is None:
        return None
    return NoteFilter(tags=tuple(tags), subject=subject, min_importance=min_importance, access=access)


def served_by(store: object) -> str | None:
    """Where ``store``'s last read on this thread was served (issue 25): its
    ``last_served_by()`` when it routes reads between servers, else ``None``."""
    where = getattr(store, "last_served_by", None)
    return str(where()) if callable(where) else None
