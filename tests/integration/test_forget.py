"""Issue 5: forget, legal hold, tombstones, scope erasure, file moves and deletes.

Every rule runs against a real PostgreSQL (fresh database per test)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from pydantic import ValidationError

from memfabric.adapters import Fabric, HashEmbedder, open_fabric
from memfabric.domain.errors import FabricError, NoteForgottenError, NoteNotFoundError, ScopeError
from memfabric.domain.note import ERASED, note_uuid
from memfabric.domain.scope import Scope
from tests.conftest import event_count, fetch


def secret(dsn: str) -> bytes:
    return bytes(fetch(dsn, "SELECT secret FROM mf_fabric_secret")[0][0])  # type: ignore[arg-type]


def recalled(notes, query: str, **kw) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.id for h in notes.recall(query, **kw).hits]


def forgotten_events(dsn: str) -> int:
    return int(fetch(dsn, "SELECT count(*) FROM memfabric_events WHERE topic LIKE %s",
                     ("%Note.Forgotten",))[0][0])  # type: ignore[arg-type]


def keys_of(dsn: str, tenant: str, resource: str | None, thread: str | None, ids: Sequence[str]) -> int:
    scope = Scope(tenant_id=tenant, resource_id=resource, thread_id=thread)
    uuids = [note_uuid(scope, i) for i in ids]
    return int(fetch(dsn, "SELECT count(*) FROM mf_note_keys WHERE originator_id = ANY(%s)",
                     (uuids,))[0][0])  # type: ignore[arg-type]


@pytest.fixture
def plain(dsn: str) -> Iterator[Fabric]:
    """A fabric without consolidation, so many similar notes stay separate."""
    with open_fabric(dsn, consolidate=False) as fab:
        yield fab


# --------------------------------------------------------------------- forget
def test_forget_tombstones_shreds_and_unindexes(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "user-1", "thread-1")
    notes.remember(kind="procedure", content="Call Alice before visiting", id="0123456789ab")
    n = notes.remember(kind="fact", content="Alice lives in Zanzibar near the harbour",
                       context="said on the phone", keywords=["home"], source_entry_ids=["e1"],
                       links=[{"id": "0123456789ab"}])
    assert recalled(notes, "Zanzibar harbour") == [n.id]
    before = event_count(fabric.dsn)

    res = notes.forget(id=n.id, requested_by="dpo@acme")

    assert (res.id, res.block, res.deleted, res.held) == (n.id, None, 1, False)
    assert event_count(fabric.dsn) == before + 1
    assert recalled(notes, "Zanzibar harbour") == []
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_recall_index WHERE note_id = %s", (n.id,))[0][0] == 0
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_note_scope WHERE note_id = %s", (n.id,))[0][0] == 0
    assert keys_of(fabric.dsn, "acme", "user-1", "thread-1", [n.id]) == 0
    got = notes.get(n.id)
    assert got.forgotten and not got.held
    assert got.content is None and got.context is None and got.keywords == ()

    tomb = notes.history(n.id)[-1]
    assert tomb.type == "Forgotten" and tomb.erased == ()
    f = tomb.fields
    assert (f["note_id"], f["kind"], f["tenant_id"], f["resource_id"], f["thread_id"]) == (
        n.id, "fact", "acme", "user-1", "thread-1")
    assert f["reason"] == "forgotten" and f["requested_by"] == "dpo@acme" and f["cause"] == "caller"
    assert f["source_entry_ids"] == ["e1"] and f["link_ids"] == ["0123456789ab"]
    content = "Alice lives in Zanzibar near the harbour"
    keyed = hmac.new(secret(fabric.dsn), content.encode(), hashlib.sha256).hexdigest()
    assert f["content_hmac"] == keyed
    assert f["content_hmac"] != hashlib.sha256(content.encode()).hexdigest()
    assert tomb.timestamp >= n.ingested_at


def test_history_of_forgotten_note_marks_protected_fields_erased(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="the vault code is 4471", context="ctx", keywords=["vault"])
    notes.remember(kind="fact", content="The vault code is 4471!", tags=["again"])  # folds
    assert [h.type for h in notes.history(n.id)] == ["Remembered", "Folded"]
    assert notes.history(n.id)[0].fields["content"] == "the vault code is 4471"

    notes.forget(id=n.id)

    remembered, folded, tomb = notes.history(n.id)
    for entry in (remembered, folded):
        assert set(entry.erased) >= {"content", "keywords", "embedding"}
        assert all(entry.fields[name] == ERASED for name in entry.erased)
        assert "4471" not in repr(entry.fields)
    assert "context" in remembered.erased
    # issue 19: only fields the event had read <erased> (the fact had no path, the fold no context)
    assert "path" not in remembered.erased and remembered.fields["path"] is None
    assert "context" not in folded.erased
    # what the caller wrote beside the content is sealed too (the invariant: tags included)
    assert "tags" in folded.erased and folded.fields["tags"] == ERASED and "again" not in repr(folded.fields)
    assert tomb.type == "Forgotten" and tomb.erased == ()


def test_forget_twice_and_unknown_id_write_nothing(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="temporary fact")
    assert notes.forget(id=n.id).deleted == 1
    before = event_count(fabric.dsn)
    again = notes.forget(id=n.id)
    assert (again.deleted, again.held) == (0, False)
    missing = notes.forget(id="abcdefabcdef")
    assert (missing.id, missing.deleted, missing.held) == ("abcdefabcdef", 0, False)
    assert event_count(fabric.dsn) == before


def test_forget_from_another_scope_never_touches_the_note(fabric: Fabric) -> None:
    mine = fabric.scope("acme", "u1", "t1")
    n = mine.remember(kind="fact", content="the launch date is in March", id="aaaaaaaaaaaa",
                      consent={"visibility": "thread"})  # issue 16: facts default to resource
    twin = fabric.scope("globex", "u1", "t1").remember(
        kind="fact", content="the launch date is in March", id="aaaaaaaaaaaa")
    before = event_count(fabric.dsn)
    for other in (fabric.scope("acme", "u1", "t2"), fabric.scope("acme", "u2", "t1"),
                  fabric.scope("acme"), fabric.scope("initech", "u1", "t1")):
        res = other.forget(id=n.id)
        assert (res.deleted, res.held) == (0, False)
    assert event_count(fabric.dsn) == before
    assert fabric.scope("globex", "u1", "t1").forget(id=twin.id).deleted == 1
    assert recalled(mine, "launch date March") == [n.id]
    assert not mine.get(n.id).forgotten


def test_forget_rejects_bad_arguments_and_writes_nothing(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="a fact to keep")
    before = event_count(fabric.dsn)
    with pytest.raises(ValidationError, match="id"):
        notes.forget()
    with pytest.raises(ValidationError, match="id"):
        notes.forget(id=n.id, block="todo")
    with pytest.raises(ValidationError, match="id"):
        notes.forget(id="NOT-AN-ID")
    with pytest.raises(ValidationError, match="hold"):
        notes.forget(id=n.id, hold="yes")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="requested_by"):
        notes.forget(id=n.id, requested_by="")
    with pytest.raises(ValidationError, match="requested_by"):
        notes.forget(id=n.id, requested_by="x" * 201)
    assert event_count(fabric.dsn) == before
    assert not notes.get(n.id).forgotten


# ----------------------------------------------------------------------- hold
def test_legal_hold_keeps_content_but_hides_the_note(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="Bob signed the supplier contract in May")
    before = event_count(fabric.dsn)

    res = notes.forget(id=n.id, hold=True, requested_by="legal")

    assert (res.id, res.deleted, res.held) == (n.id, 0, True)
    assert event_count(fabric.dsn) == before + 1
    assert recalled(notes, "supplier contract May") == []
    got = notes.get(n.id)
    assert got.held and not got.forgotten
    assert got.content == "Bob signed the supplier contract in May"
    assert keys_of(fabric.dsn, "acme", "u", "t", [n.id]) == 1
    assert all(h.erased == () for h in notes.history(n.id))
    tomb = notes.lineage(n.id).tombstone
    assert tomb is not None and tomb["reason"] == "legal_hold" and tomb["requested_by"] == "legal"
    assert notes.verify_content(n.id, "Bob signed the supplier contract in May")
    assert fetch(fabric.dsn, "SELECT held FROM mf_note_scope")[0][0] is True

    # never a fold candidate: the same text again makes a new note
    again = notes.remember(kind="fact", content="Bob signed the supplier contract in May")
    assert again.outcome == "inserted" and again.id != n.id
    # never superseded, never forgotten while held
    count = event_count(fabric.dsn)
    with pytest.raises(NoteForgottenError):
        notes.remember(kind="fact", content="Bob signed it in June", supersedes=n.id)
    res = notes.forget(id=n.id)
    assert (res.deleted, res.held) == (0, True)
    assert event_count(fabric.dsn) == count
    assert notes.get(n.id).content == "Bob signed the supplier contract in May"


# ------------------------------------------------------------ lineage, verify
def test_lineage_survives_with_the_tombstone_in_place(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u", "t")
    a = notes.remember(kind="fact", content="the office is in Leeds", id="aaaaaaaaaaa1")
    b = notes.remember(kind="fact", content="the office is in York", id="aaaaaaaaaaa2", supersedes=a.id)
    c = notes.remember(kind="fact", content="the office is in Hull", id="aaaaaaaaaaa3", supersedes=b.id)

    notes.forget(id=b.id, requested_by="user")

    lin = notes.lineage(b.id)
    assert (lin.predecessors, lin.successors) == ([a.id], [c.id])
    assert lin.tombstone is not None
    assert lin.tombstone["supersedes"] == a.id and lin.tombstone["superseded_by"] == c.id
    chain = {row["id"]: row for row in notes.lineage(c.id).chain}
    assert list(chain) == [a.id, b.id, c.id]
    assert chain[b.id]["forgotten"] and chain[b.id]["content"] is None
    assert chain[a.id]["content"] == "the office is in Leeds"
    assert notes.lineage(c.id).tombstone is None
    assert recalled(notes, "office Hull") == [c.id]


def test_verify_content_checks_the_keyed_hash(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="yes")
    live = notes.remember(kind="procedure", content="restart the router first")
    notes.forget(id=n.id)
    assert notes.verify_content(n.id, "yes") is True
    assert notes.verify_content(n.id, "no") is False
    assert notes.verify_content(n.id, "yes ") is False
    with pytest.raises(FabricError, match="tombstone"):
        notes.verify_content(live.id, "restart the router first")
    with pytest.raises(NoteNotFoundError):
        notes.verify_content("abcabcabcabc", "yes")
    with pytest.raises(NoteNotFoundError):  # the tombstone is only checkable in its scope
        fabric.scope("acme", "u", "other").verify_content(n.id, "yes")
    with pytest.raises(ValidationError, match="id"):
        notes.verify_content("bad", "yes")
    with pytest.raises(ValidationError, match="text"):
        notes.verify_content(n.id, 42)  # type: ignore[arg-type]


# -------------------------------------------------------------- scope erasure
def _fill(fabric: Fabric, tenant: str, n: int, *, resource: str = "u1") -> list[str]:
    """``n`` notes of several kinds over three threads of ``resource`` and a file note
    scope without a thread."""
    ids: list[str] = []
    for i in range(n):
        notes = fabric.scope(tenant, resource, f"t{i % 3}")
        if i % 10 == 0:
            ids.append(notes.remember(kind="file", path=f"src/mod{i}.py", content=f"module {i} of {tenant}").id)
        elif i % 10 == 1:
            ids.append(notes.remember(kind="procedure", content=f"step {i} for {tenant}").id)
        else:
            ids.append(notes.remember(kind="fact", content=f"fact number {i} about {tenant}").id)
    return ids


def test_erase_scope_tombstones_every_note_in_batches(plain: Fabric) -> None:
    fabric = plain
    acme_ids = _fill(fabric, "acme", 150)
    globex_ids = _fill(fabric, "globex", 20)
    fabric.scope("acme", "u1", "t0").remember(kind="working", block="scratch", content="draft plan")
    fabric.scope("acme").remember(kind="fact", content="tenant wide policy", consent={"visibility": "tenant"})
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_note_scope WHERE tenant_id = 'acme'")[0][0] == 152

    res = fabric.erase_scope("acme", requested_by="dpo")

    assert (res.deleted, res.held, res.already_held, res.remaining) == (152, 0, 0, 0)
    assert res.batches == 2
    assert (res.tenant_id, res.resource_id, res.thread_id) == ("acme", None, None)
    assert forgotten_events(fabric.dsn) == 152
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_recall_index WHERE tenant_id = 'acme'")[0][0] == 0
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_note_scope WHERE tenant_id = 'acme'")[0][0] == 0
    assert fabric.scope("acme", "u1", "t0").working_value()["_fabric"]["blocks"] == {}
    acme_keys = sum(keys_of(fabric.dsn, "acme", "u1", f"t{k}", acme_ids) for k in range(3))
    assert acme_keys == 0
    tomb = fabric.scope("acme", "u1", "t1").history(acme_ids[1])[-1]
    assert tomb.fields["requested_by"] == "dpo" and tomb.cause == "erase_scope"

    # the other tenant is untouched
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_recall_index WHERE tenant_id = 'globex'")[0][0] == 20
    assert sum(keys_of(fabric.dsn, "globex", "u1", f"t{k}", globex_ids) for k in range(3)) == 20
    assert recalled(fabric.scope("globex", "u1", "t2"), "fact number 2 about globex", top_k=1) == [globex_ids[2]]

    # a second erasure finds nothing left to do
    before = event_count(fabric.dsn)
    again = fabric.erase_scope("acme")
    assert (again.deleted, again.remaining, again.batches) == (0, 0, 0)
    assert event_count(fabric.dsn) == before


def test_erase_scope_prefixes_stop_at_their_boundary(plain: Fabric) -> None:
    fabric = plain
    _fill(fabric, "acme", 9, resource="u1")  # threads t0, t1, t2: 3 notes each
    _fill(fabric, "acme", 3, resource="u2")
    assert fabric.erase_scope("acme", "u1", "t1").deleted == 3
    assert fabric.erase_scope("acme", "u1").deleted == 6
    rows = fetch(fabric.dsn, "SELECT resource_id, count(*) FROM mf_note_scope GROUP BY 1")
    assert rows == [("u2", 3)]
    assert fabric.erase_scope("acme", None, "t0", batch_size=1).deleted == 1  # thread t0 of u2
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_note_scope")[0][0] == 2


def test_erase_scope_respects_and_applies_legal_holds(plain: Fabric) -> None:
    fabric = plain
    ids = _fill(fabric, "acme", 12)
    held_note = fabric.scope("acme", "u1", "t2").forget(id=ids[2], hold=True)
    assert held_note.held

    res = fabric.erase_scope("acme", "u1", hold=True, requested_by="court order 17", batch_size=5)
    assert (res.deleted, res.held, res.already_held, res.remaining) == (0, 11, 1, 0)
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_note_scope WHERE held")[0][0] == 12
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_recall_index")[0][0] == 0
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_note_keys")[0][0] == 12

    before = event_count(fabric.dsn)
    res = fabric.erase_scope("acme")
    assert (res.deleted, res.held, res.already_held, res.remaining) == (0, 0, 12, 0)
    assert event_count(fabric.dsn) == before
    assert fabric.scope("acme", "u1", "t0").get(ids[0]).content == "module 0 of acme"


def test_erase_scope_rejects_bad_arguments(fabric: Fabric) -> None:
    fabric.scope("acme", "u", "t").remember(kind="fact", content="stays")
    before = event_count(fabric.dsn)
    for kwargs in ({"tenant_id": "bad tenant"}, {"tenant_id": ""},
                   {"tenant_id": "acme", "resource_id": "a/b"},
                   {"tenant_id": "acme", "hold": "no"}, {"tenant_id": "acme", "batch_size": 0},
                   {"tenant_id": "acme", "batch_size": 5000},
                   {"tenant_id": "acme", "requested_by": ""}):
        name = next(k for k in kwargs if k != "tenant_id" or len(kwargs) == 1)
        with pytest.raises(ValidationError, match=name):
            fabric.erase_scope(**kwargs)  # type: ignore[arg-type]
    assert event_count(fabric.dsn) == before


# ------------------------------------------------------------------- file notes
class CountingEmbedder:
    """The hash embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        self.inner = HashEmbedder()
        self.id, self.dim = self.inner.id, self.inner.dim
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def test_repoint_moves_only_file_notes_of_that_path_without_reembedding(dsn: str) -> None:
    embedder = CountingEmbedder()
    with open_fabric(dsn, embedder=embedder) as fabric:
        notes = fabric.scope("acme", "repo-1", "t")
        moved = notes.remember(kind="file", path="src/app.py", content="entry point of the web app",
                               source_entry_ids=["commit-1"], tags=["code"], keywords=["flask"])
        other = notes.remember(kind="file", path="src/db.py", content="database access layer")
        fact = notes.remember(kind="fact", content="src/app.py")  # content equals the path
        elsewhere = fabric.scope("acme", "repo-2", "t").remember(
            kind="file", path="src/app.py", content="another repository's app")
        row_sql = ("SELECT note_id, path, content, embedding::text, source_entry_ids, tags"
                   " FROM mf_recall_index WHERE note_id = %s")
        before_row = fetch(dsn, row_sql, (moved.id,))[0]
        uuid = note_uuid(notes.scope, moved.id)
        before_bytes = fabric.log.repository.get(uuid).embedding
        events = event_count(dsn)
        embedded = len(embedder.texts)

        res = notes.repoint("src/app.py", "app/main.py")

        assert (res.repointed, res.held) == ((moved.id,), ())
        assert event_count(dsn) == events + 1
        assert len(embedder.texts) == embedded
        after_row = fetch(dsn, row_sql, (moved.id,))[0]
        assert after_row[1] == "app/main.py"
        assert after_row[0] == before_row[0] and after_row[2:] == before_row[2:]
        assert fabric.log.repository.get(uuid).embedding == before_bytes
        last = notes.history(moved.id)[-1]
        assert last.type == "Repointed"
        assert (last.fields["from_path"], last.fields["to_path"]) == ("src/app.py", "app/main.py")
        got = notes.get(moved.id)
        assert (got.path, got.content, got.source_entry_ids, got.keywords) == (
            "app/main.py", "entry point of the web app", ("commit-1",), ("flask",))
        for untouched, path in ((other, "src/db.py"), (elsewhere, "src/app.py")):
            assert fetch(dsn, "SELECT path, version FROM mf_recall_index WHERE note_id = %s",
                         (untouched.id,))[0] == (path, 1)
        assert fetch(dsn, "SELECT version FROM mf_recall_index WHERE note_id = %s", (fact.id,))[0][0] == 1
        # the old path no longer matches anything
        assert notes.repoint("src/app.py", "x.py").repointed == ()
        assert event_count(dsn) == events + 1


