"""What the audit, the stores and the roles share about the events table (a leaf module):
its name and the ``Remembered`` topic, the audit chain's table, DDL and leaf hash, and
:func:`plain_fields` (the clear fields of a stored state). Re-exported by
:mod:`memfabric.adapters.audit`, where they are documented with the chain."""

from __future__ import annotations

import hashlib
import struct
from typing import Any
from uuid import UUID

from memfabric.adapters.crypto import MAGIC, MAGIC_TAGGED, SEALED_OPTIONAL
from memfabric.domain.errors import EventIntegrityError
from memfabric.projections import tables

EVENTS_TABLE = tables.EVENTS
REMEMBERED_TOPIC = "memfabric.domain.note:Note.Remembered"

CHAIN_TABLE = tables.AUDIT_CHAIN
CHAIN_DDL = (
    f"CREATE TABLE IF NOT EXISTS {CHAIN_TABLE} ("
    " position bigint PRIMARY KEY, prev_position bigint NOT NULL, events integer NOT NULL,"
    " digest bytea NOT NULL, positions bigint[] NOT NULL, leaves bytea NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now())"
)
"""Checkpoints: segment ``(prev_position, position]``, its event positions and 32-byte
leaves (concatenated, in order) and the chain digest after its last event."""

GENESIS = hashlib.sha256(b"memfabric-audit-v1").digest()

LEAF_SQL = (
    "sha256(int8send(notification_id) || uuid_send(originator_id)"
    " || int8send(originator_version::bigint)"
    " || int4send(octet_length(convert_to(topic, 'UTF8'))) || convert_to(topic, 'UTF8') || state)"
)
"""The leaf hash of an events-table row, in SQL (only 32 bytes per event leave the server)."""

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


def leaf_hash(position: int, originator_id: UUID, version: int, topic: str, state: bytes) -> bytes:
    """The leaf hash of one event row (same bytes as :data:`LEAF_SQL`)."""
    t = topic.encode()
    return hashlib.sha256(
        _I64.pack(position) + originator_id.bytes + _I64.pack(version) + _I32.pack(len(t)) + t + state
    ).digest()


def plain_fields(mapper: Any, state: bytes) -> dict[str, Any]:
    """The clear (unsealed) fields of a stored state, without any key (and without
    checking its authentication tag: the decoding mapper does that)."""
    if not (state.startswith(MAGIC) or state.startswith(MAGIC_TAGGED)):
        raise EventIntegrityError("not a memfabric event state: its stored bytes were changed")
    (n,) = _U32.unpack_from(state, len(MAGIC))
    start = len(MAGIC) + 4
    fields = dict(mapper.transcoder.decode(state[start : start + n]))
    fields.pop(SEALED_OPTIONAL, None)  # a marker of the mapper, not an event field
    return fields
