"""Issue 19: embedder migration as events, without downtime (``reembed``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from memfabric.adapters import open_fabric
from memfabric.adapters.bootstrap import recorded_embedder
from memfabric.adapters.embedders import HashEmbedder
from memfabric.domain.errors import SettingsError
from memfabric.projections import tables
from memfabric.projections.rebuild import ProjectionAdmin
from tests.conftest import fetch

REEMBEDDED = "memfabric.domain.note:Note.Reembedded"


def _fill(dsn: str, n: int, dim: int = 256) -> list[str]:
    """``n`` distinct facts in scope acme/u1 (each with a unique word ``wN``), by id."""
    with open_fabric(dsn, embedder=HashEmbedder(dim), consolidate=False) as fab:
        notes = fab.scope("acme", "u1")
        return [m.id for m in notes.remember_many(
            [{"kind": "fact", "content": f"note w{i} about topic {i % 7} and item{i}"} for i in range(n)])]


def _index_dim(dsn: str, table: str = tables.RECALL_INDEX) -> str:
    return str(fetch(dsn, "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
                          " WHERE a.attrelid = %s::regclass AND a.attname = 'embedding'", (table,))[0][0])


def _reembedded(dsn: str) -> list[tuple[object, ...]]:
    return fetch(dsn, f"SELECT originator_id FROM {tables.EVENTS} WHERE topic = %s", (REEMBEDDED,))  # noqa: S608


def test_reembed_256_to_384_switches_index_record_and_recall(dsn: str) -> None:
    ids = _fill(dsn, 60)
    with open_fabric(dsn) as fab:
        assert fab.service.embedder.id == "hash-v1-256"
        report = fab.reembed("hash")          # HashEmbedder(384)
        assert (report.previous_embedder_id, report.embedder_id) == ("hash-v1-256", "hash-v1-384")
        assert report.notes == 60 and report.already == 0 and report.rows_per_second > 0
        assert fab.service.embedder.id == "hash-v1-384"
        hits = fab.scope("acme", "u1").recall("w17 item17", mode="vector").hits
        assert hits[0].id == ids[17]
        # a write after the switch embeds with the new embedder
        m = fab.scope("acme", "u1").remember(kind="fact", content="brand new fact about zebras")
        assert fab.scope("acme", "u1").history(m.id)[0].fields["embedder_id"] == "hash-v1-384"
    assert _index_dim(dsn) == "vector(384)" and _index_dim(dsn, tables.CONSOLIDATION_INDEX) == "vector(384)"
    assert recorded_embedder(dsn)["id"] == "hash-v1-384"  # type: ignore[index]
    assert len(_reembedded(dsn)) == 60
    with open_fabric(dsn) as fab:                            # a later open uses the new record
        assert fab.service.embedder.dim == 384
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fab).verify())
        again = fab.reembed("hash")                          # already there: nothing to do
        assert again.notes == 0 and again.rebuild is None
        with pytest.raises(SettingsError, match="unknown"):
            fab.reembed("nosuch")


def test_forgotten_notes_get_no_event_and_stay_erased(dsn: str) -> None:
    ids = _fill(dsn, 20)
    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1")
        notes.forget(id=ids[3])
        notes.forget(id=ids[4], hold=True)      # held: content kept, re-embedded for a release
        report = fab.reembed(HashEmbedder(384))
        assert report.notes == 19
        forgotten = notes.history(ids[3])
        assert [e.type for e in forgotten] == ["Remembered", "Forgotten"]
        assert forgotten[0].fields["content"] == "<erased>"
        assert notes.history(ids[4])[-1].type == "Reembedded"
        notes.release_hold(ids[4])
        assert notes.recall("w4 item4", mode="vector").hits[0].id == ids[4]
        assert all(h.id != ids[3] for h in notes.recall("w3 item3").hits)
    aggregate = fetch(dsn, f"SELECT aggregate_id FROM {tables.NOTE_SCOPE} WHERE note_id = %s", (ids[3],))  # noqa: S608
    assert aggregate == []


def test_rebuild_after_reembed_uses_the_event_vectors_without_embedder_calls(dsn: str) -> None:
    ids = _fill(dsn, 30)
    with open_fabric(dsn) as fab:
        fab.reembed("hash")
    calls: list[int] = []

    class Counting(HashEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            calls.append(len(texts))
            return super().embed(texts)

    with open_fabric(dsn, embedder=Counting(384)) as fab:
        before = fetch(dsn, f"SELECT aggregate_id, embedding::text FROM {tables.RECALL_INDEX} ORDER BY 1")  # noqa: S608
        for blue_green in (False, True):
            ProjectionAdmin.for_fabric(fab).rebuild(blue_green=blue_green)
        after = fetch(dsn, f"SELECT aggregate_id, embedding::text FROM {tables.RECALL_INDEX} ORDER BY 1")  # noqa: S608
        assert calls == []                                   # no embedder call in either rebuild
        assert after == before and len(after) == 30
        expected = HashEmbedder(384).embed(["note w5 about topic 5 and item5"])[0]
        hit = fab.scope("acme", "u1").recall("w5 item5", mode="vector").hits[0]
        assert hit.id == ids[5] and calls == [1]             # only the query was embedded
    row = fetch(dsn, f"SELECT embedding::text FROM {tables.RECALL_INDEX} WHERE note_id = %s", (ids[5],))  # noqa: S608
    stored = [float(x) for x in str(row[0][0]).strip("[]").split(",")]
    assert len(stored) == 384 and max(abs(a - float(b)) for a, b in zip(stored, expected, strict=True)) < 1e-6


def test_recall_in_another_thread_never_fails_during_reembed(dsn: str) -> None:
    ids = _fill(dsn, 400)
    stop = threading.Event()
    errors: list[BaseException] = []
    results: list[tuple[int, str | None]] = []
    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1")

        def recall_loop() -> None:
            i = 0
            while not stop.is_set():
                k = (i * 37) % 400
                try:
                    res = notes.recall(f"w{k} item{k}", mode="vector", top_k=3)
                    results.append((k, res.hits[0].id if res.hits else None))
                except BaseException as exc:  # noqa: BLE001 - collected, asserted below
                    errors.append(exc)
                i += 1

        written: list[str] = []

        def write_loop() -> None:            # writes all through the migration are caught up
            j = 0
            while not stop.is_set():
                try:
                    written.append(notes.remember(kind="fact", content=f"late fact number late{j} meanwhile").id)
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)
                j += 1

        threads = [threading.Thread(target=recall_loop), threading.Thread(target=write_loop)]
        for t in threads:
            t.start()
        try:
            report = fab.reembed("hash", batch=50)
            time.sleep(0.3)                  # recalls after the switch too
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert errors == []
        assert len(results) > 10
        assert all(hit == ids[k] for k, hit in results), [r for r in results if r[1] != ids[r[0]]][:5]
        assert report.notes >= 400 and len(written) > 5
        for j in (0, len(written) // 2, len(written) - 1):
            found = notes.recall(f"late{j} meanwhile", mode="vector", top_k=3).hits
            assert written[j] in [h.id for h in found], j
        bad = [r for r in ProjectionAdmin.for_fabric(fab).verify() if not r.ok]
        assert bad == [], bad
    assert _index_dim(dsn) == "vector(384)"
    # every note with content has exactly one vector of the new embedder
    dupes = fetch(dsn, f"SELECT originator_id, count(*) FROM {tables.EVENTS} WHERE topic = %s"  # noqa: S608
                       " GROUP BY 1 HAVING count(*) > 1", (REEMBEDDED,))
    assert dupes == []


def test_another_open_fabric_adopts_the_new_embedder_for_recall_and_writes(dsn: str) -> None:
    ids = _fill(dsn, 30)
    with open_fabric(dsn) as reader, open_fabric(dsn) as writer, open_fabric(dsn) as admin:
        admin.reembed("hash")
        assert reader.service.embedder.dim == 256 and writer.service.embedder.dim == 256
        hit = reader.scope("acme", "u1").recall("w9 item9", mode="vector").hits[0]
        assert hit.id == ids[9] and reader.service.embedder.dim == 384
        m = writer.scope("acme", "u1").remember(kind="fact", content="written by a stale process")
        assert writer.service.embedder.dim == 384
        assert writer.scope("acme", "u1").history(m.id)[0].fields["dim"] == 384
        assert admin.scope("acme", "u1").recall("stale process", mode="vector").hits[0].id == m.id


_CHILD = r"""
import sys
from memfabric.adapters import open_fabric
from memfabric.adapters.embedders import HashEmbedder
import memfabric.adapters.reembed as r
dsn, slow = sys.argv[1], sys.argv[2] == "slow"
orig = r.Reembedder._process
def slowed(self, refs):
    orig(self, refs)
    print("batch", self.appended, flush=True)
    if slow:
        import time; time.sleep(0.2)
