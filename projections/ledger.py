"""The conversation-ledger read model (issue 14): threads, entries and observations.

A pure function of ``Conversation`` aggregate states (``memfabric.domain.ledger``):

- ``mf_ledger_threads``: one row per conversation (scope ids, first and last entry
  position, erasures);
- ``mf_ledger_entries``: one row per entry since the last erasure (position, role, text,
  time, parent, branch, retracted) and its search terms (``terms``, stems of
  :func:`memfabric.domain.search_terms.search_terms`, GIN-indexed) for
  ``search_conversation``;
- ``mf_ledger_observations``: one row per observation (the episodes ``recall`` ranks).

An erased conversation keeps its thread row (counts only) and no text at all. Write
side (always projected in the writer's transaction): the ledger's pages are read right
after a write. Tracking table ``mf_ledger_tracking``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from psycopg import Cursor, sql

from memfabric.domain.ledger import Conversation, Entry
from memfabric.domain.search_terms import search_terms
from memfabric.projections import base, partitions
from memfabric.projections.base import copy_rows, prefix_where

NAME = "ledger"
THREADS = "mf_ledger_threads"
ENTRIES = "mf_ledger_entries"
OBSERVATIONS = "mf_ledger_observations"

THREAD_COLUMNS = ("aggregate_id", "tenant_id", "resource_id", "thread_id", "first_position",
                  "last_position", "erasures", "live")
_THREAD_TYPES = ("uuid", "text", "text", "text", "int8", "int8", "int4", "bool")
ENTRY_COLUMNS = ("aggregate_id", "position", "entry_id", "role", "text", "at", "parent_id",
                 "branch", "retracted", "terms")
_ENTRY_TYPES = ("uuid", "int8", "text", "text", "text", "timestamptz", "text", "text", "bool", "text[]")
OBS_COLUMNS = ("aggregate_id", "observation_id", "text", "source_entry_ids", "created_at")
_OBS_TYPES = ("uuid", "text", "text", "text[]", "timestamptz")

def thread_row(c: Conversation) -> tuple[Any, ...]:
    """``live``: something is left to erase (a write head only ever adds entries)."""
    live = c.partial or bool(c.entries or c.observations or c.reflections or c.work_scopes)
    return (c.id, c.tenant_id, c.resource_id or "", c.thread_id, c.first_position,
            c.last_position, c.erasures, live)


def entry_row(aggregate_id: UUID, e: Entry) -> tuple[Any, ...]:
    return (aggregate_id, e.position, e.entry_id, e.role, e.text, e.timestamp, e.parent_id,
            e.branch, e.retracted, search_terms(e.text))


def observation_rows(c: Conversation) -> list[tuple[Any, ...]]:
    return [(c.id, o.id, o.text, list(o.source_ids), o.created_at) for o in c.observations.values()]


def _conversations(aggregates: Iterable[Any]) -> list[Conversation]:
    return [a for a in aggregates if isinstance(a, Conversation)]


class LedgerProjection:
    """The ledger read model as a :class:`~memfabric.projections.base.NoteProjection`
    (its ``aggregate_types`` make the engine hand it ``Conversation`` aggregates only)."""

    name = NAME
    tables: tuple[str, ...] = (THREADS, ENTRIES, OBSERVATIONS)
    write_side = True
    aggregate_types: tuple[type, ...] = (Conversation,)

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        s = table_suffix
        migrate_entries(cur, ENTRIES + s)
        partitions.create_table(
            cur, THREADS + s,
            "aggregate_id uuid NOT NULL, tenant_id text NOT NULL,"
            " resource_id text NOT NULL, thread_id text NOT NULL, first_position bigint NOT NULL,"
            " last_position bigint NOT NULL, erasures integer NOT NULL, live boolean NOT NULL", ["aggregate_id"])
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id uuid NOT NULL, position bigint NOT NULL,"
            " entry_id text NOT NULL, role text NOT NULL, text text NOT NULL,"
            " at timestamptz NOT NULL, parent_id text, branch text, retracted boolean NOT NULL,"
            " terms text[] NOT NULL, PRIMARY KEY (aggregate_id, position))"
        ).format(t=sql.Identifier(ENTRIES + s)))
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id uuid NOT NULL, observation_id text NOT NULL,"
            " text text NOT NULL, source_entry_ids text[] NOT NULL, created_at timestamptz NOT NULL,"
            " tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,"
            " PRIMARY KEY (aggregate_id, observation_id))"
        ).format(t=sql.Identifier(OBSERVATIONS + s)))
        if not table_suffix:
            self.create_indexes(cur)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        for table, cols, suffix in ((THREADS, "(tenant_id, resource_id, thread_id)", "ids"),
                                    (ENTRIES, "(aggregate_id, entry_id)", "ids"),
                                    (ENTRIES, "USING gin (terms)", "terms"),
                                    (OBSERVATIONS, "USING gin (tsv)", "gin")):
            t = table + table_suffix
            cur.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} " + cols).format(
                i=sql.Identifier(f"{t}_{suffix}"), t=sql.Identifier(t)))

    def apply(self, cur: Cursor[Any], notes: Iterable[Any]) -> None:
        for c in _conversations(notes):
            apply_one(cur, c)

    def copy(self, cur: Cursor[Any], notes: Iterable[Any], *, table_suffix: str = "") -> int:
        convs = _conversations(notes)
        n = copy_rows(cur, THREADS + table_suffix, THREAD_COLUMNS, _THREAD_TYPES,
                      (thread_row(c) for c in convs))
        n += copy_rows(cur, ENTRIES + table_suffix, ENTRY_COLUMNS, _ENTRY_TYPES,
                       (entry_row(c.id, e) for c in convs for e in c.entries))
        n += copy_rows(cur, OBSERVATIONS + table_suffix, OBS_COLUMNS, _OBS_TYPES,
                       (r for c in convs for r in observation_rows(c)))
        return n


def apply_one(cur: Cursor[Any], c: Conversation) -> None:
    """Bring the rows of one conversation up to its state (idempotent, incremental:
    entries are append-only between erasures, so only new positions are inserted)."""
    cur.execute(
        f"INSERT INTO {THREADS} ({', '.join(THREAD_COLUMNS)}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"  # noqa: S608
        f" ON CONFLICT ON CONSTRAINT {THREADS}_pkey DO UPDATE SET first_position = EXCLUDED.first_position,"
        " last_position = EXCLUDED.last_position, erasures = EXCLUDED.erasures,"
        " live = EXCLUDED.live",
        thread_row(c),
    )
    cur.execute(f"DELETE FROM {ENTRIES} WHERE aggregate_id = %s AND position < %s",  # noqa: S608
                (c.id, c.first_position))
    row = cur.execute(f"SELECT coalesce(max(position), 0) AS m FROM {ENTRIES} WHERE aggregate_id = %s",  # noqa: S608
                      (c.id,)).fetchone()
    stored = int(_get(row, "m"))
    new = [e for e in c.entries if e.position > stored]
    if new:
        cols = list(zip(*(entry_row(c.id, e) for e in new), strict=True))
        cur.execute(
            f"INSERT INTO {ENTRIES} ({', '.join(ENTRY_COLUMNS)})"  # noqa: S608
            " SELECT a, p, i, r, x, t, pa, b, re, string_to_array(te, ' ') FROM unnest(%s::uuid[],"
            " %s::int8[], %s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::text[], %s::text[],"
            " %s::bool[], %s::text[]) AS u(a, p, i, r, x, t, pa, b, re, te) ON CONFLICT DO NOTHING",
            [*(list(col) for col in cols[:-1]), [" ".join(t) for t in cols[-1]]],
        )
    retracted = list(dict.fromkeys(c.retracted_ids))
    if retracted:
        cur.execute(f"UPDATE {ENTRIES} SET retracted = true WHERE aggregate_id = %s"  # noqa: S608
                    " AND entry_id = ANY(%s) AND NOT retracted", (c.id, retracted))
    if c.partial:  # a write head holds only its new entries and retractions
        return
    cur.execute(f"DELETE FROM {OBSERVATIONS} WHERE aggregate_id = %s", (c.id,))  # noqa: S608
    obs = observation_rows(c)
    if obs:
        cur.executemany(
            f"INSERT INTO {OBSERVATIONS} ({', '.join(OBS_COLUMNS)}) VALUES (%s, %s, %s, %s, %s)",  # noqa: S608
            obs)


def _get(row: Any, name: str, index: int = 0) -> Any:
    return row[name] if isinstance(row, dict) else row[index]


# ------------------------------------------------------------------- queries
_ENTRY_SELECT = "SELECT position, entry_id, role, text, at, parent_id, branch FROM " + ENTRIES  # noqa: S608


def select_entries(cur: Cursor[Any], aggregate_id: UUID, *, after: int | None, before: int | None,
                   limit: int, descending: bool) -> list[dict[str, Any]]:
    """Live (not retracted) entries with ``after < position < before``, ordered by
    position (descending when asked), at most ``limit``."""
    where = "aggregate_id = %s AND NOT retracted"
    params: list[Any] = [aggregate_id]
    if after is not None:
        where += " AND position > %s"
        params.append(after)
    if before is not None:
        where += " AND position < %s"
        params.append(before)
    order = "DESC" if descending else "ASC"
    rows = cur.execute(f"{_ENTRY_SELECT} WHERE {where} ORDER BY position {order} LIMIT %s",  # noqa: S608
                       [*params, limit]).fetchall()
    return [dict(r) for r in rows]


def select_window(cur: Cursor[Any], aggregate_id: UUID, position: int, limit: int, *,
                  backward: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One round trip for a page: ``backward``: up to ``limit`` live entries at or before
    ``position`` (descending) and the first one after it; else up to ``limit`` at or after
    it (ascending) and the last one before it. Returns ``(page_rows, beyond_rows)``."""
    near, far = ("<=", ">") if backward else (">=", "<")
    near_order, far_order = ("DESC", "ASC") if backward else ("ASC", "DESC")
    rows = cur.execute(
        f"(SELECT true AS near, position, entry_id, role, text, at, parent_id, branch FROM {ENTRIES}"  # noqa: S608
        f" WHERE aggregate_id = %s AND NOT retracted AND position {near} %s"
        f" ORDER BY position {near_order} LIMIT %s) UNION ALL"
        f" (SELECT false, position, entry_id, role, text, at, parent_id, branch FROM {ENTRIES}"
        f" WHERE aggregate_id = %s AND NOT retracted AND position {far} %s"
        f" ORDER BY position {far_order} LIMIT 1)",
        (aggregate_id, position, limit, aggregate_id, position), prepare=True).fetchall()
    page = [dict(r) for r in rows if r["near"]]
    beyond = [dict(r) for r in rows if not r["near"]]
    return page, beyond


