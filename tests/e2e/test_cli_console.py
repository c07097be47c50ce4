"""Issue 35: ``memfabric console`` as a command: it serves the console over a real
database until stopped, read-only when asked, and refuses a non-loopback address
without a token."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from memfabric.adapters import open_fabric
from memfabric.adapters.cli import app as cli

pytest.importorskip("starlette")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_console_refuses_a_public_address_without_a_token(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMFABRIC_CONSOLE_TOKEN", raising=False)
    res = CliRunner().invoke(cli.app, ["console", "--host", "0.0.0.0", "--dsn", dsn])  # noqa: S104
    assert res.exit_code == 2
    assert res.stderr.strip() == "error: token: listening on 0.0.0.0 needs --token or $MEMFABRIC_CONSOLE_TOKEN"


@pytest.mark.parametrize("flags", [["--read-only"], []], ids=["read-only", "default"])
def test_console_command_serves_pages_until_stopped(dsn: str, flags: list[str]) -> None:
    """Read-only by default (issue 35), as with --read-only."""
    with open_fabric(dsn) as fabric:
        fabric.scope("acme", "u1", "t1").remember(kind="fact", content="User prefers metric units")
    port = free_port()
    proc = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "memfabric.adapters.cli.app", "console", "--dsn", dsn, "--port", str(port),
         *flags], stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/?tenant=acme&resource=u1&thread=t1", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
        assert page.status_code == 200 and "User prefers metric units" in page.text
        assert 'id="mode">read-only' in page.text.replace('class="mode ro" ', "")
        assert httpx.get(f"http://127.0.0.1:{port}/projections").status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    assert "memfabric console on http://127.0.0.1:" in (proc.stderr.read() if proc.stderr else "")
