"""Issue 19: SIGTERM and SIGINT stop ``memfabric projections run`` and the embedded
server it started, cleanly (a real subprocess on a fresh embedded data directory)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest


def _postgres_of(data_dir: Path) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "postgres" in (proc.info["name"] or "") and str(data_dir) in cmd:
            out.append(proc)
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_the_runner_and_its_embedded_server(sig: signal.Signals) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="memfabric-test-signal-"))
    os.chmod(tmp, 0o755)
    data = tmp / "pg"
    env = {k: v for k, v in os.environ.items() if k != "MEMFABRIC_DSN"} | {"PYTHONUNBUFFERED": "1"}
    exe = Path(sys.executable).with_name("memfabric")
    proc = subprocess.Popen([str(exe), "projections", "run", "--poll", "0.2", "--data-dir", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the runner has caught up once
        assert line.startswith("caught up"), (line, proc.stderr.read() if proc.poll() is not None else "")
        assert _postgres_of(data), "the embedded server should be running"
        time.sleep(0.3)
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
        assert rc == 0, proc.stderr.read() if proc.stderr else rc
        deadline = time.monotonic() + 20
        while _postgres_of(data) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _postgres_of(data), "a postgres process of the data dir remains"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in _postgres_of(data):  # only the server of this test's own data dir
            p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
