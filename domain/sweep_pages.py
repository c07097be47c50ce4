"""The sweep's pages of due notes, read one page ahead (issue 30).

A sweep batch spends most of its time waiting for its commit (the server deleting the
notes' rows, appending their events), and most of the rest replaying the notes
(decrypting and decoding their events). :func:`pages` overlaps the two: while the
caller decides and commits page *k*, a helper thread reads page *k + 1* from the
retention index (``RetentionStore.due``) and replays its notes outside any unit of
work (``RetentionStore.replay``), so the next unit of work opens with its notes
decided on already. The thread holds no lock and writes nothing; the caller's append
fails with ``ConflictError`` when a write took one of those notes' next versions after
the read (:mod:`memfabric.domain.sweep` then replays the page again in its unit of
work), so no decision is ever written on a stale state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from uuid import UUID

from memfabric.domain.note import Note
from memfabric.domain.ports import DueRef


@dataclass(frozen=True, slots=True)
class Page:
    """Due refs in aggregate-id order and their notes replayed outside a unit of work
    (``None``: replay them in it, see ``RetentionStore.replay``)."""

    refs: list[DueRef]
    notes: list[Note] | None


Fetch = Callable[[UUID | None, int], Page]
"""``fetch(after, size)``: the page of at most ``size`` refs after aggregate id ``after``."""


def pages(fetch: Fetch, after: UUID | None, batch_size: int, budget: int | None) -> Iterator[Page]:
    """The non-empty pages of ``batch_size`` refs from ``after`` on, at most ``budget``
    refs in all (``None``: no bound), each fetched in a helper thread while the caller
    handles the one before; ends after a short page or when the budget is spent. An
    error of ``fetch`` is raised here; a caller that stops early waits for the page in
    flight (one bounded read)."""
    size = _size(batch_size, budget)
    if size == 0:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memfabric-sweep") as pool:
        pending: Future[Page] | None = pool.submit(fetch, after, size)
        while pending is not None:
            page = pending.result()
            if not page.refs:
                return
            if budget is not None:
                budget -= len(page.refs)
            full, size = len(page.refs) == size, _size(batch_size, budget)
            pending = pool.submit(fetch, page.refs[-1].aggregate_id, size) if full and size else None
            yield page


def _size(batch_size: int, budget: int | None) -> int:
    return batch_size if budget is None else min(batch_size, budget)
