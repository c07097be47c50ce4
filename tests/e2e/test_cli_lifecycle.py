"""Issue 19: note lifecycle on the command line (get, history, forget, hold, list,
erase-scope, lineage by id alone), JSON errors, UTC for naive times, unknown tenants,
and --data-dir against $MEMFABRIC_DSN."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from memfabric.adapters import Fabric
from memfabric.adapters.cli import app as cli
from memfabric.adapters.postgres import embedded
from memfabric.domain.errors import FabricError

runner = CliRunner()


def run(dsn: str, *args: str) -> Any:
    return runner.invoke(cli.app, [*args, "--dsn", dsn])


def ok_json(dsn: str, *args: str) -> Any:
    res = run(dsn, *args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_get_history_hold_forget_by_id_alone(fabric: Fabric, dsn: str) -> None:
    a = fabric.scope("acme", "user-1", "t1").remember(kind="fact", content="User prefers metric units")
    b = fabric.scope("acme", "user-2").remember(kind="fact", content="User likes green tea")
    got = ok_json(dsn, "get", a.id)
    assert got["id"] == a.id and got["content"] == "User prefers metric units" and got["scope"] == "acme/user-1/t1"
    hist = ok_json(dsn, "history", a.id)
    assert [h["type"] for h in hist] == ["Remembered"]
    listed = ok_json(dsn, "list", "--tenant", "acme")["items"]
    assert {(r["id"], r["kind"], r["held"]) for r in listed} == {(a.id, "fact", False), (b.id, "fact", False)}
    assert ok_json(dsn, "hold", b.id) == {"id": b.id, "scope": "acme/user-2/", "deleted": 0, "held": True}
    assert ok_json(dsn, "forget", a.id)["deleted"] == 1
    assert [r["id"] for r in ok_json(dsn, "list", "-t", "acme")["items"]] == [b.id]
    assert [r["held"] for r in ok_json(dsn, "list", "-t", "acme", "-r", "user-2")["items"]] == [True]
    hist = ok_json(dsn, "history", a.id)
    assert [h["type"] for h in hist] == ["Remembered", "Forgotten"]
    assert hist[0]["fields"]["content"] == "<erased>" and "path" not in hist[0]["erased"]
    res = run(dsn, "history", a.id)
    assert res.exit_code == 0 and "Forgotten" in res.stdout
    res = run(dsn, "lineage", b.id)
    assert res.exit_code == 0 and f"lineage of {b.id}" in res.stdout


def test_an_ambiguous_id_lists_its_scopes(fabric: Fabric, dsn: str) -> None:
    fabric.scope("acme", "u1").remember(kind="fact", content="one", id="aaaaaaaaaaaa")
    fabric.scope("globex", "u2").remember(kind="fact", content="two", id="aaaaaaaaaaaa")
    res = run(dsn, "get", "aaaaaaaaaaaa")
    assert res.exit_code == 2
    assert "acme/u1/-" in res.stderr and "globex/u2/-" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert ok_json(dsn, "get", "aaaaaaaaaaaa", "--tenant", "globex")["content"] == "two"
    res = run(dsn, "lineage", "aaaaaaaaaaaa", "--json")
    assert res.exit_code == 2 and json.loads(res.stderr)["type"] == "FabricError"
    assert run(dsn, "lineage", "aaaaaaaaaaaa", "-t", "acme").exit_code == 0


def test_errors_with_json_are_one_object_on_stderr(dsn: str, fabric: Fabric) -> None:
    res = run(dsn, "get", "bbbbbbbbbbbb", "--json")
    assert res.exit_code == 2 and res.stdout == ""
    err = json.loads(res.stderr)
    assert set(err) == {"error", "type"} and err["type"] == "NoteNotFoundError"
    res = run(dsn, "recall", "x", "-t", "acme", "--mode", "bogus", "--json")
    assert res.exit_code == 2 and json.loads(res.stderr)["type"] == "ValidationError"


def test_unknown_tenant_is_an_error(fabric: Fabric, dsn: str) -> None:
    fabric.scope("acme").remember(kind="fact", content="something")
    for args in (("log", "--tenant", "nosuch"), ("list", "--tenant", "nosuch"),
                 ("erase-scope", "--tenant", "nosuch")):
        res = run(dsn, *args)
        assert res.exit_code == 2 and "no tenant 'nosuch'" in res.stderr, args
    assert run(dsn, "log", "--tenant", "acme").exit_code == 0


def test_unknown_tenant_for_recall_and_export(fabric: Fabric, dsn: str, tmp_path: Any) -> None:
    fabric.scope("acme").remember(kind="fact", content="User prefers metric units")
    res = run(dsn, "recall", "metric", "-t", "nosuch", "--json")
    assert res.exit_code == 2 and res.stdout == ""
    assert json.loads(res.stderr) == {"error": "tenant: no tenant 'nosuch' in this database", "type": "FabricError"}
    res = run(dsn, "export", "--out", str(tmp_path / "x.jsonl"), "--tenant", "nosuch")
    assert res.exit_code == 2 and "no tenant 'nosuch'" in res.stderr
    assert not (tmp_path / "x.jsonl").exists()
    res = run(dsn, "recall", "zebra", "-t", "acme")          # a known tenant without a hit: not an error
    assert res.exit_code == 0 and "no matching notes" in res.stdout
    res = run(dsn, "export", "--out", str(tmp_path / "a.jsonl"), "--tenant", "acme")
    assert res.exit_code == 0 and (tmp_path / "a.jsonl").read_text().count("\n") == 1


@pytest.mark.parametrize(("args", "kind", "words"), [
    (("recall", "--json"), "MissingParameter", "QUERY"),
    (("recall", "x", "-t", "acme", "--top-k", "many", "--json"), "BadParameter", "--top-k"),
    (("nosuch", "--json"), "UsageError", "nosuch"),
    (("get", "--json", "--bogus"), "NoSuchOption", "--bogus"),
    (("reembed", "--json"), "MissingParameter", "--embedder"),
])
def test_usage_errors_are_one_line_on_stderr(args: tuple[str, ...], kind: str, words: str) -> None:
    res = runner.invoke(cli.app, list(args))
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    err = json.loads(lines[0])
    assert err["type"] == kind and words in err["error"], err
    plain = runner.invoke(cli.app, [a for a in args if a != "--json"])  # one line too (finding 2026-12-03)
    assert plain.exit_code == 2 and plain.stdout == ""
    assert plain.stderr.startswith("error: ") and words in plain.stderr and "--help'" in plain.stderr, plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1 and "╭" not in plain.stderr


def test_naive_times_mean_utc(fabric: Fabric, dsn: str) -> None:
    fabric.scope("acme").remember(kind="fact", content="User prefers metric units")
    for when in ("2026-01-01", "2026-01-01T12:00", "2099-01-01T00:00:00+02:00", "2099-01-01T00:00:00Z"):
        res = run(dsn, "recall", "metric", "-t", "acme", "--as-of", when, "--json")
        assert res.exit_code == 0, (when, res.stderr)
    assert cli.parse_time("2026-01-01").isoformat() == "2026-01-01T00:00:00+00:00"  # type: ignore[union-attr]
    res = run(dsn, "recall", "metric", "-t", "acme", "--as-of", "yesterday")
    assert res.exit_code == 2 and "as_of" in res.stderr


def test_erase_scope_counts(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    for text in ("alpha one", "beta two", "gamma three"):
        notes.remember(kind="fact", content=text)
    fabric.scope("acme", "u2").remember(kind="fact", content="kept")
    out = ok_json(dsn, "erase-scope", "-t", "acme", "-r", "u1")
    assert (out["deleted"], out["remaining"]) == (3, 0)
    assert [r["scope"] for r in ok_json(dsn, "list", "-t", "acme")["items"]] == ["acme/u2/"]


def test_explicit_data_dir_wins_over_env_dsn_and_dsn_with_data_dir_is_an_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    class Fake:
        def __init__(self, data_dir: Any) -> None:
            self.data_dir, self.dsn = data_dir, "postgresql:///embedded"

    monkeypatch.setattr(embedded, "EmbeddedPostgres", Fake)
    monkeypatch.setenv("MEMFABRIC_DSN", "postgresql:///from-env")
    dsn, server = embedded.resolve_dsn(None, tmp_path / "pg")
    assert dsn == "postgresql:///embedded" and server is not None
    assert embedded.resolve_dsn(None, None) == ("postgresql:///from-env", None)
    assert embedded.resolve_dsn("postgresql:///given", None) == ("postgresql:///given", None)
    with pytest.raises(FabricError, match="give one of them"):
        embedded.resolve_dsn("postgresql:///given", tmp_path / "pg")
    res = runner.invoke(cli.app, ["list", "-t", "acme", "--dsn", "postgresql:///x", "--data-dir", str(tmp_path)])
    assert res.exit_code == 2 and "give one of them" in res.stderr


@pytest.mark.parametrize("command", [
    ("recall", "metric", "-t", "acme"),
    ("list", "-t", "acme"),
    ("log", "--since", "0"),
])
def test_read_commands_never_create_a_database_in_a_mistyped_data_dir(command: tuple[str, ...], tmp_path: Any) -> None:
    typo = tmp_path / "no" / "such" / "pg"
    res = runner.invoke(cli.app, [*command, "--data-dir", str(typo), "--json"])
    assert res.exit_code == 2 and res.stdout == ""
    err = json.loads(res.stderr.strip())
    assert err["type"] == "FabricError" and str(typo) in err["error"] and "no database" in err["error"]
    assert not (tmp_path / "no").exists()


def test_sweep_dry_run_then_sweep_json_and_table(dsn: str) -> None:
    from datetime import datetime, timedelta, timezone  # noqa: PLC0415
    from memfabric.adapters import open_fabric  # noqa: PLC0415
    with open_fabric(dsn, retention={"ephemeral": "1h"}) as fabric:
        notes = fabric.scope("acme", "u1")
        gone = notes.remember(kind="fact", content="a note that will not last", retention="ephemeral")
        notes.remember(kind="fact", content="a note that stays")
    now = (datetime.now(timezone.utc) + timedelta(days=1)).isoformat()
    dry = ok_json(dsn, "sweep", "--dry-run", "--now", now)
    assert dry["dry_run"] and dry["counts"]["ephemeral"]["forgotten"] == 1 and dry["changed"] == 0
    assert not ok_json(dsn, "get", gone.id)["forgotten"]
    out = ok_json(dsn, "sweep", "--now", now)
    assert out["totals"] == {"expired": 0, "forgotten": 1, "skipped_held": 0, "skipped_floor": 0, "decayed": 0}
    assert out["complete"] and out["changed"] == 1 and ok_json(dsn, "get", gone.id)["forgotten"]
    table = run(dsn, "sweep", "--now", now)
    assert table.exit_code == 0 and "ephemeral" in table.stdout and "0 notes changed" in table.stdout
    bad = run(dsn, "sweep", "--now", "2026-01-01T00:00:00")
    assert bad.exit_code == 2 and "time zone" in bad.stderr
    log = run(dsn, "log", "--json")  # the sweep's progress events decode like any other
    assert log.exit_code == 0, log.stderr
    assert "Sweep.BatchSwept" in log.stdout and "Note.Forgotten" in log.stdout
    audit = run(dsn, "audit", "verify")
    assert audit.exit_code == 0, audit.stdout + audit.stderr
