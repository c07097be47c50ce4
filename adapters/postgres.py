"""PostgreSQL persistence for memfabric, built on ``eventsourcing.postgres``.

- :class:`PostgresFactory`: eventsourcing infrastructure factory (selected with
  ``PERSISTENCE_MODULE=memfabric.adapters.postgres``) that builds the sealing mapper and
  :class:`PostgresNoteRecorder`.
- :class:`PostgresNoteRecorder`: eventsourcing's application recorder (same table,
  same ``LOCK TABLE ... IN EXCLUSIVE MODE`` ordering guarantee) that also writes new
  data keys, destroys shredded keys and applies the projections inline, all in the
  transaction that inserts the events. It joins an open :meth:`PostgresNoteStore.write`
  transaction when there is one.
- :class:`PostgresNoteStore`: the ``NoteStore`` port (scope write locks, neighbour and
  recall queries, the fabric secret).
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import math
import os
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np
from eventsourcing.persistence import StoredEvent, Transcoder
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.postgres import PostgresFactory as _EventsourcingPostgresFactory
from memfabric.adapters.crypto import KEYS_DDL, KeyStore, SealingMapper
from memfabric.domain.errors import ProjectionLagError
from memfabric.domain.policy import Neighbour
from memfabric.domain.ports import Candidate, NeighbourQuery, NoteRef
from memfabric.domain.scope import Scope
from memfabric.domain.working import BlockEntry
from memfabric.projections import note_scope, recall_index, working_value
from memfabric.projections.engine import ProjectionEngine, advisory_key
from pgvector import Vector
from pgvector.psycopg.vector import register_vector_info
from psycopg import Connection, sql
from psycopg.types import TypeInfo

_current: contextvars.ContextVar[Connection[Any] | None] = contextvars.ContextVar(
    "memfabric_current_tx", default=None
)
_last_position: contextvars.ContextVar[int] = contextvars.ContextVar(
    "memfabric_last_position", default=0
)

IDF_CORPUS_CAP = 10_000
"""Recall counts the notes its filters admit (the ``N`` of the full-text IDF) up to this
many; beyond it the count, and so the cost, stays bounded."""

SECRETS_DDL = (
    "CREATE TABLE IF NOT EXISTS mf_fabric_secret ("
    " id smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1), secret bytea NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now())"
)


def _finite(value: float) -> float:
    """Cosine similarity with a zero vector is NaN in pgvector; read it as 0."""
    return 0.0 if math.isnan(value) else value


class PostgresNoteRecorder(PostgresApplicationRecorder):
    """Application recorder that also flushes keys, shreds keys and projects inline."""

    keys: KeyStore | None = None
    engine: ProjectionEngine | None = None

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        conn = _current.get()
        if conn is not None:
            return self._insert_in(conn, stored_events, **kwargs)
        try:
            with self.datastore.get_connection() as conn, conn.transaction():
                return self._insert_in(conn, stored_events, **kwargs)
        except BaseException:
            if self.keys is not None:
                self.keys.discard_pending()
            raise

    def _insert_in(
        self,
        conn: Connection[Any],
        stored_events: Sequence[StoredEvent],
        *,
        projected: Sequence[Any] = (),
        shred: Sequence[UUID] = (),
        **_: Any,
    ) -> Sequence[int]:
        if not stored_events:
            return []
        # Pipeline the statements of an ordinary write (one sync per result needed);
        # a bulk load streams COPY, which pipeline mode does not allow.
        bulky = len(projected) >= recall_index.BULK_MIN_ROWS
        with nullcontext() if bulky else conn.pipeline(), conn.cursor() as cur:
            if self.keys is not None:
                self.keys.flush(cur)
                if shred:
                    self.keys.destroy(cur, list(shred))
            self._insert_stored_events(cur, stored_events)  # locks the table, NOTIFY, INSERT
            ids = [row["notification_id"] for row in cur.fetchall()]
            if ids:
                _last_position.set(max(ids))
            if self.engine is not None:
                self.engine.apply_inline(cur, projected, ids)
        return ids


class PostgresFactory(_EventsourcingPostgresFactory):
    """eventsourcing ``PostgresFactory`` with memfabric's recorder and sealing mapper."""

    application_recorder_class = PostgresNoteRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.keys = KeyStore(self.datastore)

    def mapper(self, transcoder: Transcoder | None = None, mapper_class: Any = None) -> SealingMapper:  # type: ignore[override]
        assert transcoder is not None
        return SealingMapper(transcoder, self.keys)

    def application_recorder(self) -> PostgresNoteRecorder:  # type: ignore[override]
        recorder = super().application_recorder()
        assert isinstance(recorder, PostgresNoteRecorder)
        recorder.keys = self.keys
        with self.datastore.transaction(commit=True) as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("mf-ddl"),))
            cur.execute(KEYS_DDL)
            cur.execute(SECRETS_DDL)
        return recorder


