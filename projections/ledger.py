"""The conversation-ledger read model (issue 14): threads, entries and observations.

A pure function of ``Conversation`` aggregate states (``memfabric.domain.ledger``):

- ``mf_ledger_threads``: one row per conversation (scope ids, first and last entry
  position, erasures);
- ``mf_ledger_entries``: one row per entry since the last erasure (position, role, text,
  time, parent, branch, retracted) with a ``simple`` tsvector for lexical search;
- ``mf_ledger_observations``: one row per observation (the episodes ``recall`` ranks).

An erased conversation keeps its thread row (counts only) and no text at all. Write
side (always projected in the writer's transaction): the ledger's pages are read right
after a write. Tracking table ``mf_ledger_tracking``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from uuid import UUID

from psycopg import Cursor, sql

from memfabric.domain.ledger import Conversation, Entry
from memfabric.projections.base import copy_rows

NAME = "ledger"
THREADS = "mf_ledger_threads"
ENTRIES = "mf_ledger_entries"
OBSERVATIONS = "mf_ledger_observations"

THREAD_COLUMNS = ("aggregate_id", "tenant_id", "resource_id", "thread_id", "first_position",
                  "last_position", "erasures", "live")
_THREAD_TYPES = ("uuid", "text", "text", "text", "int8", "int8", "int4", "bool")
ENTRY_COLUMNS = ("aggregate_id", "position", "entry_id", "role", "text", "at", "parent_id",
                 "branch", "retracted")
_ENTRY_TYPES = ("uuid", "int8", "text", "text", "text", "timestamptz", "text", "text", "bool")
OBS_COLUMNS = ("aggregate_id", "observation_id", "text", "source_entry_ids", "created_at")
_OBS_TYPES = ("uuid", "text", "text", "text[]", "timestamptz")

_WORD = re.compile(r"\w+", re.UNICODE)


def terms(text: str) -> list[str]:
    """Lower-case word terms of ``text`` (unique, in order)."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))


def thread_row(c: Conversation) -> tuple[Any, ...]:
    """``live``: something is left to erase (a write head only ever adds entries)."""
    live = c.partial or bool(c.entries or c.observations or c.reflections or c.work_scopes)
    return (c.id, c.tenant_id, c.resource_id or "", c.thread_id, c.first_position,
            c.last_position, c.erasures, live)


def entry_row(aggregate_id: UUID, e: Entry) -> tuple[Any, ...]:
    return (aggregate_id, e.position, e.entry_id, e.role, e.text, e.timestamp, e.parent_id,
            e.branch, e.retracted)


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
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id uuid PRIMARY KEY, tenant_id text NOT NULL,"
            " resource_id text NOT NULL, thread_id text NOT NULL, first_position bigint NOT NULL,"
            " last_position bigint NOT NULL, erasures integer NOT NULL, live boolean NOT NULL)"
        ).format(t=sql.Identifier(THREADS + s)))
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id uuid NOT NULL, position bigint NOT NULL,"
            " entry_id text NOT NULL, role text NOT NULL, text text NOT NULL,"
            " at timestamptz NOT NULL, parent_id text, branch text, retracted boolean NOT NULL,"
            " tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,"
            " PRIMARY KEY (aggregate_id, position))"
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
        for table, cols in ((THREADS, "(tenant_id, resource_id, thread_id)"),
                            (ENTRIES, "(aggregate_id, entry_id)"),
                            (ENTRIES, "USING gin (tsv)"),
                            (OBSERVATIONS, "USING gin (tsv)")):
            t = table + table_suffix
            suffix = "gin" if "gin" in cols else "ids"
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
        " ON CONFLICT (aggregate_id) DO UPDATE SET first_position = EXCLUDED.first_position,"
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
            " SELECT * FROM unnest(%s::uuid[], %s::int8[], %s::text[], %s::text[], %s::text[],"
            " %s::timestamptz[], %s::text[], %s::text[], %s::bool[]) ON CONFLICT DO NOTHING",
            [list(col) for col in cols],
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


def _tsquery(words: Sequence[str]) -> str:
    return " | ".join("'" + w.replace("'", "") + "'" for w in words)


def search_entries(cur: Cursor[Any], aggregate_id: UUID, words: Sequence[str], *,
                   batch: int = 2000) -> Iterator[list[dict[str, Any]]]:
    """Batches of live entries containing at least one of ``words`` (most recent first).

    The match runs on the GIN index first (a materialised CTE, so the planner never
    walks the thread's position index filtering every row); the caller checks its
    abort signal between batches."""
    if not words:
        return
    cur.execute(
        f"WITH m AS MATERIALIZED (SELECT position, entry_id, role, text, at, parent_id, branch"  # noqa: S608
        f" FROM {ENTRIES} WHERE tsv @@ to_tsquery('simple', %s) AND aggregate_id = %s"
        " AND NOT retracted) SELECT * FROM m ORDER BY position DESC",
        (_tsquery(words), aggregate_id), prepare=True)
    while rows := cur.fetchmany(batch):
        yield [dict(r) for r in rows]


def search_observations(cur: Cursor[Any], aggregate_ids: Sequence[UUID], words: Sequence[str],
                        limit: int) -> list[dict[str, Any]]:
    """Observations of the given conversations matching any of ``words``, by ts_rank."""
    if not words or not aggregate_ids:
        return []
    rows = cur.execute(
        f"SELECT o.aggregate_id, o.observation_id, o.text, o.source_entry_ids, o.created_at,"  # noqa: S608
        " ts_rank(o.tsv, to_tsquery('simple', %s)) AS rank"
        f" FROM {OBSERVATIONS} o WHERE o.aggregate_id = ANY(%s) AND o.tsv @@ to_tsquery('simple', %s)"
        " ORDER BY rank DESC, o.created_at DESC LIMIT %s",
        (_tsquery(words), list(aggregate_ids), _tsquery(words), limit)).fetchall()
    return [dict(r) for r in rows]


def threads_in_prefix(cur: Cursor[Any], tenant_id: str, resource_id: str | None,
                      thread_id: str | None) -> list[tuple[UUID, str, str | None, str]]:
    """Conversations of a scope prefix (``None`` = any): ``(aggregate_id, tenant,
    resource, thread)``, only those with something left to erase."""
    where, params = "live AND tenant_id = %s", [tenant_id]
    if resource_id is not None:
        where += " AND resource_id = %s"
        params.append(resource_id)
    if thread_id is not None:
        where += " AND thread_id = %s"
        params.append(thread_id)
    rows = cur.execute(f"SELECT aggregate_id, tenant_id, resource_id, thread_id FROM {THREADS}"  # noqa: S608
                       f" WHERE {where} ORDER BY aggregate_id", params).fetchall()
    return [(_get(r, "aggregate_id"), _get(r, "tenant_id", 1), _get(r, "resource_id", 2) or None,
             _get(r, "thread_id", 3)) for r in rows]


def observation(cur: Cursor[Any], aggregate_id: UUID, observation_id: str) -> dict[str, Any] | None:
    row = cur.execute(f"SELECT observation_id, text, source_entry_ids, created_at FROM {OBSERVATIONS}"  # noqa: S608
                      " WHERE aggregate_id = %s AND observation_id = %s",
                      (aggregate_id, observation_id)).fetchone()
    return None if row is None else dict(row)

