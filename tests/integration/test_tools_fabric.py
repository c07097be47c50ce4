"""Attach gate and memory tools on a real fabric (embedded PostgreSQL)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.jail import JailError
from memfabric.adapters.tools import MemoryTools
from memfabric.domain.attach import (
    AttachConfig,
    AttachSettings,
    NotAttachedError,
    SessionError,
)
from memfabric.domain.errors import CapacityError, ConflictError
from memfabric.domain.notes import Notes
from pydantic import ValidationError

from tests.conftest import event_count


@dataclass
class Session:
    id: str = "sess-1"

    def entries(self) -> list[object]:
        return []


S = Session()


def _pool_thread(t: threading.Thread) -> bool:
    # psycopg_pool's connection-pool maintenance threads (opened by the PostgreSQL
    # adapter's pool, not by memfabric): the only threads an open fabric has.
    return t.name.startswith("pool-")


def test_nothing_starts_on_import_or_open(dsn: str, tmp_path: Path) -> None:
    before = set(threading.enumerate())
    import memfabric.adapters.tools
    import memfabric.domain.attach  # noqa: F401

    with open_fabric(dsn) as fabric:
        new = [t for t in threading.enumerate() if t not in before]
        assert all(_pool_thread(t) for t in new), [t.name for t in new]
        after_open = set(threading.enumerate())
        notes = fabric.scope("acme", "u", "t")
        tools = notes.tools(tmp_path)
        assert set(threading.enumerate()) == after_open  # tools are inert
        with notes.attach(S):
            tools.call("memory.insert", {"text": "hello", "block": "todo"}, session=S)
            # a write may start the recall tail's indexer (issue 24), nothing else
            started = {t.name for t in threading.enumerate() if not _pool_thread(t)} - {
                t.name for t in after_open if not _pool_thread(t)}
            assert started <= {"memfabric-tail-indexer"}, started


@pytest.fixture
def notes_tools(fabric: Fabric, tmp_path: Path) -> tuple[object, MemoryTools, Path]:
    root = tmp_path / "mem"
    root.mkdir()
    notes = fabric.scope("acme", "u", "t")
    return notes, notes.tools(root), root


ALL_CALLS = [
    ("memory.view", {}), ("memory.read", {"path": "a.md"}),
    ("memory.insert", {"text": "x", "block": "todo"}),
    ("memory.insert", {"text": "x", "path": "a.md"}),
    ("memory.recall", {"query": "x"}), ("memory.forget", {"block": "todo"}),
    ("memory.history", {"id": "0123456789ab"}), ("memory.lineage", {"id": "0123456789ab"}),
    ("memory.entities", {"name": "Maria Lopez"}), ("memory.entities", {"id": "0123456789ab"}),
]


def test_every_tool_refused_before_attach_after_detach_and_abort(
        fabric: Fabric, dsn: str, notes_tools: tuple[object, MemoryTools, Path]) -> None:
    notes, tools, root = notes_tools
    (root / "a.md").write_text("seed")
    n0 = event_count(dsn)

    def refused() -> None:
        for name, args in ALL_CALLS:
            with pytest.raises(NotAttachedError):
                tools.call(name, args, session=S)
        assert event_count(dsn) == n0
        assert (root / "a.md").read_text() == "seed"

    refused()
    att = notes.attach(S)  # type: ignore[attr-defined]
    assert tools.call("memory.view", {}, session=S)["entries"][0]["name"] == "a.md"
    with pytest.raises(NotAttachedError):
        tools.call("memory.view", {}, session=Session("other"))
    other_scope = fabric.scope("acme", "u", "t2").tools(root)
    with pytest.raises(NotAttachedError):
        other_scope.call("memory.view", {}, session=S)
    att.detach()
    refused()
    signal = threading.Event()
    with notes.attach(S, signal=signal):  # type: ignore[attr-defined]
        tools.call("memory.view", {}, session=S)
        signal.set()
        refused()
    # a handle made later for the same scope sees the same gate
    with notes.attach(S):  # type: ignore[attr-defined]
        fabric.scope("acme", "u", "t").tools(root).call("memory.view", {}, session=S)


def test_attach_returns_provider_and_settings(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u", "t")
    notes.remember(kind="working", block="persona", content="Likes tea")
    with notes.attach(S) as att:
        assert att.session is S and att.settings == AttachSettings()
        blocks = att.context_provider("tea")
        assert any("Likes tea" in b["text"] for b in blocks)
    with pytest.raises(NotAttachedError):
        att.context_provider("tea")


def test_attach_fails_closed(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u", "t")
    for bad in ("sess-1", None, type("X", (), {"id": "a", "entries": 3})()):
        with pytest.raises(SessionError):
            notes.attach(bad)
    pinned = Notes(fabric.service.replace(attach_config=AttachConfig(session_id="the-one")), notes.scope)
    with pytest.raises(SessionError):
        pinned.attach(S)
    with pinned.attach(Session("the-one")) as att:
        assert att.active


def test_block_insert_caps_and_versions(dsn: str, tmp_path: Path) -> None:
    with open_fabric(dsn, limits={"max_entry_text_chars": 20}) as fabric:
        notes = fabric.scope("acme", "u", "t")
        tools = notes.tools()
        with notes.attach(S):
            r = tools.call("memory.insert", {"text": "buy milk", "block": "todo"}, session=S)
            assert r["outcome"] == "inserted" and r["version"] == 1
            r = tools.call("memory.insert", {"text": "call bob", "block": "todo"}, session=S)
            assert r["outcome"] == "appended" and r["chars"] == 17
            before = notes.working_value()
            n0 = event_count(dsn)
            with pytest.raises(CapacityError):  # 17 + 1 + 3 > 20
                tools.call("memory.insert", {"text": "tea", "block": "todo"}, session=S)
            assert notes.working_value() == before and event_count(dsn) == n0
            # a concurrent writer between the read and the append: ConflictError, no write
            real = notes.append_block

            def racing(block: str, text: str, *, expected_version: int | None = None) -> object:
                notes.remember(kind="working", block="todo", content="replaced")
                return real(block, text, expected_version=expected_version)

            notes.append_block = racing  # type: ignore[method-assign]
            with pytest.raises(ConflictError):
                tools.call("memory.insert", {"text": "x", "block": "todo"}, session=S)
            assert notes.working_value()["_fabric"]["blocks"]["todo"]["content"] == "replaced"
            # inserted text is data: it changes neither configuration nor the gate
            tools.call("memory.insert", {"text": '{"passive": true}', "block": "cfg"}, session=S)
            assert notes.attach(Session("s9")).settings == AttachSettings()


def test_file_insert_refreshes_note(dsn: str, tmp_path: Path) -> None:
    with open_fabric(dsn, limits={"max_entry_text_chars": 30}) as fabric:
        notes = fabric.scope("acme", "u", "t")
        tools = notes.tools(tmp_path, max_file_bytes=64)
        with notes.attach(S):
            r = tools.call("memory.insert", {"text": "User prefers metric units",
                                             "path": "prefs/units.md"}, session=S)
            assert r["created"] and r["size"] == 25 and r["note_truncated"] is False
            note = notes.get(r["note_id"])
            assert note.kind == "file" and note.path == "prefs/units.md"
            assert note.content == "User prefers metric units"
            r = tools.call("memory.insert", {"text": "and Celsius", "path": "prefs/units.md"},
                           session=S)
            assert r["size"] == 37 and r["note_truncated"] is True
            assert (tmp_path / "prefs/units.md").read_text() == "User prefers metric units\nand Celsius"
            assert notes.get(r["note_id"]).content == "User prefers metric units\nand Celsius"[:30]
            read = tools.call("memory.read", {"path": "prefs/units.md"}, session=S)
            assert read == {"path": "prefs/units.md", "size": 37, "truncated": False,
                            "content": "User prefers metric units\nand Celsius"}
            n0 = event_count(dsn)
            with pytest.raises(CapacityError):
                tools.call("memory.insert", {"text": "x" * 30, "path": "prefs/units.md"}, session=S)
            assert event_count(dsn) == n0 and (tmp_path / "prefs/units.md").stat().st_size == 37
            with pytest.raises(JailError):
                tools.call("memory.insert", {"text": "x", "path": "../escape.md"}, session=S)
            assert not (tmp_path.parent / "escape.md").exists() and event_count(dsn) == n0
            view = tools.call("memory.view", {"path": "prefs"}, session=S)
            assert view["entries"] == [{"name": "units.md", "type": "file", "size": 37}]


def test_recall_and_forget_tools(fabric: Fabric, tmp_path: Path) -> None:
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="User prefers metric units")
    notes.remember(kind="procedure", content="To deploy run make release")
    tools = notes.tools()
    with notes.attach(S):
        res = tools.call("memory_recall", {"query": "zzunique preferred units"}, session=S)
        json.dumps(res)
        assert res["hits"][0]["id"] == n.id and res["explain"][0]["id"] == n.id
        assert "zzunique" not in json.dumps(res)
        assert all(h["kind"] != "procedure" for h in res["hits"])
        res = tools.call("memory.recall", {"query": "deploy", "kinds": ["procedure"]}, session=S)
        assert res["hits"][0]["kind"] == "procedure"
        # issue 26 defect 7: an as_of without an offset is UTC (it was refused)
        naive = tools.call("memory.recall", {"query": "preferred units", "as_of": "2000-01-01T00:00:00"}, session=S)
        aware = tools.call("memory.recall", {"query": "preferred units", "as_of": "2000-01-01T00:00:00+00:00"},
                           session=S)
        assert naive == aware and naive["hits"]
        with pytest.raises(ValidationError):
            tools.call("memory.recall", {"query": "x", "as_of": "last tuesday"}, session=S)
        out = tools.call("memory.forget", {"id": n.id}, session=S)
        assert out == {"id": n.id, "block": None, "deleted": 1, "held": False}
        hits = tools.call("memory.recall", {"query": "preferred units"}, session=S)["hits"]
        assert all(h["id"] != n.id for h in hits)
        hist = tools.call("memory.history", {"id": n.id}, session=S)
        assert [e["type"] for e in hist["events"]][-1] == "Forgotten"
        lin = tools.call("memory.lineage", {"id": n.id}, session=S)
        json.dumps(lin)


def test_attach_refuses_a_session_other_than_the_configured_one(dsn: str) -> None:
    """``open_fabric(session_id=...)``: only that session may attach (fails closed)."""
    from memfabric.adapters import SessionError, open_fabric

    class Session:
        def __init__(self, sid: str) -> None:
            self.id = sid

    with open_fabric(dsn, session_id="agent-1") as fab:
        notes = fab.scope("acme", "u1", "t1")
        with pytest.raises(SessionError):
            notes.attach(Session("agent-2"))
        with notes.attach(Session("agent-1")) as att:
            assert att.session.id == "agent-1"


SSN = "My SSN is 078-05-1120"


def test_forgetting_a_file_note_forgets_the_file(fabric: Fabric, tmp_path: Path) -> None:
    """Issue 26 defect 6: ``memory_forget`` of a file note left the file, so
    ``memory_read`` still returned it and the next insert re-remembered it."""
    notes = fabric.scope("acme", "u", "t")
    tools = notes.tools(tmp_path)
    with notes.attach(S):
        first = tools.call("memory_insert", {"text": SSN, "path": "me.md"}, session=S)
        out = tools.call("memory_forget", {"id": first["note_id"]}, session=S)
        assert out["deleted"] == 1 and out["file_removed"] is True and out["path"] == "me.md"
        assert not (tmp_path / "me.md").exists()
        result, is_error = tools.call_or_error("memory_read", {"path": "me.md"}, session=S)
        assert is_error and result["error"]["type"] == "FilePathError"
        again = tools.call("memory_insert", {"text": "likes tea", "path": "me.md"}, session=S)
        assert again["note_id"] != first["note_id"] and notes.get(again["note_id"]).content == "likes tea"
        hits = tools.call("memory_recall", {"query": "SSN 078-05-1120", "kinds": ["file"]}, session=S)["hits"]
        assert all("078-05" not in (h["content"] or "") for h in hits)
        assert notes.get(first["note_id"]).forgotten
        # a fact note is forgotten as before (no file involved)
        fact = notes.remember(kind="fact", content="User prefers metric units")
        assert tools.call("memory_forget", {"id": fact.id}, session=S) == {
            "id": fact.id, "block": None, "deleted": 1, "held": False}


def test_tool_errors_never_echo_a_path(fabric: Fabric, tmp_path: Path) -> None:
    """Issue 26 defect 7: the jail's errors named the path (or a folder of it)."""
    notes = fabric.scope("acme", "u", "t")
    tools = notes.tools(tmp_path)
    (tmp_path / "real.md").write_text("x")
    with notes.attach(S):
        for name, args in [("memory_read", {"path": "Zanzibar-folder/diagnosis.md"}),
                           ("memory_view", {"path": "Zanzibar-folder"}),
                           ("memory_read", {"path": "Zanzibar-folder//diagnosis.md"}),
                           ("memory_read", {"path": "real.md/Zanzibar.md"}),
                           ("memory_history", {"id": "0123456789ab"})]:
            result, is_error = tools.call_or_error(name, args, session=S)
            assert is_error, name
            text = json.dumps(result)
            assert "Zanzibar" not in text and "diagnosis" not in text and "0123456789ab" not in text, text


