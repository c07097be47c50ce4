"""Issue 33: ``memfabric mcp --principal ID`` over stdio with a real MCP client: the
principal's recall is served within its profile, its block write is refused
(naming the rule, nothing written), and both calls are in the access log."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memfabric.adapters import open_fabric
from tests.e2e.test_mcp_stdio import _memfabric


async def _calls(dsn: str) -> dict[str, Any]:
    params = StdioServerParameters(
        command=_memfabric(), env={**os.environ},
        args=["mcp", "--tenant", "acme", "--resource", "u1", "--thread", "t1", "--principal", "bot", "--dsn", dsn])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        rec = await session.call_tool("memory_recall", {"query": "units"})
        ins = await session.call_tool("memory_insert", {"text": "sneaky", "block": "persona"})
        return {"recall": json.loads(rec.content[0].text), "insert_error": ins.isError,
                "insert": ins.content[0].text}


def test_mcp_serves_as_a_principal(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        mine = fab.scope("acme", "u1", "t1").remember(kind="fact", content="User prefers metric units")
        fab.scope("acme", "u2").remember(kind="fact", content="Other user prefers imperial units",
                                         consent={"visibility": "tenant"})
        fab.principals.define("bot", {"read_kinds": ["fact"], "recall_scope": ["acme/u1/*"]})
    out = anyio.run(_calls, dsn)
    assert [h["id"] for h in out["recall"]["hits"]] == [mine.id]
    # memory_insert reads the block's version first: the profile reads no working blocks
    assert out["insert_error"] and "AccessDenied" in out["insert"] and "read_kinds" in out["insert"]
    with open_fabric(dsn) as fab:
        log = fab.access_log(principal="bot")
        assert [(r.operation, r.outcome, r.rule) for r in log] == [
            ("recall", "served", None), ("working_value", "denied", "read_kinds")]
        assert fab.scope("acme", "u1", "t1").working_value()["_fabric"]["blocks"] == {}
