"""AsyncFabric: many tasks on one loop, loop never blocked."""

from __future__ import annotations

import asyncio
import time

from memfabric.adapters import AsyncFabric, open_fabric_async
from memfabric.domain.errors import NoteNotFoundError
import pytest


def test_concurrent_tasks_do_not_block_loop(dsn: str) -> None:
    async def main() -> None:
        async with open_fabric_async(dsn, pool_size=4, max_overflow=6) as fabric:
            assert isinstance(fabric, AsyncFabric)
            ticks: list[float] = []
            done = asyncio.Event()

            async def ticker() -> None:
                while not done.is_set():
                    ticks.append(time.monotonic())
                    await asyncio.sleep(0.01)

            async def worker(w: int) -> list[str]:
                notes = fabric.scope("acme", f"user-{w % 5}", f"thread-{w}")
                ids = []
                for i in range(4):
                    m = await notes.remember(kind="fact", content=f"worker {w} fact {i} kiwi{w}x{i}")
                    ids.append(m.id)
                    res = await notes.recall(f"kiwi{w}x{i}")
                    assert m.id in {h.id for h in res.hits}
                return ids

            tick = asyncio.create_task(ticker())
            start = time.monotonic()
            results = await asyncio.gather(*(worker(w) for w in range(50)))
            elapsed = time.monotonic() - start
            done.set()
            await tick
            assert sum(len(r) for r in results) == 200
            gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
            assert len(ticks) >= max(3, int(elapsed / 0.01 * 0.3)), (len(ticks), elapsed)
            assert max(gaps) < 0.5, max(gaps)
            one = fabric.scope("acme", "user-0", "thread-0")
            page = await one.list()
            # issue 16: the facts of user-0's ten threads (workers 0, 5, ..., 45) are all
            # visible from each of them (resource visibility by default)
            assert len(page.items) == 40 and await one.count() == 40
            with pytest.raises(NoteNotFoundError):
                await one.get("0123456789ab")
            await one.append_block("plan", "step one")
            assert "plan" in (await one.working_value())["_fabric"]["blocks"]

    asyncio.run(main())


def test_await_open_and_close(dsn: str) -> None:
    async def main() -> None:
        fabric = await open_fabric_async(dsn)
        try:
            n = fabric.scope("acme")
            m = await n.remember(kind="fact", content="hello async world")
            assert (await n.get(m.id)).content == "hello async world"
            assert (await n.forget(id=m.id)).deleted == 1
        finally:
            await fabric.aclose()

    asyncio.run(main())


def test_search_conversation_and_context_provider_are_coroutines(dsn: str) -> None:
    """Issue 16 follow-up: the ledger search and the context provider of AsyncNotes."""
    async def main() -> None:
        async with open_fabric_async(dsn) as fabric:
            notes = fabric.scope("acme", "u-async", "t-async")
            await fabric.run(lambda: notes.notes.conversation().append("user", "my kayak is yellow"))
            found = await notes.search_conversation("kayak yellow", top_k=3)
            assert len(found.hits) == 1 and found.hits[0].score == 1.0
            await notes.remember(kind="fact", content="The user paddles a yellow kayak")
            provide = notes.context_provider(top_k=3)
            messages = await provide("kayak")
            assert any("yellow kayak" in m["text"] for m in messages)
            assert messages == await notes.context("kayak", top_k=3)
            more = await notes.remember_many([{"kind": "fact", "content": "The user owns a paddle"}],
                                             consolidate=False, chunk_size=None)
            assert more[0].outcome == "inserted"

    asyncio.run(main())
