"""``memfabric log``'s version check (issue 28, defect 8): an event whose note's
previous version is absent from the log (a row deleted from the middle of a note's
events) is marked ``integrity="failed"``, naming the note and the missing version, so
the command exits non-zero. The check is one indexed query per batch of entries
(primary key ``(originator_id, originator_version)``); memory stays bounded."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from uuid import UUID

from memfabric.adapters.audit import LogEntry
from memfabric.projections import tables
from psycopg import sql
from psycopg.rows import tuple_row


def missing_predecessors(conn: Any, rows: Sequence[tuple[UUID, int]]) -> set[tuple[UUID, int]]:
    """The ``(aggregate id, version)`` of ``rows`` (version > 1) whose version - 1 is
    not in the log."""
    wanted = [(oid, v) for oid, v in rows if v > 1]
    if not wanted:
        return set()
    found = conn.cursor(row_factory=tuple_row).execute(
        sql.SQL("SELECT e.oid, e.v FROM unnest(%s::uuid[], %s::int[]) AS e(oid, v)"
                " WHERE NOT EXISTS (SELECT 1 FROM {t} x WHERE x.originator_id = e.oid"
                " AND x.originator_version = e.v - 1)").format(t=sql.Identifier(tables.EVENTS)),
        ([o for o, _ in wanted], [v for _, v in wanted])).fetchall()
    return {(oid, int(v)) for oid, v in found}


def _flag(entry: LogEntry) -> LogEntry:
    problem = (f"note {entry.note_id or '?'} (aggregate {entry.aggregate_id}): event version "
               f"{entry.version - 1} is missing from the log (a row was deleted)")
    if entry.integrity == "failed" and entry.problem:
        problem = f"{entry.problem}; {problem}"
    return dataclasses.replace(entry, integrity="failed", problem=problem)


def check_versions(fabric: Any, entries: Iterable[LogEntry], batch: int = 500) -> Iterator[LogEntry]:
    """``entries`` (from :func:`memfabric.adapters.audit.read_log`) in the same order,
    each flagged ``integrity="failed"`` when its note's previous version is missing.
    ``batch``: entries held before one check (1 for ``--follow``: nothing waits). An
    error of ``entries`` passes through after the entries read before it."""
    pending: list[LogEntry] = []

    def flush() -> Iterator[LogEntry]:
        with fabric.log.datastore.get_connection() as conn:
            gaps = missing_predecessors(conn, [(e.aggregate_id, e.version) for e in pending])
        for e in pending:
            yield _flag(e) if (e.aggregate_id, e.version) in gaps else e
        pending.clear()

    upstream = iter(entries)
    while True:
        try:
            entry = next(upstream)
        except StopIteration:
            break
        except Exception:  # the log stopped being readable: what came before goes out first
            if pending:
                yield from flush()
            raise
        pending.append(entry)
        if len(pending) >= batch:
            yield from flush()
    if pending:
        yield from flush()
