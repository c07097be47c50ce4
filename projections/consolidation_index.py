"""The consolidation index: the write side's own small read model of the notes a new
write can fold into or supersede. Table ``mf_consolidation``.

One row per live, not superseded ``fact``/``procedure``/``file`` note: scope, kind,
id, token hash, path, subject, validity and the embedding. It is a **write-side**
projection: always updated in the writer's transaction (whatever
``inline_projections`` says), so consolidation is decided against current state even
while the recall index is kept by a separate runner. It is rebuilt and verified from
the log like every projection.

Neighbour lookups scan one scope's rows exactly (btree on scope and kind, then the
cosine distance of each row): there is no HNSW index here, so a write pays no HNSW
maintenance for it, and the result is exact. The cost grows with the size of one
scope (about 1 ms per 2,000 notes of 384 dimensions).

Columns ``inferred_key`` (``entity|attribute`` of the note's inferred subject key,
``note.inferred_subject``; btree) and the key's parts as plain columns
(:data:`INFERRED_COLUMNS`: entity, attribute, value, rule, polarity, single-valued,
previous) were added by issue 12: same-key notes are candidates however far apart
their vectors are. The parts were first one ``inferred jsonb`` column; plain text and
boolean columns are cheaper to write and read (issue 12's write-latency goal).
``create`` adds the columns to a table of an older release (``ALTER TABLE ... ADD
COLUMN IF NOT EXISTS``) and moves a jsonb ``inferred`` column's values into them
(then drops it); the rows of a table from before issue 12 stay ``NULL`` there until
the projection is rebuilt (``memfabric projections rebuild consolidation``) — notes
written before issue 12 carry no inferred key anyway, so nothing is lost without it.

Column ``link_terms`` (``text[]``, GIN; issue 15) holds the note's link terms
(:func:`memfabric.domain.link_terms.note_terms`), which the shared-term linker looks up
(:func:`select_term_postings`). It is added the same way; rows of an older table stay
``NULL`` (never found by a term) until the projection is rebuilt.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import Cursor, sql
from psycopg.types.range import Range

from memfabric.domain.consolidation import Neighbour, NeighbourQuery, note_key
from memfabric.domain.link_terms import DF_CAP, N_CAP, TermPostings, note_terms
from memfabric.domain.subjects import WILDCARD, SubjectKey
from memfabric.domain.note import Note
from memfabric.domain.policy import content_hash
from memfabric.domain import visibility
from memfabric.domain.scope import Scope, stored_scope
from memfabric.domain.visibility import of_consent
from memfabric.projections.batch import encode_params, vector_binary
from memfabric.projections import base, partitions, tables

NAME = "consolidation"
TABLE = tables.CONSOLIDATION_INDEX
KINDS = ("fact", "procedure", "file")

COLUMNS: tuple[str, ...] = (
    "aggregate_id", "tenant_id", "resource_id", "thread_id", "kind", "note_id",
    "token_hash", "path", "subject", "valid", "ingested_at", "embedding",
    "inferred_key", "inferred_entity", "inferred_attribute", "inferred_value", "inferred_rule",
    "inferred_polarity", "inferred_single", "inferred_previous", "visibility", "link_terms",
)
"""Column order of a row tuple (also the COPY order)."""

_TYPES = ("uuid", "text", "text", "text", "text", "text", "text", "text", "text",
          "tstzrange", "timestamptz", "vector", "text", "text", "text", "text", "text",
          "bool", "bool", "text", "text", "text[]")

CHUNK = 500
"""Queries per neighbour statement."""


def row_for(note: Note, embedder_id: str | None = None, dim: int = 0) -> tuple[Any, ...] | None:
    """The row of a note, or ``None`` when it can no longer be a consolidation
    candidate (not a consolidating kind, forgotten, held, superseded, expired, no vector).
    ``embedder_id``: whose vector the row carries (see ``recall_index.row_for``)."""
    if (note.kind not in KINDS or not note.live or note.superseded_by is not None
            or note.content is None or note.embedding is None
            or getattr(note, "expired_at", None) is not None):  # issue 30: never folds or supersedes
        return None
    embedding = base.embedding_for(note, embedder_id, dim)
    if embedding is None:
        return None
    return (
        note.id, note.tenant_id, note.resource_id or "", note.thread_id or "", note.kind,
        note.note_id, content_hash(note.content), note.path, note.subject,
        Range(note.valid_from, note.valid_to, bounds="[)"), note.created_on,
        np.frombuffer(embedding, dtype=np.float32),
        *_inferred_cols(note),
        of_consent(note.consent),
        list(note_terms(note.content)),
    )


INFERRED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("inferred_entity", "text"), ("inferred_attribute", "text"), ("inferred_value", "text"),
    ("inferred_rule", "text"), ("inferred_polarity", "boolean"), ("inferred_single", "boolean"),
    ("inferred_previous", "text"),
)
"""The parts of the inferred key, as (column, SQL type)."""

_NO_KEY: tuple[None, ...] = (None,) * (1 + len(INFERRED_COLUMNS))


def _inferred_cols(note: Note) -> tuple[Any, ...]:
    """``(key, entity, attribute, value, rule, polarity, single_valued, previous)`` of the
    note's inferred key (all ``None`` without one, or for a subject-keyed note)."""
    key = note_key(note) if note.subject is None else None
    if key is None:
        return _NO_KEY
    return (key.key, key.entity, key.attribute, key.value, key.rule, key.polarity,
            key.single_valued, key.previous)


