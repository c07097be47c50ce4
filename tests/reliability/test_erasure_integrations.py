"""Issue 28 defect 1: raw-dump erasure proofs for the integration write paths — the
LangGraph store (and LangMem on it), the agent memory tools, the Anthropic memory
tool, the MCP server over stdio and entities. Each writes a secret, erases it the way the
framework does, runs ``VACUUM FULL`` and reads every table (COPY text and binary) and
every event state with psycopg: the secret appears nowhere."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from memfabric.adapters import Fabric, open_fabric
from tests.conftest import fetch
from tests.integration.test_privacy import dump_every_table


@dataclass
class Session:
    id: str = "sess-erase"


S = Session()


def _vacuum(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM FULL")


def traces(dsn: str, needles: list[str]) -> dict[str, list[str]]:
    """Where each needle (and its lower-case form) still appears: ``"tables"`` (any
    user table, COPY text + binary) and ``"events"`` (the raw ``state`` bytes)."""
    blob, _ = dump_every_table(dsn)
    states = b"".join(bytes(r[0]) for r in fetch(dsn, "SELECT state FROM memfabric_events"))  # type: ignore[call-overload]
    out: dict[str, list[str]] = {}
    for needle in needles:
        for form in {needle, needle.lower()}:
            where = [name for name, data in (("tables", blob), ("events", states)) if form.encode() in data]
            if where:
                out[form] = where
    return out


def test_langgraph_store_delete_leaves_no_trace(fabric: Fabric, dsn: str) -> None:
    """The issue's reproduction: a field value was a plain ``FIELD=JSON`` tag in
    ``memfabric_events.state`` after delete + VACUUM FULL."""
    pytest.importorskip("langgraph.store.base")
    from memfabric.adapters.langgraph import MemfabricStore

    store = MemfabricStore(fabric)
    ns = ("acme", "user-1")
    secrets = ["HIV status is positive", "Quokkazanzibar", "Xylomorph-9"]
    store.put(ns, "m1", {"content": "User's HIV status is positive", "doctor": "Quokkazanzibar", "n": 3})
    store.put(ns, "m1", {"content": "User's HIV status is positive (confirmed)", "code": "Xylomorph-9"})
    assert [i.key for i in store.search(ns, filter={"code": "Xylomorph-9"})] == ["m1"]
    assert traces(dsn, secrets)  # positive control: the live item is in the recall index
    assert "events" not in {w for ws in traces(dsn, secrets).values() for w in ws}  # sealed in the log
    store.delete(ns, "m1")
    _vacuum(dsn)
    assert traces(dsn, secrets) == {}


def test_langmem_create_update_delete_leaves_no_trace(fabric: Fabric, dsn: str) -> None:
    langmem = pytest.importorskip("langmem")
    from memfabric.adapters.langgraph import MemfabricStore

    store = MemfabricStore(fabric)
    manage = langmem.create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"), store=store)
    config = {"configurable": {"langgraph_user_id": "user-7"}}
    manage.invoke({"content": "User's passport number is QX-774411", "action": "create"}, config=config)
    [item] = store.search(("memories", "user-7"))
    manage.invoke({"content": "User's passport number is QX-774411 (renewed)", "action": "update",
                   "id": item.key}, config=config)
    manage.invoke({"action": "delete", "id": item.key}, config=config)
    assert store.search(("memories", "user-7")) == []
    _vacuum(dsn)
    assert traces(dsn, ["QX-774411", "passport number"]) == {}


def test_memory_tools_forget_leaves_no_trace(fabric: Fabric, dsn: str, tmp_path: Path) -> None:
    notes = fabric.scope("acme", "u", "t")
    tools = notes.tools(tmp_path)
    secrets = ["078-05-1120", "Vantablackwood"]
    with notes.attach(S):
        f = tools.call("memory_insert", {"text": "My SSN is 078-05-1120", "path": "me.md"}, session=S)
        tools.call("memory_insert", {"text": "and Vantablackwood is my nurse", "path": "me.md"}, session=S)
        tools.call("memory_insert", {"text": "nurse Vantablackwood, SSN 078-05-1120", "block": "persona"}, session=S)
        assert traces(dsn, secrets)
        assert tools.call("memory_forget", {"id": f["note_id"]}, session=S)["file_removed"] is True
        assert tools.call("memory_forget", {"block": "persona"}, session=S)["deleted"] == 1
    _vacuum(dsn)
    assert traces(dsn, secrets) == {}
    assert not (tmp_path / "me.md").exists()


def test_anthropic_memory_tool_delete_leaves_no_trace(fabric: Fabric, dsn: str, tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    from memfabric.adapters.anthropic_memory import FabricMemoryTool

    notes = fabric.scope("acme", "u", "t")
    tool = FabricMemoryTool(notes, tmp_path, session=S)
    with notes.attach(S):
        tool.call({"command": "create", "path": "/memories/dx.md", "file_text": "Diagnosis: Borogove syndrome\n"})
        tool.call({"command": "str_replace", "path": "/memories/dx.md", "old_str": "Borogove",
                   "new_str": "Borogove-Jabberwock"})
        tool.call({"command": "rename", "old_path": "/memories/dx.md", "new_path": "/memories/Borogove.md"})
        assert traces(dsn, ["Borogove"])
        tool.call({"command": "delete", "path": "/memories/Borogove.md"})
    _vacuum(dsn)
    assert traces(dsn, ["Borogove", "Jabberwock"]) == {}


async def _mcp_writes(dsn: str, root: Path) -> list[dict[str, Any]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from tests.e2e.test_mcp_stdio import _memfabric

    params = StdioServerParameters(
        command=_memfabric(), args=["mcp", "--tenant", "acme", "--resource", "u", "--root", str(root),
                                    "--dsn", dsn], env={**os.environ})
    out = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for name, args in [("memory_insert", {"text": "Lives at 12 Snarkhunt Lane", "path": "home.md"}),
                           ("memory_insert", {"text": "Snarkhunt Lane, flat 4", "block": "address"})]:
            res = await session.call_tool(name, args)
            assert not res.isError, res.content
            out.append(json.loads(res.content[0].text))  # type: ignore[union-attr]
        for args in [{"id": out[0]["note_id"]}, {"block": "address"}]:
            res = await session.call_tool("memory_forget", args)
            assert not res.isError, res.content
            out.append(json.loads(res.content[0].text))  # type: ignore[union-attr]
    return out


def test_mcp_writes_leave_no_trace_after_forget(dsn: str, tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    with open_fabric(dsn):
        pass
    out = anyio.run(_mcp_writes, dsn, tmp_path)
    assert out[2]["file_removed"] is True and out[3]["deleted"] == 1
    _vacuum(dsn)
    assert traces(dsn, ["Snarkhunt"]) == {}


def test_entity_forget_leaves_no_trace(fabric: Fabric, dsn: str) -> None:
    """Entities (issue 32): names, aliases, identifiers and the facts' subject keys that
    named them are gone from every table and every event state once the entity and its
    facts are forgotten (``VACUUM FULL``, raw pages)."""
    notes = fabric.scope("acme", "user-1", "thread-1")
    secrets = ["Quillonia Brask", "Quillonia", "qbrask@hospice.example"]
    e = notes.entities.upsert("Quillonia Brask", type="person",
                              identifiers=[("email", "qbrask@hospice.example")]).entity
    notes.entities.upsert("Quillonia", identifiers=[("email", "qbrask@hospice.example")])  # an alias
    fact = notes.remember(kind="fact", content="Quillonia moved to Porto")
    assert traces(dsn, secrets)  # positive control: the live fact is in the recall index
    assert "events" not in {w for ws in traces(dsn, secrets).values() for w in ws}  # sealed in the log
    notes.forget(id=fact.id)
    assert notes.entities.forget(e.id) is True
    _vacuum(dsn)
    assert traces(dsn, secrets) == {}
