"""The rows of one write, collected into one statement (issue 24).

A writer applies the projections inline. Instead of a statement per table, the rows of
every projection that can be batched (``batch_rows = True``) are collected in a
:class:`RowBatch` and travel as data-modifying CTEs of the statement that records the
tenant's tracking (``ProjectionEngine``): one statement for the server to run, one
parameter list for the client to dump.

The parameters are pre-encoded (:func:`encode`) so that psycopg dumps each with its C
dumpers: a list, a range or a JSON document is sent as its PostgreSQL text literal (an
``unknown``-typed parameter the server reads as the target column's type), a vector as
pgvector's binary format (:class:`VectorBinary`). psycopg's Python dumpers for lists,
ranges, JSON and numpy vectors were about a third of a write's client time in the
statement (a 31-column recall-index row: 80 µs dumped as is, under 20 µs encoded).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np
from psycopg import Cursor
from psycopg.types.json import Jsonb
from psycopg.types.range import Range

MAX_BATCH_PARAMS = 60_000
"""A :class:`RowBatch` with more parameters than this is run statement by statement
(PostgreSQL takes at most 65,535 parameters in one statement)."""


class VectorBinary(bytes):
    """A vector in pgvector's binary wire format (big-endian ``uint16`` dimensions and
    unused, then big-endian ``float32`` values), sent as is by a dumper registered for
    this class (``adapters.postgres.VectorTypes``)."""


def vector_binary(vector: np.ndarray) -> VectorBinary:
    """``vector`` (1-d, any float dtype) in pgvector's binary format."""
    return VectorBinary(struct.pack(">HH", vector.shape[0], 0) + vector.astype(">f4", copy=False).tobytes())


def _array_item(item: Any) -> str:
    if item is None:
        return "NULL"
    text = str(item)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _bound(value: Any) -> str:
    return "" if value is None else value.isoformat()


def _array(value: Sequence[Any]) -> Any:
    if not value:
        return "{}"
    if all(type(i) in _ARRAY_ITEMS for i in value):
        return "{" + ",".join(map(_array_item, value)) + "}"
    return value


def _range(value: Range[Any]) -> Any:
    if value.isempty:
        return "empty"
    lo, hi = value.lower, value.upper
    if (lo is None or type(lo) is datetime) and (hi is None or type(hi) is datetime):
        return value.bounds[0] + _bound(lo) + "," + _bound(hi) + value.bounds[1]
    return value


def _vector(value: np.ndarray) -> Any:
    return vector_binary(value) if value.ndim == 1 and value.dtype == np.float32 else value


_AS_IS = frozenset({str, int, float, bool, type(None), UUID, datetime, bytes})
_ROW_AS_IS = _AS_IS - {int, bool}
"""What a row of :meth:`RowBatch.add` sends as is. An ``int`` or a ``bool`` goes as its
text literal (``"12"``, ``"true"``), an ``unknown`` parameter the server reads as its
column's type: psycopg types an ``int`` by its size (``int2``, ``int4``, ``int8``) and
a NULL as ``unknown``, and the parameter types are part of a prepared statement's key,
so a bulk chunk whose values differed from the last one's (a boolean column NULL in one
row) was parsed and planned afresh and stayed prepared on the connection: every chunk of
an import (issue 24). Now a row's parameter types change only with which of its uuid,
timestamp, bytea, float and vector values are NULL."""
_ARRAY_ITEMS = frozenset({str, int, type(None), UUID, datetime})
_ENCODERS: dict[type, Callable[[Any], Any]] = {
    list: _array, tuple: _array, Range: _range, Jsonb: lambda v: json.dumps(v.obj), np.ndarray: _vector,
}


def encode(value: Any) -> Any:
    """``value`` as the batch sends it: a list or tuple of strings, ints, UUIDs or
    datetimes as an array literal (``'{"a","b"}'``), a range of datetimes as a range literal, ``Jsonb`` as
    JSON text, a 1-d float32 array as :class:`VectorBinary`; anything else unchanged
    (psycopg's C dumpers take ``str``, ``int``, ``float``, ``bool``, ``UUID``,
    ``datetime``, ``None``). The array literal quotes every element (PostgreSQL's
    array input syntax: backslash and double quote escaped)."""
    kind = type(value)
    if kind in _AS_IS:
        return value
    encoder = _ENCODERS.get(kind)
    return value if encoder is None else encoder(value)


