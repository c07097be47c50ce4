"""Edge cases found by a fresh user trying to break the fabric: each raises a typed
error and writes nothing, or behaves as documented."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from memfabric.adapters import Fabric, open_fabric
from memfabric.domain.errors import (
    EmbedderError,
    FabricError,
    NoteNotFoundError,
    SupersessionError,
)
from tests.conftest import event_count


def test_wordless_notes_do_not_fold_into_each_other(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    up = notes.remember(kind="fact", content="👍")
    down = notes.remember(kind="fact", content="👎")
    marks = notes.remember(kind="fact", content="???")
    assert len({up.id, down.id, marks.id}) == 3
    assert notes.get(up.id).content == "👍"
    again = notes.remember(kind="fact", content=" 👍 ")
    assert again.id == up.id and again.outcome == "folded"


@pytest.mark.parametrize("fields", [
    {"kind": "fact", "content": "a\x00b"},
    {"kind": "fact", "content": "ok", "tags": ["t\x00"]},
    {"kind": "fact", "content": "ok", "subject": "s\x00"},
    {"kind": "fact", "content": "ok", "source_entry_ids": ["e\x00"]},
    {"kind": "fact", "content": "ok", "keywords": ["k\x00"]},
    {"kind": "fact", "content": "ok", "context": "c\x00"},
    {"kind": "file", "path": "a\x00.py"},
    {"kind": "working", "block": "notes", "content": "x\x00"},
])
def test_nul_characters_are_a_validation_error(fabric: Fabric, dsn: str, fields: dict) -> None:
    notes = fabric.scope("acme")
    before = event_count(dsn)
    with pytest.raises(ValidationError, match="NUL"):
        notes.remember(**fields)
    with pytest.raises(ValidationError, match="NUL"):
        notes.remember_many([fields])
    assert event_count(dsn) == before


def test_nul_in_other_calls(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme")
    notes.remember(kind="working", block="notes", content="x")
    before = event_count(dsn)
    for call in (lambda: notes.recall("q\x00"), lambda: notes.append_block("notes", "y\x00"),
                 lambda: notes.repoint("a.py", "b\x00.py"), lambda: notes.delete_path("a\x00")):
        with pytest.raises(ValidationError):
            call()
    assert event_count(dsn) == before


def test_explicit_supersession_of_a_superseded_note_is_refused(dsn: str, fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    a = notes.remember(kind="fact", content="The server is in rack 1", id="00000000000a")
    notes.remember(kind="fact", content="The server is in rack 9", supersedes=a.id)
    before = event_count(dsn)
    with pytest.raises(SupersessionError, match="already superseded"):
        notes.remember(kind="fact", content="The server is in rack 3", supersedes=a.id)
    assert event_count(dsn) == before
    assert len(notes.lineage(a.id).successors) == 1


def test_explicit_supersession_cannot_start_before_the_old_note(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme")
    x = notes.remember(kind="fact", content="Office in Oslo", valid_from=datetime(2025, 6, 1, tzinfo=timezone.utc))
    before = event_count(dsn)
    with pytest.raises(SupersessionError, match="valid_from"):
        notes.remember(kind="fact", content="Office in Bergen", supersedes=x.id,
                       valid_from=datetime(2025, 1, 1, tzinfo=timezone.utc))
    assert event_count(dsn) == before


def test_links_must_point_at_live_notes_of_the_same_scope(fabric: Fabric, dsn: str) -> None:
    a = fabric.scope("acme")
    b = fabric.scope("other")
    theirs = b.remember(kind="fact", content="Other tenant's note")
    before = event_count(dsn)
    for target in (theirs.id, "0123456789ab"):
        with pytest.raises(NoteNotFoundError, match="links"):
            a.remember(kind="fact", content="Linked note", links=[{"id": target}])
    assert event_count(dsn) == before
    mine = a.remember(kind="fact", content="Target note here")
    linked = a.remember(kind="fact", content="Source note elsewhere", links=[{"id": mine.id}])
    assert linked.links[0].id == mine.id


def test_recall_hits_carry_the_full_note(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    notes.remember(kind="fact", content="Invoices are sent on Fridays", context="from the finance call",
                   keywords=["billing", "invoice"], consent={"visibility": "thread", "granted": True})
    notes.remember(kind="fact", content="invoices are sent on fridays")
    hit = notes.recall("invoices Fridays").hits[0]
    got = notes.get(hit.id)
    assert hit.outcome == "recalled"
    for field in ("context", "keywords", "fold_count", "updated_at", "consent", "tags", "content"):
        assert getattr(hit, field) == getattr(got, field), field
    assert hit.fold_count == 1 and hit.keywords == ("billing", "invoice")


def test_zero_vectors_give_finite_similarity(dsn: str) -> None:
    class Zero:
        id, dim = "zero-8", 8

        def embed(self, texts):  # type: ignore[no-untyped-def]
            return np.zeros((len(texts), 8), np.float32)

    with open_fabric(dsn, embedder=Zero()) as fab:
        notes = fab.scope("acme")
        notes.remember(kind="fact", content="🍕🍕🍕")
        res = notes.recall("🍕", mode="vector", min_relevance=0)  # no evidence at all: only without the floor
        assert res.hits and all(e.similarity is not None and math.isfinite(e.similarity) for e in res.explain)
        json.dumps([e.similarity for e in res.explain], allow_nan=False)


@pytest.mark.parametrize("bad", [
    lambda n: [[0.1] * 7] * n,            # lists of the wrong length
    lambda n: np.full((n, 8), np.nan),    # NaN
    lambda n: np.zeros((n + 1, 8)),       # wrong row count
    lambda n: "not vectors",
])
def test_bad_embedder_output_is_a_named_error(dsn: str, bad) -> None:  # type: ignore[no-untyped-def]
    class Bad:
        id, dim = "bad-8", 8

        def embed(self, texts):  # type: ignore[no-untyped-def]
            return bad(len(texts))

    with open_fabric(dsn, embedder=Bad()) as fab:
        before = event_count(dsn)
        with pytest.raises(EmbedderError):
            fab.scope("acme").remember(kind="fact", content="anything")
        assert event_count(dsn) == before


def test_remember_many_wants_a_list_of_mappings(fabric: Fabric, dsn: str) -> None:
    for bad in (5, "abc", [1, 2]):
        with pytest.raises(ValidationError):
            fabric.scope("acme").remember_many(bad)  # type: ignore[arg-type]
    assert event_count(dsn) == 0


def test_open_fabric_validates_its_options(dsn: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="consolidate"):
        open_fabric(dsn, consolidate="yes")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="pool_size"):
        open_fabric(dsn, pool_size=-1)
    with pytest.raises(ValidationError, match="threshold"):
        open_fabric(dsn, consolidate={"threshold": 2})
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    with pytest.raises(FabricError, match="data_dir"):
        open_fabric(data_dir=a_file)


def test_embedded_server_stops_after_a_user_was_killed(tmp_path: Path) -> None:
    """A process killed with SIGKILL never releases its use of the embedded server; the
    last live user still stops it on close."""
    import os
    import signal
    import subprocess
    import sys

    os.chmod(tmp_path, 0o755)
    data = str(tmp_path / "pg")
    code = (f"from memfabric.adapters import open_fabric\nf = open_fabric(data_dir={data!r})\n"
            "print('up', flush=True)\nimport time; time.sleep(120)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline().strip() == b"up"
    child.send_signal(signal.SIGKILL)
    child.wait()
    with open_fabric(data_dir=data) as fab:
        fab.scope("acme").remember(kind="fact", content="still works")
    assert _stopped(data), "the embedded server kept running after its last user closed"


def test_two_processes_share_one_embedded_server(tmp_path: Path) -> None:
    """Two processes on one data directory share one server; the first to close leaves
    it running for the other; the last one stops it."""
    import os
    import subprocess
    import sys

    os.chmod(tmp_path, 0o755)
    data = str(tmp_path / "pg")
    code = (f"import sys\nfrom memfabric.adapters import open_fabric\n"
            f"with open_fabric(data_dir={data!r}) as f:\n"
            "    f.scope('acme').remember(kind='fact', content='written by the child')\n"
            "    print(f._embedded._server.get_pid(), flush=True)\n"
            "    sys.stdin.readline()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdin is not None
    server_pid = int(child.stdout.readline())
    with open_fabric(data_dir=data) as fab:
        assert fab._embedded is not None and fab._embedded._server.get_pid() == server_pid  # noqa: SLF001
        child.stdin.write(b"close\n")
        child.stdin.flush()
        assert child.wait(30) == 0
        hits = fab.scope("acme").recall("written by the child").hits  # the server is still up
        assert [h.content for h in hits] == ["written by the child"]
    assert _stopped(data)


def _stopped(data: str, timeout: float = 10.0) -> bool:
    """Whether no postgres process serves ``data`` (waiting up to ``timeout`` seconds)."""
    import subprocess
    import time

    deadline = time.monotonic() + timeout
    while True:
        running = subprocess.run(["pgrep", "-f", f"postgres -D {data}"], capture_output=True, text=True).stdout
        if not running.strip():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
