"""Issue 33: the access log — one record per governed call, ids sealed, the query's
keyed hash (its text only on opt-in), nothing without principals; the CLI."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from typer.testing import CliRunner

from memfabric.adapters import open_fabric
from memfabric.adapters.cli import app as cli
from memfabric.domain.errors import AccessDenied, NoteNotFoundError

PROFILE = {"read_kinds": ["fact"], "recall_scope": ["acme/u1/*"]}


def test_every_call_is_recorded_once_with_its_outcome(fab: Any) -> None:
    start = datetime.now(timezone.utc)
    notes = fab.scope("acme", "u1", "t1")
    note = notes.remember(kind="fact", content="User prefers metric units")
    fab.principals.define("bot", PROFILE)
    bot = notes.as_principal("bot")
    assert [h.id for h in bot.recall("metric units").hits] == [note.id]
    with pytest.raises(AccessDenied):
        bot.recall("metric units", kinds=["file"])
    with pytest.raises(NoteNotFoundError):
        bot.get("0123456789ab")
    bot.get(note.id)
    log = fab.access_log(principal="bot", since=start, with_ids=True)
    assert [(r.operation, r.outcome, r.served, r.rule) for r in log] == [
        ("recall", "served", 1, None), ("recall", "denied", 0, "read_kinds"),
        ("get", "error", 0, None), ("get", "served", 1, None)]
    assert log[0].ids == (note.id,) and log[0].kinds == ("fact",)
    assert (log[0].tenant_id, log[0].resource_id, log[0].thread_id) == ("acme", "u1", "t1")
    assert log[0].query_hash == fab.store.content_hmac("metric units") and log[0].query_text is None
    assert log[0].retention == "operational"
    assert fab.access_log(principal="bot", since=datetime.now(timezone.utc) + timedelta(seconds=1)) == []
    assert [r.outcome for r in fab.access_log(principal="bot", outcome="denied")] == ["denied"]
    assert fab.access_log(principal="bot")[0].ids == ()  # sealed unless asked for


def test_the_query_text_is_kept_only_when_the_host_opts_in(fab: Any) -> None:
    fab.principals.define("bot", PROFILE)
    bot = fab.scope("acme", "u1").as_principal("bot")
    bot.recall("first question")
    fab.principals.log_query_text = True
    bot.recall("second question")
    assert [r.query_text for r in fab.access_log(principal="bot")] == [None, "second question"]


def test_without_principals_nothing_is_logged(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1")
        notes.remember(kind="fact", content="User prefers metric units")
        notes.recall("metric")
        assert fab.access_log() == []
        with fab.store.connection() as conn:
            assert conn.execute("SELECT to_regclass('mf_access_log') AS t").fetchone()["t"] is None


def test_ids_are_sealed_at_rest(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        note = fab.scope("acme", "u1").remember(kind="fact", content="User prefers metric units")
        fab.principals.define("bot", PROFILE)
        fab.scope("acme", "u1").as_principal("bot").recall("metric")
        fab.principals.log.flush()
        with fab.store.connection() as conn:
            row = conn.execute("SELECT * FROM mf_access_log").fetchone()
        assert row["served"] == 1 and note.id.encode() not in bytes(row["ids_sealed"])
        assert "metric" not in json.dumps({k: str(v) for k, v in row.items()})


def test_the_cli_prints_the_log(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="User prefers metric units")
        fab.principals.define("bot", PROFILE)
        bot = fab.scope("acme", "u1").as_principal("bot")
        bot.recall("metric")
        with pytest.raises(AccessDenied):
            fab.scope("acme", "u2").as_principal("bot").recall("metric")
    out = CliRunner().invoke(cli.app, ["access-log", "--principal", "bot", "--since", "2000-01-01",
                                       "--dsn", dsn, "--json"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert [(r["outcome"], r["rule"], r["scope"], r["served"]) for r in rows] == [
        ("served", None, "acme/u1/", 1), ("denied", "recall_scope", "acme/u2/", 0)]
    bad = CliRunner().invoke(cli.app, ["access-log", "--since", "yesterday", "--dsn", dsn])
    assert bad.exit_code == 2


def test_the_demo_shows_one_served_and_one_denied_recall(dsn: str) -> None:
    import io

    from rich.console import Console

    from memfabric.adapters.cli.demo import run_demo
    out = io.StringIO()
    summary = run_demo(Console(file=out, width=140), dsn=dsn)["access"]
    assert summary == {"served": 1, "denied_rule": "recall_scope", "log": ["served", "denied"]}
    text = out.getvalue()
    assert "16. governed access" in text and "denied by rule recall_scope" in text
    assert "4242" not in text.split("16. governed access")[1]  # the other user's note never shown
