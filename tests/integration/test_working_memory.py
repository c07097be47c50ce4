"""Working blocks, the working-value projection and the context provider (issue 4),
against real PostgreSQL."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

import psycopg
import pytest
from pydantic import BaseModel, Field, ValidationError

from memfabric.adapters import Fabric, open_fabric
from memfabric.domain.errors import (
    CapacityError,
    ConflictError,
    NoteForgottenError,
    ValidatorRejectedError,
)
from memfabric.domain.note import ERASED
from memfabric.domain.working import block_note_id
from memfabric.projections.working_value import TABLE, WorkingValueProjection
from tests.conftest import event_count, fetch


def blocks(notes: Any) -> dict[str, dict[str, Any]]:
    return notes.working_value()["_fabric"]["blocks"]


# ------------------------------------------------------------------- writing blocks
def test_block_write_replace_and_value_shape(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    first = notes.remember(kind="working", block="persona", content="I am terse.")
    assert first.kind == "working" and first.block == "persona" and first.outcome == "inserted"
    assert first.id == block_note_id(notes.scope, "persona")

    again = notes.remember(kind="working", block="persona", content="I am chatty.")
    assert again.id == first.id and again.outcome == "replaced"
    notes.remember(kind="working", block="task", content="Book a flight")

    value = notes.working_value()
    assert list(value) == ["_fabric"] and list(value["_fabric"]) == ["blocks"]
    assert list(value["_fabric"]["blocks"]) == ["persona", "task"]
    persona = value["_fabric"]["blocks"]["persona"]
    assert set(persona) == {"content", "updated_at", "version"}
    assert persona["content"] == "I am chatty."
    assert persona["version"] == 2
    assert persona["updated_at"] == notes.get(first.id).updated_at
    assert persona["updated_at"].tzinfo is not None
    assert [h.type for h in notes.history(first.id)] == ["Remembered", "BlockWritten"]


def test_label_names_one_note_per_scope(fabric: Fabric) -> None:
    a = fabric.scope("acme", "u1", "t1")
    b = fabric.scope("acme", "u1", "t2")
    na = a.remember(kind="working", block="persona", content="scope A")
    nb = b.remember(kind="working", block="persona", content="scope B")
    assert na.id != nb.id
    assert blocks(a)["persona"]["content"] == "scope A"
    assert blocks(b)["persona"]["content"] == "scope B"
    # another scope's handle cannot forget this block
    assert b.forget(block="other").deleted == 0
    assert fabric.scope("other").forget(block="persona").deleted == 0
    assert blocks(a)["persona"]["content"] == "scope A"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"block": "Persona", "content": "x"}, "block"),
        ({"block": "-persona", "content": "x"}, "block"),
        ({"block": "a" * 65, "content": "x"}, "block"),
        ({"block": "persona", "content": "x", "id": "0123456789ab"}, "id"),
        ({"block": "persona", "content": "x", "tags": ["t"]}, "tags"),
        ({"block": "persona", "content": "x", "valid_from": datetime.now(timezone.utc)}, "valid_from"),
        ({"content": "x"}, "block"),
        ({"block": "persona"}, "content"),
        ({"block": "persona", "content": "   "}, "content"),
    ],
)
def test_bad_block_writes_are_rejected(
    fabric: Fabric, dsn: str, fields: dict[str, Any], field: str
) -> None:
    notes = fabric.scope("acme", "u1")
    before = event_count(dsn)
    with pytest.raises(ValidationError) as err:
        notes.remember(kind="working", **fields)
    assert field in str(err.value)
    assert event_count(dsn) == before


def test_bad_append_and_forget_arguments(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    notes.remember(kind="working", block="persona", content="x")
    before = event_count(dsn)
    for call, field in [
        (lambda: notes.append_block("Bad Label", "x"), "block"),
        (lambda: notes.append_block("persona", ""), "text"),
        (lambda: notes.append_block("persona", " \n "), "text"),
        (lambda: notes.append_block("persona", "x", expected_version=-1), "expected_version"),
        (lambda: notes.forget(block="Bad Label"), "block"),
    ]:
        with pytest.raises(ValidationError) as err:
            call()
        assert field in str(err.value)
    assert event_count(dsn) == before
    assert blocks(notes)["persona"]["content"] == "x"


def test_append_adds_a_newline_only_between_content_and_text(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1")
    created = notes.append_block("log", "first")  # absent block: created, no newline
    assert created.outcome == "inserted" and created.content == "first"
    assert notes.append_block("log", "second").content == "first\nsecond"
    assert notes.append_block("log", "\nthird").content == "first\nsecond\nthird"
    assert notes.append_block("log", " fourth").content == "first\nsecond\nthird\n fourth"
    entry = blocks(notes)["log"]
    assert entry["content"] == "first\nsecond\nthird\n fourth"
    assert entry["version"] == 4
    assert [h.type for h in notes.history(created.id)] == [
        "Remembered", "BlockAppended", "BlockAppended", "BlockAppended",
    ]


# ---------------------------------------------------------------------- the cap
def test_over_cap_write_or_append_leaves_the_block_untouched(dsn: str) -> None:
    with open_fabric(dsn, limits={"max_entry_text_chars": 40}) as fab:
        notes = fab.scope("acme", "u1")
        notes.remember(kind="working", block="notes", content="a" * 30)
        value = notes.working_value()
        before = event_count(dsn)

        with pytest.raises(ValidationError) as err:
            notes.remember(kind="working", block="notes", content="b" * 41)
        assert "content" in str(err.value)
        with pytest.raises(CapacityError) as cap:  # 30 + newline + 10 = 41 > 40
            notes.append_block("notes", "c" * 10)
        assert "text" in str(cap.value) and "max_entry_text_chars" in str(cap.value)
        assert event_count(dsn) == before
        assert notes.working_value() == value
        assert notes.get(block_note_id(notes.scope, "notes")).content == "a" * 30

        # exactly at the cap is allowed
        assert len(notes.append_block("notes", "c" * 9).content or "") == 40


def test_redaction_that_grows_a_block_past_the_cap_raises(dsn: str) -> None:
    with open_fabric(
        dsn, limits={"max_entry_text_chars": 20}, redactor=lambda s: s.replace("@", "[email]")
    ) as fab:
        notes = fab.scope("acme")
        before = event_count(dsn)
        with pytest.raises(CapacityError, match="content"):
            notes.remember(kind="working", block="x", content="a@b.c @ @ @")
        assert event_count(dsn) == before
        assert notes.remember(kind="working", block="x", content="mail a@b").content == "mail a[email]b"


# ----------------------------------------------------------------- concurrency
def test_concurrent_appends_all_land_in_order(dsn: str) -> None:
    per_writer = 15
    with open_fabric(dsn) as fab_a, open_fabric(dsn) as fab_b:
        fab_a.scope("acme", "u1").remember(kind="working", block="log", content="start")
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def writer(fab: Fabric, tag: str) -> None:
            try:
                notes = fab.scope("acme", "u1")
                barrier.wait()
                for i in range(per_writer):
                    notes.append_block("log", f"{tag}{i}")
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(f, t)) for f, t in ((fab_a, "a"), (fab_b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        entry = blocks(fab_a.scope("acme", "u1"))["log"]
    lines = entry["content"].split("\n")
    assert lines[0] == "start" and len(lines) == 1 + 2 * per_writer
    assert [x for x in lines if x.startswith("a")] == [f"a{i}" for i in range(per_writer)]
    assert [x for x in lines if x.startswith("b")] == [f"b{i}" for i in range(per_writer)]
    assert entry["version"] == 1 + 2 * per_writer


def test_expected_version_turns_a_stale_append_into_a_conflict(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    assert notes.append_block("todo", "one", expected_version=0).version == 1
    version = blocks(notes)["todo"]["version"]
    assert notes.append_block("todo", "two", expected_version=version).content == "one\ntwo"
    before = event_count(dsn)
    with pytest.raises(ConflictError, match="expected_version"):
        notes.append_block("todo", "three", expected_version=version)
    assert event_count(dsn) == before
    assert blocks(notes)["todo"]["content"] == "one\ntwo"


def test_concurrent_conditional_appends_one_wins_one_conflicts(dsn: str) -> None:
    with open_fabric(dsn) as fab_a, open_fabric(dsn) as fab_b:
        fab_a.scope("acme").remember(kind="working", block="plan", content="step 0")
        barrier = threading.Barrier(2)
        outcomes: dict[str, str] = {}

        def writer(fab: Fabric, tag: str) -> None:
            barrier.wait()
            try:
                fab.scope("acme").append_block("plan", f"step {tag}", expected_version=1)
                outcomes[tag] = "ok"
            except ConflictError:
                outcomes[tag] = "conflict"

        threads = [threading.Thread(target=writer, args=(f, t)) for f, t in ((fab_a, "a"), (fab_b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes.values()) == ["conflict", "ok"]
        winner = next(tag for tag, outcome in outcomes.items() if outcome == "ok")
        entry = blocks(fab_a.scope("acme"))["plan"]
    assert entry["content"] == f"step 0\nstep {winner}"
    assert entry["version"] == 2


# ------------------------------------------------------------------------ forget
def test_forget_block_clears_it_and_frees_the_label(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    note = notes.remember(kind="working", block="persona", content="secret persona text")
    notes.append_block("persona", "more secret text")

    result = notes.forget(block="persona")
    assert (result.id, result.block, result.deleted, result.held) == (None, "persona", 1, False)
    gone = notes.get(note.id)
    assert gone.forgotten and gone.content is None
    assert gone.forgotten_at is not None and gone.forgotten_at == gone.updated_at
    assert "persona" not in blocks(notes)
    assert fetch(dsn, f"SELECT count(*) FROM {TABLE}") == [(0,)]
    assert notes.history(note.id)[0].fields["content"] == ERASED  # crypto-shredded
    assert notes.forget(block="persona").deleted == 0  # already forgotten

    # the label is free: a new write (or append) starts the block afresh, no newline
    fresh = notes.append_block("persona", "new persona")
    assert fresh.id == note.id and fresh.outcome == "inserted"
    assert fresh.content == "new persona" and not fresh.forgotten and fresh.forgotten_at is None
    entry = blocks(notes)["persona"]
    assert entry["content"] == "new persona" and entry["version"] == 4  # write, append, forget, write
    assert notes.history(note.id)[-1].fields["content"] == "new persona"  # new key, readable


def test_held_block_is_hidden_and_refuses_writes(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    note = notes.remember(kind="working", block="case", content="evidence")
    result = notes.forget(block="case", hold=True)
    assert (result.deleted, result.held) == (0, True)
    assert "case" not in blocks(notes)
    assert notes.context_provider(include_semantic=False)() == []
    assert notes.get(note.id).content == "evidence"  # kept under hold
    before = event_count(dsn)
    with pytest.raises(NoteForgottenError, match="legal hold"):
        notes.remember(kind="working", block="case", content="overwrite")
    with pytest.raises(NoteForgottenError, match="legal hold"):
        notes.append_block("case", "more")
    assert event_count(dsn) == before


def test_working_notes_are_never_recall_hits(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    block = notes.remember(kind="working", block="prefs", content="User prefers metric units")
    fact = notes.remember(kind="fact", content="User prefers metric units in recipes")
    res = notes.recall("User prefers metric units", kinds=("fact", "procedure", "file"))
    assert [h.id for h in res.hits] == [fact.id]
    assert fetch(dsn, "SELECT count(*) FROM mf_recall_index WHERE note_id = %s", (block.id,)) == [(0,)]
    with pytest.raises(ValidationError, match="kinds"):
        notes.recall("metric", kinds=["working"])


# --------------------------------------------------------------------- validator
class Block(BaseModel):
    content: str = Field(max_length=60)
    updated_at: datetime
    version: int


class FabricPart(BaseModel):
    blocks: dict[Literal["persona", "task"], Block]


class WorkingValue(BaseModel):
    fabric: FabricPart = Field(alias="_fabric")


def test_pydantic_validator_rejects_writes_and_appends(dsn: str) -> None:
    with open_fabric(dsn, working_validator=WorkingValue) as fab:
        notes = fab.scope("acme", "u1")
        notes.remember(kind="working", block="persona", content="I am terse.")
        value = notes.working_value()
        before = event_count(dsn)
        with pytest.raises(ValidatorRejectedError, match="'mood'"):
            notes.remember(kind="working", block="mood", content="happy")  # label not allowed
        with pytest.raises(ValidatorRejectedError, match="'persona'"):
            notes.append_block("persona", "x" * 60)  # content would pass 60 characters
        with pytest.raises(ValidatorRejectedError):  # all or nothing: the task write is undone
            notes.remember_many([
                {"kind": "working", "block": "task", "content": "Book a flight"},
                {"kind": "working", "block": "mood", "content": "happy"},
            ])
        assert event_count(dsn) == before
        assert notes.working_value() == value
        notes.append_block("persona", "I answer in English.")
        assert blocks(notes)["persona"]["content"] == "I am terse.\nI answer in English."


def test_callable_validator_sees_every_proposed_value(dsn: str) -> None:
    seen: list[dict[str, Any]] = []

    def validator(value: dict[str, Any]) -> bool:
        seen.append(value)
        return all("password" not in b["content"] for b in value["_fabric"]["blocks"].values())

    with open_fabric(dsn, working_validator=validator) as fab:
        notes = fab.scope("acme")
        notes.remember_many([
            {"kind": "working", "block": "persona", "content": "helpful"},
            {"kind": "working", "block": "task", "content": "plan a trip"},
        ])
        assert set(seen[-1]["_fabric"]["blocks"]) == {"persona", "task"}  # sees the batch so far
        notes.append_block("task", "to Oslo")
        assert seen[-1]["_fabric"]["blocks"]["task"]["content"] == "plan a trip\nto Oslo"
        assert seen[-1]["_fabric"]["blocks"]["persona"]["content"] == "helpful"
        value, before = notes.working_value(), event_count(dsn)
        with pytest.raises(ValidatorRejectedError, match="'task'"):
            notes.append_block("task", "password is hunter2")
        assert notes.working_value() == value and event_count(dsn) == before

    def raising(value: dict[str, Any]) -> None:
        raise ValueError("no blocks today")

    with open_fabric(dsn, working_validator=raising) as fab:
        before = event_count(dsn)
        with pytest.raises(ValidatorRejectedError, match="no blocks today"):
            fab.scope("acme").remember(kind="working", block="x", content="y")
        assert event_count(dsn) == before


# -------------------------------------------------------------- projection replay
def _write_history(fab: Fabric) -> None:
    a = fab.scope("acme", "u1", "t1")
    b = fab.scope("acme", "u2")
    c = fab.scope("globex")
    a.remember(kind="working", block="persona", content="I am terse.")
    a.append_block("persona", "I answer in English.")
    a.remember(kind="fact", content="User prefers metric units")
    a.remember(kind="working", block="task", content="Book a flight")
    a.forget(block="task")
    a.remember(kind="working", block="task", content="Book a hotel")
    a.append_block("task", "\nnear the station")
    a.remember_many([
        {"kind": "working", "block": "scratch", "content": "tmp"},
        {"kind": "fact", "content": "The user lives in Oslo"},
    ])
    a.forget(block="scratch")
    b.append_block("log", "started")
    b.remember(kind="working", block="held", content="keep")
    b.forget(block="held", hold=True)
    c.remember(kind="working", block="persona", content="Globex bot")


def _rows(dsn: str, table: str = TABLE) -> list[tuple[object, ...]]:
    return fetch(dsn, f"SELECT * FROM {table} ORDER BY aggregate_id")  # noqa: S608


def test_replay_from_zero_gives_the_identical_value(dsn: str) -> None:
    scopes = [("acme", "u1", "t1"), ("acme", "u2", None), ("globex", None, None)]
    with open_fabric(dsn) as fab:
        _write_history(fab)
        values = [fab.scope(*s).working_value() for s in scopes]
        rows = _rows(dsn)
    assert set(values[0]["_fabric"]["blocks"]) == {"persona", "task"}
    assert values[0]["_fabric"]["blocks"]["task"]["content"] == "Book a hotel\nnear the station"
    assert set(values[1]["_fabric"]["blocks"]) == {"log"}
    assert len(rows) == 4

    # empty the projection and its tracking, then replay the whole log
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLE}")
        conn.execute("DELETE FROM mf_working_value_tracking")
    assert _rows(dsn) == []
    with open_fabric(dsn, inline_projections=False) as fab:
        positions = fab.catch_up()
        assert positions["working_value"] == fetch(dsn, "SELECT max(notification_id) FROM memfabric_events")[0][0]
        assert [fab.scope(*s).working_value() for s in scopes] == values
    assert _rows(dsn) == rows


def test_bulk_copy_matches_the_live_projection(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        _write_history(fab)
        ids = [r[0] for r in fetch(dsn, "SELECT DISTINCT originator_id FROM memfabric_events")]
        loaded = [fab.log.repository.get(i) for i in ids]
        projection = WorkingValueProjection()
        with fab.store.datastore.transaction(commit=True) as cur:
            projection.create(cur, table_suffix="_copy")
            assert projection.copy(cur, loaded, table_suffix="_copy") == 4
            projection.create_indexes(cur, table_suffix="_copy")
    assert _rows(dsn, TABLE + "_copy") == _rows(dsn)


# -------------------------------------------------------------- context provider
def test_context_provider_orders_working_then_semantic(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    notes.remember(kind="working", block="task", content="Plan the Oslo trip")
    notes.remember(kind="working", block="persona", content="I am terse.")
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    windowed = notes.remember(
        kind="fact", content="The user's passport expires in 2030",
        valid_from=start, valid_to=datetime(2099, 1, 1, tzinfo=timezone.utc),
    )
    plain = notes.remember(kind="fact", content="The user travels with a passport and a backpack")

    out = notes.context_provider()("passport")
    assert [b["type"] for b in out] == ["working-memory"] * 2 + ["semantic-memory"] * 2
    assert all(set(b) == {"type", "text"} for b in out)
    assert out[0]["text"].startswith('Working memory block "persona" (version 1, updated ')
    assert out[0]["text"].endswith("):\nI am terse.")
    assert out[1]["text"].startswith('Working memory block "task"')
    hits = notes.recall("passport").hits
    assert [b["text"].split(" ")[2] for b in out[2:]] == [h.id for h in hits]
    texts = {h.id: b["text"] for h, b in zip(hits, out[2:], strict=True)}
    assert texts[windowed.id] == (
        f"Memory note {windowed.id} (fact, valid from 2025-01-01T00:00:00Z until "
        "2099-01-01T00:00:00Z):\nThe user's passport expires in 2030"
    )
    assert texts[plain.id] == (
        f"Memory note {plain.id} (fact):\nThe user travels with a passport and a backpack"
    )


def test_context_provider_follows_recall_rules(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    now = datetime.now(timezone.utc)
    live = notes.remember(kind="fact", content="The office coffee machine is on floor two")
    expired = notes.remember(
        kind="fact", content="The coffee machine was on floor one",
        valid_from=now - timedelta(days=30), valid_to=now - timedelta(days=1),
    )
    forgotten = notes.remember(kind="fact", content="Coffee beans are kept in the blue tin")
    held = notes.remember(kind="fact", content="Coffee budget dispute with facilities")
    proc = notes.remember(kind="procedure", content="To make coffee: grind, brew, pour")
    doc = notes.remember(kind="file", path="docs/coffee.md", content="Coffee rota for the office")
    notes.forget(id=forgotten.id)
    notes.forget(id=held.id, hold=True)

    def ids(blocks_: list[dict[str, str]]) -> list[str]:
        return [b["text"].split(" ")[2] for b in blocks_ if b["type"] == "semantic-memory"]

    default = ids(notes.context_provider()("coffee"))
    assert set(default) == {live.id, doc.id}
    assert {expired.id, forgotten.id, held.id, proc.id}.isdisjoint(default)
    assert "(file, path docs/coffee.md)" in notes.context_provider()("coffee rota")[0]["text"]
    with_proc = ids(notes.context_provider(kinds=("fact", "procedure", "file"))("coffee"))
    assert proc.id in with_proc and held.id not in with_proc
    # as_of inside the expired window brings it back, as recall does
    past = ids(notes.context_provider(as_of=now - timedelta(days=10))("coffee machine"))
    assert expired.id in past and live.id in past
    # top_k and budget are recall's
    assert ids(notes.context_provider(top_k=1)("coffee")) == [h.id for h in notes.recall("coffee", top_k=1).hits]
    budget = notes.recall("coffee").hits[0].token_count
    assert ids(notes.context_provider(budget=budget)("coffee")) == [
        h.id for h in notes.recall("coffee", budget=budget).hits
    ]
    assert len(ids(notes.context_provider(budget=budget)("coffee"))) == 1


def test_context_provider_query_sources_and_switches(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1")
    notes.remember(kind="working", block="persona", content="I am terse.")
    fact = notes.remember(kind="fact", content="The user's dog is called Rex")
    messages = [
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": [{"type": "text", "text": "And my dog's name?"}]},
    ]
    from_messages = notes.context_provider()(messages)
    assert from_messages[-1]["type"] == "semantic-memory" and fact.id in from_messages[-1]["text"]
    # no query anywhere: working memory only; the provider's own query is the fallback
    assert [b["type"] for b in notes.context_provider()()] == ["working-memory"]
    assert [b["type"] for b in notes.context_provider()([{"role": "assistant", "content": "hi"}])] == [
        "working-memory"
    ]
    fixed = notes.context_provider(query="dog")
    assert fact.id in fixed()[-1]["text"]
    assert [b["type"] for b in notes.context_provider(include_working=False)("dog")] == ["semantic-memory"]
    assert [b["type"] for b in notes.context_provider(include_semantic=False)("dog")] == ["working-memory"]
    # the context never holds a forgotten block
    notes.forget(block="persona")
    assert [b["type"] for b in notes.context_provider()("dog")] == ["semantic-memory"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"top_k": 0}, "top_k"),
        ({"budget": 0}, "budget"),
        ({"kinds": ["working"]}, "kinds"),
        ({"kinds": []}, "kinds"),
        ({"query": "  "}, "query"),
        ({"as_of": datetime(2025, 1, 1)}, "as_of"),  # naive
    ],
)
def test_context_provider_rejects_bad_options(fabric: Fabric, options: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        fabric.scope("acme").context_provider(**options)
    assert field in str(err.value)


def test_context_provider_rejects_a_blank_query_call(fabric: Fabric) -> None:
    provider = fabric.scope("acme").context_provider()
    with pytest.raises(ValidationError, match="query"):
        provider("   ")


def test_demo_shows_a_working_block_and_context(dsn: str) -> None:
    import io

    from rich.console import Console

    from memfabric.adapters.cli.demo import run_demo

    out = io.StringIO()
    summary = run_demo(Console(file=out, width=200), dsn=dsn)
    assert summary["working_block"]
    assert summary["context_types"][:2] == ["working-memory", "working-memory"]
    assert "semantic-memory" in summary["context_types"]
    printed = out.getvalue()
    assert 'Working memory block "task" (version 2' in printed
    assert "Memory note " in printed
