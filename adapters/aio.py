"""asyncio front end: ``open_fabric_async(...)`` → :class:`AsyncFabric` → :class:`AsyncNotes`.

The sync fabric is thread-safe (each write is one unit of work on its own pooled
connection; reads take a pooled connection each), so every coroutine here runs the sync
call in a bounded thread pool (``loop.run_in_executor``) and the event loop is never
blocked. The pool has ``max_workers`` threads (default ``pool_size + max_overflow``,
the number of database connections the fabric may open), so no thread waits for a
connection while holding a pool slot for long.

::

    async with open_fabric_async(dsn) as fabric:
        notes = fabric.scope("acme", "user-1", "thread-1")
        await notes.remember(kind="fact", content="User prefers metric units")
        hits = (await notes.recall("units")).hits
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

from memfabric.adapters.bootstrap import open_fabric
from memfabric.domain.inputs import RememberInput
from memfabric.domain.notes import Notes
from memfabric.domain.results import (
    EraseResult,
    ForgetResult,
    HistoryEntry,
    Lineage,
    MemoryNote,
    NoteCounts,
    NotePage,
    PathForgetResult,
    RecallResult,
    RepointResult,
)

T = TypeVar("T")


SYNC_ONLY: frozenset[str] = frozenset({"conversation", "entities", "tools"})
"""``Notes`` methods :class:`AsyncNotes` does not offer: each returns a sync handle
(the conversation ``Ledger``, the ``Entities`` of issue 32, ``MemoryTools``) whose own methods do the I/O
(``attach`` is offered as a plain method: it does no I/O). Use them through ``async_notes.notes`` (the sync handle) inside
``await fabric.run(...)``, e.g. ``await fabric.run(lambda: notes.notes.conversation().append(...))``.
``search_conversation`` (the ledger's read most callers need) is offered as a coroutine."""


class AsyncNotes:
    """The coroutine twin of :class:`~memfabric.domain.notes.Notes`: same arguments,
    results and errors; each call runs in the fabric's thread pool. Every public
    ``Notes`` method is a coroutine here except ``attach`` (no I/O) and those in
    :data:`SYNC_ONLY` (sync handles);
    ``context_provider(**options)`` returns an async provider (``await provider(current)``)
    and ``context(current, **options)`` is the one-shot form."""

    def __init__(self, notes: Notes, run: Callable[..., Any]) -> None:
        self.notes = notes
        self._run = run

    @property
    def scope(self) -> Any:
        return self.notes.scope

    def __repr__(self) -> str:
        return f"AsyncNotes({self.notes.scope.key!r})"

    def attach(self, session: Any, *, signal: Any = None) -> Any:
        """``Notes.attach`` (a plain call, no I/O: it authorises ``session`` on this
        scope in the process's attach gate); the ``Attachment`` is a context manager
        (``with async_notes.attach(session): await async_notes.remember(...)``)."""
        return self.notes.attach(session, signal=signal)

    async def remember(self, **fields: Any) -> MemoryNote:
        result: MemoryNote = await self._run(self.notes.remember, **fields)
        return result

    async def remember_many(self, items: Iterable[Mapping[str, Any] | RememberInput],
                            **options: Any) -> list[MemoryNote]:
        """``Notes.remember_many`` (``consolidate``, ``chunk_size`` as there)."""
        result: list[MemoryNote] = await self._run(self.notes.remember_many, list(items), **options)
        return result

    async def search_conversation(self, query: str, **options: Any) -> Any:
        """``Notes.search_conversation`` (a ``SearchResult``; ``NoLedgerError`` without a
        thread)."""
        return await self._run(self.notes.search_conversation, query, **options)

    def context_provider(self, *args: Any, **options: Any) -> Callable[..., Any]:
        """An async provider: ``await provider(current=None)`` runs
        ``notes.context_provider(*args, **options)(current)`` in the pool (the sync
        provider's list of ``{"type", "text"}`` items). Arguments are checked here, as in ``Notes``."""
        sync = self.notes.context_provider(*args, **options)

        async def provide(current: Any = None) -> list[dict[str, str]]:
            result: list[dict[str, str]] = await self._run(sync, current)
            return result
        return provide

    def as_principal(self, agent_id: str) -> AsyncNotes:
        """Issue 33: ``Notes.as_principal`` as an ``AsyncNotes`` (a plain call: it reads
        the principal once; every call of the handle is then a coroutine)."""
        return AsyncNotes(self.notes.as_principal(agent_id), self._run)

    async def grant(self, id: str, principal: str, right: str = "read", **args: Any) -> bool:  # noqa: A002
        """Issue 33: ``Notes.grant``."""
        result: bool = await self._run(self.notes.grant, id, principal, right, **args)
        return result

    async def revoke(self, id: str, principal: str, right: str = "read", **args: Any) -> bool:  # noqa: A002
        """Issue 33: ``Notes.revoke``."""
        result: bool = await self._run(self.notes.revoke, id, principal, right, **args)
        return result

    async def recall(self, query: str, **options: Any) -> RecallResult:
        result: RecallResult = await self._run(self.notes.recall, query, **options)
        return result

    async def get(self, id: str) -> MemoryNote:  # noqa: A002
        result: MemoryNote = await self._run(self.notes.get, id)
        return result

    async def history(self, id: str) -> list[HistoryEntry]:  # noqa: A002
        result: list[HistoryEntry] = await self._run(self.notes.history, id)
        return result

    async def lineage(self, id: str) -> Lineage:  # noqa: A002
        result: Lineage = await self._run(self.notes.lineage, id)
        return result

    async def forget(self, **args: Any) -> ForgetResult:
        result: ForgetResult = await self._run(self.notes.forget, **args)
        return result

    async def release_hold(self, id: str, **args: Any) -> MemoryNote:  # noqa: A002
        result: MemoryNote = await self._run(self.notes.release_hold, id, **args)
        return result

    async def set_retention(self, id: str, retention: str, **args: Any) -> MemoryNote:  # noqa: A002
        result: MemoryNote = await self._run(self.notes.set_retention, id, retention, **args)
        return result

    async def link(self, from_id: str, to_id: str, **args: Any) -> MemoryNote:
        result: MemoryNote = await self._run(self.notes.link, from_id, to_id, **args)
        return result

    async def unlink(self, from_id: str, to_id: str, **args: Any) -> MemoryNote:
        result: MemoryNote = await self._run(self.notes.unlink, from_id, to_id, **args)
        return result

    async def verify_content(self, id: str, text: str) -> bool:  # noqa: A002
        result: bool = await self._run(self.notes.verify_content, id, text)
        return result

    async def append_block(self, block: str, text: str, **args: Any) -> MemoryNote:
        result: MemoryNote = await self._run(self.notes.append_block, block, text, **args)
        return result

    async def working_value(self, *, known_at: datetime | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._run(functools.partial(self.notes.working_value, known_at=known_at))
        return result

    async def context(self, current: Any = None, **options: Any) -> list[dict[str, str]]:
        """``notes.context_provider(**options)(current)`` in the pool."""
        def call() -> list[dict[str, str]]:
            return self.notes.context_provider(**options)(current)
        result: list[dict[str, str]] = await self._run(call)
        return result

    async def list(self, **filters: Any) -> NotePage:  # noqa: A003
        result: NotePage = await self._run(self.notes.list, **filters)
        return result

    async def count(self, **filters: Any) -> int:
        result: int = await self._run(self.notes.count, **filters)
        return result

    async def counts(self) -> NoteCounts:
        result: NoteCounts = await self._run(self.notes.counts)
        return result

    async def repoint(self, from_path: str, to_path: str, **args: Any) -> RepointResult:
        result: RepointResult = await self._run(self.notes.repoint, from_path, to_path, **args)
        return result

    async def delete_path(self, path: str, **args: Any) -> PathForgetResult:
        result: PathForgetResult = await self._run(self.notes.delete_path, path, **args)
        return result

    async def check_write(self, kind: str, operation: str = "remember") -> None:
        await self._run(self.notes.check_write, kind, operation)

    async def read_outside(self, kind: str, read: Callable[[], T], operation: str = "read") -> T:
        """``Notes.read_outside``, ``read`` run in the worker thread."""
        result: T = await self._run(self.notes.read_outside, kind, read, operation)
        return result


class AsyncFabric:
    """An open fabric for asyncio code (see the module doc). ``fabric`` is the sync
    :class:`~memfabric.adapters.bootstrap.Fabric` (any object with ``scope``,
    ``erase_scope``, ``catch_up`` and ``close`` works, e.g. an in-memory fabric)."""

    def __init__(self, fabric: Any, *, max_workers: int = 10) -> None:
        self.fabric = fabric
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="memfabric")
        self._closed = False

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the fabric's thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def scope(self, tenant_id: str, resource_id: str | None = None,
              thread_id: str | None = None) -> AsyncNotes:
        """The async handle of one scope (``pydantic.ValidationError`` for bad ids)."""
        return AsyncNotes(self.fabric.scope(tenant_id, resource_id, thread_id), self.run)

    async def erase_scope(self, tenant_id: str, resource_id: str | None = None,
                          thread_id: str | None = None, **args: Any) -> EraseResult:
        result: EraseResult = await self.run(self.fabric.erase_scope, tenant_id, resource_id,
                                             thread_id, **args)
        return result

    async def catch_up(self) -> dict[str, int]:
        result: dict[str, int] = await self.run(self.fabric.catch_up)
        return result

    async def aclose(self) -> None:
        """Close the sync fabric (in the pool) and shut the pool down."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.run(self.fabric.close)
        finally:
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncFabric:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Opening:
    """What ``open_fabric_async`` returns: ``await`` it or use it in ``async with``."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any], max_workers: int | None) -> None:
        self._args, self._kwargs, self._max_workers = args, kwargs, max_workers
        self._fabric: AsyncFabric | None = None

    async def _open(self) -> AsyncFabric:
        workers = self._max_workers or (int(self._kwargs.get("pool_size", 2))
                                        + int(self._kwargs.get("max_overflow", 8)))
        sync = await asyncio.to_thread(open_fabric, *self._args, **self._kwargs)
        return AsyncFabric(sync, max_workers=max(1, workers))

    def __await__(self) -> Generator[Any, None, AsyncFabric]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncFabric:
        self._fabric = await self._open()
        return self._fabric

    async def __aexit__(self, *exc: object) -> None:
        if self._fabric is not None:
            await self._fabric.aclose()


def open_fabric_async(*args: Any, max_workers: int | None = None, **kwargs: Any) -> _Opening:
    """``open_fabric``'s arguments; ``async with open_fabric_async(...) as fabric`` (or
    ``fabric = await open_fabric_async(...)`` and later ``await fabric.aclose()``) gives
    an :class:`AsyncFabric`. Opening runs in a thread too. ``max_workers``: threads of
    the pool (default ``pool_size + max_overflow``)."""
    return _Opening(args, kwargs, max_workers)


__all__ = ["SYNC_ONLY", "AsyncFabric", "AsyncNotes", "open_fabric_async"]