def key_of_row(row: Any) -> SubjectKey | None:
    """The inferred key of a row (a mapping with the :data:`INFERRED_COLUMNS`), or ``None``."""
    if row["inferred_entity"] is None:
        return None
    return SubjectKey(entity=row["inferred_entity"], attribute=row["inferred_attribute"],
                      value=row["inferred_value"], rule=row["inferred_rule"],
                      polarity=bool(row["inferred_polarity"]), single_valued=bool(row["inferred_single"]),
                      previous=row["inferred_previous"])


def columns_ddl(dim: int) -> str:
    """The table's column definitions (SQL text; primary key ``(aggregate_id)``, with the
    tenant when partitioned: :func:`memfabric.projections.partitions.create_table`)."""
    return (
        " aggregate_id uuid NOT NULL, tenant_id text NOT NULL, resource_id text NOT NULL,"
        " thread_id text NOT NULL, kind text NOT NULL, note_id text NOT NULL,"
        " token_hash text NOT NULL, path text, subject text, valid tstzrange NOT NULL,"
        f" ingested_at timestamptz NOT NULL, embedding vector({int(dim)}) NOT NULL,"
        " inferred_key text, " + ", ".join(f"{c} {typ}" for c, typ in INFERRED_COLUMNS)
        + ", visibility text, link_terms text[]")


def migrate_ddl(table: str = TABLE) -> list[sql.Composed]:
    """Columns added after the first release (a table created by an older release)."""
    t = sql.Identifier(table)
    return [sql.SQL("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS inferred_key text").format(t=t),
            *(sql.SQL("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {c} " + typ).format(
                t=t, c=sql.Identifier(c)) for c, typ in INFERRED_COLUMNS),
            sql.SQL("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS link_terms text[]").format(t=t)]


def migrate_jsonb(cur: Cursor[Any], table: str = TABLE) -> None:
    """Move the values of an ``inferred jsonb`` column (issue 12's first layout) into
    the :data:`INFERRED_COLUMNS`, then drop it (nothing when there is none)."""
    found = cur.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                        " AND table_name = %s AND column_name = 'inferred'", (table,)).fetchone()
    if found is None:
        return
    cur.execute(sql.SQL(
        "UPDATE {t} SET inferred_entity = inferred->>'entity', inferred_attribute = inferred->>'attribute',"
        " inferred_value = inferred->>'value', inferred_rule = inferred->>'rule',"
        " inferred_polarity = coalesce((inferred->>'polarity')::boolean, true),"
        " inferred_single = coalesce((inferred->>'single_valued')::boolean, true),"
        " inferred_previous = inferred->>'previous'"
        " WHERE inferred ? 'entity' AND inferred_entity IS NULL").format(t=sql.Identifier(table)))
    cur.execute(sql.SQL("ALTER TABLE {t} DROP COLUMN inferred").format(t=sql.Identifier(table)))