def test_repoint_and_delete_path_refuse_another_scope(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "repo-1", "t")
    n = notes.remember(kind="file", path="a.txt", content="a text file")
    before = event_count(fabric.dsn)
    with pytest.raises(ScopeError):
        notes.repoint("a.txt", "b.txt", scope={"tenant_id": "acme", "resource_id": "repo-2", "thread_id": "t"})
    with pytest.raises(ScopeError):
        notes.delete_path("a.txt", scope=Scope(tenant_id="globex", resource_id="repo-1", thread_id="t"))
    with pytest.raises(ValidationError, match="tenant_id"):
        notes.delete_path("a.txt", scope={"tenant_id": "no such!"})
    with pytest.raises(ValidationError, match="to_path"):
        notes.repoint("a.txt", "a.txt")
    with pytest.raises(ValidationError, match="from_path"):
        notes.repoint("", "b.txt")
    with pytest.raises(ValidationError, match="path"):
        notes.delete_path("x" * 1025)
    with pytest.raises(ValidationError, match="hold"):
        notes.delete_path("a.txt", hold="true")  # type: ignore[arg-type]
    assert event_count(fabric.dsn) == before
    # naming its own scope is fine
    assert notes.repoint("a.txt", "b.txt", scope=notes.scope).repointed == (n.id,)


