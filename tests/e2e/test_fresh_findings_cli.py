"""Findings of a fresh user's session (2026-12-01), on the command line; each test
failed before its fix.

2. ``memfabric console --host 0.0.0.0 --token " "`` started, and ``/?token=%20`` then
   let anyone in: a token of spaces (or with a control character) is no token.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from memfabric.adapters import cli

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
