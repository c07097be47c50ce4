"""The note's log-format values: its aggregate id, the sealed (protected) fields and
what they read as once erased, and the supersession decision a replaced note keeps.

Re-exported by :mod:`memfabric.domain.note` (import them from there or here).
"""

from __future__ import annotations

from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from memfabric.domain.scope import Scope

_NOTE_NAMESPACE = uuid5(NAMESPACE_URL, "https://memfabric.dev/note")

PROTECTED_FIELDS: tuple[str, ...] = (
    "content", "context", "keywords", "embedding", "text", "path", "from_path", "to_path",
    "inferred_subject", "decision", "subject", "tags",
)
"""Event (and snapshot) fields sealed with the note's data key; erased for good when the
key is destroyed. ``path`` is protected because a file note without content stores its
path as its content; ``subject`` and ``tags`` are what a caller wrote (sealed since
2026-12-04; older events keep them plain and read as before). Scope ids,
``source_entry_ids``, link ids, times and consent stay plain: they are metadata, not
content (see ``docs/erasure.md``)."""

OPTIONAL_PROTECTED: frozenset[str] = frozenset({"inferred_subject", "decision", "subject", "tags"})
"""Protected fields added after 0.1.0 (with defaults): derived from the content (the
inferred subject key and values, why a write folded or superseded), so sealed like it;
once the key is destroyed they read as ``None`` in the replayed state and, where the event
sealed one (a plain marker names them), are listed as erased, so ``history`` shows them as
:data:`ERASED` like content; events of 0.1.0 never had them and list none."""

ERASED = "<erased>"
"""What a protected field reads as once its note's key has been destroyed."""


def erased_value(field: str) -> object:
    """What protected ``field`` of an event reads as once its key is destroyed: ``[]``
    for the lists (``keywords``, ``tags``), ``None`` for ``embedding`` and the
    :data:`OPTIONAL_PROTECTED` ones, else :data:`ERASED`."""
    if field in ("keywords", "tags"):
        return []
    return None if field == "embedding" or field in OPTIONAL_PROTECTED else ERASED

SUCCESSOR_VALUES: frozenset[str] = frozenset({"new_value"})
"""Keys of a supersession decision that hold a value read from the *successor* (issue 28,
defect 4): a replaced note's ``Superseded`` event never stores them (they live in the
successor's own ``decision``, under the successor's key), so forgetting the successor
leaves none of its values readable through the replaced note."""


def replaced_decision(decision: dict[str, Any] | None) -> dict[str, Any] | None:
    """``decision`` as a replaced note's ``Superseded`` event keeps it: without the
    :data:`SUCCESSOR_VALUES` keys (``None`` stays ``None``). Also applied when reading
    events written before this rule."""
    if not decision or not SUCCESSOR_VALUES & decision.keys():
        return decision
    return {k: v for k, v in decision.items() if k not in SUCCESSOR_VALUES}


def note_uuid(scope: Scope, note_id: str) -> UUID:
    """Aggregate id of note ``note_id`` in ``scope`` (UUIDv5, so the same 12-hex id in
    two scopes is two aggregates)."""
    return uuid5(_NOTE_NAMESPACE, f"{scope.key}#{note_id}")
