"""The recall index: one row per live ``fact``/``procedure``/``file`` note, in PostgreSQL
with pgvector (HNSW, cosine) and full-text search (GIN over ``to_tsvector('english')``).

Rows are a pure function of the ``Note`` aggregate's state (:func:`row_for`), so an
inline update after a write and a replay of the log from zero give identical rows.
Superseded notes keep their row (with their closed window) so that ``as_of`` recall
inside their window still finds them; forgotten and held notes have no row.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np
from psycopg import Cursor, sql
from psycopg.types.json import Jsonb
from psycopg.types.range import Range

from memfabric.domain.note import Note
from memfabric.domain.ports import Candidate, ListQuery, NoteFilter
from memfabric.domain.scope import Scope, stored_scope
from memfabric.domain.policy import content_hash
from memfabric.projections import (base, partitions, principals, recall_links, recall_partition, recall_tail, tables,
                                   versions_migration)
from memfabric.projections.base import split_rows, write_rows

NAME = "recall_index"
TABLE = tables.RECALL_INDEX
RECALLABLE = ("fact", "procedure", "file")

COLUMNS: tuple[str, ...] = (
    "tenant_id", "resource_id", "thread_id", "visibility", "consent_granted", "kind",
    "aggregate_id", "note_id", "valid", "superseded_by", "importance", "token_count",
    "tags", "path", "subject", "token_hash", "content", "source_entry_ids", "supersedes",
    "t_ref", "ingested_at", "version", "embedder_id", "context", "keywords", "fold_count",
    "updated_at", "consent", "embedding", "search_extra", "recorded_from",
)
"""Column order of a row tuple (also the COPY order). ``recorded_from`` (issue 31): the
recorded time of the state's latest event (``note.modified_on``), from which the row is
the note's version as recorded (:mod:`memfabric.projections.note_versions`)."""

TSV = "to_tsvector('english', content) || to_tsvector('english', coalesce(search_extra, ''))"
"""The full-text vector of a row: its content, then its context and keywords
(``search_extra``), so a caller's keywords and what evolution contributed are found."""

_FILL_SEARCH_EXTRA = "NULLIF(array_to_string(ARRAY[NULLIF(context, '')] || keywords, ' '), '')"
"""SQL equal to :func:`search_extra` on a row's ``context`` and ``keywords`` (migration)."""

_LO, _HI = "'0001-01-01 00:00:00+00'::timestamptz", "'9999-12-31 23:59:59.999999+00'::timestamptz"


def _readable(expr: str) -> str:
    """``expr`` when Python can read it back (UTC years 1-9999), else NULL (an open
    bound): a row written before instants were validated must not break recall."""
    return f"CASE WHEN {expr} BETWEEN {_LO} AND {_HI} THEN {expr} END"


RETURNED_COLUMNS: tuple[tuple[str, str], ...] = (
    *((n, "i." + n) for n in ("tenant_id", "resource_id", "thread_id", "kind", "note_id", "importance",
                              "token_count", "tags", "path", "subject", "content", "source_entry_ids",
                              "supersedes")),
    ("t_ref", _readable("i.t_ref")),
    ("ingested_at", f"least(greatest(i.ingested_at, {_LO}), {_HI})"),
    ("version", "i.version"),
    ("valid_from", _readable("lower(i.valid)")), ("valid_to", _readable("upper(i.valid)")),
    *((n, "i." + n) for n in ("visibility", "consent_granted", "context", "keywords", "fold_count")),
    ("updated_at", _readable("i.updated_at")),
    ("consent", "i.consent::text"), ("superseded_by", "i.superseded_by"),
)
"""``(name, expression)`` of each column a recall returns (table alias ``i``)."""

RANKED = frozenset({"note_id", "importance", "token_count", "t_ref", "ingested_at", "valid_from"})
"""The returned columns ranking reads for every candidate (the score's recency and
importance, the order's tie-breaks, the budget): all a *partial* row carries (issue 29,
:func:`returned`)."""