def entry_position(cur: Cursor[Any], aggregate_id: UUID, entry_id: str) -> int | None:
    row = cur.execute(f"SELECT position FROM {ENTRIES} WHERE aggregate_id = %s AND entry_id = %s"  # noqa: S608
                      " AND NOT retracted", (aggregate_id, entry_id)).fetchone()
    return None if row is None else int(_get(row, "position"))


def migrate_entries(cur: Cursor[Any], table: str = ENTRIES) -> bool:
    """Bring an entries table made before issue 29 (a ``simple`` tsvector ``tsv``, no
    ``terms``) up to date: add ``terms``, fill it from ``text`` (1,000 rows per round trip;
    :func:`search_terms` is Python), then drop ``tsv`` (its GIN index goes with it;
    ``create_indexes`` makes the one on ``terms``). Returns whether anything changed."""
    if not base.has_table(cur, table) or base.has_column(cur, table, "terms"):
        return False
    t = sql.Identifier(table)
    cur.execute(sql.SQL("ALTER TABLE {t} ADD COLUMN terms text[] NOT NULL DEFAULT '{{}}'").format(t=t))
    rows = cur.execute(sql.SQL("SELECT aggregate_id, position, text FROM {t}").format(t=t)).fetchall()
    for start in range(0, len(rows), 1000):
        chunk = [(_get(r, "aggregate_id"), _get(r, "position", 1), " ".join(search_terms(_get(r, "text", 2))))
                 for r in rows[start:start + 1000]]
        ids, positions, joined = (list(c) for c in zip(*chunk, strict=True))
        cur.execute(sql.SQL(
            "UPDATE {t} e SET terms = string_to_array(u.te, ' ') FROM unnest(%s::uuid[], %s::int8[], %s::text[])"
            " AS u(a, p, te) WHERE e.aggregate_id = u.a AND e.position = u.p").format(t=t),
            (ids, positions, joined))
    cur.execute(sql.SQL("ALTER TABLE {t} ALTER COLUMN terms DROP DEFAULT").format(t=t))
    cur.execute(sql.SQL("ALTER TABLE {t} DROP COLUMN IF EXISTS tsv").format(t=t))
    return True


