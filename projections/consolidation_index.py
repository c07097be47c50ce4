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
``note.inferred_subject``; btree) and ``inferred`` (the whole key as jsonb) were added
by issue 12: same-key notes are candidates however far apart their vectors are.
``create`` adds them to a table of an older release (``ALTER TABLE ... ADD COLUMN IF
NOT EXISTS``); the rows of such a table stay ``NULL`` there until the projection is
rebuilt (``memfabric projections rebuild consolidation``) — notes written before
issue 12 carry no inferred key anyway, so nothing is lost without the rebuild.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from pgvector import Vector
from psycopg import Cursor, sql
from psycopg.types.range import Range

from psycopg.types.json import Jsonb

from memfabric.domain.consolidation import Neighbour, NeighbourQuery, key_from_dict, note_key
from memfabric.domain.subjects import WILDCARD
from memfabric.domain.note import Note
from memfabric.domain.policy import normalized_tokens, token_hash
from memfabric.domain.scope import Scope
from memfabric.projections import base, tables

NAME = "consolidation"
TABLE = tables.CONSOLIDATION_INDEX
KINDS = ("fact", "procedure", "file")

COLUMNS: tuple[str, ...] = (
    "aggregate_id", "tenant_id", "resource_id", "thread_id", "kind", "note_id",
    "token_hash", "path", "subject", "valid", "ingested_at", "embedding",
    "inferred_key", "inferred",
)
"""Column order of a row tuple (also the COPY order)."""

_TYPES = ("uuid", "text", "text", "text", "text", "text", "text", "text", "text",
          "tstzrange", "timestamptz", "vector", "text", "jsonb")

CHUNK = 500
"""Queries per neighbour statement."""


def row_for(note: Note, embedder_id: str | None = None, dim: int = 0) -> tuple[Any, ...] | None:
    """The row of a note, or ``None`` when it can no longer be a consolidation
    candidate (not a consolidating kind, forgotten, held, superseded, no vector).
    ``embedder_id``: whose vector the row carries (see ``recall_index.row_for``)."""
    if (note.kind not in KINDS or not note.live or note.superseded_by is not None
            or note.content is None or note.embedding is None):
        return None
    embedding = base.embedding_for(note, embedder_id, dim)
    if embedding is None:
        return None
    return (
        note.id, note.tenant_id, note.resource_id or "", note.thread_id or "", note.kind,
        note.note_id, token_hash(normalized_tokens(note.content)), note.path, note.subject,
        Range(note.valid_from, note.valid_to, bounds="[)"), note.created_on,
        np.frombuffer(embedding, dtype=np.float32),
        *_inferred_cols(note),
    )


def _inferred_cols(note: Note) -> tuple[str | None, Jsonb | None]:
    key = note_key(note) if note.subject is None else None
    if key is None:
        return (None, None)
    return (key.key, Jsonb(note.inferred_subject))


def ddl(dim: int, table: str = TABLE) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {t} ("
        " aggregate_id uuid PRIMARY KEY, tenant_id text NOT NULL, resource_id text NOT NULL,"
        " thread_id text NOT NULL, kind text NOT NULL, note_id text NOT NULL,"
        " token_hash text NOT NULL, path text, subject text, valid tstzrange NOT NULL,"
        " ingested_at timestamptz NOT NULL, embedding vector({dim}) NOT NULL,"
        " inferred_key text, inferred jsonb)"
    ).format(t=sql.Identifier(table), dim=sql.Literal(dim))


def migrate_ddl(table: str = TABLE) -> list[sql.Composed]:
    """Columns added after the first release (a table created by an older release)."""
    t = sql.Identifier(table)
    return [sql.SQL("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS inferred_key text").format(t=t),
            sql.SQL("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS inferred jsonb").format(t=t)]


def index_ddl(table: str = TABLE) -> list[sql.Composed]:
    """Btrees on scope + kind (+ token hash), path and subject."""
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
    ]


_COLS = ("n.note_id, n.token_hash, n.path, n.subject, 1 - (n.embedding <=> q.vec) AS sim,"
         " lower(n.valid) AS valid_from, upper(n.valid) AS valid_to, n.inferred")
_CURRENT = ("n.tenant_id = %(t)s AND n.resource_id = %(r)s AND n.thread_id = %(th)s"
            " AND n.kind = q.kind AND (upper(n.valid) IS NULL OR upper(n.valid) > %(now)s)")