r.Reembedder._process = slowed
with open_fabric(dsn) as fab:
    rep = fab.reembed(HashEmbedder(384), batch=20)
    print("done", rep.notes, rep.already, flush=True)
"""


def test_reembed_resumes_after_sigkill_without_duplicate_events(dsn: str, tmp_path: Path) -> None:
    ids = _fill(dsn, 200)
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen([sys.executable, str(script), dsn, "slow"], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("batch") and int(line.split()[1]) >= 60:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    partial = len(_reembedded(dsn))
    assert 60 <= partial < 200
    assert recorded_embedder(dsn)["id"] == "hash-v1-256"  # type: ignore[index]
    assert _index_dim(dsn) == "vector(256)"
    out = subprocess.run([sys.executable, str(script), dsn, "fast"], capture_output=True, text=True, env=env,
                         timeout=300, check=True).stdout
    done = out.strip().splitlines()[-1].split()
    assert done[0] == "done" and int(done[1]) == 200 - partial and int(done[2]) == partial
    assert len(_reembedded(dsn)) == 200
    assert fetch(dsn, f"SELECT count(DISTINCT originator_id) FROM {tables.EVENTS} WHERE topic = %s",  # noqa: S608
                 (REEMBEDDED,)) == [(200,)]
    assert recorded_embedder(dsn)["id"] == "hash-v1-384"  # type: ignore[index]
    with open_fabric(dsn) as fab:
        assert fab.scope("acme", "u1").recall("w150 item150", mode="vector").hits[0].id == ids[150]
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fab).verify())
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE '%%\\_bg'").fetchone()
    assert left == (0,)


def test_cli_reembed_prints_rows_per_second_and_json(dsn: str) -> None:
    from typer.testing import CliRunner

    from memfabric.adapters.cli import app as cli

    _fill(dsn, 25)
    runner = CliRunner()
    res = runner.invoke(cli.app, ["reembed", "--embedder", "hash", "--json", "--dsn", dsn])
    assert res.exit_code == 0, res.stderr
    import json
    out = json.loads(res.stdout)
    assert out["notes"] == 25 and out["dim"] == 384 and out["previous_dim"] == 256 and out["rows_per_second"] > 0
    assert "reembed → hash-v1-384: 25/25 notes" in res.stderr          # progress lines (not a terminal)
    res = runner.invoke(cli.app, ["reembed", "--embedder", "hash", "--dsn", dsn])
    assert res.exit_code == 0 and "already uses hash-v1-384" in res.stdout
    res = runner.invoke(cli.app, ["recall", "w3 item3", "-t", "acme", "-r", "u1", "--json", "--dsn", dsn])
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(cli.app, ["reembed", "--embedder", "nosuch", "--json", "--dsn", dsn])
    assert res.exit_code == 2 and json.loads(res.stderr)["type"] == "FabricError"


def test_a_separate_runner_adopts_the_new_embedder(dsn: str) -> None:
    from memfabric.adapters.cli.admin import admin_fabric

    _fill(dsn, 20)
    stop = threading.Event()
    failures: list[BaseException] = []
    with admin_fabric(dsn, None) as runner_fabric, \
            open_fabric(dsn, inline_projections=False, await_projections=False) as writer:
        def run() -> None:
            try:
                ProjectionAdmin.for_fabric(runner_fabric).run(runner_fabric.dsn, poll=0.1, stop=stop.is_set,
                                                               adopt=lambda: _adopt(runner_fabric))
            except BaseException as exc:  # noqa: BLE001 - asserted below
                failures.append(exc)

        def _adopt(fab: object) -> bool:
            from memfabric.adapters.cli.admin import adopt_stand_in
            return adopt_stand_in(fab)  # type: ignore[arg-type]

        thread = threading.Thread(target=run)
        thread.start()
        try:
            with open_fabric(dsn) as admin:
                admin.reembed("hash")
            m = writer.scope("acme", "u1").remember(kind="fact", content="after the switch, via the runner")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                hits = writer.scope("acme", "u1").recall("after the switch runner", mode="vector").hits
                if hits and hits[0].id == m.id:
                    break
                time.sleep(0.1)
            else:
                pytest.fail("the runner never projected the write made after the switch")
        finally:
            stop.set()
            thread.join(30)
    assert failures == [] and runner_fabric.service.embedder.dim == 384