def returned(full_when: str | None = None) -> str:
    """The select list of :data:`RETURNED_COLUMNS`; ``full_when``: an SQL condition
    without which a row carries only the :data:`RANKED` columns (the others ``NULL``,
    never read from the table: a *partial* row)."""
    def column(name: str, expr: str) -> str:
        if full_when is not None and name not in RANKED:
            expr = f"CASE WHEN {full_when} THEN {expr} END"
        return expr if expr == "i." + name else f"{expr} AS {name}"
    return ", ".join(column(n, e) for n, e in RETURNED_COLUMNS)


RETURNED = returned()
"""Columns a recall returns (table alias ``i``). ``consent`` comes as JSON text, decoded
only for the hits a ranking keeps (``ConsentInfo.from_dict``): decoding it for each of a
recall's ~100 candidates was a fifth of a linked recall's client time (issue 29)."""


def columns_ddl(dim: int) -> str:
    """The table's column definitions (SQL text; the primary key, ``(aggregate_id)``, is
    added by :func:`memfabric.projections.partitions.create_table`, with the tenant when
    partitioned; the HNSW/GIN indexes are :func:`index_ddl`; the last column, ``indexed``,
    is :mod:`memfabric.projections.recall_tail`'s)."""
    return (
            " tenant_id text NOT NULL, resource_id text NOT NULL, thread_id text NOT NULL,"
            " visibility text NOT NULL, consent_granted boolean, kind text NOT NULL,"
            " aggregate_id uuid NOT NULL, note_id text NOT NULL,"
            " valid tstzrange NOT NULL, superseded_by text, importance real NOT NULL,"
            " token_count integer NOT NULL, tags text[] NOT NULL, path text, subject text,"
            " token_hash text NOT NULL, content text NOT NULL, source_entry_ids text[] NOT NULL,"
            " supersedes text, t_ref timestamptz, ingested_at timestamptz NOT NULL,"
            " version integer NOT NULL, embedder_id text, context text, keywords text[] NOT NULL,"
            " fold_count integer NOT NULL, updated_at timestamptz, consent jsonb,"
            f" embedding vector({int(dim)}) NOT NULL, search_extra text, recorded_from timestamptz,"
            " tsv tsvector GENERATED ALWAYS AS (" + TSV + ") STORED"
            + recall_tail.COLUMN_DDL
    )


def migrate(cur: Cursor[Any], table: str = TABLE) -> bool:
    """Bring a table made before ``search_extra`` up to date: add the column, fill it
    from ``context`` and ``keywords`` (as :func:`search_extra` does) and generate
    ``tsv`` from both (the column is dropped and added again: its GIN index goes with it
    and :func:`index_ddl` makes it anew). Returns whether anything changed."""
    if not base.has_table(cur, table) or base.has_column(cur, table, "search_extra"):
        return False
    t = sql.Identifier(table)
    cur.execute(sql.SQL("ALTER TABLE {t} ADD COLUMN search_extra text").format(t=t))
    cur.execute(sql.SQL("UPDATE {t} SET search_extra = " + _FILL_SEARCH_EXTRA).format(t=t))  # noqa: S608 - constant
    cur.execute(sql.SQL("ALTER TABLE {t} DROP COLUMN tsv").format(t=t))
    cur.execute(sql.SQL("ALTER TABLE {t} ADD COLUMN tsv tsvector GENERATED ALWAYS AS (" + TSV + ") STORED").format(t=t))
    return True


def search_extra(note: Note) -> str | None:
    """What recall's full text searches besides the content: the note's ``context`` and
    ``keywords`` (the caller's and those evolution contributed), space-joined; ``None``
    without either."""
    return " ".join(part for part in (note.context, *note.keywords) if part) or None


def index_ddl(table: str = TABLE, suffix: str = "") -> list[sql.Composed]:
    """Secondary indexes: the partial HNSW index and the tail's btree
    (:func:`memfabric.projections.recall_tail.index_ddl`), GIN on tsv, btrees on
    scope + kind, tenant + kind and tenant + (ingested_at, aggregate_id) (listing)."""
    t = sql.Identifier(table)
    name = table + suffix
    return [
        *recall_tail.index_ddl(table, name),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} USING gin (tsv)").format(
            i=sql.Identifier(f"{name}_tsv"), t=t
        ),
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, resource_id, thread_id, kind)"
        ).format(i=sql.Identifier(f"{name}_scope"), t=t),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, kind)").format(
            i=sql.Identifier(f"{name}_tenant"), t=t
        ),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, ingested_at, aggregate_id)").format(
            i=sql.Identifier(f"{name}_listing"), t=t
        ),
    ]