def index_ddl(table: str = TABLE) -> list[sql.Composed]:
    """Btrees on scope + kind (+ token hash), path and subject; GIN on ``link_terms``."""
    t = sql.Identifier(table)
    scope = "tenant_id, resource_id, thread_id, kind"
    return [
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (" + scope + ", token_hash)").format(
            i=sql.Identifier(f"{table}_hash"), t=t),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (" + scope + ", path) WHERE path IS NOT NULL").format(
            i=sql.Identifier(f"{table}_path"), t=t),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (" + scope + ", subject) WHERE subject IS NOT NULL").format(
            i=sql.Identifier(f"{table}_subject"), t=t),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (" + scope + ", inferred_key)"
                " WHERE inferred_key IS NOT NULL").format(i=sql.Identifier(f"{table}_inferred"), t=t),
        # issue 16: the tenant-visible notes of a whole tenant (a tenant-visible write's group)
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, kind, token_hash)"
                " WHERE visibility = 'tenant'").format(i=sql.Identifier(f"{table}_tenant_vis"), t=t),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} USING gin (link_terms)").format(
            i=sql.Identifier(f"{table}_terms"), t=t),
    ]


_COLS = ("n.note_id, n.token_hash, n.path, n.subject, 1 - (n.embedding <=> q.vec) AS sim,"
         " lower(n.valid) AS valid_from, upper(n.valid) AS valid_to, "
         + ", ".join("n." + c for c, _ in INFERRED_COLUMNS)
         + ", n.tenant_id, n.resource_id, n.thread_id, n.visibility")
_OWN = "(n.tenant_id = %(t)s AND n.resource_id = %(r)s AND n.thread_id = %(th)s"
_REACH = {
    # issue 16: a write's consolidation group (memfabric.domain.visibility.meets): the
    # notes of its visibility visible from its scope, or of its scope and narrower
    "exact": _OWN + " AND (n.visibility = %(v)s OR n.visibility = ANY(%(nv)s)))",
    "resource": "(n.tenant_id = %(t)s AND n.resource_id = %(r)s AND n.visibility = 'resource')"
                " OR " + _OWN + " AND n.visibility = ANY(%(nv)s))",
    "tenant": "(n.tenant_id = %(t)s AND n.visibility = 'tenant')"
              " OR " + _OWN + " AND n.visibility = ANY(%(nv)s))",
}
_CURRENT = "({reach}) AND n.kind = q.kind AND (upper(n.valid) IS NULL OR upper(n.valid) > %(now)s)"
_FILE = (f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.path = q.path"  # noqa: S608
         " ORDER BY n.ingested_at DESC LIMIT %(k)s)")
_SUBJECT = (f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject = q.subject"  # noqa: S608
            " ORDER BY n.ingested_at DESC LIMIT %(k)s)")
_TOKEN = (f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject IS NULL"  # noqa: S608
          " AND n.token_hash = q.h ORDER BY n.ingested_at DESC LIMIT 1)")
# the per_query nearest subject-less vectors: an exact scan of the whole group, so
# only for the workers that use them (``near``; similarity alone decides no write)
_NEAREST = (f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject IS NULL"  # noqa: S608
            " ORDER BY n.embedding <=> q.vec LIMIT %(k)s)")
# a plain write with an inferred key: the same-key lookup (btree) in the same statement;
# a from-to key (attribute "*") looks up the same entity instead
_SAME_KEY = (f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject IS NULL"  # noqa: S608
             " AND n.inferred_key = q.ikey ORDER BY n.ingested_at DESC LIMIT %(ik)s)")
_SAME_ENTITY = (f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject IS NULL"  # noqa: S608
                " AND n.inferred_key IS NOT NULL AND n.inferred_entity = q.ient"
                " ORDER BY n.ingested_at DESC LIMIT %(ik)s)")