def test_a_principal_refused_file_writes_changes_no_file(dsn: str, tmp_path: Path) -> None:
    """Issue 33: the file forms of ``memory.insert`` and ``memory.forget`` on a
    principal's tools ask the profile before touching the jail: a profile that may read
    but not write ``file`` notes gets ``AccessDenied`` with no file created or removed and
    no event, and the refusal is in the access log."""
    from memfabric.domain.errors import AccessDenied

    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "u", "t")
        with notes.attach(S):
            made = notes.tools(tmp_path).call("memory.insert", {"text": "User prefers metric units",
                                                                "path": "prefs/units.md"}, session=S)
        fabric.principals.define("reader", {"read_kinds": ["file"], "recall_scope": ["acme/u/*"]})
        reader = notes.as_principal("reader")
        tools = reader.tools(tmp_path)
        n0 = event_count(dsn)
        with reader.attach(S):
            with pytest.raises(AccessDenied):
                tools.call("memory.insert", {"text": "x", "path": "other.md"}, session=S)
            assert not (tmp_path / "other.md").exists()
            with pytest.raises(AccessDenied):
                tools.call("memory.forget", {"id": made["note_id"]}, session=S)
        assert (tmp_path / "prefs/units.md").read_text() == "User prefers metric units"
        assert event_count(dsn) == n0
        denied = [r for r in fabric.access_log(principal="reader") if r.outcome == "denied"]
        assert [r.operation for r in denied][:1] == ["remember"] and len(denied) == 2


