"""Issue 32: ``memfabric entities list | get | resolve | merge | undo-merge``."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from memfabric.adapters import Fabric
from memfabric.adapters.cli import app as cli

runner = CliRunner()
SCOPE = ("--tenant", "acme", "--resource", "u1", "--thread", "t1")


def ok_json(dsn: str, *args: str) -> Any:
    res = runner.invoke(cli.app, [*args, *SCOPE, "--dsn", dsn, "--json"])
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_entities_commands(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    a = notes.entities.upsert("Maria Lopez", type="person", identifiers=[("email", "maria@acme.example")]).entity
    b = notes.entities.upsert("M. Lopez", type="person").entity
    fact = notes.remember(kind="fact", content="M. Lopez lives in Faro")
    assert {e["id"] for e in ok_json(dsn, "entities", "list")} == {a.id, b.id}
    assert ok_json(dsn, "entities", "get", a.id)["identifiers"] == [["email", "maria@acme.example"]]
    assert ok_json(dsn, "entities", "resolve", "MARIA@acme.example")[0]["tier"] == "identifier"
    merged = ok_json(dsn, "entities", "merge", a.id, b.id, "--reason", "same person")
    assert (merged["winner"], merged["loser"], merged["repointed"]) == (a.id, b.id, 1)
    assert [e["id"] for e in ok_json(dsn, "entities", "list")] == [a.id]
    assert notes.history(fact.id)[-1].cause == f"merge:{merged['merge_id']}"
    undone = ok_json(dsn, "entities", "undo-merge", b.id)
    assert undone["undone"] is True and undone["repointed"] == 1
    res = runner.invoke(cli.app, ["entities", "get", "0123456789ab", *SCOPE, "--dsn", dsn])
    assert res.exit_code == 2 and res.stderr.startswith("error:") and len(res.stderr.strip().splitlines()) == 1
    res = runner.invoke(cli.app, ["entities", "list", *SCOPE, "--dsn", dsn])
    assert res.exit_code == 0 and "Maria Lopez" in res.stdout


def test_an_unknown_tenant_is_exit_2(fabric: Fabric, dsn: str) -> None:
    """A fresh user's finding (2026-12-03): ``entities list/resolve --tenant nosuch``
    exited 0 with an empty answer, where ``recall`` and ``sweep`` answer an unknown
    ``--tenant`` with exit 2 (docs/api.md). A known tenant with no entity still lists
    nothing with exit 0, and one with entities but no note is known."""
    fabric.scope("acme", "u1", "t1").remember(kind="fact", content="Acme ships on Fridays")
    fabric.scope("ents-only", "u1", "t1").entities.upsert("Lena Park", type="person")
    for args in (["entities", "list"], ["entities", "resolve", "Maria"]):
        res = runner.invoke(cli.app, [*args, "--tenant", "nosuch", "--dsn", dsn])
        assert res.exit_code == 2 and "nosuch" in res.stderr, (args, res.stdout, res.stderr)
        known = runner.invoke(cli.app, [*args, *SCOPE, "--dsn", dsn, "--json"])
        assert known.exit_code == 0 and json.loads(known.stdout) == [], (args, known.stderr)
    only = runner.invoke(cli.app, ["entities", "resolve", "Maria", "--tenant", "ents-only", "--resource", "u1",
                                   "--thread", "t1", "--dsn", dsn, "--json"])
    assert only.exit_code == 0 and json.loads(only.stdout) == [], only.stderr


def test_a_malformed_entity_id_is_one_error_line(fabric: Fabric, dsn: str) -> None:
    """A fresh user's finding (2026-12-03): ``entities get zzz`` reported two errors (a
    winner and a loser) on two lines, and ``list --after zzz`` was accepted."""
    fabric.scope("acme", "u1", "t1").entities.upsert("Maria Lopez", type="person")
    for args, field in ((["get", "zzz"], "entity"), (["undo-merge", "zzz"], "loser"),
                        (["list", "--after", "zzz"], "after")):
        res = runner.invoke(cli.app, ["entities", *args, *SCOPE, "--dsn", dsn])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and lines == [f"error: {field}: must be 12 lowercase hex digits"], (args, lines)