_LATERAL: dict[tuple[str, bool], str] = {  # (group, near) -> branches, in candidate order
    (group, near): " UNION ALL ".join(
        (_TOKEN, *((_NEAREST,) if near else ()), *extra) if group.startswith("plain") else extra)
    for near in (False, True)
    for group, extra in (("file", (_FILE,)), ("subject", (_SUBJECT,)), ("plain", ()),
                         ("plain+key", (_SAME_KEY,)), ("plain+entity", (_SAME_ENTITY,)))
}
_STATEMENTS = {
    (group, near, how): ("SELECT q.i, m.* FROM unnest(%(i)s::int[], %(kind)s::text[], %(h)s::text[],"  # noqa: S608
                   " %(path)s::text[], %(subject)s::text[], %(vec)b::vector[], %(ikey)s::text[],"
                   " %(ient)s::text[]) AS q(i, kind, h, path, subject, vec, ikey, ient)"
                   " CROSS JOIN LATERAL (" + lateral.replace("{reach}", cond) + ") m")
    for (group, near), lateral in _LATERAL.items() for how, cond in _REACH.items()
}


def group_of(query: NeighbourQuery) -> str:
    """Which lookup serves ``query``: ``file`` (same path), ``subject`` or ``plain``."""
    return "file" if query.kind == "file" else "subject" if query.subject is not None else "plain"


def select_neighbours(
    cur: Cursor[Any], scope: Scope, queries: Sequence[NeighbourQuery], *, now: datetime,
    per_query: int = 3, near: bool = False,
) -> list[list[Neighbour]]:
    """Consolidation candidates per query (a superset; the rule is
    ``memfabric.domain.consolidation.choose``), :data:`CHUNK` queries per statement:
    the ``per_query`` newest same-path (file) or same-subject notes, else the newest
    subject-less same-token note, the ``3 * per_query`` newest of the same inferred key
    (or entity, for a from-to key) and, with ``near``, the ``per_query`` nearest
    subject-less vectors (an exact scan of the group: every other branch reads a few
    btree entries, so without ``near`` the cost does not grow with the scope); only
    current notes of the query's kind and consolidation group (issue 16: the same
    visibility, visible from ``scope``; :func:`memfabric.domain.visibility.group`),
    filtered inside the SQL. Each neighbour carries its ``home`` scope."""
    t, r, th = scope.sql()
    out: list[list[Neighbour]] = [[] for _ in queries]
    groups: dict[tuple[str, visibility.Reach, visibility.Visibility], list[int]] = {}
    for i, q in enumerate(queries):
        group = group_of(q)
        if group == "plain" and inferred_key_of(q) is not None:
            group = "plain+key"
        elif group == "plain" and inferred_entity_of(q) is not None:
            group = "plain+entity"
        groups.setdefault((group, *visibility.group(scope, q.visibility)), []).append(i)
    for (group, how, vis), idx in groups.items():
        for start in range(0, len(idx), CHUNK):
            chunk = idx[start : start + CHUNK]
            params = {
                "t": t, "r": r, "th": th, "v": vis, "nv": visibility.narrower(vis), "now": now, "k": per_query, "i": chunk,
                "kind": [queries[i].kind for i in chunk],
                "h": [queries[i].token_hash for i in chunk],
                "path": [queries[i].path for i in chunk],
                "subject": [queries[i].subject for i in chunk],
                "vec": [vector_binary(np.asarray(queries[i].embedding, np.float32)) for i in chunk],
                "ikey": [inferred_key_of(queries[i]) for i in chunk],
                "ient": [inferred_entity_of(queries[i]) for i in chunk],
                "ik": per_query * 3,
            }
            for row in cur.execute(_STATEMENTS[(group, near, how)], encode_params(params)).fetchall():
                out[row["i"]].append(Neighbour(
                    row["note_id"], base.finite(float(row["sim"])), row["token_hash"], row["path"],
                    row["subject"], row["valid_from"], row["valid_to"], key_of_row(row),
                    _home(row), of_consent({"visibility": row["visibility"]})))
    return out


def _home(row: dict[str, Any]) -> Scope:
    return stored_scope(row["tenant_id"], row["resource_id"], row["thread_id"])


_SCOPE_KIND = ("n.tenant_id = %(t)s AND n.resource_id = %(r)s AND n.thread_id = %(th)s"
               " AND n.kind = %(kind)s AND (upper(n.valid) IS NULL OR upper(n.valid) > %(now)s)")