def _range(lo: datetime | None, hi: datetime | None) -> Range[datetime]:
    return Range(lo, hi, bounds="[)")


@base.per_state
def row_for(note: Note, embedder_id: str | None = None, dim: int = 0) -> tuple[Any, ...] | None:
    """The index row of a note, or ``None`` when the note must not be recallable
    (forgotten, held, or not a recallable kind). ``embedder_id``: the embedder whose
    vector the row carries (issue 19; ``None``: the write-time one; ``EmbedderChangedError``:
    :func:`memfabric.projections.base.embedding_for`). Reused per state (a write's recall
    and versions rows)."""
    return _row_for(note, embedder_id, dim)


def _row_for(note: Note, embedder_id: str | None, dim: int) -> tuple[Any, ...] | None:
    if not note.recallable or note.content is None:  # (content: narrows the type)
        return None
    embedding = base.embedding_for(note, embedder_id, dim)
    if embedding is None:
        return None
    consent = note.consent or {}
    return (
        note.tenant_id,
        note.resource_id or "",
        note.thread_id or "",
        consent.get("visibility", "thread"),
        consent.get("granted"),
        note.kind,
        note.id,
        note.note_id,
        _range(note.valid_from, note.valid_to),
        note.superseded_by,
        float(note.importance),
        int(note.token_count),
        list(note.tags),
        note.path,
        note.subject,
        content_hash(note.content),
        note.content,
        list(note.source_entry_ids),
        note.supersedes,
        note.t_ref,
        note.created_on,
        int(note.version),
        note.embedder_id if embedding is note.embedding else embedder_id,
        note.context,
        list(note.keywords),
        int(note.fold_count),
        note.updated_at,
        Jsonb(note.consent) if note.consent is not None else None,
        np.frombuffer(embedding, dtype=np.float32),
        search_extra(note),
        note.modified_on,
    )


WRITE_COLUMNS: tuple[str, ...] = (*COLUMNS, recall_tail.COLUMN)
"""The columns a write sends: a row's :data:`COLUMNS`, then ``indexed``."""


def apply(cur: Cursor[Any], notes: Iterable[Note], table: str = TABLE,
          embedder_id: str | None = None, dim: int = 0) -> None:
    """Upsert or delete the rows of ``notes`` (their current aggregate state); a load of
    at least :data:`BULK_MIN_ROWS` rows goes through :func:`_bulk_load`. Every row
    written here joins the unindexed tail (``indexed = false``, also when an upsert
    changes an indexed row): the HNSW graph takes it later, outside the write
    (:mod:`memfabric.projections.recall_tail`)."""
    upserts, deletes = split_rows(notes, lambda n: row_for(n, embedder_id, dim))
    if len(upserts) >= BULK_MIN_ROWS and not base.in_pipeline(cur):  # COPY is refused in pipeline mode
        write_rows(cur, table, COLUMNS, [], deletes)
        _bulk_load(cur, table, upserts)
        return
    write_rows(cur, table, WRITE_COLUMNS, [(*r, False) for r in upserts], deletes, binary=("embedding",))


BULK_MIN_ROWS = 2000
"""A write of at least this many rows is loaded with COPY (see :func:`_bulk_load`)."""


def _bulk_load(cur: Cursor[Any], table: str, rows: list[tuple[Any, ...]]) -> None:
    """Large load: delete the rows being replaced, COPY the new rows into the live
    table's unindexed tail (the tail indexer puts them into the HNSW graph after the
    import commits). The index is never dropped in a
    writer's transaction (issue 17 defect 2): that took an ACCESS EXCLUSIVE lock on the
    table after the events-table lock, so a concurrent recall or write deadlocked or
    waited for the whole import. Bulk index builds happen only in a projection rebuild
    (into a shadow table, outside the append lock)."""
    t = sql.Identifier(table)
    cur.execute(sql.SQL("DELETE FROM {t} WHERE tenant_id = ANY(%s) AND aggregate_id = ANY(%s)").format(t=t),
                base.delete_params([(r[0], r[6]) for r in rows]))
    copy_rows(cur, rows, table, indexed=False)


