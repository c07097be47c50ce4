"""Issue 14 step 6: ``MemfabricSession`` against the OpenAI Agents SDK's Session protocol."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memfabric.adapters import Fabric
from memfabric.adapters.openai_agents import MemfabricSession
from memfabric.domain.errors import AccessDenied, PrincipalNotFoundError
from memfabric.domain.ledger import NoLedgerError, conversation_uuid
from tests.conftest import fetch
from tests.integration.test_privacy import dump_every_table

agents = pytest.importorskip("agents")

ITEMS: list[Any] = [
    {"role": "user", "content": "Book a table for two at Quokka-Bistro-88"},
    {"type": "function_call", "call_id": "c1", "name": "book", "arguments": '{"n": 2, "é": "ü"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "booked #4411"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "Done: booking #4411"}]},
    {"role": "user", "content": "thanks", "extra": {"nested": [1, 2.5, None, True]}},
]


async def script(session: Any) -> list[Any]:
    """The contract run: the same calls on any Session, returning what it observed."""
    seen: list[Any] = [await session.get_items(), await session.pop_item()]
    await session.add_items(ITEMS[:3])
    await session.add_items(ITEMS[3:])
    seen += [await session.get_items(), await session.get_items(limit=2), await session.get_items(limit=99)]
    seen += [await session.pop_item(), await session.get_items(limit=1)]
    await session.add_items([])
    seen.append(await session.get_items())
    await session.clear_session()
    seen += [await session.get_items(), await session.pop_item()]
    await session.add_items(ITEMS[:1])
    seen.append(await session.get_items())
    return seen


def test_runtime_protocol_and_contract_matches_sqlite_session(fabric: Fabric) -> None:
    from agents.memory import Session, SQLiteSession
    notes = fabric.scope("acme", "u1", "t1")
    session = MemfabricSession("s-1", notes)
    assert isinstance(session, Session)
    reference = asyncio.run(script(SQLiteSession("ref")))
    ours = asyncio.run(script(session))
    assert ours == reference
    assert ours[2] == ITEMS  # lossless round trip


def test_clear_session_crypto_shreds(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    session = MemfabricSession("s-1", notes)
    asyncio.run(session.add_items(ITEMS))
    assert b"Quokka-Bistro-88" in dump_every_table(fabric.dsn)[0]
    asyncio.run(session.clear_session())
    dump, _ = dump_every_table(fabric.dsn)
    assert b"Quokka-Bistro-88" not in dump and b"4411" not in dump
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_note_keys WHERE originator_id = %s",
                 (conversation_uuid(notes.scope),))[0][0] == 0


def test_session_needs_a_thread(fabric: Fabric) -> None:
    with pytest.raises(NoLedgerError):
        MemfabricSession("s-1", fabric.scope("acme", "u1"))


def test_session_settings_limit_applies_without_a_limit(fabric: Fabric) -> None:
    """Issue 26: ``get_items()`` honours ``session_settings.limit`` like ``SQLiteSession``."""
    from agents.memory import SessionSettings, SQLiteSession

    async def run(session: Any) -> list[Any]:
        await session.add_items(ITEMS)
        return [await session.get_items(), await session.get_items(limit=4)]

    settings = SessionSettings(limit=2)
    ours = asyncio.run(run(MemfabricSession("s-2", fabric.scope("acme", "u1", "t2"), session_settings=settings)))
    assert ours == asyncio.run(run(SQLiteSession("ref", session_settings=settings)))
    assert ours[0] == ITEMS[-2:] and ours[1] == ITEMS[-4:]
    as_dict = MemfabricSession("s-3", fabric.scope("acme", "u1", "t3"), session_settings={"limit": 1})
    assert isinstance(as_dict.session_settings, SessionSettings) and as_dict.session_settings.limit == 1


# ------------------------------------------------ issue 33: a principal's session
EPISODES = {"read_kinds": ["episode"], "write_kinds": ["episode"], "writes": "commit", "recall_scope": ["acme/u1/*"]}


def _log(fab: Any, principal: str) -> list[tuple[str, str, int, str | None]]:
    return [(r.operation, r.outcome, r.served, r.rule) for r in fab.access_log(principal=principal)]


def test_a_principal_session_keeps_the_contract_and_logs_every_call(fab: Any) -> None:
    """With a profile that reads and writes episodes of ``acme/u1/*`` the session is the
    SDK's ``SQLiteSession`` again, and each of its 16 calls is one served record with the
    number of entries it returned or wrote."""
    from agents.memory import SQLiteSession
    with pytest.raises(PrincipalNotFoundError):
        MemfabricSession("s-1", fab.scope("acme", "u1", "t1"), principal="agent-s")
    fab.principals.define("agent-s", EPISODES)
    session = MemfabricSession("s-1", fab.scope("acme", "u1", "t1"), principal="agent-s")
    assert asyncio.run(script(session)) == asyncio.run(script(SQLiteSession("ref")))
    served = [0, 0, 3, 2, 5, 2, 5, 1, 1, 0, 4, 0, 0, 0, 1, 1]
    ops = ["get_items", "pop_item", "add_items", "add_items", "get_items", "get_items", "get_items", "pop_item",
           "get_items", "add_items", "get_items", "clear_session", "get_items", "pop_item", "add_items", "get_items"]
    assert _log(fab, "agent-s") == [(f"session.{op}", "served", n, None) for op, n in zip(ops, served, strict=True)]
    [first_add] = [r for r in fab.access_log(principal="agent-s", with_ids=True)
                   if r.operation == "session.add_items"][:1]
    assert (first_add.kinds, first_add.thread_id, len(first_add.ids)) == (("episode",), "t1", 3)


def test_a_principal_session_refuses_outside_its_profile(fab: Any) -> None:
    """A read-only profile cannot add, pop or clear; a scope outside ``recall_scope`` or
    a profile without ``episode`` cannot read: ``AccessDenied`` naming the rule, the
    conversation unchanged, one denied record each."""
    from tests.integration.test_access import events

    plain = MemfabricSession("s-1", fab.scope("acme", "u1", "t1"))
    asyncio.run(plain.add_items(ITEMS[:2]))
    fab.principals.define("reader", {**EPISODES, "writes": "none", "write_kinds": []})
    fab.principals.define("facts", {**EPISODES, "read_kinds": ["fact"]})
    reader = MemfabricSession("s-1", fab.scope("acme", "u1", "t1"), principal="reader")
    elsewhere = MemfabricSession("s-2", fab.scope("acme", "u2", "t1"), principal="reader")
    facts = MemfabricSession("s-1", fab.scope("acme", "u1", "t1"), principal="facts")
    n = events(fab)
    refused: list[tuple[Any, str]] = [
        (lambda: reader.add_items(ITEMS[2:]), "writes"), (lambda: reader.pop_item(), "writes"),
        (lambda: reader.clear_session(), "writes"), (lambda: elsewhere.get_items(), "recall_scope"),
        (lambda: facts.get_items(), "read_kinds"),
    ]
    for call, rule in refused:
        with pytest.raises(AccessDenied) as caught:
            asyncio.run(call())
        assert caught.value.rule == rule
    assert events(fab) == n
    assert asyncio.run(reader.get_items()) == ITEMS[:2] == asyncio.run(plain.get_items())
    assert _log(fab, "reader") == [
        ("session.add_items", "denied", 0, "writes"), ("session.pop_item", "denied", 0, "writes"),
        ("session.clear_session", "denied", 0, "writes"), ("session.get_items", "denied", 0, "recall_scope"),
        ("session.get_items", "served", 2, None)]
    assert _log(fab, "facts") == [("session.get_items", "denied", 0, "read_kinds")]
