"""Issue 27 items 4, 6 and 7: the CLI does what docs/api.md says (the README until issue 34), run as a subprocess
(``release``, ``--json`` on every command, ``list`` paging, the ``recall --tenant``
hint, ``status``, the runner's lines, ``ProjectionAdmin`` importable)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


from memfabric.adapters import Fabric

EXE = str(Path(sys.executable).with_name("memfabric"))
ENV = {k: v for k, v in os.environ.items() if k not in ("MEMFABRIC_DSN", "MEMFABRIC_READ_ONLY")}


def cli(dsn: str, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([EXE, *args, "--dsn", dsn], capture_output=True, text=True, env=ENV, timeout=180)
    assert res.returncode == code, (args, res.stdout, res.stderr)
    return res


def out_json(dsn: str, *args: str) -> Any:
    return json.loads(cli(dsn, *args, "--json").stdout)


def test_release_lifts_a_legal_hold_from_the_command_line(fabric: Fabric, dsn: str) -> None:
    note = fabric.scope("acme", "u1").remember(kind="fact", content="User keeps bees on the roof")
    assert out_json(dsn, "hold", note.id)["held"] is True
    assert out_json(dsn, "recall", "bees", "-t", "acme", "-r", "u1")["hits"] == []
    assert out_json(dsn, "release", note.id) == {"id": note.id, "scope": "acme/u1/", "outcome": "released"}
    assert [h["id"] for h in out_json(dsn, "recall", "bees", "-t", "acme", "-r", "u1")["hits"]] == [note.id]
    again = cli(dsn, "release", note.id, code=2)
    assert again.stderr.count("error:") == 1 and "not under legal hold" in again.stderr


def test_every_command_the_readme_names_takes_json(fabric: Fabric, dsn: str, tmp_path: Path) -> None:
    fabric.scope("acme", "u1").remember(kind="fact", content="User drinks oolong tea")
    rebuilt = out_json(dsn, "projections", "rebuild", "--blue-green")
    assert rebuilt["blue_green"] is True and rebuilt["events"] >= 1 and "recall_index" in rebuilt["projections"]
    exported = out_json(dsn, "export", "--out", str(tmp_path / "log.jsonl"))
    assert exported["events"] == len((tmp_path / "log.jsonl").read_text().splitlines()) and exported["failed"] == []
    ran = [json.loads(line) for line in cli(dsn, "projections", "run", "--once", "--json").stdout.splitlines()]
    assert ran[0]["event"] == "caught_up" and ran[0]["positions"]
    roles = json.loads(subprocess.run([EXE, "roles", "sql", "--json"], capture_output=True, text=True, env=ENV,
                                      timeout=60, check=True).stdout)  # connects to nothing: no --dsn
    assert roles["database"] == "memfabric" and "CREATE ROLE" in roles["sql"]
    demo = out_json(dsn, "demo")
    assert isinstance(demo, dict) and demo
    bad = subprocess.run([EXE, "mcp", "-t", "no such tenant", "--json", "--dsn", dsn], capture_output=True,
                         text=True, env=ENV, timeout=120)
    assert bad.returncode == 2 and json.loads(bad.stderr)["type"] == "ValidationError", bad.stderr


def test_list_pages_with_a_cursor_a_total_and_content(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1")
    ids = {notes.remember(kind="fact", content=f"User visited city number {i} in {2000 + i}").id for i in range(5)}
    seen: list[str] = []
    page = out_json(dsn, "list", "-t", "acme", "--limit", "2", "--content")
    assert len(page["items"]) == 2 and all(item["content"].startswith("User visited city") for item in page["items"])
    while True:
        assert page["total"] == 5 and len(page["items"]) <= 2
        seen += [item["id"] for item in page["items"]]
        if page["next_cursor"] is None:
            break
        page = out_json(dsn, "list", "-t", "acme", "--limit", "2", "--cursor", page["next_cursor"])
        assert all("content" not in item for item in page["items"])
    assert len(seen) == 5 and set(seen) == ids
    text = cli(dsn, "list", "-t", "acme", "--limit", "2", "--content").stdout
    assert "User visited city" in text and "2 of 5 notes; next page: --cursor " in text
    bad = cli(dsn, "list", "-t", "acme", "--cursor", "nonsense", code=2)
    assert bad.stderr.startswith("error: cursor:")


def test_recall_of_a_tenant_whose_notes_are_user_level_says_why(fabric: Fabric, dsn: str) -> None:
    fabric.scope("acme", "u1").remember(kind="fact", content="User plays the cello")
    res = cli(dsn, "recall", "cello", "-t", "acme")
    assert "no matching notes" in res.stdout and "--resource" in res.stdout and "u1 (1)" in res.stdout
    assert "--resource" in out_json(dsn, "recall", "cello", "-t", "acme")["hint"]
    assert "hint" not in out_json(dsn, "recall", "cello", "-t", "acme", "-r", "u1")


def test_status_shows_projections_lag_embedder_and_audit_head(fabric: Fabric, dsn: str) -> None:
    fabric.scope("acme", "u1").remember(kind="fact", content="User owns a tandem bicycle")
    before = out_json(dsn, "status")
    assert before["audit"]["position"] is None and before["audit"]["events_after"] == before["log"]["events"] >= 1
    anchor = cli(dsn, "audit", "checkpoint").stdout.strip().splitlines()[-1].removeprefix("anchor: ")
    status = out_json(dsn, "status")
    assert status["audit"]["anchor"] == anchor and status["audit"]["events_after"] == 0
    assert {p["name"] for p in status["projections"]} >= {"recall_index", "note_scope"}
    assert all(p["state"] == "ok" and p["lag_events"] == 0 for p in status["projections"])
    assert status["lag"] == {"events": 0, "seconds": 0.0}
    assert status["embedder"]["id"] == status["embedder"]["in_use"] == str(fabric.service.embedder.id)
    text = cli(dsn, "status").stdout
    assert "recall_index" in text and anchor in text and "lag: 0 events" in text


def test_the_runner_prints_batches_and_interval_summaries_not_a_line_per_event(dsn: str) -> None:
    from memfabric.adapters import open_fabric

    with open_fabric(dsn):
        pass  # tables first
    proc = subprocess.Popen([EXE, "projections", "run", "--poll", "0.2", "--interval", "1", "--dsn", dsn],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("caught up")
        with open_fabric(dsn, inline_projections=False, await_projections=False, consolidate=False) as fabric:
            notes = fabric.scope("acme", "u1")
            for i in range(30):
                notes.remember(kind="fact", content=f"User note {i} about gardening")
                time.sleep(0.03)
        time.sleep(2.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = out.splitlines()
    summaries = [line for line in lines if line.startswith("last ")]
    assert lines[-1] == "stopped" and len(lines) <= 8, (lines, err)
    assert summaries and not any(line.startswith("caught up") for line in lines[1:]), lines
    # every write is one Remembered event per note (plus its write-side events): all counted
    assert sum(int(line.split()[2]) for line in summaries) >= 30, lines


def test_the_runner_reports_each_batch_of_a_backlog(dsn: str) -> None:
    """Issue 27 item 6: a backlog is caught up in --batch transactions, each reported."""
    from memfabric.adapters import open_fabric

    with open_fabric(dsn, inline_projections=False, await_projections=False, consolidate=False) as fabric:
        fabric.scope("acme", "u1").remember_many(
            [{"kind": "fact", "content": f"User note {i} about gardening"} for i in range(260)])
    ran = [json.loads(line) for line in
           cli(dsn, "projections", "run", "--once", "--batch", "50", "--json").stdout.splitlines()]
    progress = [r for r in ran if r["event"] == "progress" and r["projection"] == "recall_index"]
    assert len(progress) >= 5 and all(r["events"] == 50 for r in progress), ran
    assert [r["position"] for r in progress] == sorted({r["position"] for r in progress}), progress
    assert ran[-1]["event"] == "caught_up" and ran[-1]["positions"]["recall_index"] > progress[-1]["position"]
    text = cli(dsn, "projections", "run", "--once").stdout
    assert "catching up" not in text and text.startswith("caught up"), text  # nothing left: one line


def test_projection_admin_imports_from_memfabric_adapters(dsn: str) -> None:
    code = ("from memfabric.adapters import ProjectionAdmin, fabric_status, open_fabric\n"
            f"with open_fabric({dsn!r}) as f:\n"
            "    print(ProjectionAdmin.for_fabric(f).rebuild().projections[0], sorted(fabric_status(f)))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert res.returncode == 0 and "recall_index" in res.stdout and "'audit'" in res.stdout, res.stderr


def test_counts_are_named_live_superseded_held_forgotten(fabric: Fabric, dsn: str) -> None:
    """Issue 27 item 5: ``count()`` counts live notes, ``erase_scope`` names each state."""
    notes = fabric.scope("acme", "u1")
    old = notes.remember(kind="fact", content="User lives in Lisbon", subject="home")
    notes.remember(kind="fact", content="User lives in Porto", subject="home")  # supersedes old
    notes.remember(kind="fact", content="User likes jazz")
    held = notes.remember(kind="fact", content="User signed the contract")
    notes.forget(id=held.id, hold=True)
    assert notes.count() == 2 and notes.count(include_superseded=True) == 3 and old.id
    out = out_json(dsn, "erase-scope", "-t", "acme", "-r", "u1")
    assert out["found"] == {"live": 2, "superseded": 1, "held": 1, "forgotten": 3}, out
    assert (out["deleted"], out["already_held"], out["remaining"]) == (3, 1, 0)
    text = cli(dsn, "erase-scope", "-t", "acme", "-r", "u1").stdout
    assert "found 0 live, 0 superseded, 1 held" in text, text
    assert "left: 0 live, 0 superseded, 1 held, 3 forgotten" in text, text
    assert out["left"] == {"live": 0, "superseded": 0, "held": 1, "forgotten": 3}, out
    listed = out_json(dsn, "list", "-t", "acme")
    assert listed["counts"] == out["left"] and listed["total"] == 1, listed
    assert "in the prefix: 0 live, 0 superseded, 1 held, 3 forgotten" in cli(dsn, "list", "-t", "acme").stdout


def test_a_tenant_or_note_filter_ending_in_a_newline_is_refused(fabric: Fabric, dsn: str) -> None:
    """Issue 26 defect 7, the CLI's side: ``$`` in a Python regex matches before a final
    newline, so ``"acme\\n"`` passed the id check and then matched nothing."""
    note = fabric.scope("acme", "u1").remember(kind="fact", content="User keeps bees on the roof")
    bad = cli(dsn, "log", "--tenant", "acme\n", code=2)
    assert "is not a tenant id" in bad.stderr
    assert "is not a note id" in cli(dsn, "log", "--note", note.id + "\n", code=2).stderr
