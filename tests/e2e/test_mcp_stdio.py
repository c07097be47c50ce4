"""``memfabric mcp`` end to end: the official MCP client over stdio against a real
subprocess on the test database."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from memfabric.adapters import open_fabric


def _memfabric() -> str:
    exe = Path(sys.executable).with_name("memfabric")
    return str(exe) if exe.exists() else (shutil.which("memfabric") or "memfabric")


def _payload(result: Any) -> dict[str, Any]:
    text = result.content[0].text
    data: dict[str, Any] = json.loads(text)
    if result.structuredContent is not None:
        assert result.structuredContent == data
    return data


async def _session_run(dsn: str, root: Path, outside: Path) -> dict[str, Any]:
    params = StdioServerParameters(
        command=_memfabric(),
        args=["mcp", "--tenant", "acme", "--resource", "u", "--thread", "t",
              "--root", str(root), "--dsn", dsn],
        env={**os.environ},
    )
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        out["names"] = [t.name for t in listed.tools]
        out["read_only"] = {t.name: bool(t.annotations and t.annotations.readOnlyHint)
                            for t in listed.tools}

        ins = await session.call_tool("memory.insert", {
            "text": "User prefers metric units", "path": "prefs/units.md"})
        assert not ins.isError, ins.content
        out["insert"] = _payload(ins)
        blk = await session.call_tool("memory_insert", {"text": "likes tea", "block": "persona"})
        assert not blk.isError, blk.content
        out["block"] = _payload(blk)

        rec = await session.call_tool("memory_recall", {"query": "preferred units"})
        assert not rec.isError, rec.content
        out["recall"] = _payload(rec)

        hist = await session.call_tool("memory_history", {"id": out["insert"]["note_id"]})
        out["history"] = _payload(hist)

        esc = await session.call_tool("memory_insert", {
            "text": "pwned", "path": "../outside/evil.md"})
        out["escape"] = (esc.isError, _payload(esc))
        esc2 = await session.call_tool("memory_read", {"path": "link/secret.txt"})
        out["escape_symlink"] = (esc2.isError, _payload(esc2))
        bad = await session.call_tool("memory_recall", {"query": "secret words", "top_k": "x"})
        out["bad"] = (bad.isError, _payload(bad))

        fgt = await session.call_tool("memory_forget", {"id": out["insert"]["note_id"]})
        assert not fgt.isError, fgt.content
        out["forget"] = _payload(fgt)
        rec2 = await session.call_tool("memory_recall", {"query": "preferred units"})
        out["recall_after"] = _payload(rec2)
    return out


def test_mcp_stdio_round_trip(dsn: str, tmp_path: Path) -> None:
    with open_fabric(dsn):
        pass  # create the tables before the subprocess starts
    root = tmp_path / "mem"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "link").symlink_to(outside, target_is_directory=True)

    out = anyio.run(_session_run, dsn, root, outside)

    assert out["names"] == ["memory_view", "memory_read", "memory_insert", "memory_recall",
                            "memory_forget", "memory_history", "memory_lineage"]
    assert out["read_only"]["memory_recall"] and not out["read_only"]["memory_forget"]
    assert out["insert"]["path"] == "prefs/units.md" and out["insert"]["note_id"]
    assert (root / "prefs/units.md").read_text() == "User prefers metric units"
    assert out["block"]["outcome"] == "inserted"
    note_id = out["insert"]["note_id"]
    assert out["recall"]["hits"][0]["id"] == note_id
    assert out["recall"]["explain"][0]["id"] == note_id
    assert out["history"]["events"][0]["type"] == "Remembered"
    is_error, payload = out["escape"]
    assert is_error and payload["error"]["type"] == "JailError"
    assert not (outside / "evil.md").exists() and not (tmp_path / "outside" / "evil.md").exists()
    is_error, payload = out["escape_symlink"]
    assert is_error and payload["error"]["type"] == "JailError"
    assert "secret" not in json.dumps(payload)
    is_error, payload = out["bad"]
    assert is_error and payload["error"]["type"] == "ValidationError"
    assert "secret words" not in json.dumps(payload)
    assert out["forget"] == {"id": note_id, "block": None, "deleted": 1, "held": False}
    assert all(h["id"] != note_id for h in out["recall_after"]["hits"])

    with open_fabric(dsn) as fabric:  # the events are in the log, seen by another process
        notes = fabric.scope("acme", "u", "t")
        assert [h.type for h in notes.history(note_id)][-1] == "Forgotten"
        assert "persona" in notes.working_value()["_fabric"]["blocks"]