def encode_params(params: Any) -> Any:
    """The parameters of a statement (a sequence or a mapping) with each value
    :func:`encode`-d: for a statement whose array parameters have a type from the
    statement itself (a cast, or the other side of ``= ANY(...)``), so psycopg's C
    dumpers send them as text."""
    if isinstance(params, dict):
        return {k: v if type(v) in _AS_IS else encode(v) for k, v in params.items()}
    return [v if type(v) in _AS_IS else encode(v) for v in params]


@dataclass(frozen=True, slots=True)
class _Rows:
    """Upserts (``conflict`` ``"update"``: of every column but the key; ``"nothing"``:
    rows already there are kept) of ``n_rows`` rows into ``table``, and the delete of
    ``n_deletes`` (0 or 1) id lists."""

    table: str
    columns: tuple[str, ...]
    n_rows: int
    n_deletes: int
    conflict: str


@dataclass(frozen=True, slots=True)
class _Statement:
    """A data-modifying statement given as ``template`` with ``{0}``, ``{1}``, ...
    where its ``n_params`` placeholders go."""

    template: str
    n_params: int


class RowBatch:
    """The row writes of several projection tables, collected instead of run, to
    travel as data-modifying CTEs of one statement with the tenant's tracking. Sound
    because each collected write touches rows no other one touches (a note is either
    upserted or deleted in a table, never both; a statement part names rows of its own)
    and none reads another's: every CTE sees the same snapshot, as PostgreSQL runs
    them.

    The statement uses PostgreSQL's own ``$n`` placeholders (run on a
    ``psycopg.RawCursor``: no client-side parsing of a long query); the caller numbers
    them from ``first``. :attr:`key` is the statement's cache key; :attr:`params` its
    parameters, in order, encoded (:func:`encode`)."""

    def __init__(self) -> None:
        self.parts: list[_Rows | _Statement] = []
        self.params: list[Any] = []
        self._runs: list[Callable[[Cursor[Any]], None]] = []
        self._encoded: dict[int, tuple[Any, Any]] = {}
        """id(value) -> (value, encoded): one value in several rows (a note's recall and
        version rows share their lists, ranges, documents and vector) is encoded once."""

    @property
    def key(self) -> tuple[_Rows | _Statement, ...]:
        """What the statement's text depends on (a cache key)."""
        return tuple(self.parts)

    def add(self, table: str, columns: tuple[str, ...], upserts: Sequence[Sequence[Any]],
            deletes: tuple[list[str], list[Any]] | None, run: Callable[[Cursor[Any]], None],
            *, conflict: str = "update") -> None:
        """Collect the delete of ``deletes`` (the tenant list and the id list of
        ``base.delete_params``) and the upsert of ``upserts`` into ``table``; ``run``
        writes the same rows statement by statement (:meth:`run_each`)."""
        if not upserts and not deletes:
            return
        self.parts.append(_Rows(table, columns, len(upserts), 1 if deletes else 0, conflict))
        self._runs.append(run)
        if deletes:
            self.params.extend(deletes)
        as_is = _ROW_AS_IS
        for row in upserts:  # (the type test inline: most values are scalars)
            self.params.extend([v if type(v) in as_is else self._encode(v) for v in row])

    def _encode(self, value: Any) -> Any:
        kind = type(value)
        if kind is int:
            return str(value)
        if kind is bool:
            return "true" if value else "false"
        held = self._encoded.get(id(value))
        if held is not None and held[0] is value:
            return held[1]
        out = encode(value)
        self._encoded[id(value)] = (value, out)
        return out

    def add_statement(self, template: str, params: Sequence[Any], run: Callable[[Cursor[Any]], None],
                      *, first: bool = False) -> None:
        """Collect one data-modifying statement (``template``: see :class:`_Statement`;
        its array parameters need a type from the template, e.g. a cast: they are sent
        encoded); ``run`` runs it alone (:meth:`run_each`). ``first``: put it before
        every write collected so far, for a statement that reads rows other writes of
        the batch change (in the one statement every part reads the snapshot before
        it; run statement by statement, it then runs before them)."""
        part, encoded = _Statement(template, len(params)), encode_params(params)
        if first:
            self.parts.insert(0, part)
            self._runs.insert(0, run)
            self.params[0:0] = encoded
            return
        self.parts.append(part)
        self._runs.append(run)
        self.params.extend(encoded)

    def too_big(self) -> bool:
        """Whether the collected writes must run one statement each (:data:`MAX_BATCH_PARAMS`)."""
        return len(self.params) > MAX_BATCH_PARAMS

    def run_each(self, cur: Cursor[Any]) -> None:
        """Run the collected writes statement by statement, in order."""
        for run in self._runs:
            run(cur)

    def ctes(self, first: int = 3) -> list[str]:
        """``w<i> AS (<write>)`` (and ``d<i> AS (<delete>)``) for each collected write,
        placeholders ``$first`` on, in :attr:`params` order."""
        out: list[str] = []
        n = first
        for i, part in enumerate(self.parts):
            if isinstance(part, _Statement):
                out.append(f"w{i} AS (" + part.template.format(*(f"${k}" for k in range(n, n + part.n_params))) + ")")
                n += part.n_params
                continue
            t = _quoted(part.table)
            if part.n_deletes:
                out.append(f"d{i} AS (DELETE FROM {t} WHERE tenant_id = ANY(${n})"  # noqa: S608 - quoted identifiers
                           f" AND aggregate_id = ANY(${n + 1}))")
                n += 2
            if part.n_rows:
                width = len(part.columns)
                rows = ", ".join("(" + ", ".join(f"${k}" for k in range(m, m + width)) + ")"
                                 for m in range(n, n + width * part.n_rows, width))
                n += width * part.n_rows
                out.append(f"w{i} AS (INSERT INTO {t} ({', '.join(map(_quoted, part.columns))}) VALUES {rows}"  # noqa: S608
                           + _on_conflict(part) + ")")
        return out


