"""Group commit: concurrent writes to one scope share one transaction (issue 24).

Threads of one process that ``remember`` into the same scope with the same settings
at the same time would otherwise queue on the scope's write lock and pay one durable
commit each. :class:`GroupCommit` coalesces them, the way LangGraph's
``AsyncBatchedBaseStore`` and KurrentDB's writer do (flush when idle): the first
caller becomes the *leader*, takes every request queued for that key (its own first,
then in arrival order, at most :attr:`GroupCommit.max_items` items), and runs them as
one batch; callers that arrive meanwhile queue for the next batch. The batch is one
``remember_many`` unit of work, so its decisions are made in turn, each seeing the
batch's earlier writes (the result equals the requests written one by one), and each
caller's result is handed back only after the batch's COMMIT.

One failing request fails alone: when a batch of several requests raises, nothing of
it was written (a unit of work is atomic) and each request is run again on its own,
so only the requests that fail by themselves raise. Writers in other processes stay
correct through the scope and tenant locks, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

_I = TypeVar("_I")
_R = TypeVar("_R")


@dataclass(eq=False)
class _Request(Generic[_I, _R]):
    """One caller's items, and where its outcome goes."""

    items: Sequence[_I]
    done: threading.Event = field(default_factory=threading.Event)
    results: list[_R] | None = None
    error: BaseException | None = None
    lead: bool = False
    """Set (with ``done``) when this waiting caller is handed the leadership."""


class GroupCommit(Generic[_I, _R]):
    """Coalesces concurrent batches of items per key (see the module doc).

    ``max_items``: most items one batch takes (default 256; a request is never split).
    Thread-safe; holds no lock while a batch runs."""

    def __init__(self, max_items: int = 256) -> None:
        self.max_items = max_items
        self._lock = threading.Lock()
        self._queues: dict[Hashable, list[_Request[_I, _R]]] = {}
        self._leading: set[Hashable] = set()
        self.batches = 0
        """Batches run so far (a request written alone counts as one)."""
        self.coalesced = 0
        """Requests that shared a batch with at least one other."""

    def submit(self, key: Hashable, items: Sequence[_I],
               write: Callable[[Sequence[_I]], list[_R]]) -> list[_R]:
        """``write(items)``'s result for these ``items``, possibly written in one batch
        with other callers' items of the same ``key``. ``write`` must return one
        result per item, in order; what it raises for these items is raised here."""
        request: _Request[_I, _R] = _Request(items)
        with self._lock:
            self._queues.setdefault(key, []).append(request)
            lead = key not in self._leading
            if lead:
                self._leading.add(key)
        if not lead:
            request.done.wait()
            if not request.lead:
                return self._outcome(request)
        self._lead(key, write)
        return self._outcome(request)

    def _lead(self, key: Hashable, write: Callable[[Sequence[_I]], list[_R]]) -> None:
        """Run one batch for ``key``, then hand the leadership to the next waiting
        caller (or give it up when none waits)."""
        batch = self._take(key)
        self._run(batch, write)
        with self._lock:
            queue = self._queues.get(key)
            if not queue:
                self._queues.pop(key, None)
                self._leading.discard(key)
                return
            successor = queue[0]
        successor.lead = True
        successor.done.set()

    def _take(self, key: Hashable) -> list[_Request[_I, _R]]:
        with self._lock:
            queue = self._queues[key]
            batch: list[_Request[_I, _R]] = []
            size = 0
            while queue and (not batch or size + len(queue[0].items) <= self.max_items):
                request = queue.pop(0)
                batch.append(request)
                size += len(request.items)
        return batch

    def _run(self, batch: list[_Request[_I, _R]], write: Callable[[Sequence[_I]], list[_R]]) -> None:
        self.batches += 1
        if len(batch) > 1:
            self.coalesced += len(batch)
        try:
            results = write([item for request in batch for item in request.items])
        except BaseException as exc:  # noqa: BLE001 - handed to its caller(s)
            if len(batch) == 1:
                batch[0].error = exc
            else:  # nothing was written: each request alone, so only the failing ones fail
                for request in batch:
                    self._run([request], write)
                return
        else:
            start = 0
            for request in batch:
                request.results = results[start:start + len(request.items)]
                start += len(request.items)
        for request in batch:
            if not request.lead:
                request.done.set()

    @staticmethod
    def _outcome(request: _Request[_I, _R]) -> list[_R]:
        if request.error is not None:
            raise request.error
        assert request.results is not None
        return request.results