_COPY_TYPES = (
    "text", "text", "text", "text", "bool", "text", "uuid", "text", "tstzrange",
    "text", "float4", "int4", "text[]", "text", "text", "text", "text", "text[]",
    "text", "timestamptz", "timestamptz", "int4", "text", "text", "text[]", "int4",
    "timestamptz", "jsonb", "vector", "text", "timestamptz",
)


def copy_rows(cur: Cursor[Any], rows: Iterable[Sequence[Any]], table: str = TABLE, *,
              indexed: bool = True) -> int:
    """Bulk-load rows (in :data:`COLUMNS` order) with ``COPY ... FROM STDIN (FORMAT
    BINARY)``, each with ``indexed`` (default ``True``: a rebuild's shadow table, whose
    HNSW index is built after the load); returns the count."""
    return base.copy_rows(cur, table, WRITE_COLUMNS, (*_COPY_TYPES, "bool"),
                          ((*r, indexed) for r in rows))


def scope_filter(alias: str = "") -> sql.Composable:
    """Visibility rule (issue "forget"): same tenant and either the note's own
    (resource, thread), or ``tenant`` visibility, or ``resource`` visibility with the
    same non-empty resource. Parameters: ``%(t)s, %(r)s, %(th)s``."""
    p = sql.SQL(alias + ".") if alias else sql.SQL("")
    return sql.SQL(
        "{p}tenant_id = %(t)s AND (({p}resource_id = %(r)s AND {p}thread_id = %(th)s)"
        " OR {p}visibility = 'tenant'"
        " OR ({p}visibility = 'resource' AND {p}resource_id = %(r)s AND %(r)s <> ''))"
    ).format(p=p)


def scope_access(filters: NoteFilter | None, alias: str = "") -> sql.Composable:
    """Issue 33: the scope rule, or with a principal's ``filters.access`` the rule of
    :func:`memfabric.projections.principals.access_condition` around it."""
    access = None if filters is None else filters.access
    return scope_filter(alias) if access is None else principals.access_condition(scope_filter(alias), access, alias)


def access_params(filters: NoteFilter | None) -> dict[str, Any]:
    """The parameters of :func:`scope_access`' principal rule (none without ``filters.access``)."""
    access = None if filters is None else filters.access
    return {} if access is None else principals.access_params(access)


class RecallIndexProjection:
    """The recall index as a :class:`~memfabric.projections.base.NoteProjection`."""

    name = NAME
    tables: tuple[str, ...] = (TABLE,)
    write_side = False
    batch_rows = True
    """Writes through ``write_rows`` alone (its rows may travel in a ``RowBatch``)."""

    def __init__(self, dim: int, embedder_id: str | None = None) -> None:
        self.dim = dim
        self.embedder_id = embedder_id
        """The embedder whose vectors the rows carry (``None``: each note's write-time one)."""

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        migrate(cur, TABLE + table_suffix)
        recall_tail.migrate(cur, TABLE + table_suffix)
        versions_migration.migrate(cur, TABLE + table_suffix)
        partitions.create_table(cur, TABLE + table_suffix, columns_ddl(self.dim), ["aggregate_id"])
        if not table_suffix:
            self.create_indexes(cur)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        for stmt in index_ddl(TABLE + table_suffix):
            cur.execute(stmt)

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None:
        apply(cur, notes, embedder_id=self.embedder_id, dim=self.dim)

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "", indexed: bool = True) -> int:
        rows = (r for r in (row_for(n, self.embedder_id, self.dim) for n in notes) if r is not None)
        return copy_rows(cur, rows, TABLE + table_suffix, indexed=indexed)


