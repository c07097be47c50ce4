"""The OpenAI Agents SDK ``Session`` on the conversation ledger (extra ``openai-agents``).

``MemfabricSession(session_id, notes)`` keeps a session's items in the conversation
ledger of ``notes``' thread scope (``notes.conversation()``):

- ``add_items(items)``: each item stored losslessly as one JSON entry (role: the item's
  ``role``, else its ``type``, else ``item``), all in one transaction;
- ``get_items(limit=None)``: the items in chronological order (the latest ``limit``,
  default ``session_settings.limit`` as in ``SQLiteSession``);
- ``pop_item()``: the latest item, hidden by an ``EntryRetracted`` event (the log keeps it);
- ``clear_session()``: erases the thread's conversation (``Erased`` tombstone, key
  destroyed: every stored item is crypto-shredded).

It satisfies the SDK's runtime-checkable ``agents.memory.Session`` protocol without
importing the SDK (so this module loads without the extra). The ledger calls block, so
they run in a worker thread (``asyncio.to_thread``).

``MemfabricSession(session_id, notes, principal="agent-a")`` (issue 33): every call is
one governed call of that principal (:class:`memfabric.domain.access.Governor`),
checked against its current memory profile on the thread's scope and recorded once in
the access log as ``session.get_items``, ``session.add_items``, ``session.pop_item`` or
``session.clear_session`` (kind ``episode``, the ids of the entries it returned or
wrote, sealed). ``get_items`` reads (``episode`` in ``read_kinds``, the scope within
``recall_scope``: :func:`~memfabric.domain.access.check_read`); ``add_items`` writes
(:func:`~memfabric.domain.access.check_write` of an ``episode``: ``writes="commit"``,
``episode`` in ``write_kinds``, ``thread`` in ``visibility``); ``pop_item`` and
``clear_session`` read and write (they return or erase what the principal reads). A
refused call raises ``AccessDenied`` naming the rule and writes nothing. The ledger is
one thread's: there are no per-note grants on it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from memfabric.domain import access as rules
from memfabric.domain.conversation import Ledger, LedgerEntry
from memfabric.domain.principal import MemoryProfile

PAGE = 500
KINDS = ("episode",)
"""The kind a session's entries are governed as."""
_T = TypeVar("_T")


def _role(item: Any) -> str:
    if isinstance(item, dict):
        for key in ("role", "type"):
            value = item.get(key)
            if isinstance(value, str) and value.replace("_", "").replace("-", "").isalnum():
                return value[:64]
    return "item"


def _settings(given: Any) -> Any:
    """The SDK's ``SessionSettings`` of ``given`` (``None``: the default), or ``given``
    itself when the SDK is not installed."""
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings  # noqa: PLC0415
    except ImportError:  # the extra is not installed: anything with a ``limit``
        return given
    return SessionSettings() if given is None else coerce_session_settings(given)


class MemfabricSession:
    """An Agents SDK session on the ledger of ``notes``' thread (see the module doc)."""

    def __init__(self, session_id: str, notes: Any, session_settings: Any = None, *,
                 principal: str | None = None) -> None:
        """``session_settings``: the SDK's ``SessionSettings`` (or a dict of its fields;
        default ``SessionSettings()``): ``limit`` is what ``get_items()`` without a
        limit returns at most (the latest items), as ``SQLiteSession`` does.
        ``principal`` (default ``None``: no checks, no access log): every call governed
        by that principal's profile (see the module doc; ``PrincipalNotFoundError``
        when it was never defined). ``notes``: a plain handle of a thread scope
        (``NoLedgerError`` without a thread)."""
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        self.session_id = session_id
        self.session_settings: Any = _settings(session_settings)
        self.ledger: Ledger = notes.conversation()
        self.ledger.aggregate_id  # noqa: B018 - fail closed now for a scope without thread
        self.governor: rules.Governor | None = (
            notes.as_principal(principal).governor if principal is not None else None)
        """The principal's governed calls (``None``: no principal)."""

    def _call(self, operation: str, work: Callable[[], _T], ids_of: Callable[[_T], Sequence[str]], *,
              read: bool, write: bool) -> _T:
        """``work()``, with a principal as one governed call that first checks the
        profile may ``read`` and / or ``write`` the thread's episodes."""
        governor = self.governor
        if governor is None:
            return work()
        scope = self.ledger.scope

        def run(profile: MemoryProfile) -> _T:
            if write:
                rules.check_write(governor.agent_id, profile, scope, "episode")
            if read:
                rules.check_read(governor.agent_id, profile, scope, KINDS)
            return work()
        return governor.call(operation, scope, KINDS, run, ids_of)

    def _all(self) -> list[LedgerEntry]:
        out: list[LedgerEntry] = []
        cursor: str | None = None
        while True:
            page = self.ledger.entries(cursor, limit=PAGE)
            out += page.entries
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    def _latest(self, limit: int | None) -> list[LedgerEntry]:
        """The latest ``limit`` entries, oldest first (``None``: all of them)."""
        if limit is None:
            return self._all()
        out: list[LedgerEntry] = []
        cursor: str | None = None
        while len(out) < limit:
            page = self.ledger.entries(cursor, limit=min(PAGE, limit - len(out)), direction="backward")
            out += page.entries
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        return list(reversed(out))

    def _get(self, limit: int | None) -> list[Any]:
        entries = self._call("session.get_items", lambda: self._latest(limit) if limit is None or limit > 0 else [],
                             _ids, read=True, write=False)
        return [json.loads(e.text) for e in entries]

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The items in chronological order: the latest ``limit`` (default
        ``session_settings.limit``; ``None`` there too: all of them)."""
        if limit is None:
            limit = getattr(self.session_settings, "limit", None)
        return await asyncio.to_thread(self._get, limit)

    def _add(self, items: list[Any]) -> None:
        rows = [{"role": _role(i), "text": json.dumps(i, ensure_ascii=False, separators=(",", ":"))}
                for i in items]
        self._call("session.add_items", lambda: self.ledger.extend(rows) if rows else [], _ids,
                   read=False, write=True)

    async def add_items(self, items: list[Any]) -> None:
        await asyncio.to_thread(self._add, items)

    def _retract_latest(self) -> list[LedgerEntry]:
        """Retract the latest entry; returns it (``[]``: the session was empty)."""
        page = self.ledger.entries(limit=1, direction="backward")
        for entry in page.entries:
            self.ledger.retract(entry.id)
        return list(page.entries)

    def _pop(self) -> Any:
        popped = self._call("session.pop_item", self._retract_latest, _ids, read=True, write=True)
        return json.loads(popped[0].text) if popped else None

    async def pop_item(self) -> Any:
        return await asyncio.to_thread(self._pop)

    def _clear(self) -> None:
        self._call("session.clear_session", lambda: self.ledger.erase(
            requested_by=f"session:{self.session_id}", cause="clear_session"), lambda _: (),
            read=True, write=True)

    async def clear_session(self) -> None:
        await asyncio.to_thread(self._clear)


def _ids(entries: Sequence[LedgerEntry]) -> list[str]:
    return [e.id for e in entries]