Factory = PostgresFactory


class _VectorTypes:
    """Registers pgvector's psycopg adapters once per pooled connection (no query after
    the first connection)."""

    def __init__(self) -> None:
        self.info: TypeInfo | None = None
        self.done: weakref.WeakSet[Connection[Any]] = weakref.WeakSet()

    def ensure(self, conn: Connection[Any]) -> None:
        if conn in self.done:
            return
        if self.info is None:
            self.info = TypeInfo.fetch(conn, "vector")
        register_vector_info(conn, self.info)
        self.done.add(conn)


class PostgresWriteTransaction:
    """A write transaction holding a scope's advisory lock (``WriteTransaction`` port)."""

    def __init__(self, conn: Connection[Any], vectors: _VectorTypes, ef_search: int) -> None:
        self.conn = conn
        self.vectors = vectors
        self.ef_search = ef_search

    _NEIGHBOUR_COLS = (
        "n.note_id, n.token_hash, n.path, n.subject, 1 - (n.embedding <=> q.vec) AS sim,"
        " lower(n.valid) AS valid_from, upper(n.valid) AS valid_to"
    )
    _CURRENT = (
        "n.tenant_id = %(t)s AND n.resource_id = %(r)s AND n.thread_id = %(th)s"
        " AND n.kind = q.kind AND n.superseded_by IS NULL"
        " AND (upper(n.valid) IS NULL OR upper(n.valid) > %(now)s)"
    )

    def nearest_many(
        self, scope: Scope, queries: Sequence[NeighbourQuery], *, now: datetime, per_query: int = 3,
    ) -> list[list[Neighbour]]:
        """Consolidation candidates for many writes of one scope in one statement per
        chunk of 500 (the bounded neighbour query of the fold policy, batched).

        For each query, in preference order: ``file`` notes with the same path (newest
        first); subject-keyed writes: notes with the same subject; otherwise notes
        without a subject (a subject-keyed note only changes through its subject) with
        the same token hash, then the ``per_query`` nearest vectors (HNSW, iterative
        scan). Only live, currently valid, not superseded notes of exactly ``scope`` and
        the query's kind are candidates."""
        t, r, th = scope.sql()
        out: list[list[Neighbour]] = [[] for _ in queries]
        groups: dict[str, list[int]] = {"file": [], "subject": [], "plain": []}
        for i, q in enumerate(queries):
            groups["file" if q.kind == "file" else "subject" if q.subject is not None else "plain"].append(i)
        cols, cur_ = self._NEIGHBOUR_COLS, self._CURRENT
        lateral = {
            "file": f"(SELECT {cols} FROM mf_recall_index n WHERE {cur_} AND n.path = q.path"
                    f" ORDER BY n.ingested_at DESC LIMIT %(k)s)",
            "subject": f"(SELECT {cols} FROM mf_recall_index n WHERE {cur_} AND n.subject = q.subject"
                       f" ORDER BY n.ingested_at DESC LIMIT %(k)s)",
            "plain": f"(SELECT {cols} FROM mf_recall_index n WHERE {cur_} AND n.subject IS NULL"
                     f" AND n.token_hash = q.h ORDER BY n.ingested_at DESC LIMIT 1) UNION ALL"
                     f" (SELECT {cols} FROM mf_recall_index n WHERE {cur_} AND n.subject IS NULL"
                     f" ORDER BY n.embedding <=> q.vec LIMIT %(k)s)",
        }
        self.vectors.ensure(self.conn)
        with self.conn.cursor() as cur:
            if groups["plain"]:
                cur.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                cur.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(self.ef_search)))
            for name, idx in groups.items():
                for start in range(0, len(idx), 500):
                    chunk = idx[start : start + 500]
                    params = {
                        "t": t, "r": r, "th": th, "now": now, "k": per_query,
                        "i": chunk, "kind": [queries[i].kind for i in chunk],
                        "h": [queries[i].token_hash for i in chunk],
                        "path": [queries[i].path for i in chunk],
                        "subject": [queries[i].subject for i in chunk],
                        "vec": [Vector(np.asarray(queries[i].embedding, np.float32)) for i in chunk],
                    }
                    rows = cur.execute(
                        "SELECT q.i, m.* FROM unnest(%(i)s::int[], %(kind)s::text[], %(h)s::text[],"
                        " %(path)s::text[], %(subject)s::text[], %(vec)s::vector[])"
                        " AS q(i, kind, h, path, subject, vec)"
                        f" CROSS JOIN LATERAL ({lateral[name]}) m",
                        params,
                    ).fetchall()
                    for row in rows:
                        out[row["i"]].append(Neighbour(
                            row["note_id"], _finite(float(row["sim"])), row["token_hash"], row["path"],
                            row["subject"], row["valid_from"], row["valid_to"]))
        return out

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        with self.conn.cursor() as cur:
            return working_value.select_blocks(cur, scope)

    def note_ids_by_path(self, scope: Scope, path: str) -> list[str]:
        t, r, th = scope.sql()
        rows = self.conn.execute(
            f"SELECT note_id FROM {note_scope.TABLE} WHERE tenant_id = %s AND resource_id = %s"  # noqa: S608
            " AND thread_id = %s AND path = %s ORDER BY note_id",
            (t, r, th, path),
        ).fetchall()
        return [row["note_id"] for row in rows]