def _tsquery(words: Sequence[str]) -> str:
    return " | ".join("'" + w.replace("'", "") + "'" for w in words)


_SEARCH_SQL = (
    f"WITH q AS (SELECT unnest(%(q)s::text[]) AS t),"  # noqa: S608
    f" m AS MATERIALIZED (SELECT position, terms FROM {ENTRIES}"
    " WHERE terms && %(q)s::text[] AND aggregate_id = %(a)s AND NOT retracted),"
    f" n AS (SELECT coalesce(max(last_position - first_position + 1), 0) AS n FROM {THREADS}"
    " WHERE aggregate_id = %(a)s),"
    " w AS (SELECT q.t, ln(1 + (greatest(n.n, d.d) - d.d + 0.5) / (d.d + 0.5)) AS w FROM q"
    " CROSS JOIN n CROSS JOIN LATERAL (SELECT count(*) AS d FROM m WHERE q.t = ANY(m.terms)) d),"
    " s AS (SELECT m.position, (SELECT sum(w.w) FROM w WHERE w.t = ANY(m.terms))"
    " / nullif((SELECT sum(w) FROM w), 0) AS score FROM m ORDER BY score DESC, m.position DESC"
    " LIMIT %(k)s)"
    " SELECT e.position, e.entry_id, e.role, e.text, e.at, e.parent_id, e.branch, s.score,"
    f" (SELECT count(*) FROM m) AS scanned FROM s JOIN {ENTRIES} e"
    " ON e.aggregate_id = %(a)s AND e.position = s.position ORDER BY s.score DESC, s.position DESC"
)


