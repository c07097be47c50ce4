"""Regression tests of issue 17's defects (each named after its defect number)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.cli import app as cli
from memfabric.domain.errors import EventIntegrityError
from memfabric.domain.note import note_uuid
from memfabric.domain.inputs import is_block_id
from memfabric.domain.working import block_note_id, legacy_block_note_id
from tests.conftest import event_count

LOW = datetime(1, 1, 1, 5, tzinfo=timezone(timedelta(hours=14)))
HIGH = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-12)))


# ------------------------------------------------------------------- defect 1
@pytest.mark.parametrize("field", ["valid_from", "t_ref", "valid_to"])
@pytest.mark.parametrize("value", [LOW, HIGH])
def test_defect_1_poison_timestamps_are_rejected(fabric: Fabric, dsn: str, field: str, value: datetime) -> None:
    notes = fabric.scope("acme")
    notes.remember(kind="fact", content="the sky is blue")
    before = event_count(dsn)
    with pytest.raises(ValidationError, match=field):
        notes.remember(kind="fact", content="poison", **{field: value})
    with pytest.raises(ValidationError, match=field):
        notes.remember_many([{"kind": "fact", "content": "poison", field: value}])
    assert event_count(dsn) == before
    with pytest.raises(ValidationError, match="as_of"):
        notes.recall("sky", as_of=value)
    with pytest.raises(ValidationError, match="as_of"):
        notes.context_provider(query="sky", as_of=value)
    assert [h.content for h in notes.recall("sky").hits] == ["the sky is blue"]


def test_defect_1_recall_survives_a_row_at_the_edge(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme")
    bad = notes.remember(kind="fact", content="the sky is blue at noon")
    good = notes.remember(kind="fact", content="the sky is grey at dusk")
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        n = conn.execute(
            "UPDATE mf_recall_index SET valid = tstzrange(%s::timestamptz, %s::timestamptz, '[)'),"
            " t_ref = %s::timestamptz WHERE note_id = %s",
            ("0001-01-01 05:00:00+14", "9999-12-31 23:00:00-12", "0001-01-01 05:00:00+14", bad.id),
        ).rowcount
        assert n == 1
    res = notes.recall("sky", top_k=5)
    assert {h.id for h in res.hits} == {bad.id, good.id}
    row = next(e for e in res.explain if e.id == bad.id)
    assert row.valid == (None, None)


# ------------------------------------------------------------------- defect 6
def test_defect_6_top_k_1000_on_hnsw(fabric: Fabric) -> None:
    fabric.store.exact_search_max = 0
    notes = fabric.scope("acme")
    notes.remember_many([{"kind": "fact", "content": f"fact number {i} about item{i}"} for i in range(1100)])
    res = notes.recall("fact number", top_k=1000, mode="vector")
    assert len(res.hits) == 1000
    res = notes.recall("fact number", top_k=300)
    assert len(res.hits) == 300


# ------------------------------------------------------------------- defect 8
def test_defect_8_block_operations_never_reach_a_fact(fabric: Fabric) -> None:
    """A fact at a block label's pre-issue-27 id (the only id a fact could take) never
    becomes the block, and the label stays usable (issue 27 leftover)."""
    notes = fabric.scope("acme")
    scope = notes.scope
    fid = legacy_block_note_id(scope, "notes")
    fact = notes.remember(kind="fact", id=fid, content="a fact")
    assert fact.id == fid and fact.kind == "fact"
    block = notes.append_block("notes", "line 1")
    assert block.id == block_note_id(scope, "notes") != fid and block.kind == "working"
    assert notes.remember(kind="working", block="notes", content="replace").outcome == "replaced"
    assert notes.forget(block="notes").deleted == 1
    got = notes.get(fid)
    assert got.kind == "fact" and got.content == "a fact" and not got.forgotten


def test_block_ids_cannot_be_taken_by_an_explicit_id(fabric: Fabric, dsn: str) -> None:
    """Issue 27 leftover: a fact written with a block's derived id is refused (nothing
    written), before or after the block exists; generated ids never have that form."""
    notes = fabric.scope("acme")
    scope = notes.scope
    before = event_count(dsn)
    for label in ("todo", "notes"):
        with pytest.raises(ValidationError, match="reserved for working-memory block ids"):
            notes.remember(kind="fact", id=block_note_id(scope, label), content="a fact")
    assert event_count(dsn) == before
    assert notes.append_block("todo", "buy milk").id == block_note_id(scope, "todo")
    with pytest.raises(ValidationError, match="reserved"):
        notes.remember(kind="fact", id=block_note_id(scope, "todo"), content="a fact")
    assert notes.working_value()["_fabric"]["blocks"]["todo"]["content"] == "buy milk"
    assert all(is_block_id(block_note_id(scope, f"label-{i}")) for i in range(100))
    assert not any(is_block_id(notes.remember(kind="fact", content=f"fact {i}").id) for i in range(20))


# ------------------------------------------------------------------- defect 9
def test_defect_9_missing_key_is_an_integrity_error(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme")
    scope = notes.scope
    fact = notes.remember(kind="fact", content="a secret fact")
    notes.remember(kind="working", block="notes", content="line 1")
    gone = notes.remember(kind="fact", content="forget me please")
    notes.forget(id=gone.id)
    with psycopg.connect(dsn) as conn:
        for nid in (fact.id, block_note_id(scope, "notes")):
            conn.execute("DELETE FROM mf_note_keys WHERE originator_id = %s", (note_uuid(scope, nid),))
    fabric.log.keys._cache.clear()
    before = event_count(dsn)
    with pytest.raises(EventIntegrityError, match="key"):
        notes.get(fact.id)
    with pytest.raises(EventIntegrityError, match="key"):
        notes.append_block("notes", "line 2")
    assert event_count(dsn) == before
    # issue 17 defect 3: a key fault never blocks erasure: forget tombstones it blind
    assert notes.forget(id=fact.id).deleted == 1
    assert event_count(dsn) == before + 1
    forgotten = notes.get(gone.id)  # shredded on purpose: reads erased, no error
    assert forgotten.forgotten


# ------------------------------------------------------------------ defect 10
def test_defect_10_tiny_importance_writes_nothing(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme")
    before = event_count(dsn)
    with pytest.raises(ValidationError, match="importance"):
        notes.remember(kind="fact", content="x", importance=1e-320)
    nested: object = "p"
    for _ in range(1000):
        nested = [nested]
    with pytest.raises(ValidationError):
        notes.remember(kind="fact", content="x", consent={"purposes": nested})
    assert event_count(dsn) == before


def test_defect_10_cli_database_errors_are_one_line(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    res = runner.invoke(cli.app, ["recall", "q", "-t", "acme", "--dsn", "postgresql://nobody@127.0.0.1:9/nodb"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines

    from eventsourcing.persistence import DataError, OperationalError

    for exc in (DataError("year -1 is out of range"), OperationalError("server closed the connection"),
                psycopg.errors.DataError("underflow")):
        def boom(*_a: object, _exc: Exception = exc, **_k: object) -> None:
            raise _exc
        monkeypatch.setattr(cli, "_open", boom)
        res = runner.invoke(cli.app, ["remember", "x", "-t", "acme", "--dsn", dsn])
        assert res.exit_code == 2, (exc, res.output)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), lines


def _server_log(dsn: str) -> Path | None:
    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
    except psycopg.Error:
        return None
    path = Path(str(row[0])) / "log" if row else None
    return path if path is not None and path.is_file() else None


def test_defect_10_reopen_logs_no_server_error(dsn: str) -> None:
    with open_fabric(dsn):
        pass
    log = _server_log(dsn)
    if log is None:
        pytest.skip("the server log is not readable here")
    size = log.stat().st_size
    with open_fabric(dsn):
        pass
    with open_fabric(dsn):
        pass
    new = log.read_bytes()[size:].decode(errors="replace")
    assert "stored_event_uuid" not in new, new
    assert " ERROR: " not in new, new


def test_defect_5_a_long_query_uses_only_its_longest_terms(fabric: Fabric) -> None:
    """An 8,000-character message used as the query costs about what a 32-term query
    costs: the lexical list keeps the MAX_QUERY_TERMS longest distinct lexemes
    (``scripts/bench_long_query.py`` measures the cost: seconds before, tens of ms after)."""
    from memfabric.projections.recall_index import MAX_QUERY_TERMS

    notes = fabric.scope("acme", "u1", "t1")
    short_word = notes.remember(kind="fact", content="zebu grazing")
    long_word = notes.remember(kind="fact", content="Quarterly reconciliationprocedure")
    filler = [f"extraordinarily{i:03d}" for i in range(MAX_QUERY_TERMS)]
    query = " ".join(["zebu", "reconciliationprocedure", *filler])
    hits = notes.recall(query, mode="lexical", min_relevance=0, top_k=5)
    lexical = {e.id: e.lexical for e in hits.explain}
    assert lexical.get(long_word.id, 0) > 0          # a long term is kept
    assert short_word.id not in lexical or not lexical[short_word.id]  # "zebu" was dropped
    assert notes.recall("zebu", mode="lexical").hits[0].id == short_word.id  # short queries unaffected


def _edit_state(dsn: str, notification_id: int, old: bytes, new: bytes) -> None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state FROM memfabric_events WHERE notification_id = %s",
                           (notification_id,)).fetchone()
        assert row is not None and old in bytes(row[0])
        conn.execute("UPDATE memfabric_events SET state = %s WHERE notification_id = %s",
                     (bytes(row[0]).replace(old, new), notification_id))


def test_defect_4_edited_metadata_is_refused_by_rebuild_and_reads(dsn: str) -> None:
    """The plain metadata (scope, consent, tags, ...) is authenticated: widening a
    thread-private note's visibility, or moving it to another tenant, in SQL makes its
    event fail authentication; a rebuild stops there, naming the event, and the note
    never becomes visible elsewhere."""
    from memfabric.domain.errors import ProjectionError
    from memfabric.projections.rebuild import ProjectionAdmin

    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1", "t1")
        secret = notes.remember(kind="fact", content="The launch code word is bluebird",
                                consent={"visibility": "thread"})
        _edit_state(dsn, 1, b'"visibility":"thread"', b'"visibility":"tenant"')
        with pytest.raises(ProjectionError) as stop:
            ProjectionAdmin.for_fabric(fab).rebuild("recall_index")
        assert stop.value.notification_id == 1 and "authentication" in stop.value.cause
        with pytest.raises(EventIntegrityError, match="failed authentication"):
            notes.get(secret.id)
        other = fab.scope("acme", "u2", "t9").recall("launch code word", min_relevance=0)
        assert secret.id not in {h.id for h in other.hits}


def test_defect_4_moved_tenant_and_stripped_tag_are_refused(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1", "t1")
        a = notes.remember(kind="fact", content="Invoices go out on Mondays")
        b = notes.remember(kind="fact", content="The office closes at six")
        _edit_state(dsn, 1, b'"tenant_id":"acme"', b'"tenant_id":"acmf"')
        with pytest.raises(EventIntegrityError, match="failed authentication"):
            notes.get(a.id)
        # rewriting an event in the untagged 0.1 format is refused in a fabric that tags all
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT state FROM memfabric_events WHERE notification_id = 2").fetchone()
            assert row is not None and bytes(row[0]).startswith(b"MF2")
            legacy = b"MF1" + bytes(row[0])[3:-32]
            conn.execute("UPDATE memfabric_events SET state = %s WHERE notification_id = 2", (legacy,))
        with pytest.raises(EventIntegrityError, match="no authentication tag"):
            notes.get(b.id)


def test_defect_4_an_edit_before_the_first_checkpoint_is_never_checkpointed(dsn: str) -> None:
    """``audit verify`` checks every not-yet-checkpointed event's tag before it writes a
    checkpoint: a row edited before the first checkpoint is reported, not sealed in."""
    from memfabric.adapters.audit import verify_chain

    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1", "t1")
        for text in ("Invoices go out on Mondays", "The office closes at six", "Deploys freeze on Fridays"):
            notes.remember(kind="fact", content=text)
        _edit_state(dsn, 2, b'"tenant_id":"acme"', b'"tenant_id":"acmf"')
        report = verify_chain(fab)
        assert not report.ok and report.unauthenticated == [2] and report.written == 0
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM mf_audit_chain").fetchone()
        assert row is not None and row[0] == 0
