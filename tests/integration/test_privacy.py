"""Issue 5: crypto-shredding proofs (raw dumps of every table, snapshots, on-disk files
after VACUUM FULL), consent and visibility in SQL, and the host redactor."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from memfabric.adapters import Fabric, HashEmbedder, open_fabric
from memfabric.domain.results import ConsentInfo
from memfabric.domain.note import note_uuid
from tests.conftest import event_count, fetch

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")


def dump_every_table(dsn: str) -> tuple[bytes, list[str]]:
    """Every row of every user table, COPYed out in text *and* binary format (so
    ``bytea`` shows up both hex-encoded and raw, ``vector`` both as pgvector text and as
    its big-endian binary form); returns the bytes and the table names. ``COPY (SELECT
    * ...)`` rather than ``COPY table``, which would skip generated columns (``tsv``)."""
    out = bytearray()
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname <> ALL(%s) ORDER BY 2",
            (list(SYSTEM_SCHEMAS),),
        ).fetchall()
        for schema, table in tables:
            for fmt in ("text", "binary"):
                stmt = sql.SQL("COPY (SELECT * FROM {}) TO STDOUT (FORMAT {})").format(
                    sql.Identifier(schema, table), sql.SQL(fmt))
                with conn.cursor() as cur, cur.copy(stmt) as copy:
                    for chunk in copy:
                        out += bytes(chunk)
    return bytes(out), [t for _, t in tables]


@dataclass
class Secrets:
    """Every form in which a note's content could survive in the database."""

    texts: list[str]
    embedding_le: bytes
    vector_text: str
    keys: list[bytes]

    def needles(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for i, text in enumerate(self.texts):
            out[f"text{i}"] = text.encode()
            out[f"text{i}-lower"] = text.lower().encode()
        out["embedding-float32-le"] = self.embedding_le
        out["embedding-float32-be"] = np.frombuffer(self.embedding_le, "<f4").astype(">f4").tobytes()
        out["embedding-hex"] = self.embedding_le.hex().encode()
        out["pgvector-text"] = self.vector_text.encode()
        for i, key in enumerate(self.keys):
            out[f"key{i}"] = key
            out[f"key{i}-hex"] = key.hex().encode()
        return out


def found(blob: bytes, secrets: Secrets) -> set[str]:
    return {name for name, needle in secrets.needles().items() if needle in blob}


CONTENT = "Patient Quokkazanzibar was prescribed Xylomorphine 40mg"
CONTEXT = "told to nurse Vantablackwood on ward 9"


def _remember_secret(fabric: Fabric) -> tuple[Any, Secrets]:
    notes = fabric.scope("clinic", "patient-7", "visit-1")
    n = notes.remember(kind="fact", content=CONTENT, context=CONTEXT,
                       keywords=["Hypnotoadine"], tags=["medical"])
    notes.remember(kind="fact", content=CONTENT + ".", context=CONTEXT)  # folds into n
    uuid = note_uuid(notes.scope, n.id)
    embedding = fabric.log.repository.get(uuid).embedding
    vector_text = fetch(fabric.dsn, "SELECT embedding::text FROM mf_recall_index WHERE aggregate_id = %s",
                        (uuid,))[0][0]
    keys = [bytes(r[0]) for r in fetch(fabric.dsn, "SELECT key FROM mf_note_keys WHERE originator_id = %s",
                                       (uuid,))]
    assert keys and embedding
    secrets = Secrets(
        texts=[CONTENT, CONTEXT, "Quokkazanzibar", "Xylomorphine", "Vantablackwood", "Hypnotoadine"],
        embedding_le=embedding, vector_text=str(vector_text), keys=keys,
    )
    return n, secrets


def test_raw_dump_of_every_table_holds_no_trace_after_forget(fabric: Fabric) -> None:
    n, secrets = _remember_secret(fabric)
    notes = fabric.scope("clinic", "patient-7", "visit-1")
    f = notes.remember(kind="file", path="records/Quokkazanzibar-scan.pdf")  # content = path
    held = fabric.scope("clinic", "patient-8").remember(kind="fact", content="Held Borogovewidget record")
    fabric.scope("clinic", "patient-8").forget(id=held.id, hold=True)

    blob, tables = dump_every_table(fabric.dsn)
    assert {"memfabric_events", "mf_note_keys", "mf_recall_index", "mf_recall_index_tracking",
            "mf_note_scope", "mf_note_scope_tracking", "mf_fabric_secret"} <= set(tables)
    # positive control: the dump does see the live note in the projection and keys
    assert found(blob, secrets) >= {"text0", "text2-lower", "pgvector-text", "embedding-float32-be",
                                    "key0", "key0-hex"}
    # sealing: the event log alone never holds protected fields in the clear
    events = b"".join(bytes(r[0]) for r in fetch(fabric.dsn, "SELECT state FROM memfabric_events"))  # type: ignore[call-overload]
    assert found(events, secrets) == set()
    assert b"Borogovewidget" not in blob  # held: content kept, but only sealed

    assert notes.forget(id=n.id).deleted == 1
    assert notes.forget(id=f.id).deleted == 1

    blob, _ = dump_every_table(fabric.dsn)
    assert found(blob, secrets) == set()
    assert b"records/Quokkazanzibar" not in blob
    assert b"quokkazanzibar" not in blob.lower()
    # what remains readable is the tombstone
    history = notes.history(n.id)
    assert [h.type for h in history] == ["Remembered", "Folded", "Forgotten"]
    assert "Quokkazanzibar" not in repr([h.fields for h in history])
    assert history[-1].fields["content_hmac"].encode() in blob
    assert notes.verify_content(n.id, CONTENT + ".")  # the fold's content was the last one


def test_tags_and_subject_are_sealed_and_erased_with_the_note(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The invariant names tags: what a caller writes beside the content (``tags``,
    ``subject``) is sealed in the log and, after ``forget``, in no table at all, snapshots
    included (a fresh user's finding, 2026-12-04: both stayed plain in the event state).
    The live note still reads and filters by them."""
    monkeypatch.setenv("IS_SNAPSHOTTING_ENABLED", "y")
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("clinic", "patient-9", "visit-2")
        n = notes.remember(kind="fact", content="Prefers the window seat", tags=["Jabberwockytag", "Tumtumtag"],
                           subject="Bandersnatchsubject")
        fabric.log.take_snapshot(note_uuid(notes.scope, n.id))
        assert set(notes.get(n.id).tags) == {"Jabberwockytag", "Tumtumtag"}
        assert [h.id for h in notes.recall("window seat", tags=["Tumtumtag"]).hits] == [n.id]
        events = b"".join(bytes(r[0]) for r in fetch(dsn, "SELECT state FROM memfabric_events"))  # type: ignore[call-overload]
        snaps = b"".join(bytes(r[0]) for r in fetch(dsn, "SELECT state FROM memfabric_snapshots"))  # type: ignore[call-overload]
        for word in (b"Jabberwockytag", b"Tumtumtag", b"Bandersnatchsubject"):
            assert word not in events and word not in snaps, word
        notes.forget(id=n.id)
        blob, _ = dump_every_table(dsn)
        for word in (b"jabberwockytag", b"tumtumtag", b"bandersnatchsubject"):
            assert word not in blob.lower(), word
        history = notes.history(n.id)
        assert [h.type for h in history] == ["Remembered", "Forgotten"]
        assert "tags" in history[0].erased and "subject" in history[0].erased


def test_snapshots_are_sealed_and_shredded_too(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IS_SNAPSHOTTING_ENABLED", "y")
    with open_fabric(dsn) as fabric:
        n, secrets = _remember_secret(fabric)
        notes = fabric.scope("clinic", "patient-7", "visit-1")
        uuid = note_uuid(notes.scope, n.id)
        fabric.log.take_snapshot(uuid)
        snap = b"".join(bytes(r[0]) for r in fetch(dsn, "SELECT state FROM memfabric_snapshots"))
        assert snap and found(snap, secrets) == set()
        # a first-version note snapshots with its existing key (no new key, still readable)
        one = notes.remember(kind="procedure", content="Rinse the Frumiousbandersnatch daily")
        keys_before = fetch(dsn, "SELECT count(*) FROM mf_note_keys")[0][0]
        fabric.log.take_snapshot(note_uuid(notes.scope, one.id))
        assert fetch(dsn, "SELECT count(*) FROM mf_note_keys")[0][0] == keys_before
        assert fabric.log.repository.get(note_uuid(notes.scope, one.id)).content.startswith("Rinse")
        restored = fabric.log.repository.get(uuid)
        assert (restored.content, restored.context, restored.embedding) == (
            CONTENT + ".", CONTEXT, secrets.embedding_le)

        notes.forget(id=n.id)

        note = fabric.log.repository.get(uuid)  # from the shredded snapshot + tombstone
        assert note.forgotten and note.content is None and note.embedding is None
        fabric.log.take_snapshot(uuid)  # a forgotten note snapshots without a key
        assert fabric.log.repository.get(uuid).forgotten
        blob, tables = dump_every_table(dsn)
        assert "memfabric_snapshots" in tables
        assert found(blob, secrets) == set()


def _data_files(conn: psycopg.Connection[Any]) -> list[Path]:
    datadir = Path(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
    rels = conn.execute(
        "SELECT pg_relation_filepath(oid) FROM pg_class WHERE pg_relation_filepath(oid) IS NOT NULL"
    ).fetchall()
    files: list[Path] = []
    for (rel,) in rels:
        base = datadir / rel
        files += [p for p in base.parent.glob(base.name + "*") if re.fullmatch(rf"{base.name}(\.\d+)?", p.name)]
    return files


def test_on_disk_relation_files_are_clean_after_vacuum_full(fabric: Fabric) -> None:
    """Documents the operator step of docs/erasure.md: deleted rows live on as dead
    tuples until VACUUM; after ``VACUUM FULL`` + ``CHECKPOINT`` no relation file of the
    database holds the content or the destroyed key (WAL and backups are separate)."""
    n, secrets = _remember_secret(fabric)
    keeper = fabric.scope("clinic", "patient-9").remember(kind="fact", content="Live Jabberwockzeta note")
    fabric.scope("clinic", "patient-7", "visit-1").forget(id=n.id)
    with psycopg.connect(fabric.dsn, autocommit=True) as conn:
        try:
            conn.execute("CHECKPOINT")
            files = _data_files(conn)
            if not files or not all(os.access(p, os.R_OK) for p in files):
                pytest.skip("the server's data directory is not readable from this process")
            dead = b"".join(p.read_bytes() for p in files)
            conn.execute("VACUUM FULL")
            conn.execute("CHECKPOINT")
            files = _data_files(conn)
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("needs a superuser connection (embedded test server)")
    # before VACUUM the deleted key row is still on disk as a dead tuple
    assert secrets.keys[0] in dead
    blob = b"".join(p.read_bytes() for p in files)
    assert b"Live Jabberwockzeta note" in blob  # positive control: live data is on disk
    assert keeper.id.encode() in blob
    assert found(blob, secrets) == set()


# ---------------------------------------------------------- consent / visibility
@pytest.fixture
def plain(dsn: str) -> Iterator[Fabric]:
    with open_fabric(dsn, consolidate=False) as fab:
        yield fab


def visible(fabric: Fabric, scope: tuple[str | None, ...], query: str = "quarterly roadmap") -> set[str]:
    notes = fabric.scope(*scope)  # type: ignore[arg-type]
    return {h.id for h in notes.recall(query, top_k=50, kinds=("fact", "procedure", "file")).hits}


def test_visibility_rules_are_applied_in_sql(plain: Fabric) -> None:
    home = plain.scope("acme", "u1", "th1")
    thread = home.remember(kind="fact", content="quarterly roadmap thread note", consent={"visibility": "thread"})
    resource = home.remember(kind="fact", content="quarterly roadmap resource note",
                             consent={"visibility": "resource"})
    tenant = home.remember(kind="fact", content="quarterly roadmap tenant note",
                           consent={"visibility": "tenant"})
    top = plain.scope("acme").remember(kind="fact", content="quarterly roadmap top-level note",
                                       consent={"visibility": "resource"})
    assert visible(plain, ("acme", "u1", "th1")) == {thread.id, resource.id, tenant.id}
    assert visible(plain, ("acme", "u1", "th2")) == {resource.id, tenant.id}
    assert visible(plain, ("acme", "u1", None)) == {resource.id, tenant.id}
    assert visible(plain, ("acme", "u2", "th1")) == {tenant.id}
    assert visible(plain, ("acme", None, "th1")) == {tenant.id}
    assert visible(plain, ("acme",)) == {tenant.id, top.id}
    for other in (("globex", "u1", "th1"), ("globex",), ("globex", "u1", None)):
        assert visible(plain, other) == set()
    rows = fetch(plain.dsn, "SELECT note_id, visibility FROM mf_recall_index ORDER BY 2")
    assert dict(rows) == {thread.id: "thread", resource.id: "resource", tenant.id: "tenant", top.id: "resource"}


def test_invisible_notes_are_filtered_before_ranking_not_after(plain: Fabric) -> None:
    """50 better-matching notes in another thread must not crowd out the one visible
    note from top_k=1: the filter runs inside the candidate SQL."""
    crowd = plain.scope("acme", "u1", "th-crowd")
    crowd.remember_many([{"kind": "fact", "content": f"quarterly roadmap review {i}",
                          "consent": {"visibility": "thread"}} for i in range(50)])
    plain.scope("globex", "u1", "th1").remember_many(
        [{"kind": "fact", "content": "quarterly roadmap review", "consent": {"visibility": "tenant"}}] * 20)
    mine = plain.scope("acme", "u1", "th-me").remember(kind="fact", content="roadmap for the offsite lunch")
    for mode in ("hybrid", "vector", "lexical"):
        res = plain.scope("acme", "u1", "th-me").recall("quarterly roadmap review", top_k=1, mode=mode)
        assert [h.id for h in res.hits] == [mine.id], mode


def test_consent_refusal_and_require_consent(dsn: str) -> None:
    with open_fabric(dsn, consolidate=False) as open_fab:
        notes = open_fab.scope("acme", "u1", "th1")
        granted = notes.remember(kind="fact", content="quarterly roadmap granted",
                                 consent={"granted": True, "purposes": ["personalisation"]})
        refused = notes.remember(kind="fact", content="quarterly roadmap refused", consent={"granted": False})
        unknown = notes.remember(kind="fact", content="quarterly roadmap unknown")
        # without require_consent, unknown consent is recalled; an explicit refusal never is
        assert visible(open_fab, ("acme", "u1", "th1")) == {granted.id, unknown.id}
        assert refused.id not in {h.id for h in notes.recall("quarterly roadmap refused", top_k=10, mode="lexical").hits}
    with open_fabric(dsn, require_consent=True) as strict:
        assert visible(strict, ("acme", "u1", "th1")) == {granted.id}
        assert strict.scope("acme", "u1", "th1").get(granted.id).consent == ConsentInfo(
            visibility="resource", granted=True, purposes=("personalisation",))  # a fact's default


def test_a_fold_never_widens_visibility_or_consent(dsn: str) -> None:
    """A write folds into a note of its own visibility or (its own scope) a narrower
    one, and the fold keeps the narrower consent; a wider note is never met by a write
    for a narrower audience (issue 16), so it is never narrowed either."""
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "u1", "th1")
        n = notes.remember(kind="fact", content="the quarterly roadmap is due friday",
                           consent={"visibility": "thread", "granted": True, "purposes": ["a", "b"]})
        assert visible(fabric, ("acme", "u1", "th1")) == {n.id}
        narrowed = notes.remember(kind="fact", content="The quarterly roadmap is due Friday!",
                                  consent={"visibility": "resource", "purposes": ["b", "c"]})
        assert (narrowed.outcome, narrowed.id) == ("folded", n.id)
        assert narrowed.consent == ConsentInfo(visibility="thread", granted=None, purposes=("b",))
        assert visible(fabric, ("acme", "u1", "th9")) == set()
        widened = notes.remember(kind="fact", content="the quarterly roadmap is due friday",
                                 consent={"visibility": "tenant", "granted": True})
        assert (widened.outcome, widened.id) == ("folded", n.id)
        assert widened.consent == ConsentInfo(visibility="thread", granted=None, purposes=("b",))
        assert visible(fabric, ("acme", "u2", "x")) == set()
        assert fetch(dsn, "SELECT visibility, consent_granted FROM mf_recall_index") == [("thread", None)]
        other = fabric.scope("acme", "u1", "th2")
        wide = other.remember(kind="fact", content="the quarterly roadmap is shared in May",
                              consent={"visibility": "tenant"})
        narrow = other.remember(kind="fact", content="the quarterly roadmap is shared in May",
                                consent={"visibility": "resource"})
        assert narrow.outcome == "inserted" and narrow.id != wide.id
        assert wide.id in visible(fabric, ("acme", "u2", "x")) and narrow.id not in visible(fabric, ("acme", "u2", "x"))
    with open_fabric(dsn, require_consent=True) as strict:
        assert visible(strict, ("acme", "u1", "th1")) == set()


# ------------------------------------------------------------------- redaction
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


def redact(text: str) -> str:
    return EMAIL.sub("[email]", text)


def test_redactor_runs_before_embedding_and_sealing(dsn: str) -> None:
    embedder = HashEmbedder()
    with open_fabric(dsn, redactor=redact, embedder=embedder) as fabric:
        notes = fabric.scope("acme", "u1", "th1")
        n = notes.remember(kind="fact", content="Invoice questions go to zed.quinn@example.org weekly",
                           context="zed.quinn@example.org asked on Monday")
        expected = "Invoice questions go to [email] weekly"
        assert (n.content, n.context) == (expected, "[email] asked on Monday")
        hit = notes.recall("invoice questions").hits[0]
        assert (hit.id, hit.content) == (n.id, expected)
        assert notes.get(n.id).content == expected
        stored = fabric.log.repository.get(note_uuid(notes.scope, n.id)).embedding
        assert stored == embedder.embed([expected])[0].tobytes()
        assert stored != embedder.embed(["Invoice questions go to zed.quinn@example.org weekly"])[0].tobytes()
        decoded = [fabric.log.sealing_mapper.decode_state(e)[0]
                   for e in fabric.log.recorder.select_events(note_uuid(notes.scope, n.id))]
        assert decoded[0]["content"] == expected and decoded[0]["context"] == "[email] asked on Monday"
        blob, _ = dump_every_table(dsn)
        assert b"zed.quinn" not in blob and "zed.quinn" not in repr(decoded)
        # the tombstone hash is of the stored (redacted) text
        notes.forget(id=n.id)
        assert notes.verify_content(n.id, expected)
        assert not notes.verify_content(n.id, "Invoice questions go to zed.quinn@example.org weekly")


def test_redactor_also_covers_folds_and_working_blocks(dsn: str) -> None:
    with open_fabric(dsn, redactor=redact) as fabric:
        notes = fabric.scope("acme", "u1", "th1")
        n = notes.remember(kind="fact", content="Ping ann@corp.io about the quarterly roadmap")
        again = notes.remember(kind="fact", content="ping bob@corp.io about the quarterly roadmap")
        assert again.id == n.id and again.outcome == "folded"
        assert again.content == "ping [email] about the quarterly roadmap"
        block = notes.remember(kind="working", block="scratch", content="call carl@corp.io")
        assert block.content == "call [email]"
        before = event_count(dsn)
        blob, _ = dump_every_table(dsn)
        assert b"@corp.io" not in blob and event_count(dsn) == before
