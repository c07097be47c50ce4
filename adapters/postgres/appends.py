"""The statements that append a unit of work's keys and events (issue 24)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memfabric.adapters.crypto import KEYS_TABLE, TransactionKeys
from memfabric.adapters.postgres import PostgresNoteRecorder
from memfabric.projections.engine import ProjectionEngine

VALUES_ROWS = 256
"""Up to this many keys or events, the append sends them as ``VALUES`` rows of scalar
parameters (psycopg dumps arrays in Python: a fifth of the append's client time)."""

_EVENTS_SQL: dict[tuple[int, int], bytes] = {}
"""The statements of :func:`events_statement`, by (keys, events)."""

_POSITIONS_SQL: dict[tuple[bool, bytes], bytes] = {}
"""The statements of :func:`positions_statement`, by (new keys?, positions)."""


def events_statement(recorder: PostgresNoteRecorder, keys: TransactionKeys, stored: Sequence[Any],
                     tenants: Sequence[str]) -> tuple[bytes, list[Any]]:
    """``WITH k AS (<new keys>) <events>``: the unit of work's new keys and its events
    (``tenants[i]``: the tenant of event ``i``) in one statement, and its parameters. Up to
    :data:`VALUES_ROWS` rows each are sent as scalars (``VALUES`` rows, in order: the
    ids are drawn in that order), more as arrays."""
    pending = list(keys.pending.items())
    shape = (len(pending), len(stored))
    query = _EVENTS_SQL.get(shape)
    if query is None:
        if len(_EVENTS_SQL) > 64:
            _EVENTS_SQL.clear()
        query = _EVENTS_SQL[shape] = _events_sql(recorder, *shape)
    if len(pending) > VALUES_ROWS:
        key_params: list[Any] = list(keys.flush_params())
    else:
        key_params = [v for oid, (gen, key) in pending for v in (oid, gen, key)]
    if len(stored) > VALUES_ROWS:
        events: list[Any] = list(recorder.insert_params(stored, tenants))
    else:
        events = [v for e, tenant in zip(stored, tenants, strict=True)
                  for v in (e.originator_id, e.originator_version, e.topic, e.state, tenant)]
    return query, [*key_params, *events]


def _events_sql(recorder: PostgresNoteRecorder, n_keys: int, n_events: int) -> bytes:
    """The statement of :func:`events_statement` for ``n_keys`` keys and ``n_events`` events."""
    if n_keys > VALUES_ROWS:
        head = TransactionKeys.FLUSH_SQL
    else:
        head = (f"INSERT INTO {KEYS_TABLE} (originator_id, gen, key) VALUES "  # noqa: S608 - constant table name
                + ", ".join(["(%s::uuid, %s::int, %s::bytea)"] * n_keys)
                + " ON CONFLICT (originator_id, gen) DO UPDATE SET key = EXCLUDED.key")
    prefix = f"WITH k AS ({head}) ".encode() if n_keys else b""
    if n_events > VALUES_ROWS:
        return prefix + recorder.insert_sql()
    return prefix + recorder.insert_values_sql(n_events)


def positions_statement(recorder: PostgresNoteRecorder, keys: TransactionKeys, engine: ProjectionEngine,
                        stored: Sequence[Any], tenant: str, projections: Sequence[Any]) -> tuple[bytes, list[Any]]:
    """``WITH k AS (<new keys>), e AS (<events> RETURNING notification_id) SELECT
    <ids in order>, <the tenant's positions>`` and its parameters: the append of the
    path that reads the tenant's positions back (to catch a gap up first)."""
    positions, n = engine.positions_array(projections)
    pending = keys.pending
    key = (bool(pending), positions)
    query = _POSITIONS_SQL.get(key)
    if query is None:
        ctes = ([b"k AS (" + TransactionKeys.FLUSH_SQL.encode() + b")"] if pending else [])
        ctes.append(b"e AS (" + recorder.insert_sql() + b")")
        query = _POSITIONS_SQL[key] = (b"WITH " + b", ".join(ctes)
                                       + b" SELECT ARRAY(SELECT notification_id FROM e ORDER BY 1) AS ids, "
                                       + positions + b" AS pos")
    args: list[Any] = [*(keys.flush_params() if pending else ()),
                       *recorder.insert_params(stored, [tenant] * len(stored)),
                       *([engine.tenant_rows(tenant)] * n)]
    return query, args