def test_delete_path_tombstones_the_notes_of_that_path(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "repo-1", "t")
    first = notes.remember(kind="file", path="docs/secret.md", content="salary table for 2024")
    second = notes.remember(kind="file", path="docs/secret.md", content="bonus plan draft", id="bbbbbbbbbbbb")
    kept = notes.remember(kind="file", path="docs/public.md", content="docs/secret.md")
    other_scope = fabric.scope("acme", "repo-2", "t").remember(
        kind="file", path="docs/secret.md", content="unrelated repository notes")

    res = notes.delete_path("docs/secret.md", requested_by="ci")

    assert sorted(res.deleted) == sorted([first.id, second.id]) and res.held == ()
    assert notes.get(first.id).forgotten and notes.get(second.id).forgotten
    assert notes.history(second.id)[-1].fields["requested_by"] == "ci"
    assert notes.history(second.id)[-1].cause == "delete_path"
    assert notes.history(second.id)[0].fields["path"] == ERASED
    assert keys_of(fabric.dsn, "acme", "repo-1", "t", [first.id, second.id]) == 0
    assert recalled(notes, "salary table bonus plan", kinds=["file"], min_relevance=0) == [kept.id]
    assert not notes.get(kept.id).forgotten
    assert not fabric.scope("acme", "repo-2", "t").get(other_scope.id).forgotten
    before = event_count(fabric.dsn)
    assert notes.delete_path("docs/secret.md").deleted == ()
    assert event_count(fabric.dsn) == before