def test_a_principal_reads_files_only_through_its_profile(fab: object, tmp_path: Path) -> None:
    """Issue 33, on both backends: ``memory.view`` and ``memory.read`` on a principal's
    tools ask the profile first: served (and recorded) when it reads ``file`` notes of
    the scope, ``AccessDenied`` naming the rule with no content when it does not."""
    from memfabric.domain.errors import AccessDenied

    notes = fab.scope("acme", "u", "t")  # type: ignore[attr-defined]
    with notes.attach(S):
        notes.tools(tmp_path).call("memory.insert", {"text": "User prefers metric units",
                                                     "path": "prefs/units.md"}, session=S)
    fab.principals.define("files", {"read_kinds": ["file"], "recall_scope": ["acme/u/*"]})  # type: ignore[attr-defined]
    fab.principals.define("facts", {"read_kinds": ["fact"], "recall_scope": ["acme/u/*"]})  # type: ignore[attr-defined]
    files, facts = notes.as_principal("files"), notes.as_principal("facts")
    with files.attach(S):
        tools = files.tools(tmp_path)
        assert tools.call("memory.read", {"path": "prefs/units.md"}, session=S)["content"] == "User prefers metric units"
        assert [e["name"] for e in tools.call("memory.view", {"path": "prefs"}, session=S)["entries"]] == ["units.md"]
    with facts.attach(S):
        tools = facts.tools(tmp_path)
        for name, args in (("memory.read", {"path": "prefs/units.md"}), ("memory.view", {"path": "prefs"})):
            with pytest.raises(AccessDenied, match="read_kinds"):
                tools.call(name, args, session=S)
    log = [(r.principal, r.operation, r.outcome) for r in fab.access_log()]  # type: ignore[attr-defined]
    assert log == [("files", "memory.read", "served"), ("files", "memory.view", "served"),
                   ("facts", "memory.read", "denied"), ("facts", "memory.view", "denied")]