MAX_QUERY_TERMS = 32
"""The lexical list uses at most this many distinct query lexemes, the longest ones
(length is a cheap stand-in for rarity): a long message used as the query (up to 8,000
characters) costs about what a 32-term query costs instead of seconds. Short queries
are unaffected."""

IDF_CORPUS_CAP = 10_000
"""Recall counts the notes its filters admit (the ``N`` of the full-text IDF) up to this
many; beyond it the count, and so the cost, stays bounded."""


def _consent(require_consent: bool) -> sql.Composable:
    # An explicit refusal (granted=False) is never recalled; with require_consent
    # only notes whose consent was granted are.
    return (sql.SQL("consent_granted IS TRUE") if require_consent
            else sql.SQL("consent_granted IS DISTINCT FROM FALSE"))


def filter_sql(filters: NoteFilter | None) -> list[sql.Composable]:
    """The conditions of ``filters`` (parameters ``f_tags``, ``f_subject``, ``f_imp``,
    see :func:`filter_params`): every tag (``tags @>``), equal subject, importance at least."""
    out: list[sql.Composable] = []
    if filters is not None and filters.tags:
        out.append(sql.SQL("tags @> %(f_tags)s::text[]"))
    if filters is not None and filters.subject is not None:
        out.append(sql.SQL("subject = %(f_subject)s"))
    if filters is not None and filters.min_importance is not None:
        out.append(sql.SQL("importance >= %(f_imp)s::float8"))
    return out


def filter_params(filters: NoteFilter | None) -> dict[str, Any]:
    """Parameters of :func:`filter_sql`."""
    if filters is None:
        return {}
    return {"f_tags": list(filters.tags), "f_subject": filters.subject, "f_imp": filters.min_importance,
            **access_params(filters)}


def _where(require_consent: bool, filters: NoteFilter | None = None) -> sql.Composable:
    return sql.SQL(" AND ").join([
        scope_access(filters),
        sql.SQL("kind = ANY(%(kinds)s)"),
        sql.SQL("valid @> %(as_of)s::timestamptz"),
        _consent(require_consent),
        *filter_sql(filters),
    ])


_LEXICAL_LIST = (
    "qt AS (SELECT lexeme, quote_literal(lexeme)::tsquery AS q"
    " FROM unnest(to_tsvector('english', %(text)s))"
    " ORDER BY length(lexeme) DESC, lexeme LIMIT %(max_terms)s),"
    " tq AS (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS q FROM qt),"
    " m AS MATERIALIZED (SELECT aggregate_id, ingested_at, tsv FROM {t}"
    " WHERE tsv @@ (SELECT q FROM tq) AND {w}),"
    " mt AS MATERIALIZED (SELECT m.aggregate_id, m.ingested_at, qt.lexeme FROM m JOIN qt ON m.tsv @@ qt.q),"
    " nn AS MATERIALIZED (SELECT count(*)::float8 AS n FROM (SELECT 1 FROM {t}"
    " WHERE {w} LIMIT %(idf_cap)s) s),"
    " idf AS MATERIALIZED (SELECT lexeme, ln(1 + (greatest(nn.n, count(*)) - count(*) + 0.5)"
    " / (count(*) + 0.5)) AS w FROM mt, nn GROUP BY lexeme, nn.n),"
    " ls AS MATERIALIZED (SELECT mt.aggregate_id, mt.ingested_at, sum(idf.w)::float8 AS lex"
    " FROM mt JOIN idf USING (lexeme) GROUP BY mt.aggregate_id, mt.ingested_at),"
    " lr AS (SELECT aggregate_id, row_number() OVER (ORDER BY lex DESC, ingested_at, aggregate_id)"
    " AS rank FROM ls ORDER BY lex DESC, ingested_at, aggregate_id LIMIT %(limit)s)"
)
_EXACT_VECTOR_LIST = (
    # issue 18: the exact scan of a small tenant, without ``SET LOCAL enable_indexscan``
    # (one round trip): the OFFSET 0 fence keeps the HNSW index out of the plan, the
    # btree on the scope finds the rows, each distance is computed once, top-N sort.
    "v AS MATERIALIZED (SELECT aggregate_id, dist FROM (SELECT aggregate_id,"
    " embedding <=> %(q)b AS dist FROM {t} WHERE {w} OFFSET 0) s ORDER BY dist LIMIT %(limit)s),"
    " vr AS (SELECT aggregate_id, row_number() OVER (ORDER BY dist, aggregate_id) AS rank FROM v)"
)
_NO_LIST = "{name} AS (SELECT NULL::uuid AS aggregate_id, NULL::bigint AS rank WHERE FALSE)"


