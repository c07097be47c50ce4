"""Issue 24: the batched write statement's parameters, pre-encoded for psycopg's C
dumpers (``memfabric.projections.batch.encode``) — each the PostgreSQL input text of
the value (PostgreSQL reads an ``unknown`` parameter as the target column's type), or
pgvector's binary format for a vector."""

from __future__ import annotations

import json
import struct
import uuid
from datetime import datetime, timedelta, timezone

import numpy as np
from psycopg.adapt import PyFormat, Transformer
from psycopg.types.json import Jsonb
from psycopg.types.range import Range

from memfabric.projections.batch import RowBatch, VectorBinary, encode


def test_scalars_pass_unchanged() -> None:
    now = datetime.now(timezone.utc)
    oid = uuid.uuid4()
    for value in ("text", "", None, 0, 7, 0.25, True, False, oid, now, b"\x00\x01"):
        assert encode(value) is value


def test_lists_are_array_literals_with_every_element_quoted() -> None:
    assert encode([]) == "{}"
    assert encode(()) == "{}"
    assert encode(["a", "b c"]) == '{"a","b c"}'
    assert encode(['say "hi"', "back\\slash", "comma,brace}"]) == '{"say \\"hi\\"","back\\\\slash","comma,brace}"}'
    assert encode(["x", None]) == '{"x",NULL}'
    assert encode([1, 22]) == '{"1","22"}'


def test_a_list_of_other_things_is_left_to_psycopg() -> None:
    mixed = [uuid.uuid4(), 1.5]
    assert encode(mixed) is mixed


def test_ranges_of_datetimes_are_range_literals() -> None:
    lo = datetime(2026, 1, 2, 3, 4, 5, 600_000, tzinfo=timezone.utc)
    hi = lo + timedelta(days=1)
    assert encode(Range(lo, hi, bounds="[)")) == f"[{lo.isoformat()},{hi.isoformat()})"
    assert encode(Range(lo, None, bounds="[)")) == f"[{lo.isoformat()},)"
    assert encode(Range(None, None, bounds="[)")) == "(,)"  # psycopg opens an unbounded side
    assert encode(Range(empty=True)) == "empty"
    ints = Range(1, 5)
    assert encode(ints) is ints


def test_json_documents_are_json_text() -> None:
    doc = {"visibility": "thread", "granted": True, "nested": [1, "é"]}
    assert json.loads(encode(Jsonb(doc))) == doc


def test_a_float32_vector_is_pgvectors_binary_format() -> None:
    vec = np.array([0.5, -1.0, 3.25], dtype=np.float32)
    out = encode(vec)
    assert isinstance(out, VectorBinary)
    assert struct.unpack(">HH", out[:4]) == (3, 0)
    assert np.array_equal(np.frombuffer(out[4:], dtype=">f4"), vec)
    doubles = np.array([0.5], dtype=np.float64)
    assert encode(doubles) is doubles


def test_a_batch_numbers_its_placeholders_in_parameter_order() -> None:
    batch = RowBatch()
    batch.add("t1", ("aggregate_id", "a", "tags"), [(uuid.uuid4(), "x", ["p", "q"])], (["acme"], [uuid.uuid4()]),
              lambda cur: None)
    batch.add_statement("UPDATE t2 SET x = {0} WHERE y = {1}", [1, 2], lambda cur: None)
    batch.add("t3", ("aggregate_id", "b"), [(uuid.uuid4(), 1), (uuid.uuid4(), 2)], None, lambda cur: None,
              conflict="nothing")
    ctes = batch.ctes(first=3)
    assert ctes[0] == 'd0 AS (DELETE FROM "t1" WHERE tenant_id = ANY($3) AND aggregate_id = ANY($4))'
    assert ctes[1].startswith('w0 AS (INSERT INTO "t1" ("aggregate_id", "a", "tags") VALUES ($5, $6, $7) ON CONFLICT'
                              ' ON CONSTRAINT "t1_pkey" DO UPDATE SET "a" = EXCLUDED."a", "tags" = EXCLUDED."tags"')
    assert ctes[2] == "w1 AS (UPDATE t2 SET x = $8 WHERE y = $9)"
    assert ctes[3] == 'w2 AS (INSERT INTO "t3" ("aggregate_id", "b") VALUES ($10, $11), ($12, $13) ON CONFLICT DO NOTHING)'
    assert len(batch.params) == 11 and batch.params[4] == '{"p","q"}'


def _types(params: list[object]) -> tuple[int, ...]:
    tx = Transformer()
    tx.dump_sequence(params, [PyFormat.AUTO] * len(params))
    return tuple(tx.types or ())


def test_a_rows_parameter_types_do_not_change_with_its_ints_and_booleans() -> None:
    """The types are part of the prepared statement's key: two chunks of one shape
    whose ints differ in size and whose booleans are NULL in one and set in the other
    must share one prepared statement (issue 24: every bulk chunk was parsed and
    planned afresh)."""
    cols = ("aggregate_id", "n", "flag", "big")
    first, second = RowBatch(), RowBatch()
    first.add("t", cols, [(uuid.uuid4(), 1, None, 2), (uuid.uuid4(), 7, True, 3)], None, lambda cur: None)
    second.add("t", cols, [(uuid.uuid4(), 70_000, False, 2**40), (uuid.uuid4(), 0, None, None)], None,
               lambda cur: None)
    assert _types(first.params) == _types(second.params)
    assert first.params[1:4] == ["1", None, "2"] and first.params[5:8] == ["7", "true", "3"]
    assert second.params[1:4] == ["70000", "false", str(2**40)]
