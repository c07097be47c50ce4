"""Replaying an aggregate from its events, one version after the other (issue 28,
defect 8): a version missing from the middle of a note's events (a row deleted from
the log) is a typed :class:`~memfabric.domain.errors.EventIntegrityError` naming the
note and the missing version, never eventsourcing's bare ``OriginatorVersionError`` /
``AssertionError`` nor a quietly partial history."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memfabric.domain.errors import EventIntegrityError


def _name(event: Any, current: Any) -> str:
    """``note '<id>' (aggregate <uuid>)`` when the note id is known, else the aggregate."""
    note_id = getattr(current, "note_id", None) or getattr(event, "note_id", None)
    oid = event.originator_id
    return f"note {note_id!r} (aggregate {oid})" if note_id else f"aggregate {oid}"


def missing_version(name: str, expected: int, found: int) -> EventIntegrityError:
    """The error for the event ``expected`` of ``name`` absent before version ``found``."""
    gap = f"version {expected}" if found == expected + 1 else f"versions {expected}-{found - 1}"
    return EventIntegrityError(
        f"{name}: event {gap} is missing from the log (the next stored event is version {found}): "
        "an event row was deleted; run 'memfabric audit verify'")


def step(event: Any, current: Any) -> Any:
    """``event.mutate(current)`` after checking that ``event`` is the next version
    (1 for a new aggregate, else ``current.version + 1``). Raises
    ``EventIntegrityError`` naming the note and the missing version otherwise."""
    expected = 1 if current is None else int(current.version) + 1
    found = int(event.originator_version)
    if found != expected:
        raise missing_version(_name(event, current), expected, found)
    return event.mutate(current)


def check_versions(name: str, versions: Iterable[int]) -> None:
    """Versions of one aggregate's events, in order, must be ``1, 2, 3, ...``; raises
    ``EventIntegrityError`` naming ``name`` and the first missing version."""
    expected = 1
    for found in versions:
        if found != expected:
            raise missing_version(name, expected, found)
        expected += 1