@functools.lru_cache(maxsize=2048)
def recall_statement(*, vector: bool, lexical: bool, require_consent: bool,
                     filters: NoteFilter | None = None, expand: bool = False,
                     exact: bool = False, vector_list: str | None = None, partition: int | None = None) -> bytes:
    """The text of the one recall statement (composed once per process per set of
    arguments: composing was ~0.4 ms of a recall): the vector list (top ``limit`` by cosine distance), the
    full-text list (top ``limit`` by IDF-weighted term overlap) and, for the union of
    both, the exact cosine similarity and full-text score, with every scope, kind,
    validity and consent filter inside each list.

    Full-text score of a note = the sum over the query's lexemes (``english``
    configuration, stop words dropped) that the note contains of the BM25 IDF
    ``ln(1 + (N - df + 0.5) / (df + 0.5))``, where ``N`` is the number of notes the
    filters admit (counted up to :data:`IDF_CORPUS_CAP`) and ``df`` the number of those
    containing the lexeme: BM25 with ``k1 = 0`` (no term-frequency or length term, which
    barely matter for short notes). Parameters: ``t, r, th, kinds, as_of, limit``, and
    ``q`` (float32 vector, binary) / ``text``, ``idf_cap``, ``max_terms`` and those of
    :func:`filter_params`.

    Rows carry no ``links``: :func:`memfabric.projections.recall_hits.select_links` reads them for the hits a ranking
    keeps (issue 29: a sub-select per candidate was half of a linked recall's time). With ``expand`` (issue 15)
    the statement also returns up to ``expand`` (parameter) notes linked in either
    direction to a candidate of either list, each passing the same conditions as the
    lists (scope, kinds, validity, consent and ``filters``), with ``link_w`` = the
    largest weight of such an edge (``NULL`` for list candidates), ``link_seeds``
    the candidates it is linked to (by :func:`~memfabric.projections.recall_links.seed_number`)
    and the edge weights, packed (:func:`~memfabric.projections.recall_links.unpack`); a list
    candidate carries in ``link_seeds`` its edges to
    the other list candidates (for the link term of :mod:`memfabric.domain.ranking`); the
    link CTEs are :mod:`memfabric.projections.recall_links`'. A linked note's row is
    *partial* (issue 29): only the :data:`RANKED` columns, the others ``NULL``;
    :func:`memfabric.projections.recall_hits.select_hits` reads the rest for those
    that become hits (two in three never do).

    ``exact``: the vector list scans the scope's rows and sorts them (never the HNSW
    index; recall 1.0), else it is the HNSW index's ``ORDER BY embedding <=> q`` over
    indexed rows merged with an exact scan of the unindexed tail
    (:data:`memfabric.projections.recall_tail.VECTOR_LIST`). ``vector_list``: another
    template of the vector list (``{t}``, ``{w}`` as there; issue 31's ``known_at`` recall through the live
    HNSW index, :data:`memfabric.projections.note_versions.RECORDED_VECTOR_LIST`). ``partition``: the
    tenant's partition, named instead of the parents (:mod:`memfabric.projections.recall_partition`)."""
    t, w = sql.Identifier(recall_partition.relation(TABLE, partition)), _where(require_consent, filters)
    g = sql.Identifier(recall_partition.relation(tables.LINK_GRAPH, partition))
    vector_list = vector_list or (_EXACT_VECTOR_LIST if exact else recall_tail.VECTOR_LIST)
    parts = [sql.SQL(vector_list if vector else _NO_LIST.format(name="vr")).format(t=t, w=w),
             sql.SQL(_LEXICAL_LIST if lexical else _NO_LIST.format(name="lr")).format(t=t, w=w)]
    return sql.SQL(
        "WITH {parts}, c AS (SELECT aggregate_id FROM vr UNION SELECT aggregate_id FROM lr){expand}, {rows}"
        " SELECT i.aggregate_id, {ret}, {sim} AS sim, cf.vrank, {lex} AS lex, cf.lrank,"
        " cf.lw AS link_w, cf.seeds AS link_seeds"
        " FROM cf JOIN {t} i ON i.aggregate_id = cf.aggregate_id AND i.tenant_id = %(t)s"  # one partition
    ).format(
        parts=sql.SQL(", ").join(parts), ret=sql.SQL(returned("cf.lw IS NULL") if expand else RETURNED), t=t,
        expand=sql.SQL(recall_links.EXPAND if expand else recall_links.NO_EXPAND).format(t=t, w=w, g=g),
        sim=sql.SQL("1 - (i.embedding <=> %(q)b)" if vector else "NULL::float8"),
        lex=sql.SQL("coalesce(cf.lex, 0)" if lexical else "NULL::float8"),
        rows=sql.SQL(recall_links.ROWS).format(lex_rows=sql.SQL(recall_links.LEX_ROWS if lexical else "")),
    ).as_bytes(None)


