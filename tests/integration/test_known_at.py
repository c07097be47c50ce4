"""Issue 31: ``known_at`` (transaction time) on recall, get, list, count and the context
provider, alone and with ``as_of``, on both backends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters import open_fabric
from memfabric.adapters.memory import open_memory_fabric
from memfabric.domain.errors import NoteNotFoundError
from memfabric.domain.note import ERASED


@pytest.fixture(params=["postgres", "memory"])
def fab(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        yield open_memory_fabric()
        return
    dsn = request.getfixturevalue("dsn")
    with open_fabric(dsn) as fabric:
        yield fabric


def _tick() -> datetime:
    """An instant strictly between the events written before and after it."""
    time.sleep(0.002)
    now = datetime.now(timezone.utc)
    time.sleep(0.002)
    return now


def _ids(result: Any) -> list[str]:
    return [h.id for h in result.hits]


def test_recall_known_at_sees_what_was_recorded_then(fab: Any) -> None:
    notes = fab.scope("acme", "u1", "t1")
    before = _tick()
    old = notes.remember(kind="fact", content="the deploy window is friday", subject="deploy window")
    t1 = _tick()
    new = notes.remember(kind="fact", content="the deploy window is monday", subject="deploy window")
    assert new.outcome == "superseding"
    t2 = _tick()
    assert _ids(notes.recall("deploy window")) == [new.id]
    assert _ids(notes.recall("deploy window", known_at=t1)) == [old.id]
    assert _ids(notes.recall("deploy window", known_at=t2)) == [new.id]
    assert _ids(notes.recall("deploy window", known_at=before)) == []
    # valid time and transaction time combine: recorded by t2, true at t1+ -> the old note
    assert _ids(notes.recall("deploy window", known_at=t2, as_of=t1)) == [old.id]
    # what was recorded at t1 about t1: the old note, not yet superseded
    hit = notes.recall("deploy window", known_at=t1).hits[0]
    assert hit.superseded_by is None and hit.valid_to is None


def test_a_note_forgotten_after_t_is_recorded_at_t_with_its_content_erased(fab: Any) -> None:
    notes = fab.scope("acme", "u1", "t1")
    secret = notes.remember(kind="fact", content="the vault code is 4711")
    t1 = _tick()
    assert _ids(notes.recall("vault code", known_at=t1)) == [secret.id]
    notes.forget(id=secret.id)
    for at in (t1, _tick()):
        assert _ids(notes.recall("vault code", known_at=at)) == []
    seen = notes.get(secret.id, known_at=t1)
    assert seen.content == ERASED and not seen.forgotten
    assert "4711" not in repr(seen)
    with pytest.raises(NoteNotFoundError):
        notes.get(secret.id, known_at=t1 - timedelta(seconds=5))


def test_get_list_and_count_known_at(fab: Any) -> None:
    notes = fab.scope("acme", "u1", "t1")
    a = notes.remember(kind="fact", content="the cache is redis")
    t1 = _tick()
    notes.remember(kind="fact", content="the cache is redis", tags=["infra"])  # a fold: tags grow
    notes.remember(kind="fact", content="the queue is kafka")
    t2 = _tick()
    assert list(notes.get(a.id, known_at=t1).tags) == [] and list(notes.get(a.id).tags) == ["infra"]
    assert [n.id for n in notes.list(known_at=t1).items] == [a.id]
    assert notes.count(known_at=t1) == 1 and notes.count(known_at=t2) == 2
    assert [n.id for n in notes.list(tags=["infra"], known_at=t1).items] == []
    assert [n.id for n in notes.list(tags=["infra"], known_at=t2).items] == [a.id]


def test_links_and_holds_as_recorded(fab: Any) -> None:
    notes = fab.scope("acme", "u1", "t1")
    a = notes.remember(kind="fact", content="the api gateway is envoy")
    b = notes.remember(kind="fact", content="rate limits live in redis")
    t0 = _tick()
    notes.link(a.id, b.id, "related", 0.9)
    t1 = _tick()
    assert notes.recall("api gateway envoy", known_at=t0).hits[0].links == ()
    assert [lk.id for lk in notes.recall("api gateway envoy", known_at=t1).hits[0].links] == [b.id]
    notes.forget(id=b.id, hold=True)
    t2 = _tick()
    # a note under legal hold now is kept only sealed: absent whatever T, links to it too
    for at in (t1, t2, None):
        assert b.id not in _ids(notes.recall("rate limits redis", known_at=at))
    assert notes.recall("api gateway envoy", known_at=t1).hits[0].links == ()
    notes.release_hold(b.id)
    assert b.id in _ids(notes.recall("rate limits redis", known_at=t1))  # released: its history is back
    assert b.id not in _ids(notes.recall("rate limits redis", known_at=t2))  # it was held at t2
    assert b.id in _ids(notes.recall("rate limits redis"))


def test_context_provider_known_at(fab: Any) -> None:
    notes = fab.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="the office is in berlin", subject="office city")
    t1 = _tick()
    notes.remember(kind="fact", content="the office is in paris", subject="office city")
    then = notes.context_provider(include_working=False, known_at=t1)("office city")
    now = notes.context_provider(include_working=False)("office city")
    assert "berlin" in then[0]["text"] and "paris" in now[0]["text"]


def _blocks(value: dict[str, Any]) -> dict[str, tuple[str, int]]:
    return {label: (e["content"], e["version"]) for label, e in value["_fabric"]["blocks"].items()}


def test_working_blocks_known_at(fab: Any) -> None:
    """The working value (and the context provider's working blocks) as recorded at T:
    writes and appends after T are not seen, a block written after T is absent, one
    forgotten or held now is absent at every T (its content erased, or kept sealed)."""
    notes = fab.scope("acme", "u1", "t1")
    before = _tick()
    notes.remember(kind="working", block="persona", content="terse")
    held = notes.remember(kind="working", block="secret", content="kept sealed")
    t1 = _tick()
    notes.append_block("persona", " and polite")
    notes.remember(kind="working", block="plan", content="ship it")
    t2 = _tick()
    notes.forget(block="plan")
    notes.forget(id=held.id, hold=True)
    notes.remember(kind="working", block="todo", content="write docs")
    fab.scope("acme", "u1", "t2").remember(kind="working", block="persona", content="another thread")
    t3 = _tick()
    assert _blocks(notes.working_value(known_at=before)) == {}
    assert _blocks(notes.working_value(known_at=t1)) == {"persona": ("terse", 1)}
    assert _blocks(notes.working_value(known_at=t2)) == {"persona": ("terse\n and polite", 2)}  # plan: forgotten since
    assert notes.working_value(known_at=t3) == notes.working_value()  # now: the projection's value
    assert set(_blocks(notes.working_value(known_at=t3))) == {"persona", "todo"}
    then = notes.context_provider(include_semantic=False, known_at=t1)()
    assert [b["text"].split("\n", 1)[1] for b in then] == ["terse"]
    with pytest.raises(ValidationError, match="known_at"):
        notes.working_value(known_at=datetime(2026, 1, 1))


def test_episodes_known_at(fab: Any) -> None:
    """Ledger observations (recall of kind ``episode``) as recorded at T: one observed
    after T is not recalled at T, even with an ``as_of`` after it."""
    notes = fab.scope("acme", "u1", "t1")
    ledger = notes.conversation()
    entry = ledger.append("user", "we sail from the harbour at dawn")
    first = ledger.observe("harbour departure at dawn", source_entry_ids=[entry.id])
    t1 = _tick()
    second = ledger.observe("harbour fees are due monthly", source_entry_ids=[entry.id])
    t2 = _tick()

    def ids(**kw: Any) -> set[str]:
        return set(_ids(notes.recall("harbour", kinds=["episode"], **kw)))
    assert ids() == {first, second}
    assert ids(known_at=t1) == {first}
    assert ids(known_at=t1, as_of=t2) == {first}  # valid time later than T: still only what T knew
    assert ids(known_at=t2) == {first, second}


def test_bad_known_at_is_a_validation_error(fab: Any) -> None:
    notes = fab.scope("acme", "u1", "t1")
    for bad in (datetime(2026, 1, 1), "yesterday"):  # naive, not an instant
        with pytest.raises(ValidationError, match="known_at"):
            notes.recall("x", known_at=bad)
        with pytest.raises(ValidationError, match="known_at"):
            notes.list(known_at=bad)
        with pytest.raises(ValidationError, match="known_at"):
            notes.get("0123456789ab", known_at=bad)


def test_cli_recall_and_get_known_at(dsn: str) -> None:
    import json

    from typer.testing import CliRunner

    from memfabric.adapters.cli import app as cli

    runner = CliRunner()
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        old = notes.remember(kind="fact", content="the build server is jenkins", subject="build server")
        t1 = _tick()
        new = notes.remember(kind="fact", content="the build server is buildkite", subject="build server")
    args = ["-t", "acme", "--resource", "u1", "--thread", "t1", "--dsn", dsn, "--json"]
    then = runner.invoke(cli.app, ["recall", "build server", "--known-at", t1.isoformat(), *args])
    now = runner.invoke(cli.app, ["recall", "build server", *args])
    assert then.exit_code == 0 and now.exit_code == 0, then.output
    assert [h["id"] for h in json.loads(then.stdout)["hits"]] == [old.id]
    assert [h["id"] for h in json.loads(now.stdout)["hits"]] == [new.id]
    got = runner.invoke(cli.app, ["get", old.id, "--known-at", t1.isoformat(), *args])
    assert got.exit_code == 0 and json.loads(got.stdout)["superseded_by"] is None
    assert json.loads(runner.invoke(cli.app, ["get", old.id, *args]).stdout)["superseded_by"] == new.id
    bad = runner.invoke(cli.app, ["recall", "x", "--known-at", "someday", *args])
    assert bad.exit_code == 2 and "known_at" in bad.stderr


def test_recall_tool_known_at(fab: Any) -> None:
    from tests.integration.test_tools_fabric import Session

    notes = fab.scope("acme", "u1", "t1")
    old = notes.remember(kind="fact", content="the standup is at nine", subject="standup time")
    t1 = _tick()
    notes.remember(kind="fact", content="the standup is at ten", subject="standup time")
    tools, session = notes.tools(), Session()
    with notes.attach(session):
        res = tools.call("memory.recall", {"query": "standup time", "known_at": t1.isoformat()}, session=session)
        assert [h["id"] for h in res["hits"]] == [old.id]
        with pytest.raises(ValidationError):
            tools.call("memory.recall", {"query": "x", "known_at": "last tuesday"}, session=session)


def test_history_and_lineage_carry_both_times(fab: Any) -> None:
    notes = fab.scope("acme", "u1", "t1")
    v1 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    old = notes.remember(kind="fact", content="the region is eu-west", subject="region", valid_from=v1)
    new = notes.remember(kind="fact", content="the region is us-east", subject="region")
    entries = notes.history(old.id)
    assert [e.type for e in entries] == ["Remembered", "Superseded"]
    assert entries[0].recorded_at == entries[0].timestamp < entries[1].timestamp  # transaction time
    assert entries[0].valid_from == v1 and entries[0].valid_to is None  # valid time after each event
    assert entries[1].valid_from == v1 and entries[1].valid_to is not None
    chain = notes.lineage(new.id).chain
    assert [r["id"] for r in chain] == [old.id, new.id]
    assert chain[0]["recorded_at"] == entries[1].timestamp and chain[0]["version"] == 2
    assert chain[0]["valid_to"] == entries[1].valid_to and chain[0]["ingested_at"] == entries[0].timestamp


def test_cli_log_until(dsn: str) -> None:
    import json

    from typer.testing import CliRunner

    from memfabric.adapters.cli import app as cli

    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="the printer is on floor two")
        t1 = _tick()
        notes.remember(kind="fact", content="the printer is on floor three")
    runner = CliRunner()
    every = runner.invoke(cli.app, ["log", "--dsn", dsn, "--json"])
    until = runner.invoke(cli.app, ["log", "--dsn", dsn, "--json", "--until", t1.isoformat()])
    assert every.exit_code == 0 and until.exit_code == 0, until.output
    rows = [json.loads(line) for line in every.stdout.splitlines()]
    kept = [json.loads(line) for line in until.stdout.splitlines()]
    assert len(kept) == 1 < len(rows) and kept[0] == rows[0]
    assert runner.invoke(cli.app, ["log", "--dsn", dsn, "--until", "soon"]).exit_code == 2


def test_the_demo_shows_a_known_at_recall_next_to_as_of(dsn: str) -> None:
    import io

    from rich.console import Console

    from memfabric.adapters.cli.demo import run_demo

    out = io.StringIO()
    summary = run_demo(Console(file=out, width=200), dsn=dsn)
    assert summary["known_at_returns_first"] and summary["as_of_returns_first"]
    assert "known_at " in out.getvalue() and "transaction time" in out.getvalue()


def test_a_principal_known_at_through_the_graph_equals_the_exact_scan(dsn: str) -> None:
    """A tenant past ``exact_search_max`` reads its current versions through the live
    HNSW index; with a principal's access filter (patterns and a grant) the answer at T
    is the one the exact scan of the versions gives."""
    with open_fabric(dsn) as fab:
        fab.principals.define("bot", {"read_kinds": ["fact"], "recall_scope": ["acme/u1/*"]})
        mine, other = fab.scope("acme", "u1", "t1"), fab.scope("acme", "u2", "t1")
        tenant = {"visibility": "tenant"}
        ids = [n.id for n in mine.remember_many(
            [{"kind": "fact", "content": f"widget{i % 20} note {i}", "consent": tenant} for i in range(120)],
            consolidate=False)]
        theirs = [n.id for n in other.remember_many(
            [{"kind": "fact", "content": f"widget{i % 20} other {i}", "consent": tenant} for i in range(120)],
            consolidate=False)]
        other.grant(theirs[3], "bot")
        t1 = _tick()
        mine.remember_many([{"kind": "fact", "content": f"widget{i % 20} newer {i}", "supersedes": sid,
                             "consent": tenant} for i, sid in enumerate(ids[:30])], consolidate=False)
        fab.store.tail.run_once(["acme"])
        bot = mine.as_principal("bot")
        for at in (t1, _tick()):
            for query in ("widget3", "widget7 other", "widget12 newer"):
                fab.store.exact_search_max = 20_000
                exact = _ids(bot.recall(query, known_at=at))
                fab.store.exact_search_max = 0
                graph = _ids(bot.recall(query, known_at=at))
                assert graph == exact and graph, (at, query)
                assert not set(graph) & (set(theirs) - {theirs[3]})  # only the granted note of u2
        assert theirs[3] in _ids(bot.recall("widget3", known_at=t1))
