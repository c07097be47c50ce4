"""Issue 25, tenant partitions: ``open_fabric(partitions=N)`` lays the events table and
the projection tables out hash-partitioned by tenant, fixed at creation; the planner
prunes every tenant-scoped statement of a write and a recall to one partition
(``EXPLAIN`` of the statements the fabric really sends); the contract suite passes on a
partitioned fabric."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg.rows import dict_row
from pydantic import ValidationError

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.postgres import wire
from memfabric.adapters.postgres.vectors import VectorTypes
from memfabric.domain.errors import PartitionsMismatchError
from memfabric.domain.scope import Scope
from memfabric.projections import note_versions, partitions, recall_index, recall_partition, tables
from memfabric.projections.ledger import THREADS
from tests.conftest import event_count, fetch
from tests.contract.behaviours import Backend, FabricContract

PARTITIONED = (tables.EVENTS, tables.RECALL_INDEX, tables.CONSOLIDATION_INDEX, tables.NOTE_SCOPE,
               tables.WORKING_VALUE, tables.LINK_GRAPH, tables.RETENTION, THREADS)
"""Every table with a tenant column: partitioned when the fabric is."""


def layout(dsn: str) -> dict[str, int]:
    """Table → its partitions (1: plain), for :data:`PARTITIONED`."""
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        return {t: partitions.count(cur, t) for t in PARTITIONED}


def test_partitions_are_made_at_creation_and_fixed(dsn: str) -> None:
    with open_fabric(dsn, partitions=4) as fab:
        notes = fab.scope("acme", "u1")
        notes.remember(kind="fact", content="the deploy uses blue green switches")
        assert fab.topology()["partitions"] == 4
    assert layout(dsn) == dict.fromkeys(PARTITIONED, 4)
    keys = fetch(dsn, "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
                      " WHERE contype = 'p' AND conrelid = ANY(%s::regclass[])", (list(PARTITIONED),))
    assert dict(keys)[tables.EVENTS] == "PRIMARY KEY (originator_id, originator_version, tenant)"
    assert dict(keys)[tables.RECALL_INDEX] == "PRIMARY KEY (aggregate_id, tenant_id)"
    before = event_count(dsn)
    with pytest.raises(PartitionsMismatchError, match="partitions=4"):
        open_fabric(dsn, partitions=2)
    assert event_count(dsn) == before
    with open_fabric(dsn) as fab:  # no count given: the database's own
        assert fab.partitions() == 4
        hits = fab.scope("acme", "u1").recall("deploy").hits
        assert [h.content for h in hits] == ["the deploy uses blue green switches"]


def test_an_unpartitioned_database_still_opens(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="the VPN needs a token")
        assert fab.partitions() == 1
    assert layout(dsn) == dict.fromkeys(PARTITIONED, 1)
    with open_fabric(dsn, partitions=1) as fab:
        assert [h.content for h in fab.scope("acme", "u1").recall("VPN").hits] == ["the VPN needs a token"]
    with pytest.raises(PartitionsMismatchError, match="partitions=1"):
        open_fabric(dsn, partitions=8)


@pytest.mark.parametrize("bad", [0, -1, 257, "four", 2.5, True, "4", 4.0])
def test_a_bad_partition_count_is_refused_before_anything_is_made(dsn: str, bad: Any) -> None:
    with pytest.raises(ValidationError):
        open_fabric(dsn, partitions=bad)
    assert fetch(dsn, "SELECT to_regclass(%s)", (tables.EVENTS,)) == [(None,)]


# ------------------------------------------------------------------ pruning
class Recorder:
    """Records the statements (and parameters) psycopg cursors execute and units of
    work send on their wire (``adapters/postgres/wire.py``) while active."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements: list[tuple[Any, Any, bool]] = []
        original = psycopg.Cursor.execute
        send, send_psycopg = wire.Wire.send, wire.Wire.send_psycopg

        def execute(cur: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            self.statements.append((query, params, isinstance(cur, psycopg.RawCursor)))
            return original(cur, query, params, **kw)

        def sent(w: Any, query: Any, params: Any = ()) -> Any:
            self.statements.append((query, list(params), True))
            return send(w, query, params)

        def sent_psycopg(w: Any, query: Any, params: Any = None) -> Any:
            self.statements.append((query, params, False))
            return send_psycopg(w, query, params)
        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        monkeypatch.setattr(wire.Wire, "send", sent)
        monkeypatch.setattr(wire.Wire, "send_psycopg", sent_psycopg)

        def undo() -> None:
            monkeypatch.setattr(psycopg.Cursor, "execute", original)
            monkeypatch.setattr(wire.Wire, "send", send)
            monkeypatch.setattr(wire.Wire, "send_psycopg", send_psycopg)
        self.undo = undo


def _text(query: Any, conn: psycopg.Connection[Any]) -> str:
    if isinstance(query, bytes):
        return query.decode()
    return query if isinstance(query, str) else query.as_string(conn)


def scanned_partitions(plan: Any, out: dict[str, set[str]]) -> None:
    """Parent table → the partitions a JSON plan (node tree) scans."""
    if isinstance(plan, dict):
        rel = plan.get("Relation Name")
        m = re.fullmatch(r"(.+)_p\d+", rel or "")
        if m and m.group(1) in PARTITIONED:
            out.setdefault(m.group(1), set()).add(rel)  # type: ignore[arg-type]
        for value in plan.values():
            scanned_partitions(value, out)
    elif isinstance(plan, list):
        for value in plan:
            scanned_partitions(value, out)


def plans(dsn: str, recorded: list[tuple[Any, Any, bool]]) -> list[tuple[str, dict[str, set[str]]]]:
    """``EXPLAIN (FORMAT JSON)`` of each recorded statement that names a partitioned
    table: (statement, parent → partitions scanned)."""
    out = []
    with psycopg.connect(dsn) as conn:
        VectorTypes().ensure(conn)  # pgvector's adapters and the write statements' vector dumper
        for query, params, raw in recorded:
            text = _text(query, conn)
            if not any(t in text for t in PARTITIONED) or not re.match(r"\s*(WITH|SELECT|INSERT|UPDATE|DELETE)", text):
                continue
            cur = psycopg.RawCursor(conn) if raw else conn.cursor()
            cur.execute("EXPLAIN (FORMAT JSON) " + text, params)
            row = cur.fetchone()
            plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
            found: dict[str, set[str]] = {}
            scanned_partitions(plan, found)
            out.append((text, found))
            conn.rollback()
    return out


@pytest.fixture
def pfabric(dsn: str) -> Iterator[Fabric]:
    with open_fabric(dsn, partitions=4) as fab:
        for t in ("t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"):  # every partition has rows
            fab.scope(t, "u1").remember(kind="fact", content=f"tenant {t} keeps its runbook in the wiki")
        yield fab


def test_a_write_and_a_recall_of_one_tenant_touch_one_partition(pfabric: Fabric, dsn: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    notes = pfabric.scope("t3", "u1")
    rec = Recorder(monkeypatch)
    notes.remember(kind="fact", content="the build server is in Frankfurt")
    first = notes.remember(kind="fact", content="the staging database is called blue")
    notes.remember(kind="fact", content="the staging database is called green", supersedes=first.id)
    notes.recall("build server Frankfurt")
    notes.recall("staging database", top_k=3)
    notes.forget(id=first.id, requested_by="dpo")  # deletes rows of every projection
    rec.undo()
    explained = plans(dsn, rec.statements)
    assert len(explained) >= 5  # the appends, the rows, the neighbour reads, the recalls
    scans = [found for _, found in explained if found]
    assert scans, "no statement scanned a partition"
    wide = [f"{text[:160]} -> {sorted(t for t, p in found.items() if len(p) > 1)}" for text, found in explained if any(len(p) > 1 for p in found.values())]
    assert wide == [], "\n".join(wide)
    recalls = [found for text, found in explained if " vr AS (" in text]  # the recall statements
    assert len(recalls) == 2 and all(len(found[tables.RECALL_INDEX]) == 1 for found in recalls)
    assert any("INSERT INTO" in text and f'"{tables.EVENTS}"' in text for text, _ in explained), \
        [t[:80] for t, _ in explained]
    deletes = [(text, found) for text, found in explained if f"DELETE FROM \"{tables.RECALL_INDEX}\"" in text]  # noqa: S608 - a constant
    assert deletes and all(len(found[tables.RECALL_INDEX]) == 1 for _, found in deletes), deletes


def test_a_recall_names_the_tenants_partition_and_keeps_a_generic_plan(pfabric: Fabric, dsn: str) -> None:
    """The recall statement names the tenant's partition of the recall index and the link
    graph (``recall_partition``), so PostgreSQL keeps its generic plan as it does on the
    plain layout: over the parents a generic plan is costed over every partition and was
    never chosen (0 generic plans; each recall planned afresh)."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        VectorTypes().ensure(conn)
        cur = conn.cursor()
        remainder = partitions.of_tenant(cur, "t3", tables.RECALL_INDEX)
        assert recall_partition.of_tenant(cur, "t3") == remainder
        assert recall_partition.of_tenant(note_versions.RecordedCursor(cur, datetime.now(UTC)), "t3") is None
        row = cur.execute("SELECT embedding FROM mf_recall_index WHERE tenant_id = 't3' LIMIT 1").fetchone()
        assert row is not None
        for _ in range(12):
            found = recall_index.select_candidates(
                cur, Scope(tenant_id="t3", resource_id="u1"), embedding=np.asarray(row["embedding"].to_numpy()),
                query="runbook wiki", kinds=["fact"], as_of=datetime.now(UTC), limit=10, require_consent=False,
                expand=5, exact=True)
            assert [c.fields["content"] for c in found] == ["tenant t3 keeps its runbook in the wiki"]
        plans = cur.execute("SELECT statement, generic_plans FROM pg_prepared_statements"
                            " WHERE statement LIKE '%% vr AS (%%'").fetchall()
    assert len(plans) == 1 and plans[0]["generic_plans"] >= 1, plans
    assert f'"{tables.RECALL_INDEX}_p{remainder}"' in plans[0]["statement"]
    assert f'"{tables.LINK_GRAPH}_p{remainder}"' in plans[0]["statement"]
    assert f'"{tables.RECALL_INDEX}" ' not in plans[0]["statement"]


def test_the_same_recall_on_a_plain_fabric_scans_the_whole_table(fabric: Fabric, dsn: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: without partitions no partition is scanned at all."""
    fabric.scope("t3", "u1").remember(kind="fact", content="the build server is in Frankfurt")
    rec = Recorder(monkeypatch)
    fabric.scope("t3", "u1").recall("build server Frankfurt")
    rec.undo()
    assert [found for _, found in plans(dsn, rec.statements) if found] == []


# ---------------------------------------------------------------- contract
class TestPartitionedContract(FabricContract):
    """The whole contract suite on a fabric created with ``partitions=4``."""

    @pytest.fixture
    def backend(self, dsn: str) -> Iterator[Backend]:
        opened: list[Fabric] = []

        def open_(**settings: Any) -> Fabric:
            fab = open_fabric(dsn, partitions=4, **settings)
            opened.append(fab)
            return fab

        yield Backend(open=open_, events=lambda: event_count(dsn))
        for fab in opened:
            fab.close()


def test_status_shows_the_topology(dsn: str) -> None:
    from typer.testing import CliRunner  # noqa: PLC0415

    from memfabric.adapters.cli import app as cli  # noqa: PLC0415

    with open_fabric(dsn, partitions=4) as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="the VPN needs a token")
    runner = CliRunner()
    out = runner.invoke(cli.app, ["status", "--json", "--dsn", dsn])
    assert out.exit_code == 0, out.stderr
    topo = json.loads(out.stdout)["topology"]
    assert topo["partitions"] == 4 and topo["replicas"] == [] and "dbname=" in topo["primary"]
    assert "password" not in topo["primary"]
    text = runner.invoke(cli.app, ["status", "--dsn", dsn]).stdout
    assert "partitions: 4 (hash of the tenant)" in text


def test_a_primary_key_of_another_name_is_renamed_on_open(dsn: str) -> None:
    """Upserts name the key ``<table>_pkey``: a key rebuilt by hand under another name
    (as an operator might, e.g. for Citus) is renamed when the fabric next runs its DDL
    phase, which the operator asks for by clearing the schema stamp (issue 24)."""
    with open_fabric(dsn) as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="the VPN needs a token")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {tables.RECALL_INDEX} RENAME CONSTRAINT {tables.RECALL_INDEX}_pkey TO by_hand")
        conn.execute(f"DELETE FROM {tables.SCHEMA_STAMP}")  # docs/write-path.md: after changing the schema by hand
    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1")
        note = notes.remember(kind="fact", content="the VPN token expires monthly")
        assert [h.id for h in notes.recall("VPN token expires").hits][:1] == [note.id]
    assert fetch(dsn, "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
                 (tables.RECALL_INDEX,)) == [(f"{tables.RECALL_INDEX}_pkey",)]
