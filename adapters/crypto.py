"""Crypto-shredding: per-note AES-GCM data keys and the sealing event mapper.

Each ``Note`` aggregate gets a 256-bit data key, stored in ``mf_note_keys`` (outside
the event log; the key side is :mod:`memfabric.adapters.crypto_keys`, re-exported here). The mapper seals the protected fields of every event
(``memfabric.domain.note.PROTECTED_FIELDS``: content, context, keywords, embedding, path,
appended text, the inferred subject, the decision, subject, tags) with that key; the rest of the event stays readable JSON. ``forget``
deletes the key rows in the same transaction as the tombstone event, after which the
protected fields of every earlier event are unrecoverable ciphertext and read back as
``<erased>``.

Stored state layout (``state`` column of ``memfabric_events``)::

    b"MF2" | u32 len(plain) | plain JSON | [ u32 key_gen | 12-byte nonce | AES-GCM ciphertext ] | 32-byte tag

The tag (:func:`event_tag`) is HMAC-SHA256 under the fabric secret over the event's id,
version, topic and everything before the tag: the plain metadata (scope, consent, tags,
subject, validity) cannot be edited, and a state cannot be moved to another event,
without the event failing authentication on every read, replay and rebuild. The
AES-GCM associated data is ``originator_id.bytes + u64 originator_version``; the sealed
payload is ``u32 len(json) | JSON of protected text fields | raw float32 embedding
bytes``, zlib-compressed when that saves space (issue 19: the first u32 then has its
high bit set, see :func:`pack_payload`). States written by release 0.1 start with ``b"MF1"`` and have no tag: they stay
readable in a fabric created before tags existed (``mf_fabric_secret.event_format`` 1);
in a fabric created since (``event_format`` 2) an untagged state is refused. What
remains: whoever can read ``mf_fabric_secret`` and write the events table can forge a
tag (keep the secret's table from writers you do not trust; the audit chain's
checkpoints, kept elsewhere, still show the change).

Snapshots (when ``IS_SNAPSHOTTING_ENABLED`` is set) are sealed the same way: the
protected attributes of the snapshotted aggregate state are moved into the sealed
payload (with the note's latest existing key) and their names are listed in the plain
``_sealed`` entry of the state, so an erased snapshot still says what it lost.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
import zlib
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.domain import CanSnapshotAggregate
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic, resolve_topic
from memfabric.adapters.crypto_keys import (
    KEYS_DDL, KEYS_TABLE, BatchKeys, KeyStore, KeyVault, TransactionKeys, forgotten_versions, select_keys,
    select_latest, shredded, shredding_topics,
)
from memfabric.domain.errors import EventIntegrityError, FabricError
from memfabric.domain.note import OPTIONAL_PROTECTED, PROTECTED_FIELDS
from memfabric.domain.note_fields import erased_value

__all__ = [
    "COMPRESSED", "COMPRESS_MIN_SAVING", "KEYS_DDL", "KEYS_TABLE", "MAGIC", "MAGIC_TAGGED", "SEALED_OPTIONAL",
    "TAG_BYTES", "BatchKeys", "KeyStore", "KeyVault", "SealingMapper", "TransactionKeys", "event_tag",
    "forgotten_versions", "pack_payload", "select_keys", "select_latest", "shredded", "shredding_topics",
    "unpack_payload",
]

MAGIC = b"MF1"
"""Magic of a release-0.1 state: the plain JSON part is not authenticated (legacy)."""
SEALED_OPTIONAL = "_sealed_optional"
"""Plain-state key of an event naming the ``OPTIONAL_PROTECTED`` fields it sealed
(absent: none, as in every event of 0.1.0); popped on read, never part of the event."""
MAGIC_TAGGED = b"MF2"
"""Magic of an authenticated state: the whole state ends with :data:`TAG_BYTES` of
HMAC-SHA256 under the fabric secret (see :func:`event_tag`)."""
TAG_BYTES = 32
_U32 = struct.Struct(">I")
_AAD = struct.Struct(">Q")


COMPRESSED = 0x8000_0000
"""High bit of the sealed payload's first u32: the rest is a zlib stream of the plain
payload (``u32 len(json) | JSON | float32 bytes``). Payloads written before issue 19
never set it (their JSON is far shorter than 2 GiB), so they read as before."""

COMPRESS_MIN_SAVING = 64
"""A payload is stored compressed only when that saves at least this many bytes."""


def pack_payload(text: bytes, embedding: bytes) -> bytes:
    """The plaintext that is sealed: ``u32 len(text) | text | embedding``, or, when zlib
    (level 1) makes it at least :data:`COMPRESS_MIN_SAVING` bytes shorter (e.g. the
    mostly-zero vectors of the hash embedder, repeated JSON keys),
    ``u32 COMPRESSED | zlib(that)``. Compressing before encrypting lets the ciphertext
    length depend on the content's redundancy as well as its length (no attacker text
    is ever mixed into a payload, so no CRIME-style oracle arises)."""
    plain = _U32.pack(len(text)) + text + embedding
    packed = zlib.compress(plain, 1)
    if len(packed) + 4 + COMPRESS_MIN_SAVING <= len(plain):
        return _U32.pack(COMPRESSED) + packed
    return plain


def unpack_payload(payload: bytes) -> bytes:
    """The plain payload of :func:`pack_payload` (decompressed when flagged)."""
    (first,) = _U32.unpack_from(payload, 0)
    if first & COMPRESSED:
        try:
            return zlib.decompress(payload[4:])
        except zlib.error as exc:
            raise EventIntegrityError(f"a sealed payload does not decompress: {exc}") from None
    return payload


def event_tag(secret: bytes, originator_id: UUID, version: int, topic: str, body: bytes) -> bytes:
    """The authentication tag of a stored event: HMAC-SHA256 under the fabric secret of
    ``originator_id (16 bytes) | u64 version | topic (UTF-8) | 0x00 | body``, where
    ``body`` is the whole stored state before the tag (magic, plain JSON metadata and the
    sealed part). It covers the metadata (scope, consent, tags, subject, validity) and
    binds the state to its event. It is keyed by the fabric secret, not the note's key,
    so a tombstone stays verifiable after its note's key is destroyed."""
    mac = hmac.new(secret, originator_id.bytes + _AAD.pack(version) + topic.encode() + b"\0", hashlib.sha256)
    mac.update(body)
    return mac.digest()


