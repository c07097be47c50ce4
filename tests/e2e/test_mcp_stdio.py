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
        out["schemas"] = {t.name: t.inputSchema for t in listed.tools}
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
        ent = await session.call_tool("memory_entities", {"name": "maria@acme.example"})
        assert not ent.isError, ent.content
        out["entities"] = _payload(ent)

        esc = await session.call_tool("memory_insert", {
            "text": "pwned", "path": "../outside/evil.md"})
        out["escape"] = (esc.isError, _payload(esc))
        esc2 = await session.call_tool("memory_read", {"path": "link/secret.txt"})
        out["escape_symlink"] = (esc2.isError, _payload(esc2))
        bad = await session.call_tool("memory_recall", {"query": "secret words", "top_k": "x"})
        out["bad"] = (bad.isError, _payload(bad))
        missing = await session.call_tool("memory_read", {"path": "Quokka-folder/diagnosis.md"})
        out["missing"] = (missing.isError, _payload(missing))

        fgt = await session.call_tool("memory_forget", {"id": out["insert"]["note_id"]})
        assert not fgt.isError, fgt.content
        out["forget"] = _payload(fgt)
        rec2 = await session.call_tool("memory_recall", {"query": "preferred units"})
        out["recall_after"] = _payload(rec2)
    return out


def assert_provider_safe(schemas: dict[str, Any]) -> None:
    """Issue 26 defect 4: every listed ``inputSchema`` meets the MCP spec and the rules
    of the model APIs a host hands it on to (``tests/unit/provider_rules.py``)."""
    from tests.unit import provider_rules as r

    assert len(schemas) == 8
    for name, schema in schemas.items():
        assert r.TOOL_NAME.match(name)
        for rules in (r.MCP_INPUT_SCHEMA, r.ANTHROPIC_INPUT_SCHEMA, r.OPENAI_PARAMETERS):
            assert r.violations(schema, rules) == [], (name, rules)


def test_mcp_stdio_round_trip(dsn: str, tmp_path: Path) -> None:
    with open_fabric(dsn) as fabric:  # create the tables before the subprocess starts
        maria = fabric.scope("acme", "u", "t").entities.upsert(
            "Maria Lopez", type="person", identifiers=[("email", "maria@acme.example")]).entity
    root = tmp_path / "mem"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "link").symlink_to(outside, target_is_directory=True)

    out = anyio.run(_session_run, dsn, root, outside)

    assert out["names"] == ["memory_view", "memory_read", "memory_insert", "memory_recall",
                            "memory_forget", "memory_history", "memory_lineage", "memory_entities"]
    assert out["read_only"]["memory_entities"]
    assert out["entities"]["candidates"][0] == {"id": maria.id, "tier": "identifier", "score": 1.0,
                                                "type": "person", "display_name": "Maria Lopez"}
    assert out["read_only"]["memory_recall"] and not out["read_only"]["memory_forget"]
    assert out["insert"]["path"] == "prefs/units.md" and out["insert"]["note_id"]
    assert out["insert"]["size"] == len("User prefers metric units") and out["insert"]["created"]
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
    # issue 26 defect 7: the error does not echo the path (nor a folder of it)
    is_error, payload = out["missing"]
    assert is_error and payload["error"]["type"] == "FilePathError"
    assert "Quokka" not in json.dumps(payload) and "diagnosis" not in json.dumps(payload)
    # issue 26 defect 6: forgetting the file note removed the file
    assert out["forget"] == {"id": note_id, "block": None, "deleted": 1, "held": False,
                             "path": "prefs/units.md", "file_removed": True}
    assert not (root / "prefs/units.md").exists()
    assert all(h["id"] != note_id for h in out["recall_after"]["hits"])
    assert_provider_safe(out["schemas"])

    with open_fabric(dsn) as fabric:  # the events are in the log, seen by another process
        notes = fabric.scope("acme", "u", "t")
        assert [h.type for h in notes.history(note_id)][-1] == "Forgotten"
        assert "persona" in notes.working_value()["_fabric"]["blocks"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _http_run(url: str, token: str) -> dict[str, Any]:
    import httpx
    from mcp.client.streamable_http import streamable_http_client

    out: dict[str, Any] = {}
    for _ in range(100):  # wait for the server to listen
        try:
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http, \
                    streamable_http_client(url, http_client=http) as (read, write, _sid), \
                    ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                out["schemas"] = {t.name: t.inputSchema for t in listed.tools}
                ins = await session.call_tool("memory_insert", {"text": "Prefers green tea", "path": "tea.md"})
                out["insert"] = (ins.isError, _payload(ins))
                both = await session.call_tool("memory_forget", {"id": "0123456789ab", "block": "todo"})
                out["both"] = (both.isError, _payload(both))
                fgt = await session.call_tool("memory_forget", {"id": out["insert"][1]["note_id"]})
                out["forget"] = (fgt.isError, _payload(fgt))
                return out
        except (OSError, ExceptionGroup):  # not listening yet
            await anyio.sleep(0.2)
    raise AssertionError("the HTTP server never answered")


def test_mcp_streamable_http_round_trip(dsn: str, tmp_path: Path) -> None:
    """The official MCP client over Streamable HTTP (a bearer token from the
    environment): provider-safe schemas, exactly-one-of as a tool error, and a
    forgotten file note takes its file with it."""
    import subprocess

    with open_fabric(dsn):
        pass
    root = tmp_path / "mem"
    root.mkdir()
    port, token = _free_port(), "t0ken-for-tests"
    proc = subprocess.Popen(
        [_memfabric(), "mcp", "--tenant", "acme", "--resource", "u", "--root", str(root), "--dsn", dsn,
         "--transport", "http", "--port", str(port)],
        env={**os.environ, "MEMFABRIC_MCP_TOKEN": token}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        out = anyio.run(_http_run, f"http://127.0.0.1:{port}/mcp", token)
    finally:
        proc.terminate()
        proc.wait(30)
    assert_provider_safe(out["schemas"])
    is_error, payload = out["insert"]
    assert not is_error and payload["path"] == "tea.md"
    is_error, payload = out["both"]
    assert is_error and payload["error"]["type"] == "ValidationError"
    assert "exactly one of" in payload["error"]["message"]
    is_error, payload = out["forget"]
    assert not is_error and payload["deleted"] == 1 and payload["file_removed"] is True
    assert not (root / "tea.md").exists()