def _on_conflict(part: _Rows) -> str:
    if part.conflict == "nothing":
        return " ON CONFLICT DO NOTHING"
    sets = ", ".join(f"{_quoted(c)} = EXCLUDED.{_quoted(c)}" for c in part.columns if c != "aggregate_id")
    return f" ON CONFLICT ON CONSTRAINT {_quoted(part.table + '_pkey')} DO UPDATE SET {sets}"


def _quoted(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


class BatchCursor:
    """What a projection that may batch (``batch_rows = True``) is handed instead of a
    cursor: its ``write_rows`` calls are collected into :attr:`batch`; :meth:`direct`
    gives a real cursor of the writer's transaction (``make_cursor``) for a statement
    that must run by itself (a read, e.g. the note versions' replay)."""

    def __init__(self, batch: RowBatch, make_cursor: Callable[[], Cursor[Any]]) -> None:
        self.batch = batch
        self.make_cursor = make_cursor
        self._direct: Cursor[Any] | None = None

    def direct(self) -> Cursor[Any]:
        """A cursor of the writer's transaction (one per batch cursor, made on first use)."""
        if self._direct is None:
            self._direct = self.make_cursor()
        return self._direct

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()


class LazyCursor:
    """Stands in for a cursor of the writer's transaction, made (by ``make``) on first
    use: a projection that has nothing to write for a unit of work costs no cursor,
    and a unit of work on the wire stays there (``adapters.postgres.session``)."""

    def __init__(self, make: Callable[[], Cursor[Any]]) -> None:
        self._make = make
        self._cur: Cursor[Any] | None = None

    def __getattr__(self, name: str) -> Any:
        if self._cur is None:
            self._cur = self._make()
        return getattr(self._cur, name)

    def close(self) -> None:
        if self._cur is not None:
            self._cur.close()


def batch_rows(p: object) -> bool:
    """Whether projection ``p`` may be handed a :class:`BatchCursor` (its class says
    ``batch_rows = True``)."""
    return bool(getattr(p, "batch_rows", False))