class SealingMapper(Mapper[UUID]):
    """An eventsourcing ``Mapper`` that seals protected fields per note and
    authenticates every stored event (see module doc).

    ``secret``: the fabric secret; with it every event is written as an authenticated
    ``MF2`` state and every ``MF2`` state is checked on reading. ``require_tags``: refuse
    legacy ``MF1`` states (a fabric created by this release has only tagged events, so
    a row rewritten in the old format is refused too). ``read_only``: a fabric opened
    read-only by a role that may not read the secret reads tagged states without checking
    their tags (it writes nothing; ``audit verify`` against the chain is its check)."""

    def __init__(self, transcoder: Transcoder, keys: KeyVault, *, secret: bytes | None = None,
                 require_tags: bool = False, read_only: bool = False) -> None:
        super().__init__(transcoder=transcoder)
        self.keys = keys
        self.secret = secret
        self.require_tags = require_tags
        self.read_only = read_only

    def bound(self, keys: KeyVault) -> SealingMapper:
        """This mapper sealing and unsealing with ``keys`` (a unit of work's or a
        replay's own key vault) instead of the shared key store."""
        return SealingMapper(self.transcoder, keys, secret=self.secret, require_tags=self.require_tags,
                             read_only=self.read_only)

    def _tag(self, stored_id: UUID, version: int, topic: str, body: bytes) -> bytes:
        if self.secret is None:
            raise EventIntegrityError("the fabric secret is not loaded: events cannot be authenticated")
        return event_tag(self.secret, stored_id, version, topic, body)

    def authenticated_body(self, stored: StoredEvent) -> bytes:
        """The state without its tag, after checking the tag (``MF2``) or the policy for
        legacy states (``MF1``); raises ``EventIntegrityError`` naming the event."""
        data = stored.state
        oid = stored.originator_id if isinstance(stored.originator_id, UUID) else UUID(str(stored.originator_id))
        if data.startswith(MAGIC_TAGGED) and len(data) > len(MAGIC_TAGGED) + TAG_BYTES:
            body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
            if self.secret is None and self.read_only:
                return body  # a read-only auditor without the secret: the audit chain is the check
            if not hmac.compare_digest(tag, self._tag(oid, stored.originator_version, stored.topic, body)):
                raise EventIntegrityError(
                    f"event {stored.originator_version} of aggregate {oid} failed authentication: "
                    "its stored bytes were changed (metadata, topic or sealed content)")
            return body
        if data.startswith(MAGIC):
            if self.require_tags:
                raise EventIntegrityError(
                    f"event {stored.originator_version} of aggregate {oid} has no authentication "
                    "tag although every event of this fabric is authenticated: it was rewritten")
            return data
        raise EventIntegrityError(
            f"event {stored.originator_version} of aggregate {oid} is not a "
            "memfabric event state: its stored bytes were changed")

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        topic = get_topic(domain_event.__class__)
        state = dict(vars(domain_event))
        originator_id = state.pop("originator_id")
        version = state.pop("originator_version")
        state.pop("_erased", None)
        found: tuple[int, bytes] | None = None
        if isinstance(domain_event, CanSnapshotAggregate):
            inner = dict(state["state"])
            protected = {k: inner.pop(k) for k in PROTECTED_FIELDS if k in inner}
            found = self.keys.key_for_snapshot(originator_id) if protected else None
            if found is None:
                if any(v not in (None, [], (), b"") for v in protected.values()):
                    raise FabricError(
                        f"cannot snapshot note {originator_id}: it has protected content but no data key"
                    )
                inner.update(protected)  # a forgotten note: nothing left to seal
                protected = {}
            else:
                inner["_sealed"] = list(protected)
            state["state"] = inner
        else:
            # a protected field that is None carries nothing: it stays in the clear, so
            # an erased event still tells which fields it had (no ``path: <erased>`` on a
            # note that never had a path)
            protected = {k: state.pop(k) for k in PROTECTED_FIELDS if state.get(k) is not None}
            optional = sorted(k for k in protected if k in OPTIONAL_PROTECTED)
            if optional:  # plain: which optional fields this event sealed (history erases them)
                state[SEALED_OPTIONAL] = optional
            if state.get("contributed") is not None and state.get("source"):
                # issue 15: an evolution patch is sealed under its source note's key, inside
                # this (MF2) state, so the tag below covers it too
                state["contributed"] = self._seal_contribution(
                    state["contributed"], UUID(state["source"]), originator_id, version)
        plain = self.transcoder.encode(state)
        out = [MAGIC_TAGGED if self.secret is not None else MAGIC, _U32.pack(len(plain)), plain]
        if protected:
            embedding = protected.pop("embedding", None)
            text = json.dumps(protected, separators=(",", ":"), ensure_ascii=False).encode()
            payload = pack_payload(text, embedding or b"")
            gen, key = found or self.keys.key_for_write(originator_id, version)
            nonce = os.urandom(12)
            sealed = AESGCM(key).encrypt(nonce, payload, originator_id.bytes + _AAD.pack(version))
            out += [_U32.pack(gen), nonce, sealed]
        body = b"".join(out)
        if self.secret is not None:
            body += self._tag(originator_id, version, topic, body)
        return StoredEvent(originator_id=originator_id, originator_version=version, topic=topic, state=body)

    def _seal_contribution(self, value: dict[str, Any], source: UUID, originator_id: UUID,
                           version: int) -> dict[str, Any]:
        """An evolution patch sealed under its *source* note's key (issue 15): plain
        ``{"sealed_by", "gen", "blob"}`` (hex of nonce + AES-GCM ciphertext, associated
        data = this event's originator id and version + the source id)."""
        gen, key = self.keys.key_for_write(source, 2)
        nonce = os.urandom(12)
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        sealed = AESGCM(key).encrypt(nonce, text, originator_id.bytes + _AAD.pack(version) + source.bytes)
        return {"sealed_by": str(source), "gen": gen, "blob": (nonce + sealed).hex()}

    def _open_contribution(self, value: Any, originator_id: UUID, version: int) -> Any:
        """The patch of :meth:`_seal_contribution`, or ``None`` once its source's key is
        destroyed (the source was forgotten); a key missing otherwise is a key fault."""
        if not isinstance(value, dict) or "sealed_by" not in value:
            return value
        source = UUID(value["sealed_by"])
        gen = int(value["gen"])
        key = self.keys.key_for_read(source, gen)
        if key is None:
            if not self.keys.shredded(source, gen):
                raise EventIntegrityError(
                    f"event {version} of aggregate {originator_id}: key fault: the data key "
                    f"(generation {gen}) of its contributing note {source} is missing although "
                    "that note was never forgotten")
            return None
        blob = bytes.fromhex(value["blob"])
        try:
            text = AESGCM(key).decrypt(blob[:12], blob[12:],
                                       originator_id.bytes + _AAD.pack(version) + source.bytes)
        except InvalidTag:
            raise EventIntegrityError(
                f"event {version} of aggregate {originator_id} failed authentication: "
                "its stored bytes were changed") from None
        return json.loads(text)

    def decode_state(self, stored: StoredEvent) -> tuple[dict[str, Any], list[str]]:
        """Plain event fields with protected ones unsealed, or marked erased; returns
        ``(fields, erased_field_names)``."""
        data = self.authenticated_body(stored)
        (n,) = _U32.unpack_from(data, 3)
        state: dict[str, Any] = self.transcoder.decode(data[7 : 7 + n])
        rest = data[7 + n :]
        sealed_optional = set(state.pop(SEALED_OPTIONAL, None) or ())
        oid = _originator(stored)
        if isinstance(state.get("contributed"), dict):
            state["contributed"] = self._open_contribution(state["contributed"], oid, stored.originator_version)
        if not rest:
            return state, []
        (gen,) = _U32.unpack_from(rest, 0)
        key = self.keys.key_for_read(oid, gen)
        target, fields = _sealed_fields(state, resolve_topic(stored.topic), sealed_optional)
        if key is None and not self.keys.shredded(oid, gen):
            raise EventIntegrityError(
                f"event {stored.originator_version} of aggregate {oid}: key fault: its data "
                f"key (generation {gen}) is missing although the note was never forgotten")
        if key is None:
            return state, erase_fields(target, fields, sealed_optional)
        target.update(_unseal(key, rest, oid, stored.originator_version, gen, "embedding" in fields))
        return state, []

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        cls = resolve_topic(stored_event.topic)
        state, erased = self.decode_state(stored_event)
        state["originator_id"] = stored_event.originator_id
        state["originator_version"] = stored_event.originator_version
        if erased:
            state["_erased"] = erased
        event = object.__new__(cls)
        object.__setattr__(event, "__dict__", state)
        return event


