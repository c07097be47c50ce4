"""The link part of the recall statement (issue 15's 1-hop expansion, issue 29's cost).

:data:`EXPAND` and :data:`NO_EXPAND` are CTE templates that
:func:`memfabric.projections.recall_index.recall_statement` appends after its candidate
CTE ``c`` (the union of the vector and full-text lists); both end in ``ca``, the rows
the statement returns, with the columns ``aggregate_id``, ``lw`` (float8) and ``seeds``
(bytea: the edges packed, :func:`unpack`); :data:`ROWS` (``cf``) then gathers each row's ranks,
full-text score and those columns without a join per CTE. Placeholders: ``{t}`` the recall index, ``{w}`` the
lists' conditions (scope, kinds, validity, consent, the caller's filters), ``{g}`` the
link graph; parameters ``%(t)s`` (tenant), ``%(limit)s`` (the lists' length) and
``%(expand)s`` (how many linked notes).

A seed (a list candidate at the other end of an edge) is given by its *number*
:func:`seed_number`: its rank in the vector list ``vr``, else ``limit`` + its rank in
the full-text list ``lr`` (issue 29: two thousand uuids per recall, parsed by the
client, were a tenth of a linked recall's time); every list candidate is a returned row
with those ranks, so the client maps numbers back to aggregate ids.

With expansion, ``ca`` holds

* every list candidate, with ``seeds`` its edges (either direction) to other
  list candidates, sorted by the other end's aggregate id, then weight (``NULL`` without
  one), ``lw`` ``NULL``;
* up to ``expand`` notes linked (either direction) to a list candidate, not list
  candidates themselves, each passing every condition of the lists: the ``expand`` of
  largest ``lw`` (the largest weight of such an edge; ties: the smaller id), with
  ``seeds`` the list candidates it is linked to and those edges' weights.

The plan does not depend on the planner's row estimates (issue 29: right after a
conversation is written its statistics are stale, and the joins of the former form,
planned as nested loops over CTE scans, took 0.3-0.5 s per recall on a 400-note
scope): the edges of each candidate are read by a probe per candidate on the link
graph's primary key (outgoing) and its ``to_aggregate_id`` btree (incoming), through
``LATERAL ... OFFSET 0`` (a subquery the planner cannot flatten into a join); every
edge is grouped once (``lk``); membership of ``c`` and of the visible linked notes
(``lv``: one read of the linked notes by their keys, ``= ANY(ARRAY(...))``, with the
lists' conditions) are hashed subplans, never joins; and the link columns travel in
``ca`` instead of two more joins in the final select.
"""

from __future__ import annotations

import struct

_PAIR = struct.Struct(">if")


def unpack(packed: bytes | None) -> list[tuple[int, float]]:
    """The ``(seed number, weight)`` pairs of a packed ``seeds`` value (``None``: none;
    see :data:`EXPAND`); a weight reads back as the ``real`` it was stored as, widened
    exactly."""
    return list(_PAIR.iter_unpack(packed)) if packed else []


