"""The in-memory backend's rows and the row predicates its queries share.

Each predicate is the Python twin of a SQL condition of a projection module, named in
its docstring (``recall_index.scope_filter``, ``recall_index.filter_sql``, ...): the
in-memory queries (:mod:`memfabric.adapters.memory.store`,
:mod:`memfabric.adapters.memory.uow`) apply them to the rows
:mod:`memfabric.adapters.memory.log` keeps, which are the projections' own row tuples
as dicts (:func:`put`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np

from memfabric.domain import visibility
from memfabric.domain.ports import ListQuery, NoteFilter
from memfabric.domain.scope import Scope
from memfabric.domain.working import BlockEntry
from memfabric.projections import tables

Row = dict[str, Any]
"""One row: column name → value."""


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity as pgvector computes it (``1 - (a <=> b)``), 0 for a zero vector."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    value = float(np.dot(a.astype(np.float64), b.astype(np.float64)) / (na * nb))
    return 0.0 if math.isnan(value) else value


def put(table: dict[UUID, dict[str, Any]], aid: UUID, columns: Sequence[str],
         row: tuple[Any, ...] | None) -> None:
    """Store ``row`` (a projection's row tuple in ``columns`` order) as ``table[aid]``,
    or drop ``table[aid]`` when ``row`` is ``None``. A ``valid`` range becomes
    ``valid_from`` / ``valid_to``, a ``Jsonb`` consent its object; the row is copied."""
    if row is None:
        table.pop(aid, None)
        return
    data = dict(zip(columns, row, strict=True))
    if "valid" in data:
        valid = data.pop("valid")
        data["valid_from"], data["valid_to"] = valid.lower, valid.upper
    consent = data.get("consent")
    if consent is not None and hasattr(consent, "obj"):
        data["consent"] = consent.obj
    table[aid] = copy.deepcopy(data)


def row_dict(columns: Sequence[str], row: tuple[Any, ...]) -> Row:
    """One row tuple as :func:`put` stores it (a fresh dict)."""
    table: dict[UUID, Row] = {}
    marker = UUID(int=0)
    put(table, marker, columns, row)
    return table[marker]


def home(row: dict[str, Any]) -> Scope:
    """The scope a row's ``tenant_id, resource_id, thread_id`` name."""
    return Scope(tenant_id=row["tenant_id"], resource_id=row["resource_id"] or None,
                 thread_id=row["thread_id"] or None)


def resolve_note(log: Any, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
    """Like ``note_scope.resolve``: homes of the notes ``note_id`` seen from ``scope``."""
    with log.lock:
        rows = [dict(r) for r in log.scope_rows.values() if r["note_id"] == note_id]
    found = []
    for r in rows:
        home = Scope(tenant_id=r["tenant_id"], resource_id=r["resource_id"] or None,
                     thread_id=r["thread_id"] or None)
        if visibility.visible(home, visibility.of_consent({"visibility": r["visibility"]}), scope):
            found.append((home, str(r["visibility"])))
    found.sort(key=lambda f: (f[0] != scope, f[0].sql()))
    return found[:3]


def blocks_of(log: Any, scope: Scope) -> dict[str, BlockEntry]:
    """Like ``working_value.select_blocks``: the working blocks of exactly ``scope``
    from the log's ``mf_working_value`` rows, by label."""
    t, r, th = scope.sql()
    with log.lock:
        rows = [dict(row) for row in log.tables[tables.WORKING_VALUE].values()
                if (row["tenant_id"], row["resource_id"], row["thread_id"]) == (t, r, th)]
    return {row["block"]: BlockEntry(content=row["content"], updated_at=row["updated_at"],
                                     version=int(row["version"])) for row in rows}


def visible(row: dict[str, Any], scope: Scope) -> bool:
    """``recall_index.scope_filter`` in Python: same tenant, and the note's own
    (resource, thread), or ``tenant`` visibility, or ``resource`` visibility with the
    same non-empty resource."""
    t, r, th = scope.sql()
    return row["tenant_id"] == t and (
        (row["resource_id"] == r and row["thread_id"] == th)
        or row["visibility"] == "tenant"
        or (row["visibility"] == "resource" and row["resource_id"] == r and r != ""))


def in_prefix(row: dict[str, Any], scope: Scope) -> bool:
    """Rows of the scope prefix (``None`` parts match any resource / thread)."""
    t, r, th = scope.sql()
    return row["tenant_id"] == t and (scope.resource_id is None or row["resource_id"] == r) and (
        scope.thread_id is None or row["thread_id"] == th)


def valid_at(row: dict[str, Any], at: datetime) -> bool:
    lo, hi = row["valid_from"], row["valid_to"]
    return not ((lo is not None and at < lo) or (hi is not None and at >= hi))


def consented(row: dict[str, Any], require_consent: bool) -> bool:
    granted = row["consent_granted"]
    return granted is True if require_consent else granted is not False


def seen(row: dict[str, Any], scope: Scope, filters: NoteFilter | None) -> bool:
    """``recall_index.scope_access``: the scope rule, or a principal's rule around it
    (issue 33, ``AccessFilter.admits``)."""
    shown = visible(row, scope)
    access = None if filters is None else filters.access
    if access is None:
        return shown
    return row["tenant_id"] == scope.tenant_id and access.admits(row, shown)


def prefixed(row: dict[str, Any], scope: Scope, filters: NoteFilter) -> bool:
    """``recall_index._list_where``'s prefix rule: in the scope prefix, and with a
    principal's ``filters.access`` admitted by it (issue 33, no visibility rule)."""
    return in_prefix(row, scope) and (filters.access is None or filters.access.admits(row, True))


def admits(row: dict[str, Any], scope: Scope, kinds: Sequence[str], as_of: datetime,
            require_consent: bool, filters: NoteFilter | None = None) -> bool:
    """``recall_index.scope_filter`` + kinds + validity + consent, in Python."""
    return (seen(row, scope, filters) and row["kind"] in kinds and valid_at(row, as_of)
            and consented(row, require_consent))


def returned(row: dict[str, Any]) -> dict[str, Any]:
    """The fields ``recall_index.RETURNED`` selects from a row."""
    fields = {k: v for k, v in row.items()
              if k not in ("embedding", "valid", "token_hash", "embedder_id")}
    fields["importance"] = float(np.float32(fields["importance"]))  # a ``real`` column
    return fields


def filtered(row: dict[str, Any], filters: NoteFilter | None) -> bool:
    """``recall_index.filter_sql`` in Python."""
    if filters is None:
        return True
    if not all(t in row["tags"] for t in filters.tags):
        return False
    if filters.subject is not None and row["subject"] != filters.subject:
        return False
    return filters.min_importance is None or float(np.float32(row["importance"])) >= filters.min_importance


def lists(row: dict[str, Any], query: ListQuery) -> bool:
    """``recall_index._list_where`` in Python."""
    shown = prefixed(row, query.scope, query.filters) if query.prefix else seen(row, query.scope, query.filters)
    return (shown and row["kind"] in query.kinds
            and (query.valid_at is None or valid_at(row, query.valid_at))
            and (query.include_superseded or row["superseded_by"] is None)
            and consented(row, query.require_consent) and filtered(row, query.filters))