def select_candidates(
    cur: Cursor[Any], scope: Scope, *, embedding: np.ndarray | None, query: str | None,
    kinds: Sequence[str], as_of: datetime, limit: int, require_consent: bool,
    filters: NoteFilter | None = None,
    expand: int = 0, exact: bool = False, vector_list: str | None = None,
) -> list[Candidate]:
    """Run :func:`recall_statement` on ``cur`` (one statement); returns candidates with
    their similarity, raw lexical score and ranks (``expand`` > 0: plus up to that many
    linked notes, ``Candidate.link`` set, and every candidate's edges to list candidates
    in ``Candidate.link_from``; ``exact``, ``vector_list``: see :func:`recall_statement`)."""
    t, r, th = scope.sql()
    params: dict[str, Any] = {"t": t, "r": r, "th": th, "kinds": list(kinds), "as_of": as_of,
                              "limit": limit, "text": query, "idf_cap": IDF_CORPUS_CAP,
                              "max_terms": MAX_QUERY_TERMS, "expand": expand,
                              **filter_params(filters)}
    if embedding is not None:
        params["q"] = np.asarray(embedding, np.float32)
    stmt = recall_statement(vector=embedding is not None, lexical=query is not None,
                            require_consent=require_consent, filters=filters, expand=expand > 0,
                            exact=exact, vector_list=vector_list, partition=recall_partition.of_tenant(cur, t))
    # prepare=True: the statement's plan (about 0.5 ms of the server's time) is kept per
    # pooled connection after psycopg's fifth run of the same text
    rows = cur.execute(stmt, params, prepare=True).fetchall()
    by_number = {recall_links.seed_number(row["vrank"], row["lrank"], limit): row["aggregate_id"] for row in rows}
    return [_candidate(row, by_number) for row in rows]


def _candidate(row: dict[str, Any], by_number: dict[int | None, UUID]) -> Candidate:
    """The :class:`Candidate` of one row of :func:`recall_statement` (``row`` becomes its
    ``fields``); ``by_number``: the aggregate id of each list candidate by its seed number
    (:func:`memfabric.projections.recall_links.seed_number`)."""
    sim, lex, link_w = row.pop("sim"), row.pop("lex"), row.pop("link_w")
    seeds = recall_links.unpack(row.pop("link_seeds"))
    return Candidate(
        aggregate_id=row["aggregate_id"], note_id=row["note_id"],
        similarity=None if sim is None else base.finite(float(sim)),
        lexical=None if lex is None else float(lex),
        vector_rank=row.pop("vrank"), lexical_rank=row.pop("lrank"), fields=row,
        link=None if link_w is None else float(link_w), partial=link_w is not None,
        link_from=tuple((by_number[n], w) for n, w in seeds))