class PostgresNoteStore:
    """The ``NoteStore`` port on PostgreSQL + pgvector."""

    def __init__(self, datastore: Any, recorder: PostgresNoteRecorder, mapper: SealingMapper,
                 *, ef_search: int = 100) -> None:
        self.datastore = datastore
        self.recorder = recorder
        self.mapper = mapper
        self.vectors = _VectorTypes()
        self.ef_search = ef_search
        self._secret: bytes | None = None
        self.awaited_engine: ProjectionEngine | None = None
        self._sizes: dict[str, tuple[float, int]] = {}

    @contextmanager
    def connection(self) -> Iterator[Connection[Any]]:
        """A pooled connection with pgvector's types registered."""
        with self.datastore.get_connection() as conn:
            self.vectors.ensure(conn)
            yield conn

    @contextmanager
    def write(self, scope: Scope) -> Iterator[PostgresWriteTransaction]:
        """Transaction holding ``pg_advisory_xact_lock(scope)``: writers of one scope
        run one at a time (so N processes remembering one fact end with one note);
        writers of different scopes only meet at the events-table lock held from the
        event INSERT to COMMIT."""
        with self.write_scopes([scope]) as tx:
            yield tx

    @contextmanager
    def write_scopes(self, scopes: Sequence[Scope]) -> Iterator[PostgresWriteTransaction]:
        """Like :meth:`write`, holding the write locks of several scopes (taken in sorted
        scope-key order, so two multi-scope writers cannot deadlock)."""
        if _current.get() is not None:
            raise RuntimeError("nested memfabric write transactions are not supported")
        _last_position.set(0)
        try:
            with self.connection() as conn, conn.transaction():
                for key in sorted({s.key for s in scopes}):
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("scope:" + key),))
                token = _current.set(conn)
                try:
                    yield PostgresWriteTransaction(conn, self.vectors, self.ef_search)
                finally:
                    _current.reset(token)
        except BaseException:
            if self.recorder.keys is not None:
                self.recorder.keys.discard_pending()
            raise
        self.await_projections(_last_position.get())

    await_timeout: float = 30.0
    """Seconds a write waits for the separate runner (``inline_projections=False``)."""

    def await_projections(self, position: int, timeout: float | None = None) -> None:
        """Read-your-writes without inline projections: block until every projection
        has tracked ``position`` (kept by a separate ``memfabric projections run``).
        No-op when projections run inline (they are then updated in the write's own
        transaction). Raises ``ProjectionLagError`` (a ``TimeoutError``; the write itself
        is committed) after ``timeout`` seconds."""
        engine = self.awaited_engine
        if engine is None or position <= 0:
            return
        timeout = self.await_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        pause = 0.002
        while min(engine.position(p.name) for p in engine.projections) < position:
            if time.monotonic() > deadline:
                raise ProjectionLagError(
                    f"the write is committed (notification {position}) but the projections did "
                    f"not reach it in {timeout}s; is `memfabric projections run` running?")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    # ----------------------------------------------------------------- recall
    def recall(
        self, scope: Scope, *, embedding: np.ndarray | None, query: str | None,
        kinds: Sequence[str], as_of: datetime, limit: int, require_consent: bool,
    ) -> list[Candidate]:
        """One statement: the vector list (HNSW, cosine, top ``limit``), the full-text
        list (top ``limit`` by IDF-weighted term overlap) and, for the union of both,
        the exact cosine similarity and full-text score, every filter inside each list.

        Full-text score of a note = the sum over the query's lexemes (``english``
        configuration, stop words dropped) that the note contains of the BM25 IDF
        ``ln(1 + (N - df + 0.5) / (df + 0.5))``, where ``N`` is the number of notes the
        filters admit and ``df`` the number of those containing the lexeme: BM25 with
        ``k1 = 0`` (no term-frequency or length term, which barely matter for short
        notes). ``N`` is counted up to :data:`IDF_CORPUS_CAP` notes, so its cost is
        bounded in a large scope (which then weighs terms as if it held that many
        notes). Ties go to the earlier note (``ingested_at``, then id).
        """
        t, r, th = scope.sql()
        where = sql.SQL(" AND ").join([
            recall_index.scope_filter(),
            sql.SQL("kind = ANY(%(kinds)s)"),
            sql.SQL("valid @> %(as_of)s::timestamptz"),
            # An explicit refusal (granted=False) is never recalled; with require_consent
            # only notes whose consent was granted are.
            sql.SQL("consent_granted IS TRUE") if require_consent
            else sql.SQL("consent_granted IS DISTINCT FROM FALSE"),
        ])
        params: dict[str, Any] = {"t": t, "r": r, "th": th, "kinds": list(kinds), "as_of": as_of,
                                  "limit": limit, "text": query, "idf_cap": IDF_CORPUS_CAP}
        parts = []
        if embedding is not None:
            params["q"] = np.asarray(embedding, np.float32)
            parts.append(sql.SQL(
                "v AS MATERIALIZED (SELECT aggregate_id, embedding <=> %(q)b AS dist FROM mf_recall_index"
                " WHERE {w} ORDER BY embedding <=> %(q)b LIMIT %(limit)s),"
                " vr AS (SELECT aggregate_id, row_number() OVER (ORDER BY dist, aggregate_id) AS rank FROM v)"
            ).format(w=where))
            sim = sql.SQL("1 - (i.embedding <=> %(q)b)")
        else:
            parts.append(sql.SQL("vr AS (SELECT NULL::uuid AS aggregate_id, NULL::bigint AS rank WHERE FALSE)"))
            sim = sql.SQL("NULL::float8")
        if query is not None:
            parts.append(sql.SQL(
                "qt AS (SELECT lexeme, quote_literal(lexeme)::tsquery AS q"
                " FROM unnest(to_tsvector('english', %(text)s))),"
                " tq AS (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS q FROM qt),"
                " m AS MATERIALIZED (SELECT aggregate_id, ingested_at, tsv FROM mf_recall_index"
                " WHERE tsv @@ (SELECT q FROM tq) AND {w}),"
                " mt AS MATERIALIZED (SELECT m.aggregate_id, m.ingested_at, qt.lexeme"
                " FROM m JOIN qt ON m.tsv @@ qt.q),"
                " nn AS MATERIALIZED (SELECT count(*)::float8 AS n FROM (SELECT 1 FROM mf_recall_index"
                " WHERE {w} LIMIT %(idf_cap)s) s),"
                " idf AS MATERIALIZED (SELECT lexeme, ln(1 + (greatest(nn.n, count(*)) - count(*) + 0.5)"
                " / (count(*) + 0.5)) AS w FROM mt, nn GROUP BY lexeme, nn.n),"
                " ls AS MATERIALIZED (SELECT mt.aggregate_id, mt.ingested_at, sum(idf.w)::float8 AS lex"
                " FROM mt JOIN idf USING (lexeme) GROUP BY mt.aggregate_id, mt.ingested_at),"
                " lr AS (SELECT aggregate_id, row_number() OVER (ORDER BY lex DESC, ingested_at, aggregate_id)"
                " AS rank FROM ls ORDER BY lex DESC, ingested_at, aggregate_id LIMIT %(limit)s)"
            ).format(w=where))
            lex = sql.SQL("coalesce(ls.lex, 0)")
            lex_join = sql.SQL(" LEFT JOIN ls ON ls.aggregate_id = c.aggregate_id")
        else:
            parts.append(sql.SQL("lr AS (SELECT NULL::uuid AS aggregate_id, NULL::bigint AS rank WHERE FALSE)"))
            lex = sql.SQL("NULL::float8")
            lex_join = sql.SQL("")
        stmt = sql.SQL(
            "WITH {parts}, c AS (SELECT aggregate_id FROM vr UNION SELECT aggregate_id FROM lr)"
            " SELECT i.aggregate_id, {ret}, {sim} AS sim, vr.rank AS vrank, {lex} AS lex, lr.rank AS lrank"
            " FROM c JOIN mf_recall_index i ON i.aggregate_id = c.aggregate_id"
            " LEFT JOIN vr ON vr.aggregate_id = c.aggregate_id"
            " LEFT JOIN lr ON lr.aggregate_id = c.aggregate_id{lex_join}"
        ).format(parts=sql.SQL(", ").join(parts), ret=sql.SQL(recall_index.RETURNED),
                 sim=sim, lex=lex, lex_join=lex_join)
        with self.connection() as conn, conn.transaction():
            if embedding is not None and self._tenant_size(conn, t) <= self.exact_search_max:
                # Exact search: for a small tenant, scanning its rows through the btree
                # and sorting by distance is as fast as HNSW and has recall 1.0.
                conn.execute("SET LOCAL enable_indexscan = off")
            else:
                conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(
                    sql.Literal(max(self.ef_search, limit))))
            rows = conn.execute(stmt, params).fetchall()
        out = []
        for row in rows:
            sim_value, lex_value = row.pop("sim"), row.pop("lex")
            out.append(Candidate(
                aggregate_id=row["aggregate_id"],
                note_id=row["note_id"],
                similarity=None if sim_value is None else _finite(float(sim_value)),
                lexical=None if lex_value is None else float(lex_value),
                vector_rank=row.pop("vrank"),
                lexical_rank=row.pop("lrank"),
                fields=row,
            ))
        return out

    exact_search_max: int = 20_000
    """Tenants with at most this many indexed notes are searched exactly (btree scan and
    sort, recall 1.0); larger ones through HNSW with iterative scan. 0 disables."""

    def _tenant_size(self, conn: Connection[Any], tenant_id: str) -> int:
        """Indexed notes of a tenant, counted up to ``exact_search_max + 1`` and cached
        for 30 s (it only chooses the search strategy, never filters)."""
        now = time.monotonic()
        hit = self._sizes.get(tenant_id)
        if hit is not None and now - hit[0] < 30.0:
            return hit[1]
        row = conn.execute(
            "SELECT count(*) AS n FROM (SELECT 1 FROM mf_recall_index WHERE tenant_id = %s"
            " LIMIT %s) s", (tenant_id, self.exact_search_max + 1),
        ).fetchone()
        size = int(row["n"]) if row else 0
        self._sizes[tenant_id] = (now, size)
        return size

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        """The blocks of exactly ``scope`` in the working-value projection."""
        with self.datastore.get_connection() as conn, conn.cursor() as cur:
            return working_value.select_blocks(cur, scope)

    # ---------------------------------------------------------------- erasure
    @staticmethod
    def _prefix(tenant_id: str, resource_id: str | None, thread_id: str | None) -> tuple[str, list[Any]]:
        where = "tenant_id = %s"
        params: list[Any] = [tenant_id]
        if resource_id is not None:
            where += " AND resource_id = %s"
            params.append(resource_id)
        if thread_id is not None:
            where += " AND thread_id = %s"
            params.append(thread_id)
        return where, params

    def notes_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None,
        *, after: NoteRef | None, limit: int,
    ) -> list[NoteRef]:
        where, params = self._prefix(tenant_id, resource_id, thread_id)
        if after is not None:
            after_r, after_th = after.scope.resource_id or "", after.scope.thread_id or ""
            where += " AND (resource_id, thread_id, aggregate_id) > (%s, %s, %s)"
            params += [after_r, after_th, after.aggregate_id]
        with self.connection() as conn:
            rows = conn.execute(
                f"SELECT aggregate_id, tenant_id, resource_id, thread_id, note_id, held"  # noqa: S608
                f" FROM {note_scope.TABLE} WHERE {where}"
                " ORDER BY resource_id, thread_id, aggregate_id LIMIT %s",
                [*params, limit],
            ).fetchall()
        return [
            NoteRef(
                aggregate_id=row["aggregate_id"],
                scope=Scope(tenant_id=row["tenant_id"], resource_id=row["resource_id"] or None,
                            thread_id=row["thread_id"] or None),
                note_id=row["note_id"],
                held=row["held"],
            )
            for row in rows
        ]

    def count_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None
    ) -> tuple[int, int]:
        where, params = self._prefix(tenant_id, resource_id, thread_id)
        with self.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE NOT held) AS live, count(*) FILTER (WHERE held) AS held"  # noqa: S608
                f" FROM {note_scope.TABLE} WHERE {where}",
                params,
            ).fetchone()
        return int(row["live"]), int(row["held"])

    # ---------------------------------------------------------------- secrets
    def secret(self) -> bytes:
        """The fabric secret (32 random bytes created on first use, kept in
        ``mf_fabric_secret``); keys the tombstone content hashes."""
        if self._secret is None:
            with self.datastore.transaction(commit=True) as cur:
                cur.execute(
                    "INSERT INTO mf_fabric_secret (id, secret) VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
                    (os.urandom(32),),
                )
                row = cur.execute("SELECT secret FROM mf_fabric_secret WHERE id = 1").fetchone()
            self._secret = bytes(row["secret"])
        return self._secret

    def content_hmac(self, text: str) -> str:
        return hmac.new(self.secret(), text.encode(), hashlib.sha256).hexdigest()

    def stored_events(self, aggregate_id: UUID) -> Iterator[Any]:
        for stored in self.recorder.select_events(aggregate_id):
            yield self.mapper.to_domain_event(stored)