_TERM_POSTINGS = (  # table and column names are constants of this module
    f"SELECT q.term, m.note_id, extract(epoch FROM m.ingested_at)::float8 AS at"  # noqa: S608
    f" FROM unnest(%(terms)s::text[]) AS q(term) CROSS JOIN LATERAL"
    f" (SELECT n.note_id, n.ingested_at FROM {TABLE} n WHERE n.link_terms @> ARRAY[q.term]"
    f" AND {_SCOPE_KIND} ORDER BY n.ingested_at DESC, n.note_id LIMIT %(per_term)s) m"
)
_SCOPE_SIZE = (f"SELECT (SELECT count(*) FROM (SELECT 1 FROM {TABLE} n WHERE {_SCOPE_KIND}"  # noqa: S608
               " LIMIT %(cap)s) s) AS n")
_SCOPE_SIZE_LATEST = (_SCOPE_SIZE + f", (SELECT n.note_id FROM {TABLE} n WHERE {_SCOPE_KIND}"  # noqa: S608
                      " ORDER BY n.ingested_at DESC, n.note_id LIMIT 1) AS latest")


def select_term_postings(cur: Cursor[Any], scope: Scope, kind: str, terms: Sequence[str], *,
                         now: datetime, latest: bool = False, df_cap: int = DF_CAP) -> TermPostings:
    """For the shared-term linker: the current notes of exactly ``scope`` and ``kind``
    (counted up to :data:`~memfabric.domain.link_terms.N_CAP`, and with ``latest`` the
    newest one) and,
    per term of ``terms``, up to ``df_cap + 1`` ids of such notes containing it (newest
    first; GIN on ``link_terms``, one statement for every term; none without terms)."""
    t, r, th = scope.sql()
    params = {"t": t, "r": r, "th": th, "kind": kind, "now": now, "terms": list(terms),
              "per_term": df_cap + 1, "cap": N_CAP}
    row = cur.execute(_SCOPE_SIZE_LATEST if latest else _SCOPE_SIZE, params).fetchone()
    ids: dict[str, list[str]] = {}
    at: dict[str, float] = {}
    if terms:
        for rec in cur.execute(_TERM_POSTINGS, params).fetchall():
            ids.setdefault(rec["term"], []).append(rec["note_id"])
            at[rec["note_id"]] = float(rec["at"])
    return TermPostings(int(row["n"]) if row else 0, ids, at, row["latest"] if row and latest else None)


def inferred_key_of(q: NeighbourQuery) -> str | None:
    """The inferred key a query looks up (``None`` for a from-to key)."""
    return q.inferred.key if q.inferred is not None and q.inferred.attribute != WILDCARD else None


def inferred_entity_of(q: NeighbourQuery) -> str | None:
    """The entity a from-to query (attribute ``*``) looks up."""
    return q.inferred.entity if q.inferred is not None and q.inferred.attribute == WILDCARD else None


class ConsolidationIndexProjection:
    """The consolidation index as a :class:`~memfabric.projections.base.NoteProjection`
    (``write_side``: always projected in the writer's transaction)."""

    name = NAME
    tables: tuple[str, ...] = (TABLE,)
    write_side = True
    batch_rows = True
    """Writes through ``write_rows`` alone (its rows may travel in a ``RowBatch``)."""

    def __init__(self, dim: int, embedder_id: str | None = None) -> None:
        self.dim = dim
        self.embedder_id = embedder_id
        """The embedder whose vectors the rows carry (``None``: each note's write-time one)."""

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        partitions.create_table(cur, TABLE + table_suffix, columns_ddl(self.dim), ["aggregate_id"])
        for stmt in migrate_ddl(TABLE + table_suffix):
            cur.execute(stmt)
        migrate_jsonb(cur, TABLE + table_suffix)
        base.add_visibility(cur, TABLE + table_suffix)
        if not table_suffix:
            self.create_indexes(cur)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        for stmt in index_ddl(TABLE + table_suffix):
            cur.execute(stmt)

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None:
        upserts, deletes = base.split_rows(notes, lambda n: row_for(n, self.embedder_id, self.dim))
        base.write_rows(cur, TABLE, COLUMNS, upserts, deletes, binary=("embedding",))

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int:
        rows = (r for r in (row_for(n, self.embedder_id, self.dim) for n in notes) if r is not None)
        return base.copy_rows(cur, TABLE + table_suffix, COLUMNS, _TYPES, rows)