_LATERAL = {  # noqa: S608 - table and column names are constants of this module
    "file": f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.path = q.path"  # noqa: S608
            " ORDER BY n.ingested_at DESC LIMIT %(k)s)",
    "subject": f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject = q.subject"  # noqa: S608
               " ORDER BY n.ingested_at DESC LIMIT %(k)s)",
    "plain": f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject IS NULL"  # noqa: S608
             " AND n.token_hash = q.h ORDER BY n.ingested_at DESC LIMIT 1) UNION ALL"
             f" (SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject IS NULL"  # noqa: S608
             " ORDER BY n.embedding <=> q.vec LIMIT %(k)s)",
}
# a plain write with an inferred key: the same-key lookup (btree) in the same statement;
# a from-to key (attribute "*") looks up the same entity instead
_SAME_KEY = (f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject IS NULL"  # noqa: S608
             " AND n.inferred_key = q.ikey ORDER BY n.ingested_at DESC LIMIT %(ik)s)")
_SAME_ENTITY = (f"(SELECT {_COLS} FROM {TABLE} n WHERE {_CURRENT} AND n.subject IS NULL"  # noqa: S608
                " AND n.inferred_key IS NOT NULL AND n.inferred->>'entity' = q.ient"
                " ORDER BY n.ingested_at DESC LIMIT %(ik)s)")
_LATERAL["plain+key"] = _LATERAL["plain"] + " UNION ALL " + _SAME_KEY
_LATERAL["plain+entity"] = _LATERAL["plain"] + " UNION ALL " + _SAME_ENTITY
_STATEMENTS = {
    group: ("SELECT q.i, m.* FROM unnest(%(i)s::int[], %(kind)s::text[], %(h)s::text[],"  # noqa: S608
            " %(path)s::text[], %(subject)s::text[], %(vec)s::vector[], %(ikey)s::text[],"
            " %(ient)s::text[]) AS q(i, kind, h, path, subject, vec, ikey, ient)"
            " CROSS JOIN LATERAL (" + lateral + ") m")
    for group, lateral in _LATERAL.items()
}


def group_of(query: NeighbourQuery) -> str:
    """Which lookup serves ``query``: ``file`` (same path), ``subject`` or ``plain``."""
    return "file" if query.kind == "file" else "subject" if query.subject is not None else "plain"


def select_neighbours(
    cur: Cursor[Any], scope: Scope, queries: Sequence[NeighbourQuery], *, now: datetime,
    per_query: int = 3,
) -> list[list[Neighbour]]:
    """Consolidation candidates per query (a superset; the rule is
    ``memfabric.domain.consolidation.choose``), :data:`CHUNK` queries per statement:
    the ``per_query`` newest same-path (file) or same-subject notes, else the newest
    subject-less same-token note and the ``per_query`` nearest subject-less vectors;
    only current notes of exactly ``scope`` and the query's kind."""
    t, r, th = scope.sql()
    out: list[list[Neighbour]] = [[] for _ in queries]
    groups: dict[str, list[int]] = {"file": [], "subject": [], "plain": [], "plain+key": [], "plain+entity": []}
    for i, q in enumerate(queries):
        group = group_of(q)
        if group == "plain" and inferred_key_of(q) is not None:
            group = "plain+key"
        elif group == "plain" and inferred_entity_of(q) is not None:
            group = "plain+entity"
        groups[group].append(i)
    for group, idx in groups.items():
        for start in range(0, len(idx), CHUNK):
            chunk = idx[start : start + CHUNK]
            params = {
                "t": t, "r": r, "th": th, "now": now, "k": per_query, "i": chunk,
                "kind": [queries[i].kind for i in chunk],
                "h": [queries[i].token_hash for i in chunk],
                "path": [queries[i].path for i in chunk],
                "subject": [queries[i].subject for i in chunk],
                "vec": [Vector(np.asarray(queries[i].embedding, np.float32)) for i in chunk],
                "ikey": [inferred_key_of(queries[i]) for i in chunk],
                "ient": [inferred_entity_of(queries[i]) for i in chunk],
                "ik": per_query * 3,
            }
            for row in cur.execute(_STATEMENTS[group], params).fetchall():
                out[row["i"]].append(Neighbour(
                    row["note_id"], base.finite(float(row["sim"])), row["token_hash"], row["path"],
                    row["subject"], row["valid_from"], row["valid_to"], key_from_dict(row["inferred"])))
    return out


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

    def __init__(self, dim: int, embedder_id: str | None = None) -> None:
        self.dim = dim
        self.embedder_id = embedder_id
        """The embedder whose vectors the rows carry (``None``: each note's write-time one)."""

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        cur.execute(ddl(self.dim, TABLE + table_suffix))
        for stmt in migrate_ddl(TABLE + table_suffix):
            cur.execute(stmt)
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