def tenant_size(cur: Cursor[Any], tenant_id: str, cap: int) -> int:
    """Indexed notes of a tenant, counted up to ``cap``."""
    q = sql.SQL("SELECT count(*) AS n FROM (SELECT 1 FROM {t} WHERE tenant_id = %s LIMIT %s) s")
    row = cur.execute(q.format(t=sql.Identifier(TABLE)), (tenant_id, cap)).fetchone()
    return int(row["n"]) if row else 0


def _list_where(query: ListQuery) -> tuple[sql.Composable, dict[str, Any]]:
    t, r, th = query.scope.sql()
    params: dict[str, Any] = {"t": t, "r": r, "th": th, "kinds": list(query.kinds),
                              "valid_at": query.valid_at, **filter_params(query.filters)}
    conds: list[sql.Composable] = []
    if query.prefix:
        conds.append(sql.SQL("tenant_id = %(t)s"))
        if query.scope.resource_id is not None:
            conds.append(sql.SQL("resource_id = %(r)s"))
        if query.scope.thread_id is not None:
            conds.append(sql.SQL("thread_id = %(th)s"))
        if query.filters.access is not None:  # issue 33: the principal's rule, in the prefix
            conds.append(principals.access_condition(sql.SQL("TRUE"), query.filters.access))
    else:
        conds.append(scope_access(query.filters))
    conds.append(sql.SQL("kind = ANY(%(kinds)s)"))
    if query.valid_at is not None:
        conds.append(sql.SQL("valid @> %(valid_at)s::timestamptz"))
    if not query.include_superseded:
        conds.append(sql.SQL("superseded_by IS NULL"))
    conds.append(_consent(query.require_consent))
    conds.extend(filter_sql(query.filters))
    return sql.SQL(" AND ").join(conds), params


def select_page(
    cur: Cursor[Any], query: ListQuery, *, after: tuple[datetime, UUID] | None, limit: int,
) -> list[Candidate]:
    """Keyset page of the rows ``query`` admits, ordered by ``(ingested_at,
    aggregate_id)`` after ``after`` (btree ``(tenant_id, ingested_at, aggregate_id)``)."""
    where, params = _list_where(query)
    if after is not None:
        where = sql.SQL("{w} AND (ingested_at, aggregate_id) > (%(a_at)s::timestamptz, %(a_id)s::uuid)").format(w=where)
        params["a_at"], params["a_id"] = after
    params["limit"] = limit
    stmt = sql.SQL(
        "SELECT i.aggregate_id, {ret} FROM {t} i WHERE {w}"
        " ORDER BY i.ingested_at, i.aggregate_id LIMIT %(limit)s"
    ).format(ret=sql.SQL(RETURNED), t=sql.Identifier(TABLE), w=where)
    return [Candidate(aggregate_id=row["aggregate_id"], note_id=row["note_id"], similarity=None,
                      lexical=None, vector_rank=None, lexical_rank=None, fields=row)
            for row in cur.execute(stmt, params).fetchall()]


def count_rows(cur: Cursor[Any], query: ListQuery) -> int:
    """How many rows ``query`` admits."""
    where, params = _list_where(query)
    row = cur.execute(sql.SQL("SELECT count(*) AS n FROM {t} WHERE {w}").format(
        t=sql.Identifier(TABLE), w=where), params).fetchone()
    return int(row["n"]) if row else 0


def select_scopes(cur: Cursor[Any], *, tenant_id: str | None, tags: Sequence[str]) -> list[Scope]:
    """Distinct scopes of the rows carrying every tag of ``tags`` (one tenant or all)."""
    conds: list[sql.Composable] = [sql.SQL("tags @> %(tags)s::text[]")]
    if tenant_id is not None:
        conds.append(sql.SQL("tenant_id = %(t)s"))
    stmt = sql.SQL(
        "SELECT DISTINCT tenant_id, resource_id, thread_id FROM {t} WHERE {w} ORDER BY 1, 2, 3"
    ).format(t=sql.Identifier(TABLE), w=sql.SQL(" AND ").join(conds))
    rows = cur.execute(stmt, {"tags": list(tags), "t": tenant_id}).fetchall()
    return [stored_scope(r["tenant_id"], r["resource_id"], r["thread_id"]) for r in rows]
