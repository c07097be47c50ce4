"""The Anthropic memory tool handler (SDK class, scripted commands, no network)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import BetaAbstractMemoryTool, ToolError
from memfabric.adapters import Fabric
from memfabric.adapters.anthropic_memory import FabricMemoryTool
from memfabric.domain.note import note_uuid
from memfabric.domain.scope import Scope

from tests.conftest import event_count, fetch


def keys_of(dsn: str, scope: Scope, ids: list[str]) -> int:
    uuids = [note_uuid(scope, i) for i in ids]
    return int(fetch(dsn, "SELECT count(*) FROM mf_note_keys WHERE originator_id = ANY(%s)",
                     (uuids,))[0][0])  # type: ignore[call-overload]


@dataclass
class Session:
    id: str = "claude-1"


S = Session()


def _types(notes: object, note_id: str) -> list[str]:
    return [h.type for h in notes.history(note_id)]  # type: ignore[attr-defined]


def _live_file_notes(notes: object, query: str = "coffee tea notes") -> list[object]:
    res = notes.recall(query, kinds=["file"], top_k=50)  # type: ignore[attr-defined]
    return list(res.hits)


def test_six_commands_are_fabric_events(fabric: Fabric, dsn: str, tmp_path: Path) -> None:
    notes = fabric.scope("acme", "u", "t")
    tool = FabricMemoryTool(notes, tmp_path, session=S)
    assert isinstance(tool, BetaAbstractMemoryTool)
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"}

    with pytest.raises(ToolError, match="NotAttachedError"):  # refused before attach
        tool.call({"command": "view", "path": "/memories"})
    assert event_count(dsn) == 0

    with notes.attach(S):
        out = tool.call({"command": "create", "path": "/memories/prefs.md",
                         "file_text": "Likes coffee\nHates tea\n"})
        assert out == "File created successfully at: /memories/prefs.md"
        assert (tmp_path / "prefs.md").read_text() == "Likes coffee\nHates tea\n"
        [hit] = _live_file_notes(notes)
        first_id = hit.id  # type: ignore[attr-defined]
        assert hit.path == "prefs.md" and "Likes coffee" in hit.content  # type: ignore[attr-defined]
        with pytest.raises(ToolError, match="already exists"):
            tool.call({"command": "create", "path": "/memories/prefs.md", "file_text": "x"})

        out = tool.call({"command": "view", "path": "/memories"})
        assert "/memories/prefs.md" in out
        out = tool.call({"command": "view", "path": "/memories/prefs.md", "view_range": [2, 2]})
        assert out.endswith("     2\tHates tea")

        tool.call({"command": "str_replace", "path": "/memories/prefs.md",
                   "old_str": "Hates tea", "new_str": "Loves green tea"})
        assert (tmp_path / "prefs.md").read_text() == "Likes coffee\nLoves green tea\n"
        hits = _live_file_notes(notes)
        assert len(hits) == 1 and "Loves green tea" in hits[0].content  # type: ignore[attr-defined]
        with pytest.raises(ToolError, match="did not appear"):
            tool.call({"command": "str_replace", "path": "/memories/prefs.md",
                       "old_str": "absent", "new_str": "x"})

        tool.call({"command": "insert", "path": "/memories/prefs.md", "insert_line": 1,
                   "insert_text": "Drinks it black\n"})
        assert (tmp_path / "prefs.md").read_text() == "Likes coffee\nDrinks it black\nLoves green tea\n"
        [hit] = _live_file_notes(notes)
        assert "Drinks it black" in hit.content  # type: ignore[attr-defined]
        live_id = hit.id  # type: ignore[attr-defined]
        with pytest.raises(ToolError, match="insert_line"):
            tool.call({"command": "insert", "path": "/memories/prefs.md", "insert_line": 99,
                       "insert_text": "x"})

        tool.call({"command": "rename", "old_path": "/memories/prefs.md",
                   "new_path": "/memories/people/me.md"})
        assert not (tmp_path / "prefs.md").exists() and (tmp_path / "people/me.md").is_file()
        moved = notes.get(live_id)
        assert moved.path == "people/me.md" and moved.id == live_id  # same note, repointed
        assert _types(notes, live_id)[-1] == "Repointed"

        assert keys_of(dsn, notes.scope, [live_id]) == 1
        tool.call({"command": "delete", "path": "/memories/people"})
        assert not (tmp_path / "people").exists()
        assert _types(notes, live_id)[-1] == "Forgotten"
        assert _live_file_notes(notes) == []
        # crypto-shredded: the forgotten note's data key is destroyed
        assert keys_of(dsn, notes.scope, [live_id]) == 0
        assert first_id

        with pytest.raises(ToolError, match="directory itself"):
            tool.call({"command": "delete", "path": "/memories"})


def test_memory_tool_jail(fabric: Fabric, tmp_path: Path) -> None:
    root = tmp_path / "mem"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "link").symlink_to(outside, target_is_directory=True)
    notes = fabric.scope("acme", "u", "t")
    tool = FabricMemoryTool(notes, root, session=S)
    with notes.attach(S):
        for cmd in (
            {"command": "view", "path": "/etc/passwd"},
            {"command": "view", "path": "/memories/../outside/secret.txt"},
            {"command": "view", "path": "/memories/link/secret.txt"},
            {"command": "create", "path": "/memories/link/new.txt", "file_text": "x"},
            {"command": "delete", "path": "/memories/link/secret.txt"},
            {"command": "rename", "old_path": "/memories/link/secret.txt",
             "new_path": "/memories/stolen.txt"},
            {"command": "str_replace", "path": "/memories/link/secret.txt",
             "old_str": "secret", "new_str": "pwned"},
        ):
            with pytest.raises(ToolError):
                tool.call(cmd)
    assert (outside / "secret.txt").read_text() == "secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert sorted(p.name for p in root.iterdir()) == ["link"]


def test_every_command_method_checks_the_gate(fabric: Fabric, dsn: str, tmp_path: Path) -> None:
    """Issue 26 defect 5: ``tool.create(cmd)`` on a never-attached session wrote the
    file and its note (only ``call`` / ``execute`` checked)."""
    from anthropic.types.beta import (
        BetaMemoryTool20250818CreateCommand,
        BetaMemoryTool20250818DeleteCommand,
        BetaMemoryTool20250818InsertCommand,
        BetaMemoryTool20250818RenameCommand,
        BetaMemoryTool20250818StrReplaceCommand,
        BetaMemoryTool20250818ViewCommand,
    )

    notes = fabric.scope("acme", "u", "t")
    (tmp_path / "old.md").write_text("Likes coffee\n")
    tool = FabricMemoryTool(notes, tmp_path, session=S)
    commands = [
        (tool.create, BetaMemoryTool20250818CreateCommand(command="create", path="/memories/a.md", file_text="x")),
        (tool.view, BetaMemoryTool20250818ViewCommand(command="view", path="/memories/old.md")),
        (tool.str_replace, BetaMemoryTool20250818StrReplaceCommand(
            command="str_replace", path="/memories/old.md", old_str="coffee", new_str="tea")),
        (tool.insert, BetaMemoryTool20250818InsertCommand(
            command="insert", path="/memories/old.md", insert_line=0, insert_text="x")),
        (tool.rename, BetaMemoryTool20250818RenameCommand(
            command="rename", old_path="/memories/old.md", new_path="/memories/new.md")),
        (tool.delete, BetaMemoryTool20250818DeleteCommand(command="delete", path="/memories/old.md")),
    ]
    for method, command in commands:
        with pytest.raises(ToolError, match="NotAttachedError"):
            method(command)  # type: ignore[operator]
    assert event_count(dsn) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.md"]
    assert (tmp_path / "old.md").read_text() == "Likes coffee\n"
    with notes.attach(S):
        assert commands[0][0](commands[0][1]) == "File created successfully at: /memories/a.md"  # type: ignore[operator]


def test_the_memory_tool_over_a_principal_is_governed_and_logged(fabric: Fabric, tmp_path: Path) -> None:
    """Issue 33: the Anthropic memory tool built on ``notes.as_principal(agent)`` checks
    every command against the agent's profile: a profile that may read but not write
    ``file`` notes gets a refused ``create`` (the model sees ``AccessDenied`` naming the
    rule, no file, no event), a served ``view``; both calls are in the access log."""
    notes = fabric.scope("acme", "u", "t")
    with notes.attach(S):
        FabricMemoryTool(notes, tmp_path, session=S).call(
            {"command": "create", "path": "/memories/prefs.md", "file_text": "Likes coffee\n"})
    fabric.principals.define("claude-reader", {"read_kinds": ["file"], "recall_scope": ["acme/u/*"]})
    reader = notes.as_principal("claude-reader")
    tool = FabricMemoryTool(reader, tmp_path, session=S)
    with reader.attach(S):
        with pytest.raises(ToolError, match="AccessDenied"):
            tool.call({"command": "create", "path": "/memories/other.md", "file_text": "x"})
        assert not (tmp_path / "other.md").exists()
        assert "Likes coffee" in tool.call({"command": "view", "path": "/memories/prefs.md"})
    outcomes = [(r.operation, r.outcome) for r in fabric.access_log(principal="claude-reader")]
    assert ("remember", "denied") in outcomes
    assert len(_live_file_notes(notes)) == 1


def test_the_memory_tool_reads_files_through_the_principals_profile(fab: Any, tmp_path: Path) -> None:
    """Issue 33, on both backends: ``view`` (a file or a directory) and the reads of
    ``str_replace`` / ``insert`` over a principal's handle ask the profile first. A
    profile that reads ``file`` notes of ``acme/u/*`` is served (one ``memory.view``
    record per view); one that reads only facts, or whose ``recall_scope`` misses the
    scope, gets ``AccessDenied`` naming the rule, sees no content and changes no file."""
    notes = fab.scope("acme", "u", "t")
    with notes.attach(S):
        FabricMemoryTool(notes, tmp_path, session=S).call(
            {"command": "create", "path": "/memories/prefs.md", "file_text": "Likes coffee\n"})
    fab.principals.define("files", {"read_kinds": ["file"], "recall_scope": ["acme/u/*"]})
    fab.principals.define("facts", {"read_kinds": ["fact"], "write_kinds": ["file"], "writes": "commit",
                                    "recall_scope": ["acme/u/*"]})
    fab.principals.define("other", {"read_kinds": ["file"], "recall_scope": ["acme/u2/*"]})
    served = notes.as_principal("files")
    with served.attach(S):
        tool = FabricMemoryTool(served, tmp_path, session=S)
        assert "Likes coffee" in tool.call({"command": "view", "path": "/memories/prefs.md"})
        assert "prefs.md" in tool.call({"command": "view", "path": "/memories"})
    assert [(r.operation, r.outcome, r.kinds) for r in fab.access_log(principal="files")] == [
        ("memory.view", "served", ("file",))] * 2
    for agent, rule in (("facts", "read_kinds"), ("other", "recall_scope")):
        handle = notes.as_principal(agent)
        tool = FabricMemoryTool(handle, tmp_path, session=S)
        with handle.attach(S):
            for command in ({"command": "view", "path": "/memories/prefs.md"},
                            {"command": "view", "path": "/memories"},
                            {"command": "str_replace", "path": "/memories/prefs.md", "old_str": "coffee",
                             "new_str": "tea"},
                            {"command": "insert", "path": "/memories/prefs.md", "insert_line": 0,
                             "insert_text": "x"}):
                with pytest.raises(ToolError, match="AccessDenied") as caught:
                    tool.call(command)
                assert "coffee" not in str(caught.value) and "prefs.md" not in str(caught.value)
        assert [(r.operation, r.outcome, r.rule) for r in fab.access_log(principal=agent)] == [
            ("memory.view", "denied", rule), ("memory.view", "denied", rule),
            ("memory.str_replace", "denied", rule), ("memory.insert", "denied", rule)]
    assert (tmp_path / "prefs.md").read_text() == "Likes coffee\n"
