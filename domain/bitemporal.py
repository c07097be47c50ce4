"""Issue 31: reading the fabric as it was *recorded* at an instant (transaction time).

``as_of`` asks what was true at T (each note's validity window); ``known_at`` asks what
the fabric had recorded at T: every event whose ``timestamp`` (the domain event's
recorded time, the only time the log keeps) is at or before T, and none after — the
log truncated at T, read with the data keys and legal holds as they are *now*. So a note forgotten after
T appears as recorded at T with its protected fields erased (its key is destroyed: its
content never returns, whatever T), and it is not recalled (an erased state has no
vector and no text to match); a note under legal hold now is not recalled or listed at
any T (its content is kept only sealed) until it is released. Both times combine: ``known_at=T, as_of=V`` is what the
fabric recorded at T held true at V (``as_of`` defaults to ``known_at``).

:class:`KnownAtStore` is the read side at T: single notes are replayed from their own
events up to T (what ``get`` does anyway); recall and list read the note-versions
projection (``memfabric.projections.note_versions``, and its in-memory twin), never the
log. See ``docs/bitemporal.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from memfabric.domain import replay
from memfabric.domain.inputs import Instant
from memfabric.domain.note import Note
from memfabric.domain.scope import Scope
from memfabric.domain.working import BlockEntry, block_entry


class _KnownAt(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    known_at: Instant


def known_at_arg(value: Any) -> datetime | None:
    """``value`` checked as a ``known_at`` instant: ``None``, or a timezone-aware
    datetime in years 1-9999 (``pydantic.ValidationError`` on ``known_at`` otherwise)."""
    return None if value is None else _KnownAt.model_validate({"known_at": value}).known_at


def recorded_by(events: Iterable[Any], known_at: datetime) -> list[Any]:
    """The events (of one aggregate, in version order) recorded at ``known_at``: the
    longest prefix whose ``timestamp`` is at or before it (a prefix, so a replay of it
    is always a valid version sequence)."""
    out: list[Any] = []
    for event in events:
        if event.timestamp > known_at:
            break
        out.append(event)
    return out


def replay_at(events: Iterable[Any], known_at: datetime) -> Note | None:
    """The note as recorded at ``known_at`` (``None``: it did not exist yet)."""
    note: Any = None
    for event in recorded_by(events, known_at):
        note = replay.step(event, note)
    return note if isinstance(note, Note) else None


class KnownAtStore:
    """A ``NoteStore`` (``memfabric.domain.ports``) as recorded at ``known_at``:
    ``load`` / ``stored_events`` read the note's own events up to ``known_at``; every
    other read the wrapped store serves as now (``resolve``: which note an id names,
    ``content_hmac``...). Backends subclass it to answer ``recall``, ``hit_links``,
    ``hits``, ``list_notes`` and ``count_notes`` from their note versions."""

    def __init__(self, store: Any, known_at: datetime) -> None:
        self.store = store
        self.known_at = known_at

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def stored_events(self, aggregate_id: UUID) -> Iterator[Any]:
        """The note's events recorded at ``known_at`` (:func:`recorded_by`)."""
        yield from recorded_by(self.store.stored_events(aggregate_id), self.known_at)

    def load(self, aggregate_id: UUID) -> Note | None:
        """The note replayed from its events recorded at ``known_at`` (``None`` when it
        had none then)."""
        return replay_at(self.store.stored_events(aggregate_id), self.known_at)

    def working_notes(self, scope: Scope) -> list[tuple[UUID, bool]]:
        """``(aggregate id, held now)`` of every un-forgotten working note of exactly
        ``scope`` (the backend's note-scope index)."""
        raise NotImplementedError

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        """The working blocks of exactly ``scope`` as recorded at ``known_at``, by label:
        each working note of the scope (:meth:`working_notes`) replayed from its events
        up to ``known_at``, kept when that state has a block
        (:func:`memfabric.domain.working.block_entry`: live, not expired then). A block
        forgotten since has no row to start from (its content is erased, whatever T) and
        one held now is left out, as recall leaves such notes out; one expired since is
        shown as it was. One replay per working note of the scope."""
        out: dict[str, BlockEntry] = {}
        for aggregate_id, held in self.working_notes(scope):
            note = None if held else self.load(aggregate_id)
            entry = block_entry(note) if note is not None else None
            if entry is not None and note is not None and note.block is not None:
                out[note.block] = entry
        return out
