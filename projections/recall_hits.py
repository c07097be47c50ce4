"""What a recall reads for the hits a ranking keeps, after the candidates (issue 29): each
hit's link edges, and the full row of a hit whose candidate row was *partial* (a note
added by link expansion: :func:`memfabric.projections.recall_index.recall_statement`
returns only the columns ranking reads for those, two in three of which never become
hits). One statement either way, so a linked recall makes the round trips a plain one
makes."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from psycopg import Cursor, sql

from memfabric.domain.ports import NoteFilter
from memfabric.domain.scope import Scope
from memfabric.projections import recall_partition, tables
from memfabric.projections.recall_index import RETURNED, TABLE, access_params, scope_access

_LINKS = (
    # arrays, not a jsonb object per edge (issue 29: building and parsing ~300 jsonb
    # objects was a third of a linked recall's links read); the weight as ``real``'s text
    # (shortest exact form, as the jsonb number was), so it reads back as before
    "SELECT g.from_aggregate_id AS aggregate_id, array_agg(g.to_note_id ORDER BY g.to_note_id, g.relation) AS ids,"
    " array_agg(g.relation ORDER BY g.to_note_id, g.relation) AS relations,"
    " array_agg(g.weight::text ORDER BY g.to_note_id, g.relation) AS weights FROM {g} g"
    " WHERE g.tenant_id = %(t)s AND g.from_aggregate_id = ANY(%(ids)s) AND EXISTS (SELECT 1 FROM {t} x"
    # OFFSET 0 keeps the probe per edge (primary key): unflattened, a stale estimate
    # could scan every row of the tenant once per hit
    " WHERE x.aggregate_id = g.to_aggregate_id AND {xs} OFFSET 0) GROUP BY g.from_aggregate_id"
)

_HITS = (
    # the link edges of every hit, beside the full rows of the partial ones (read by
    # their keys, still visible from the scope): a full join on the aggregate id
    "SELECT coalesce(k.aggregate_id, i.aggregate_id) AS aggregate_id, k.ids, k.relations, k.weights, i.found, {ret}"
    " FROM ({links}) k FULL JOIN (SELECT *, TRUE AS found FROM {t}"
    " WHERE tenant_id = %(t)s AND aggregate_id = ANY(%(rows)s) AND {s}) i ON i.aggregate_id = k.aggregate_id"
)

Links = dict[UUID, list[dict[str, Any]]]
"""``{aggregate_id: [{id, relation, weight}]}`` sorted by ``(id, relation)``."""


def select_links(cur: Cursor[Any], scope: Scope, aggregate_ids: Sequence[UUID],
                 filters: NoteFilter | None = None) -> Links:
    """The edges of each note in ``aggregate_ids`` (``mf_link_graph``) whose target still
    has a row here visible from ``scope`` (and admitted by ``filters.access``, issue 33),
    as ``[{id, relation, weight}]`` sorted by ``(id, relation)``; a note without such an
    edge is absent. One statement."""
    return select_hits(cur, scope, aggregate_ids, filters)[0]


def select_hits(cur: Cursor[Any], scope: Scope, aggregate_ids: Sequence[UUID],
                filters: NoteFilter | None = None,
                complete: Sequence[UUID] = ()) -> tuple[Links, dict[UUID, dict[str, Any]]]:
    """``(links, rows)``: :func:`select_links`' edges of ``aggregate_ids``, and for each
    of ``complete`` (hits among them whose candidate row was partial) its
    :data:`~memfabric.projections.recall_index.RETURNED` columns by aggregate id, if its
    row is still there and visible from ``scope`` (a note forgotten since the candidates
    were read is absent). One statement (without ``complete``: :func:`select_links`'
    text)."""
    if not aggregate_ids:
        return {}, {}
    t, r, th = scope.sql()
    params = {"t": t, "r": r, "th": th, "ids": list(aggregate_ids), "rows": list(complete),
              **access_params(filters)}
    stmt = _text(filters, recall_partition.of_tenant(cur, t), bool(complete))
    links: Links = {}
    rows: dict[UUID, dict[str, Any]] = {}
    for row in cur.execute(stmt, params, prepare=True).fetchall():
        aid, ids, relations, weights = (row.pop(k) for k in ("aggregate_id", "ids", "relations", "weights"))
        if ids is not None:
            links[aid] = [{"id": i, "relation": rel, "weight": float(w)}
                          for i, rel, w in zip(ids, relations, weights, strict=True)]
        if row.pop("found", None):
            rows[aid] = row
    return links, rows


@functools.lru_cache(maxsize=512)
def _text(filters: NoteFilter | None, partition: int | None, complete: bool) -> bytes:
    """:func:`select_hits`' statement text for ``filters`` (and the tenant's
    ``partition``; ``complete``: with the full rows), composed once."""
    g, t = (sql.Identifier(recall_partition.relation(x, partition)) for x in (tables.LINK_GRAPH, TABLE))
    links = sql.SQL(_LINKS).format(g=g, t=t, xs=scope_access(filters, "x"))
    if not complete:
        return links.as_bytes(None)
    return sql.SQL(_HITS).format(links=links, t=t, s=scope_access(filters), ret=sql.SQL(RETURNED)).as_bytes(None)