def _originator(stored: StoredEvent) -> UUID:
    """The stored event's originator id as a ``UUID``."""
    oid = stored.originator_id
    return oid if isinstance(oid, UUID) else UUID(str(oid))


def _sealed_fields(state: dict[str, Any], cls: Any, sealed_optional: set[str]) -> tuple[dict[str, Any], list[str]]:
    """Where the unsealed fields go and which they are: a snapshot's inner ``state``
    and the names its ``_sealed`` entry lists (added to ``sealed_optional``: a snapshot
    lists what it sealed), else the event's own fields and the protected fields of its
    class missing from its plain part."""
    if isinstance(cls, type) and issubclass(cls, CanSnapshotAggregate):
        target = state["state"] = dict(state["state"])
        fields = list(target.pop("_sealed", []))
        sealed_optional |= set(fields)
        return target, fields
    declared = getattr(cls, "__dataclass_fields__", {})
    return state, [f for f in PROTECTED_FIELDS if f in declared and f not in state]


def erase_fields(target: dict[str, Any], fields: list[str], sealed_optional: set[str]) -> list[str]:
    """Set the sealed ``fields`` of a shredded event as they read once erased
    (:func:`~memfabric.domain.note_fields.erased_value`); returns the names listed as
    erased: an optional field only where the event sealed it (``sealed_optional``;
    events of 0.1.0 never had one)."""
    for f in fields:
        target[f] = erased_value(f)
    return [f for f in fields if f not in OPTIONAL_PROTECTED or f in sealed_optional]


def _unseal(key: bytes, rest: bytes, oid: UUID, version: int, gen: int, embedding: bool) -> dict[str, Any]:
    """The protected fields of the sealed part ``rest`` (``u32 gen | nonce | ciphertext``)
    under ``key``, with the raw ``embedding`` bytes when the event has that field
    (``None`` when empty); ``EventIntegrityError`` when authentication fails."""
    try:
        payload = AESGCM(key).decrypt(rest[4:16], rest[16:], oid.bytes + _AAD.pack(version))
    except InvalidTag:
        raise EventIntegrityError(
            f"event {version} of aggregate {oid} failed authentication with its data key (generation "
            f"{gen}): key fault or changed bytes (the key row or the event's stored bytes were altered)"
        ) from None
    payload = unpack_payload(payload)
    (m,) = _U32.unpack_from(payload, 0)
    fields: dict[str, Any] = json.loads(payload[4 : 4 + m])
    if embedding:
        emb = payload[4 + m :]
        fields["embedding"] = bytes(emb) if emb else None
    return fields
