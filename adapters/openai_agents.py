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
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from memfabric.domain.conversation import Ledger

PAGE = 500


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

    def __init__(self, session_id: str, notes: Any, session_settings: Any = None) -> None:
        """``session_settings``: the SDK's ``SessionSettings`` (or a dict of its fields;
        default ``SessionSettings()``): ``limit`` is what ``get_items()`` without a
        limit returns at most (the latest items), as ``SQLiteSession`` does."""
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        self.session_id = session_id
        self.session_settings: Any = _settings(session_settings)
        self.ledger: Ledger = notes.conversation()
        self.ledger.aggregate_id  # noqa: B018 - fail closed now for a scope without thread

    def _all(self) -> list[Any]:
        out: list[Any] = []
        cursor: str | None = None
        while True:
            page = self.ledger.entries(cursor, limit=PAGE)
            out += [json.loads(e.text) for e in page.entries]
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    def _latest(self, limit: int) -> list[Any]:
        out: list[Any] = []
        cursor: str | None = None
        while len(out) < limit:
            page = self.ledger.entries(cursor, limit=min(PAGE, limit - len(out)), direction="backward")
            out += [json.loads(e.text) for e in page.entries]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        return list(reversed(out))

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The items in chronological order: the latest ``limit`` (default
        ``session_settings.limit``; ``None`` there too: all of them)."""
        if limit is None:
            limit = getattr(self.session_settings, "limit", None)
        if limit is None:
            return await asyncio.to_thread(self._all)
        if limit <= 0:
            return []
        return await asyncio.to_thread(self._latest, limit)

    async def add_items(self, items: list[Any]) -> None:
        rows = [{"role": _role(i), "text": json.dumps(i, ensure_ascii=False, separators=(",", ":"))}
                for i in items]
        if rows:
            await asyncio.to_thread(self.ledger.extend, rows)

    def _pop(self) -> Any:
        page = self.ledger.entries(limit=1, direction="backward")
        if not page.entries:
            return None
        entry = page.entries[0]
        self.ledger.retract(entry.id)
        return json.loads(entry.text)

    async def pop_item(self) -> Any:
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        await asyncio.to_thread(self.ledger.erase, requested_by=f"session:{self.session_id}",
                                cause="clear_session")