def search_entries(cur: Cursor[Any], aggregate_id: UUID, terms: Sequence[str],
                   top_k: int) -> tuple[list[dict[str, Any]], int]:
    """The ``top_k`` live entries of highest IDF-weighted coverage of the query
    ``terms`` (search terms, see :mod:`memfabric.domain.search_terms`; ties: the newer
    first), each row with its ``score``, and how many entries hold any of the terms.

    One statement: the entries holding a term come from the GIN index on ``terms``
    (a materialised CTE), ``df`` is counted among them and ``N`` is the thread's
    position range (retracted entries included, an upper bound)."""
    if not terms:
        return [], 0
    rows = cur.execute(_SEARCH_SQL, {"q": list(terms), "a": aggregate_id, "k": top_k},
                       prepare=True).fetchall()
    found = [dict(r) for r in rows]
    scanned = int(found[0]["scanned"]) if found else 0
    for r in found:
        r["score"] = float(r["score"])
        del r["scanned"]
    return found, scanned


def search_observations(cur: Cursor[Any], aggregate_ids: Sequence[UUID], words: Sequence[str],
                        limit: int, *, until: Any = None) -> list[dict[str, Any]]:
    """Observations of the given conversations matching any of ``words``, by ts_rank;
    only those created at or before ``until`` when given (``as_of``, ``known_at``)."""
    if not words or not aggregate_ids:
        return []
    rows = cur.execute(
        f"SELECT o.aggregate_id, o.observation_id, o.text, o.source_entry_ids, o.created_at,"  # noqa: S608
        " ts_rank(o.tsv, to_tsquery('simple', %s)) AS rank"
        f" FROM {OBSERVATIONS} o WHERE o.aggregate_id = ANY(%s) AND o.tsv @@ to_tsquery('simple', %s)"
        " AND (%s::timestamptz IS NULL OR o.created_at <= %s::timestamptz)"
        " ORDER BY rank DESC, o.created_at DESC LIMIT %s",
        (_tsquery(words), list(aggregate_ids), _tsquery(words), until, until, limit)).fetchall()
    return [dict(r) for r in rows]


