"""Issue 19: a real read-only auditor role (SELECT + TEMPORARY only) runs every read-only
command and writes nothing; ``log`` and ``export`` survive a tampered row, mark it and
exit 1 naming its notification id."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from typer.testing import CliRunner

from memfabric.adapters import FabricError, ReadOnlyError, open_fabric
from memfabric.adapters.cli.app import app
from memfabric.adapters.postgres.roles import auditor_grants, roles_sql

runner = CliRunner()
PASSWORD = "auditor-pw-27"  # the embedded server asks every role but its owner for a password


def run(dsn: str, *args: str) -> object:
    return runner.invoke(app, [*args, "--dsn", dsn])


def make_auditor(pg_server: str, dsn: str, *, checkpoints: bool = False) -> tuple[str, str]:
    name = "mf_aud_" + uuid.uuid4().hex[:8]
    db = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(make_conninfo(pg_server, dbname=db), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {name}")
        for stmt in auditor_grants(role=name, checkpoints=checkpoints):
            conn.execute(stmt)
    return name, make_conninfo(dsn, user=name, password=PASSWORD)


def drop_role(pg_server: str, dsn: str, name: str) -> None:
    db = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(make_conninfo(pg_server, dbname=db), autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


def snapshot(dsn: str) -> dict[str, object]:
    """Row count and an md5 of the content of every table (tracking positions, chain and
    keys included): what any write changes."""
    with psycopg.connect(dsn) as conn:
        names = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1").fetchall()]
        return {n: conn.execute(f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), ''))"  # noqa: S608
                                f" FROM {n} t").fetchone() for n in names}


@pytest.fixture
def filled(dsn: str) -> Iterator[dict[str, str]]:
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        first = notes.remember(kind="fact", content="User lives in Lisbon", subject="home")
        second = notes.remember(kind="fact", content="User lives in Porto", subject="home")
        for i in range(8):
            notes.remember(kind="fact", content=f"User fact number {i} about cycling")
        gone = notes.remember(kind="fact", content="User secret to forget")
        notes.forget(id=gone.id)
    yield {"first": first.id, "second": second.id}


def test_auditor_role_runs_every_read_command_and_writes_nothing(
        pg_server: str, dsn: str, filled: dict[str, str], tmp_path: Path) -> None:
    assert run(dsn, "audit", "checkpoint", "--every", "5").exit_code == 0  # type: ignore[attr-defined]
    name, auditor = make_auditor(pg_server, dsn)
    try:
        before = snapshot(dsn)
        nid = filled["second"]
        commands = [
            ("audit", "verify"), ("audit", "verify", "--json"), ("log",), ("log", "--json", "--tenant", "acme"),
            ("export", "--out", str(tmp_path / "x.jsonl")), ("projections", "status"),
            ("projections", "verify"), ("lineage", nid), ("get", nid), ("history", nid),
            ("list", "--tenant", "acme"), ("status",), ("status", "--json"),
            ("recall", "Porto", "--tenant", "acme", "--resource", "u1", "--thread", "t1"),
        ]
        for args in commands:
            res = run(auditor, *args)
            assert res.exit_code == 0, (args, res.output)  # type: ignore[attr-defined]
            assert "Traceback" not in res.output  # type: ignore[attr-defined]
        verify = json.loads(run(auditor, "audit", "verify", "--json").stdout.splitlines()[-1])  # type: ignore[attr-defined]
        assert verify["ok"] and verify["written"] == 0 and "read-only" in verify["not_checkpointed"]
        assert "OK" in run(auditor, "projections", "verify").output  # type: ignore[attr-defined]
        assert len((tmp_path / "x.jsonl").read_text().splitlines()) == before["memfabric_events"][0]  # type: ignore[index]
        # writes are refused with one error line, no traceback
        for args in (("remember", "x", "--tenant", "acme"), ("forget", nid), ("audit", "checkpoint"),
                     ("projections", "rebuild")):
            res = run(auditor, *args)
            assert res.exit_code == 2, (args, res.output)  # type: ignore[attr-defined]
            assert "Traceback" not in res.output and res.output.count("error:") == 1, res.output  # type: ignore[attr-defined]
        with open_fabric(auditor, read_only=True) as fabric:
            notes = fabric.scope("acme", "u1", "t1")
            assert notes.get(nid).content == "User lives in Porto"
            assert notes.recall("Porto").hits
            with pytest.raises(ReadOnlyError):
                notes.remember(kind="fact", content="nope")
            with pytest.raises(ReadOnlyError):
                fabric.erase_scope("acme")
        assert snapshot(dsn) == before
    finally:
        drop_role(pg_server, dsn, name)


def test_auditor_with_the_checkpoint_grant_checkpoints(pg_server: str, dsn: str, filled: dict[str, str]) -> None:
    assert run(dsn, "audit", "checkpoint", "--every", "5").exit_code == 0  # type: ignore[attr-defined]
    with open_fabric(dsn) as fabric:
        fabric.scope("acme", "u1", "t1").remember(kind="fact", content="User owns a bicycle")
    name, auditor = make_auditor(pg_server, dsn, checkpoints=True)
    try:
        out = json.loads(run(auditor, "audit", "verify", "--json").stdout.splitlines()[-1])  # type: ignore[attr-defined]
        assert out["ok"] and out["written"] == 1 and out["not_checkpointed"] is None
    finally:
        drop_role(pg_server, dsn, name)


def test_read_only_env_forces_a_read_only_open(dsn: str, filled: dict[str, str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    before = snapshot(dsn)
    monkeypatch.setenv("MEMFABRIC_READ_ONLY", "1")
    out = json.loads(run(dsn, "audit", "verify", "--json").stdout.splitlines()[-1])  # type: ignore[attr-defined]
    assert out["ok"] and out["written"] == 0 and out["not_checkpointed"]
    assert run(dsn, "projections", "verify").exit_code == 0  # type: ignore[attr-defined]
    assert snapshot(dsn) == before


def test_read_only_open_of_an_empty_database_is_one_error(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FabricError, match="no memfabric log"):
        open_fabric(dsn, read_only=True)
    monkeypatch.setenv("MEMFABRIC_READ_ONLY", "1")
    res = run(dsn, "log")
    assert res.exit_code == 2 and res.output.startswith("error: no memfabric log")  # type: ignore[attr-defined]
    with psycopg.connect(dsn) as conn:  # nothing was created
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


def test_roles_sql_is_printed() -> None:
    res = runner.invoke(app, ["roles", "sql", "--database", "prod"])
    assert res.exit_code == 0 and res.stdout == roles_sql("prod")
    assert 'GRANT SELECT ON ALL TABLES IN SCHEMA "public" TO "memfabric_auditor";' in res.stdout


def _flip_sealed_byte(dsn: str, position: int) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE memfabric_events SET state = set_byte(state, octet_length(state) - 1,"
                     " get_byte(state, octet_length(state) - 1) # 1) WHERE notification_id = %s", (position,))


def _edit_clear_tenant(dsn: str, position: int) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE memfabric_events SET state = decode(replace(encode(state, 'hex'), encode('acme', 'hex'),"
            " encode('acmf', 'hex')), 'hex') WHERE notification_id = %s", (position,))


@pytest.fixture
def two_hundred(dsn: str) -> int:
    with open_fabric(dsn, consolidate=False) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        for i in range(200):
            notes.remember(kind="fact", content=f"note {i}: the user mentioned topic {i * 7919 % 1000}")
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT count(*) FROM memfabric_events").fetchone()[0])  # type: ignore[index]


def test_log_and_export_survive_a_tampered_sealed_row(dsn: str, two_hundred: int, tmp_path: Path) -> None:
    with psycopg.connect(dsn) as conn:
        bad = int(conn.execute("SELECT notification_id FROM memfabric_events ORDER BY notification_id"
                               " OFFSET 100 LIMIT 1").fetchone()[0])  # type: ignore[index]
    _flip_sealed_byte(dsn, bad)
    res = run(dsn, "log", "--json")
    assert res.exit_code == 1, res.output  # type: ignore[attr-defined]
    rows = [json.loads(line) for line in res.stdout.splitlines()]  # type: ignore[attr-defined]
    assert len(rows) == two_hundred
    failed = [r for r in rows if r["integrity"] == "failed"]
    assert [r["position"] for r in failed] == [bad] and "stored bytes were changed" in failed[0]["problem"]
    assert f"notification {bad}" in res.stderr and res.stderr.count("error") == 1  # type: ignore[attr-defined]
    assert all(r["metadata"] == "unauthenticated" for r in rows)  # no checkpoint yet
    text = run(dsn, "log")
    assert text.exit_code == 1 and f"{bad} " in text.stdout and "INTEGRITY FAILED" in text.stdout  # type: ignore[attr-defined]
    assert len(text.stdout.splitlines()) == two_hundred  # type: ignore[attr-defined]

    out = tmp_path / "log.jsonl"
    exp = run(dsn, "export", "--out", str(out))
    assert exp.exit_code == 1 and f"notification {bad}" in exp.stderr  # type: ignore[attr-defined]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == two_hundred and [r["position"] for r in lines if r["integrity"] == "failed"] == [bad]


def test_log_catches_an_edited_clear_tenant_through_the_checkpoint(dsn: str, two_hundred: int) -> None:
    assert run(dsn, "audit", "checkpoint").exit_code == 0  # type: ignore[attr-defined]
    rows = [json.loads(line) for line in run(dsn, "log", "--json").stdout.splitlines()]  # type: ignore[attr-defined]
    assert {r["metadata"] for r in rows} == {"checkpointed"} and {r["integrity"] for r in rows} == {"ok"}
    with psycopg.connect(dsn) as conn:
        bad = int(conn.execute("SELECT notification_id FROM memfabric_events ORDER BY notification_id"
                               " OFFSET 57 LIMIT 1").fetchone()[0])  # type: ignore[index]
    _edit_clear_tenant(dsn, bad)
    res = run(dsn, "log", "--json")
    assert res.exit_code == 1, res.output  # type: ignore[attr-defined]
    rows = [json.loads(line) for line in res.stdout.splitlines()]  # type: ignore[attr-defined]
    assert len(rows) == two_hundred
    failed = [r for r in rows if r["integrity"] == "failed"]
    assert [r["position"] for r in failed] == [bad] and "audit checkpoint" in failed[0]["problem"]
    assert f"notification {bad}" in res.stderr  # type: ignore[attr-defined]


# ---------------------------------------------------------------- issue 27
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")


class Roles:
    """The three groups of ``roles_sql`` (unique names: roles are cluster-wide) with a
    password login in each, created as docs/roles.md says after the first open."""

    def __init__(self, pg_server: str, dsn: str) -> None:
        sfx = uuid.uuid4().hex[:6]
        self.pg_server, self.dsn, self.db = pg_server, dsn, conninfo_to_dict(dsn)["dbname"]
        self.groups = {"admin": f"mfo_{sfx}", "writer": f"mfw_{sfx}", "auditor": f"mfa_{sfx}"}
        self.logins = {k: f"{k}_{sfx}" for k in self.groups}
        script = roles_sql(str(self.db), owner=self.groups["admin"], writer=self.groups["writer"],
                           auditor=self.groups["auditor"])
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(script)  # type: ignore[call-overload]
            for kind, login in self.logins.items():
                conn.execute(f"CREATE ROLE {login} LOGIN PASSWORD '{PASSWORD}' IN ROLE {self.groups[kind]}")

    def dsn_of(self, kind: str) -> str:
        return make_conninfo(self.dsn, user=self.logins[kind], password=PASSWORD)

    def privileges(self, kind: str) -> dict[str, set[str]]:
        """table -> the privileges login ``kind`` has on it (every table of the schema)."""
        with psycopg.connect(self.dsn) as conn:
            names = [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename NOT LIKE '%\\_bg'").fetchall()]
            return {n: {p for p in PRIVILEGES if conn.execute(
                "SELECT has_table_privilege(%s, %s, %s)", (self.logins[kind], f"public.{n}", p)).fetchone()[0]}  # type: ignore[index]
                for n in names}

    def drop(self) -> None:
        everyone = [*self.logins.values(), *self.groups.values()]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for name in everyone:
                conn.execute(f"REASSIGN OWNED BY {name} TO postgres")
                conn.execute(f"DROP OWNED BY {name}")
        with psycopg.connect(self.pg_server, autocommit=True) as conn:
            for name in everyone:
                conn.execute(f"DROP ROLE IF EXISTS {name}")


@pytest.mark.parametrize("admin_as", ["superuser", "admin_login"])
def test_every_role_keeps_its_privileges_across_every_admin_command(
        pg_server: str, dsn: str, filled: dict[str, str], admin_as: str, tmp_path: Path) -> None:
    """Issue 27 item 1: roles created first (after the first open), then every admin
    command; afterwards each login has exactly its privileges on every table that
    existed, the auditor reads the tables created since (the audit chain), and the
    auditor's and the writer's commands still work."""
    roles = Roles(pg_server, dsn)
    try:
        admin = dsn if admin_as == "superuser" else roles.dsn_of("admin")
        before = {kind: roles.privileges(kind) for kind in roles.logins}
        assert before["auditor"]["mf_note_scope"] == {"SELECT"} and before["auditor"]["mf_fabric_secret"] == set()
        assert before["writer"]["mf_note_scope"] == set(PRIVILEGES)
        commands = [("audit", "checkpoint", "--every", "5"), ("projections", "rebuild", "--blue-green"),
                    ("reembed", "--embedder", "hash:64"), ("projections", "rebuild"),
                    ("projections", "rebuild", "--blue-green", "-p", "note_scope"),
                    ("erase-scope", "--tenant", "acme", "--resource", "u9"), ("hold", filled["first"])]
        for args in commands:
            res = run(admin, *args)
            assert res.exit_code == 0, (args, res.output)  # type: ignore[attr-defined]
            after = {kind: roles.privileges(kind) for kind in roles.logins}
            for kind in roles.logins:
                assert {t: after[kind][t] for t in before[kind]} == before[kind], (args, kind)
            assert after["auditor"]["mf_audit_chain"] == {"SELECT"}, args  # created by the checkpoint
            for read in (("audit", "verify"), ("list", "--tenant", "acme"), ("get", filled["second"]),
                         ("projections", "verify"), ("log", "--tenant", "acme")):
                res = run(roles.dsn_of("auditor"), *read)
                assert res.exit_code == 0, (args, read, res.output)  # type: ignore[attr-defined]
        with open_fabric(roles.dsn_of("writer")) as fabric:
            notes = fabric.scope("acme", "u1", "t1")
            notes.remember(kind="fact", content="User rides to work on Tuesdays")
            assert notes.recall("Tuesdays").hits
        res = run(roles.dsn_of("auditor"), "recall", "Tuesdays", "--tenant", "acme", "--resource", "u1",
                  "--thread", "t1")
        assert res.exit_code == 0 and "Tuesdays" in res.output, res.output  # type: ignore[attr-defined]
    finally:
        roles.drop()


def test_a_plain_open_as_the_auditor_reads_with_one_line_and_writes_are_typed_errors(
        pg_server: str, dsn: str, filled: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """Issue 27 item 3: ``open_fabric(dsn)`` as a SELECT-only role falls back to
    read-only with one warning line (no eventsourcing ProgrammingError); writes raise
    ReadOnlyError naming the missing privilege; CLI write commands print one line that
    names it (no raw "permission denied ... CREATE TABLE"); CLI recall works."""
    name, auditor = make_auditor(pg_server, dsn)
    try:
        before = snapshot(dsn)
        with caplog.at_level("WARNING", logger="memfabric.adapters.bootstrap"), open_fabric(auditor) as fabric:
            assert fabric.read_only and fabric.read_only_reason and "INSERT" in fabric.read_only_reason
            notes = fabric.scope("acme", "u1", "t1")
            assert notes.get(filled["second"]).content == "User lives in Porto"
            with pytest.raises(ReadOnlyError, match="may not INSERT into memfabric_events"):
                notes.remember(kind="fact", content="nope")
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and lines[0].startswith("memfabric: opened read-only: role"), lines
        for args in (("remember", "x", "--tenant", "acme"), ("forget", filled["second"]),
                     ("projections", "rebuild"), ("reembed", "--embedder", "hash:64"),
                     ("erase-scope", "--tenant", "acme"), ("projections", "run", "--once")):
            res = run(auditor, *args)
            assert res.exit_code == 2, (args, res.output)  # type: ignore[attr-defined]
            out = res.output  # type: ignore[attr-defined]
            assert out.count("error:") == 1 and "may not INSERT into memfabric_events" in out, (args, out)
            assert "permission denied" not in out and "Traceback" not in out, (args, out)
        res = run(auditor, "recall", "Porto", "--tenant", "acme", "--resource", "u1", "--thread", "t1", "--json")
        assert res.exit_code == 0 and json.loads(res.stdout)["hits"], res.output  # type: ignore[attr-defined]
        assert snapshot(dsn) == before
    finally:
        drop_role(pg_server, dsn, name)


def test_read_only_env_lets_cli_recall_open_read_only(dsn: str, filled: dict[str, str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27 item 3: ``MEMFABRIC_READ_ONLY=1`` applies to ``recall`` too (it opened for writing)."""
    before = snapshot(dsn)
    monkeypatch.setenv("MEMFABRIC_READ_ONLY", "1")
    res = run(dsn, "recall", "Porto", "--tenant", "acme", "--resource", "u1", "--thread", "t1", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["hits"], res.output  # type: ignore[attr-defined]
    res = run(dsn, "remember", "x", "--tenant", "acme")
    assert res.exit_code == 2 and "read-only" in res.output, res.output  # type: ignore[attr-defined]
    assert snapshot(dsn) == before
