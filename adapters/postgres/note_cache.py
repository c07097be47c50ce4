"""Committed note states of this process, so a write replays only what is new (issue 24).

A fold or a supersession changes a note that its unit of work must replay first; a
note folded often has a long history, and every replayed event is authenticated,
decrypted and decompressed. :class:`NoteCache` keeps the state of each note as this
process last saw it committed (after its own commit, or after a replay in a
transaction), by aggregate id and version. A unit of work that needs a cached note
reads only the events after that version (in its transaction, under the locks its
decision takes, so another process's newer events are read and replayed on top) and
the note's keys, in the same round trip as before.

What is never cached: a note whose content is erased (a ``Forgotten`` tombstone in
effect: the cache drops it) or whose keys a unit of work destroys, and the states a
unit of work replays as unreadable (``load_unreadable``). Each state handed out is a
copy (aggregates are mutable); at most ``capacity`` notes are kept, least recently
used first out. The log stays the only source of truth: a cached state is a state
the log produced, and a version the log no longer has past it is read as usual.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from memfabric.domain.note import Note

DEFAULT_CAPACITY = 4096
"""Notes a fabric keeps (each a few kilobytes: its content, vector and metadata)."""


def _copy(value: Any) -> Any:
    """``value`` with its lists, dicts and sets copied at every depth (strings, bytes,
    numbers, datetimes and tuples of them are immutable: shared)."""
    kind = type(value)
    if kind is list:
        return [_copy(v) for v in value]
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}
    if kind is set:
        return set(value)
    return value


def clone(note: Note) -> Note:
    """A copy of ``note``'s state without its pending events (its containers copied, so
    changing one never changes the other)."""
    twin = object.__new__(type(note))
    state = {k: _copy(v) for k, v in vars(note).items() if k != "collected"}
    state["_pending_events"] = []
    twin.__dict__.update(state)
    return twin


class NoteCache:
    """Committed note states by aggregate id (see the module doc). Thread-safe."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._states: OrderedDict[UUID, Note] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        """States handed out so far (a replay each saved, or shortened)."""

    def get(self, ids: Iterable[UUID]) -> dict[UUID, Note]:
        """Copies of the cached states among ``ids``."""
        out: dict[UUID, Note] = {}
        with self._lock:
            for i in ids:
                held = self._states.get(i)
                if held is not None:
                    self._states.move_to_end(i)
                    out[i] = held
            self.hits += len(out)
        return {i: clone(n) for i, n in out.items()}

    def put(self, notes: Iterable[Any], *, shredded: Iterable[UUID] = (), owned: bool = False) -> None:
        """Keep the committed states ``notes`` (copies, or the objects themselves when
        the caller hands them over: ``owned``, e.g. a finished unit of work's); other
        aggregates are ignored; a note erased, or among ``shredded`` (its keys
        destroyed), is dropped."""
        doomed = set(shredded)
        notes = list(notes)
        kept = [(n.id, n if owned else clone(n)) for n in notes
                if isinstance(n, Note) and not n.erased and n.id not in doomed]
        gone = [n.id for n in notes if isinstance(n, Note) and (n.erased or n.id in doomed)]
        with self._lock:
            for i in (*gone, *doomed):
                self._states.pop(i, None)
            for i, state in kept:
                held = self._states.get(i)
                if held is not None and held.version > state.version:
                    continue  # a newer state was kept meanwhile
                self._states[i] = state
                self._states.move_to_end(i)
            while len(self._states) > self.capacity:
                self._states.popitem(last=False)

    def discard(self, ids: Iterable[UUID]) -> None:
        with self._lock:
            for i in ids:
                self._states.pop(i, None)

    def __len__(self) -> int:
        return len(self._states)