def select_due_threads(cur: Cursor[Any], tenant_id: str, before: Any, *, after: UUID | None,
                       limit: int) -> list[tuple[UUID, str | None, str]]:
    """Issue 30: up to ``limit`` live conversations of ``tenant_id`` whose last write
    (the time of their last entry, or their newest observation when later) is at or
    before ``before``, ``(aggregate_id, resource, thread)`` in id order after ``after``."""
    start = "" if after is None else " AND t.aggregate_id > %(after)s"
    rows = cur.execute(
        f"SELECT t.aggregate_id, t.resource_id, t.thread_id FROM {THREADS} t"  # noqa: S608
        f" LEFT JOIN {ENTRIES} e ON e.aggregate_id = t.aggregate_id AND e.position = t.last_position"
        f" WHERE t.live AND t.tenant_id = %(t)s{start}"
        " AND coalesce(greatest(e.at, (SELECT max(o.created_at) FROM "
        f"{OBSERVATIONS} o WHERE o.aggregate_id = t.aggregate_id)), '-infinity') <= %(before)s"
        " ORDER BY t.aggregate_id LIMIT %(k)s",
        {"t": tenant_id, "after": after, "before": before, "k": limit}).fetchall()
    return [(_get(r, "aggregate_id"), _get(r, "resource_id", 1) or None, _get(r, "thread_id", 2)) for r in rows]


def select_live_tenants(cur: Cursor[Any], *, after: str | None) -> list[str]:
    """The tenants with a live conversation, sorted, after ``after``."""
    rows = cur.execute(f"SELECT DISTINCT tenant_id FROM {THREADS} WHERE live"  # noqa: S608
                       " AND (%(a)s::text IS NULL OR tenant_id > %(a)s::text) ORDER BY tenant_id",
                       {"a": after}).fetchall()
    return [_get(r, "tenant_id") for r in rows]


def threads_in_prefix(cur: Cursor[Any], tenant_id: str, resource_id: str | None,
                      thread_id: str | None) -> list[tuple[UUID, str, str | None, str]]:
    """Conversations of a scope prefix (``None`` = any): ``(aggregate_id, tenant,
    resource, thread)``, only those with something left to erase."""
    prefix, params = prefix_where(tenant_id, resource_id, thread_id)
    where = "live AND " + prefix
    rows = cur.execute(f"SELECT aggregate_id, tenant_id, resource_id, thread_id FROM {THREADS}"  # noqa: S608
                       f" WHERE {where} ORDER BY aggregate_id", params).fetchall()
    return [(_get(r, "aggregate_id"), _get(r, "tenant_id", 1), _get(r, "resource_id", 2) or None,
             _get(r, "thread_id", 3)) for r in rows]


def observation(cur: Cursor[Any], aggregate_id: UUID, observation_id: str) -> dict[str, Any] | None:
    row = cur.execute(f"SELECT observation_id, text, source_entry_ids, created_at FROM {OBSERVATIONS}"  # noqa: S608
                      " WHERE aggregate_id = %s AND observation_id = %s",
                      (aggregate_id, observation_id)).fetchone()
    return None if row is None else dict(row)