EXPAND = (
    # every edge of each list candidate ``seed`` (either direction) as (aggregate_id: the
    # other end, seed, weight): two index probes per candidate, which stay probes with
    # stale statistics (``= ANY(ARRAY(...))`` over all candidates became a sequential
    # scan then, 7 ms on a 400-note scope)
    # the list candidates numbered as the rows will show them (issue 29: a seed travels
    # as that number, not as a uuid the client parses): the vector rank, else ``limit`` +
    # the full-text rank
    ", cn AS (SELECT aggregate_id, rank AS n FROM vr UNION ALL SELECT aggregate_id, %(limit)s::int + rank FROM lr"
    " WHERE aggregate_id NOT IN (SELECT aggregate_id FROM vr)),"  # a hashed subplan
    " le AS (SELECT e.aggregate_id, e.seed, c.n, e.weight FROM cn c CROSS JOIN LATERAL ("
    "SELECT g.to_aggregate_id AS aggregate_id, g.from_aggregate_id AS seed, g.weight FROM {g} g"
    " WHERE g.tenant_id = %(t)s AND g.from_aggregate_id = c.aggregate_id"  # one partition
    " UNION ALL SELECT g.from_aggregate_id, g.to_aggregate_id, g.weight FROM {g} g"
    " WHERE g.tenant_id = %(t)s AND g.to_aggregate_id = c.aggregate_id OFFSET 0) e),"
    " lk AS MATERIALIZED (SELECT l.aggregate_id, l.aggregate_id IN (SELECT aggregate_id FROM c) AS in_c,"
    # the edges (n, weight) of a group as one bytea: per edge the seed number (big-endian
    # int4) and the weight (real, big-endian float4), sorted by the seed's aggregate id,
    # then weight (``unpack`` reads it; issue 29: as a bigint[] and a float8[] the ~2,200
    # numbers of a linked recall were printed as text by the server and parsed by the
    # client, ~3 ms of ~30)
    " max(l.weight)::float8 AS lw, string_agg(int4send(l.n::int4) || float4send(l.weight), ''::bytea"
    " ORDER BY l.seed, l.weight) AS seeds FROM le l GROUP BY l.aggregate_id),"
    # the linked notes that pass the lists' conditions, read at once by their keys
    " lv AS MATERIALIZED (SELECT aggregate_id FROM {t}"
    " WHERE aggregate_id = ANY(ARRAY(SELECT aggregate_id FROM lk WHERE NOT in_c)) AND {w}),"
    " lx AS MATERIALIZED (SELECT aggregate_id, lw, seeds FROM lk WHERE NOT in_c"
    " AND (aggregate_id IN (SELECT aggregate_id FROM lv)) IS TRUE"  # a hashed subplan, not a join
    " ORDER BY lw DESC, aggregate_id LIMIT %(expand)s),"
    " ca AS (SELECT aggregate_id, NULL::float8 AS lw, seeds FROM lk WHERE in_c"
    " UNION ALL SELECT aggregate_id, NULL::float8, NULL::bytea FROM c"
    " WHERE aggregate_id NOT IN (SELECT aggregate_id FROM lk WHERE in_c)"  # a hashed subplan
    " UNION ALL SELECT aggregate_id, lw, seeds FROM lx)"
)
"""The 1-hop expansion (see the module doc)."""



def seed_number(vector_rank: int | None, lexical_rank: int | None, limit: int) -> int | None:
    """The number a list candidate has in ``seeds``: its vector rank, else ``limit`` + its
    full-text rank (``None`` for a row in neither list: an expanded note)."""
    if vector_rank is not None:
        return vector_rank
    return None if lexical_rank is None else limit + lexical_rank


NO_EXPAND = ", ca AS (SELECT aggregate_id, NULL::float8 AS lw, NULL::bytea AS seeds FROM c)"
"""No expansion: the list candidates, without link columns."""


LEX_ROWS = (" UNION ALL SELECT aggregate_id, NULL, NULL, lex, NULL, NULL FROM ls"
            " WHERE aggregate_id IN (SELECT aggregate_id FROM ca)")  # a hashed subplan
"""The full-text scores of ``ca``'s rows: :data:`ROWS`' ``{lex_rows}`` when the statement
has a full-text list (``ls``)."""


ROWS = (
    # issue 29: each returned row's ranks, full-text score and link columns gathered by
    # one grouping over the CTEs instead of a LEFT JOIN per CTE: with a generic plan
    # (a prepared statement after five runs) the planner estimated a few rows for ``ca``
    # and joined ``vr``, ``lr`` and ``ls`` as nested loops rescanning each CTE per row
    # (120,000 join-filter comparisons, 13 ms of a linked recall on a 400-note scope)
    # (``string_agg`` picks a group's one ``seeds``: ``max(bytea)`` needs PostgreSQL 17)
    "cf AS (SELECT aggregate_id, max(vrank) AS vrank, max(lrank) AS lrank, max(lex) AS lex,"
    " max(lw) AS lw, string_agg(seeds, ''::bytea) AS seeds FROM ("
    "SELECT aggregate_id, rank AS vrank, NULL::bigint AS lrank, NULL::float8 AS lex, NULL::float8 AS lw,"
    " NULL::bytea AS seeds FROM vr"
    " UNION ALL SELECT aggregate_id, NULL, rank, NULL, NULL, NULL FROM lr{lex_rows}"
    " UNION ALL SELECT aggregate_id, NULL, NULL, NULL, lw, seeds FROM ca) u GROUP BY aggregate_id)"
)
"""The returned rows before the index's columns: one per row of ``ca`` (every ``vr`` and
``lr`` row is one), with ``vrank``, ``lrank``, ``lex`` (``NULL`` for a row the full-text
score does not match) and ``ca``'s ``lw``, ``seeds`` (each group holds at most one
non-null value of each, so ``max`` / ``string_agg`` picks it)."""
