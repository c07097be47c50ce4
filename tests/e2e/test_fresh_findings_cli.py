"""Findings of a fresh user's session (2026-12-01), on the command line; each test
failed before its fix.

2. ``memfabric console --host 0.0.0.0 --token " "`` started, and ``/?token=%20`` then
   let anyone in: a token of spaces (or with a control character) is no token.
5. ``memfabric status`` on the embedded default said ``(the --dsn server)`` and its JSON
   ``"embedded": null``: admin commands start the embedded server themselves and open
   the fabric on its DSN, so the fabric did not know it.
6. ``memfabric sweep --tenant nosuch`` exited 0 ("0 notes changed"); docs/api.md (the README
   until issue 34) says an unknown ``--tenant`` is exit 2, as ``recall`` and ``erase-scope`` answer.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memfabric.adapters.cli import app as cli
from memfabric.adapters.postgres.embedded import EmbeddedPostgres

pytest.importorskip("starlette")


@pytest.mark.parametrize("token", [" ", "\t", "two words", "tab\there", "nl\n"], ids=repr)
def test_console_refuses_a_token_of_spaces_or_control_characters(
        dsn: str, token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMFABRIC_CONSOLE_TOKEN", raising=False)
    res = CliRunner().invoke(cli.app, ["console", "--host", "0.0.0.0", "--token", token, "--dsn", dsn])  # noqa: S104
    assert res.exit_code == 2
    assert res.stderr.strip() == "error: token: must be printable characters without spaces"


def test_console_refuses_a_blank_token_from_the_environment(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMFABRIC_CONSOLE_TOKEN", "   ")
    res = CliRunner().invoke(cli.app, ["console", "--host", "0.0.0.0", "--dsn", dsn])  # noqa: S104
    assert res.exit_code == 2
    assert res.stderr.strip() == "error: token: must be printable characters without spaces"


def test_status_names_the_embedded_server_it_reads() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="memfabric-test-status-"))
    os.chmod(tmp, 0o755)
    pg = EmbeddedPostgres(tmp / "pg")
    try:
        runner = CliRunner()
        made = runner.invoke(cli.app, ["remember", "User lives in Porto", "-t", "acme", "--data-dir", str(pg.pgdata)])
        assert made.exit_code == 0, made.stderr
        out = runner.invoke(cli.app, ["status", "--json", "--data-dir", str(pg.pgdata)])
        assert out.exit_code == 0, out.stderr
        assert json.loads(out.stdout)["database"]["embedded"] == str(pg.pgdata)
        text = runner.invoke(cli.app, ["status", "--data-dir", str(pg.pgdata)])
        assert f"(embedded server in {pg.pgdata})" in text.stdout and "--dsn" not in text.stdout
    finally:
        pg.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("flags", [["--dry-run"], []], ids=["dry-run", "sweep"])
def test_sweep_of_an_unknown_tenant_is_exit_2(dsn: str, flags: list[str]) -> None:
    from memfabric.adapters import open_fabric  # noqa: PLC0415
    with open_fabric(dsn) as fabric:
        fabric.scope("acme", "u1").remember(kind="fact", content="a note that stays")
    res = CliRunner().invoke(cli.app, ["sweep", *flags, "--tenant", "acmee", "--dsn", dsn])
    assert res.exit_code == 2
    assert res.stderr.strip() == "error: tenant: no tenant 'acmee' in this database"
    ok = CliRunner().invoke(cli.app, ["sweep", *flags, "--tenant", "acme", "--dsn", dsn])
    assert ok.exit_code == 0, ok.stderr
