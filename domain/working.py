"""Working memory: labelled blocks an agent reads every turn, and the scope's working value.

A working block is a ``Note`` of kind ``working`` whose id is derived from its scope
and label (:func:`block_note_id`), so writing the same label again reaches the same
aggregate. Its events are ``Remembered`` (first write), ``BlockWritten`` (replace, or
the first write after a forget), ``BlockAppended`` and ``Forgotten``; ``block_version``
counts them.

The working value of a scope is::

    {"_fabric": {"blocks": {LABEL: {"content": str, "updated_at": datetime, "version": int}}}}

with one entry per live block (forgotten and held blocks are absent). Each entry is a
pure function of its note's state (:func:`block_entry`), which is what the
``working_value`` projection stores and what a host validator is shown.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, TypedDict

from pydantic import BaseModel, ValidationError

from memfabric.domain.errors import ValidatorRejectedError
from memfabric.domain.note import Note
from memfabric.domain.scope import Scope

FABRIC_KEY = "_fabric"


class BlockEntry(TypedDict):
    """One block of the working value: its text, last change (UTC) and version."""

    content: str
    updated_at: datetime
    version: int


WorkingValidator = type[BaseModel] | Callable[[dict[str, Any]], Any]
"""A host's check of the working value: a pydantic model class (validated with
``model_validate``) or a callable that raises or returns ``False`` to reject."""


def block_note_id(scope: Scope, label: str) -> str:
    """The 12-hex note id of block ``label`` in ``scope`` (BLAKE2b of both), so a label
    names one note per scope and the same label in two scopes is two notes."""
    return hashlib.blake2b(f"block#{scope.key}#{label}".encode(), digest_size=6).hexdigest()


def block_entry(note: Note) -> BlockEntry | None:
    """The working-value entry of a working note, or ``None`` when it has none
    (not a working note, forgotten, held or empty)."""
    if note.kind != "working" or not note.live or note.content is None or note.block is None:
        return None
    changed = note.updated_at or note.created_on
    return BlockEntry(
        content=note.content,
        updated_at=changed.astimezone(timezone.utc),
        version=int(note.block_version),
    )


def working_value(blocks: Mapping[str, BlockEntry]) -> dict[str, Any]:
    """The working value holding ``blocks`` (labels sorted)."""
    return {FABRIC_KEY: {"blocks": {label: dict(blocks[label]) for label in sorted(blocks)}}}


def check_working_value(
    validator: WorkingValidator, value: dict[str, Any], label: str
) -> None:
    """Run a host validator on the working value a write of block ``label`` would
    produce; raises ``ValidatorRejectedError`` (naming the block) when it rejects."""
    if isinstance(validator, type) and issubclass(validator, BaseModel):
        try:
            validator.model_validate(value)
        except ValidationError as exc:
            raise ValidatorRejectedError(
                f"block: the working-value validator rejected block {label!r}: {exc}"
            ) from exc
        return
    try:
        verdict = validator(value)
    except Exception as exc:  # a host's callable signals rejection by raising
        raise ValidatorRejectedError(
            f"block: the working-value validator rejected block {label!r}: {exc}"
        ) from exc
    if verdict is False:
        raise ValidatorRejectedError(
            f"block: the working-value validator rejected block {label!r}"
        )