def test_delete_path_with_hold_and_repoint_skip_held_notes(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "repo-1", "t")
    n = notes.remember(kind="file", path="ledger.csv", content="quarterly ledger")
    res = notes.delete_path("ledger.csv", hold=True, requested_by="auditor")
    assert (res.deleted, res.held) == ((), (n.id,))
    assert notes.get(n.id).held and notes.get(n.id).content == "quarterly ledger"
    before = event_count(fabric.dsn)
    moved = notes.repoint("ledger.csv", "archive/ledger.csv")
    assert (moved.repointed, moved.held) == ((), (n.id,))
    again = notes.delete_path("ledger.csv")
    assert (again.deleted, again.held) == ((), (n.id,))
    assert event_count(fabric.dsn) == before


def test_held_and_forgotten_notes_never_reach_the_context(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u", "t")
    held = notes.remember(kind="fact", content="the Glimmerquartz merger closes in June")
    gone = notes.remember(kind="fact", content="the Glimmerquartz audit found two issues")
    shown = notes.remember(kind="fact", content="Glimmerquartz staff party on Friday")
    notes.remember(kind="working", block="held-plan", content="Glimmerquartz negotiation plan")
    notes.remember(kind="working", block="todo", content="book the Glimmerquartz venue")
    notes.forget(id=held.id, hold=True)
    notes.forget(id=gone.id)
    hold = notes.forget(block="held-plan", hold=True)
    assert (hold.block, hold.deleted, hold.held) == ("held-plan", 0, True)

    context = notes.context_provider(query="Glimmerquartz merger audit negotiation plan")()

    text = "\n".join(part["text"] for part in context)
    assert "staff party" in text and "book the Glimmerquartz venue" in text
    for hidden in ("merger closes", "audit found", "negotiation plan"):
        assert hidden not in text
    assert {p["type"] for p in context} == {"working-memory", "semantic-memory"}
    assert shown.id in recalled(notes, "Glimmerquartz merger audit party")


def test_a_read_racing_forget_never_caches_the_destroyed_key(fabric: Fabric) -> None:
    """A read that SELECTed a note's key just before ``forget`` committed must not put the
    destroyed key back into the shared cache (it would decrypt the forgotten note for
    another ``ttl`` seconds). The reader is paused between its SELECT and its caching."""
    import threading

    notes = fabric.scope("keyrace", "u1", "th1")
    n = notes.remember(kind="fact", content="Secret: the vault code is 7741")
    store = fabric.log.keys
    oid = note_uuid(Scope(tenant_id="keyrace", resource_id="u1", thread_id="th1"), n.id)
    gen = next(g for (o, g) in list(store._cache) if o == oid)
    with store._lock:
        store._cache.clear()                       # the reader must go to the database
    fetched, go = threading.Event(), threading.Event()
    real = store.remember

    def paused(keys: dict, *, epoch: int) -> None:  # type: ignore[type-arg]
        if threading.current_thread().name == "reader":
            fetched.set()
            go.wait(10)
        real(keys, epoch=epoch)

    store.remember = paused  # type: ignore[method-assign]
    try:
        reader = threading.Thread(target=lambda: store.key_for_read(oid, gen), name="reader")
        reader.start()
        assert fetched.wait(10)                    # the reader holds the key, not yet cached
        assert notes.forget(id=n.id).deleted == 1  # DELETE of the key, evict, commit
        go.set()
        reader.join(10)
    finally:
        store.remember = real  # type: ignore[method-assign]
    assert store.cached(oid, gen) is None
    history = notes.history(n.id)
    assert all("7741" not in str(entry) for entry in history)
