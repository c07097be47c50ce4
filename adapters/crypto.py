"""Crypto-shredding: per-note AES-GCM data keys and the sealing event mapper.

Each ``Note`` aggregate gets a 256-bit data key, stored in ``mf_note_keys`` (outside
the event log). The mapper seals the protected fields of every event
(``memfabric.domain.note.PROTECTED_FIELDS``: content, context, keywords, embedding,
appended text) with that key; the rest of the event stays readable JSON. ``forget``
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
import threading
import time
import zlib
from collections import OrderedDict
from typing import Any, Protocol
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.domain import CanSnapshotAggregate
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic, resolve_topic
from memfabric.domain.errors import EventIntegrityError, FabricError
from memfabric.domain.note import ERASED, OPTIONAL_PROTECTED, PROTECTED_FIELDS
from memfabric.projections import tables
from psycopg import Connection, Cursor

KEYS_TABLE = tables.NOTE_KEYS
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

KEYS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {KEYS_TABLE} ("
    " originator_id uuid NOT NULL, gen integer NOT NULL, key bytea NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (originator_id, gen))"
)


class KeyStore:
    """The fabric's data keys in ``mf_note_keys``, read side, with a per-process cache.

    Decryption keys are cached for ``ttl`` seconds (default 2), at most ``maxsize``
    entries. Writes never go through here: a unit of work creates and destroys keys
    through its own :class:`TransactionKeys` on its own connection, and hands the keys it
    committed to this cache (:meth:`remember`) only after the commit.

    Crypto-shredding and the cache: every :meth:`evict` advances an eviction counter
    (:meth:`epoch`). A reader takes the counter before its key SELECT and passes it to
    :meth:`remember`, which caches nothing when an eviction happened in between — else a
    read that fetched a key just before a ``forget`` committed would put the destroyed
    key back into the cache, readable for another ``ttl`` seconds."""

    def __init__(self, datastore: Any, ttl: float = 2.0, maxsize: int = 4096) -> None:
        self.datastore = datastore
        self.ttl = ttl
        self.maxsize = maxsize
        self._cache: OrderedDict[tuple[UUID, int], tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()
        self._epoch = 0

    def epoch(self) -> int:
        """The eviction counter (see the class doc)."""
        with self._lock:
            return self._epoch

    def cached(self, originator_id: UUID, gen: int) -> bytes | None:
        """A fresh cached key, or ``None``."""
        with self._lock:
            hit = self._cache.get((originator_id, gen))
        if hit is not None and time.monotonic() - hit[0] < self.ttl:
            return hit[1]
        return None

    def remember(self, keys: dict[tuple[UUID, int], bytes], *, epoch: int) -> None:
        """Cache committed keys fetched or created after :meth:`epoch` returned ``epoch``;
        nothing when a key was evicted since (a shredding raced this read)."""
        now = time.monotonic()
        with self._lock:
            if epoch != self._epoch:
                return
            for k, key in keys.items():
                self._cache[k] = (now, key)
                self._cache.move_to_end(k)
            while len(self._cache) > self.maxsize:
                self._cache.popitem(last=False)

    def evict(self, originator_ids: set[UUID]) -> None:
        """Drop the cached keys of shredded notes (a scan of the cache: skipped when
        there are none, i.e. on every write that shreds nothing)."""
        if not originator_ids:
            return
        with self._lock:
            self._epoch += 1
            for k in [k for k in self._cache if k[0] in originator_ids]:
                del self._cache[k]

    def key_for_read(self, originator_id: UUID, gen: int) -> bytes | None:
        hit = self.cached(originator_id, gen)
        if hit is not None:
            return hit
        epoch = self.epoch()
        with self.datastore.get_connection() as conn:
            row = conn.execute(
                f"SELECT key FROM {KEYS_TABLE} WHERE originator_id = %s AND gen = %s",  # noqa: S608
                (originator_id, gen),
            ).fetchone()
        if row is None:
            return None
        key = bytes(row["key"])
        self.remember({(originator_id, gen): key}, epoch=epoch)
        return key

    def shredded(self, originator_id: UUID, gen: int) -> bool:
        """Whether key ``gen`` of the note was destroyed on purpose (see :func:`shredded`)."""
        with self.datastore.get_connection() as conn:
            return shredded(forgotten_versions(conn, [originator_id]), originator_id, gen)

    def key_for_snapshot(self, originator_id: UUID) -> tuple[int, bytes] | None:
        """(gen, key) to seal a snapshot of an existing note: its latest key, or ``None``
        when the note has none (it was forgotten)."""
        with self.datastore.get_connection() as conn:
            return select_latest(conn, originator_id)

    def key_for_write(self, originator_id: UUID, version: int) -> tuple[int, bytes]:
        raise FabricError("events are written through a unit of work, not the shared key store")

    def preload(self, originator_ids: list[UUID]) -> None:
        """Fetch the keys of many notes at once (for replays)."""
        if not originator_ids:
            return
        epoch = self.epoch()
        with self.datastore.get_connection() as conn:
            self.remember(select_keys(conn, originator_ids), epoch=epoch)


def select_keys(conn: Connection[Any], originator_ids: list[UUID]) -> dict[tuple[UUID, int], bytes]:
    """Every key of the given notes, on ``conn`` (so in its transaction and snapshot)."""
    rows = conn.execute(
        f"SELECT originator_id, gen, key FROM {KEYS_TABLE} WHERE originator_id = ANY(%s)",  # noqa: S608
        (originator_ids,),
    ).fetchall()
    return {(_first(r, "originator_id", 0), int(_first(r, "gen", 1))): bytes(_first(r, "key", 2)) for r in rows}


FORGOTTEN_TOPIC = "memfabric.domain.note:Note.Forgotten"
"""Topic of a note's tombstone event (part of the log format)."""
ERASED_TOPIC = "memfabric.domain.ledger:Conversation.Erased"
"""Topic of a conversation's tombstone event (part of the log format)."""
ENTITY_FORGOTTEN_TOPIC = "memfabric.domain.entity:Entity.EntityForgotten"
"""Topic of an entity's tombstone event (issue 32; part of the log format)."""
SHREDDING_TOPICS = [FORGOTTEN_TOPIC, ERASED_TOPIC, ENTITY_FORGOTTEN_TOPIC]
"""Events whose transaction destroys the aggregate's keys."""


def forgotten_versions(conn: Connection[Any], originator_ids: list[UUID]) -> dict[UUID, int]:
    """The version of the latest tombstone (a note's ``Forgotten``, a conversation's
    ``Erased``) of each of the given aggregates that has one, on ``conn``."""
    rows = conn.execute(
        f"SELECT originator_id, max(originator_version) AS v FROM {tables.EVENTS}"  # noqa: S608
        " WHERE originator_id = ANY(%s) AND topic = ANY(%s) GROUP BY originator_id",
        (originator_ids, SHREDDING_TOPICS),
    ).fetchall()
    return {_first(r, "originator_id", 0): int(_first(r, "v", 1)) for r in rows}


def shredded(forgotten: dict[UUID, int], originator_id: UUID, gen: int) -> bool:
    """A missing key ``gen`` is a shredding (reads ``<erased>``) exactly when the note
    has a ``Forgotten`` event at or after version ``gen``: ``forget`` deletes every key
    in the tombstone's transaction, and a note written again after it gets a fresh key
    (gen = the version of that write). Any other missing key is an integrity fault."""
    version = forgotten.get(originator_id)
    return version is not None and version >= gen


def _first(row: Any, name: str, index: int) -> Any:
    return row[name] if isinstance(row, dict) else row[index]


def select_latest(conn: Connection[Any], originator_id: UUID) -> tuple[int, bytes] | None:
    """The newest (gen, key) of a note, on ``conn``."""
    row = conn.execute(
        f"SELECT gen, key FROM {KEYS_TABLE} WHERE originator_id = %s ORDER BY gen DESC LIMIT 1",  # noqa: S608
        (originator_id,),
    ).fetchone()
    if row is None:
        return None
    return int(_first(row, "gen", 0)), bytes(_first(row, "key", 1))


class BatchKeys:
    """Keys of a set of notes read on one connection (one snapshot), for replays."""

    def __init__(self) -> None:
        self.keys: dict[tuple[UUID, int], bytes] = {}
        self.forgotten: dict[UUID, int] = {}
        self._conn: Connection[Any] | None = None
        self._asked: set[UUID] = set()

    def load(self, conn: Connection[Any], ids: list[UUID]) -> None:
        self.keys = select_keys(conn, ids) if ids else {}
        self.forgotten = forgotten_versions(conn, ids) if ids else {}
        self._conn, self._asked = conn, set(ids)

    def key_for_read(self, originator_id: UUID, gen: int) -> bytes | None:
        found = self.keys.get((originator_id, gen))
        if found is None and self._conn is not None and originator_id not in self._asked:
            # another note's key (an evolution patch sealed under its source, issue 15)
            self._asked.add(originator_id)
            self.keys.update(select_keys(self._conn, [originator_id]))
            self.forgotten.update(forgotten_versions(self._conn, [originator_id]))
            found = self.keys.get((originator_id, gen))
        return found

    def key_for_write(self, originator_id: UUID, version: int) -> tuple[int, bytes]:
        raise FabricError("a replay's key vault is read-only")

    def key_for_snapshot(self, originator_id: UUID) -> tuple[int, bytes] | None:
        raise FabricError("a replay's key vault is read-only")

    def shredded(self, originator_id: UUID, gen: int) -> bool:
        return shredded(self.forgotten, originator_id, gen)


class TransactionKeys:
    """The data keys of one unit of work, read and written on its connection.

    New keys are generated in memory while events are sealed and inserted by
    :meth:`flush` in the event-insert transaction; :meth:`destroy` deletes the keys of
    shredded notes in that same transaction; :meth:`committed` hands the new keys to
    the shared cache once the transaction has committed (never before: a rolled-back
    key must not be cached)."""

    def __init__(self, conn: Connection[Any], shared: KeyStore) -> None:
        self.conn = conn
        self.shared = shared
        self.epoch = shared.epoch()
        """The shared cache's eviction counter when this unit of work began: its new keys
        are cached after the commit only if no key was shredded meanwhile."""
        self.pending: dict[UUID, tuple[int, bytes]] = {}
        self.loaded: dict[tuple[UUID, int], bytes] = {}
        self.doomed: set[UUID] = set()
        self.forgotten: dict[UUID, int] = {}
        self.unreadable: set[UUID] = set()
        """Notes replayed as if their keys were destroyed (a key fault being erased)."""
        self.latest: dict[UUID, tuple[int, bytes] | None] = {}
        """The newest (gen, key) of each preloaded note (``None``: it has no key), so a
        write to a note just replayed needs no second key query."""

    def key_for_write(self, originator_id: UUID, version: int) -> tuple[int, bytes]:
        """(gen, key) to seal an event at ``version``: the note's latest key, or a fresh
        one for a new note (or a note whose keys were destroyed)."""
        if originator_id in self.pending:
            return self.pending[originator_id]
        if version > 1 and originator_id not in self.doomed:
            gens = [gen for (oid, gen) in self.loaded if oid == originator_id]
            if gens:  # every key of the note was preloaded on this connection: its latest
                return max(gens), self.loaded[(originator_id, max(gens))]
        if version > 1:
            found = (self.latest[originator_id] if originator_id in self.latest
                     else select_latest(self.conn, originator_id))
            if found is not None:
                return found
        key = AESGCM.generate_key(bit_length=256)
        self.pending[originator_id] = (version, key)
        return version, key

    def key_for_snapshot(self, originator_id: UUID) -> tuple[int, bytes] | None:
        found = self.pending.get(originator_id)
        return found if found is not None else select_latest(self.conn, originator_id)

    def preload(self, originator_ids: list[UUID]) -> None:
        """Read the keys of notes about to be replayed in one query (whether a missing
        key was shredded is only asked when one is missing: :meth:`shredded`)."""
        if originator_ids:
            found = select_keys(self.conn, originator_ids)
            self.loaded.update(found)
            for oid in originator_ids:
                self.latest.setdefault(oid, None)
            for (oid, gen), key in found.items():
                held = self.latest.get(oid)
                if held is None or gen > held[0]:
                    self.latest[oid] = (gen, key)

    def shredded(self, originator_id: UUID, gen: int) -> bool:
        if originator_id in self.doomed or originator_id in self.unreadable:
            return True
        if originator_id not in self.forgotten:
            self.forgotten.update(forgotten_versions(self.conn, [originator_id]))
        return shredded(self.forgotten, originator_id, gen)

    def key_for_read(self, originator_id: UUID, gen: int) -> bytes | None:
        if originator_id in self.unreadable:
            return None
        found = self.pending.get(originator_id)
        if found is not None and found[0] == gen:
            return found[1]
        hit = self.loaded.get((originator_id, gen)) or self.shared.cached(originator_id, gen)
        if hit is not None:
            return hit
        row = self.conn.execute(
            f"SELECT key FROM {KEYS_TABLE} WHERE originator_id = %s AND gen = %s",  # noqa: S608
            (originator_id, gen),
        ).fetchone()
        return None if row is None else bytes(_first(row, "key", 0))

    FLUSH_SQL = (f"INSERT INTO {KEYS_TABLE} (originator_id, gen, key)"  # noqa: S608
                 " SELECT * FROM unnest(%s::uuid[], %s::int[], %s::bytea[])"
                 " ON CONFLICT (originator_id, gen) DO UPDATE SET key = EXCLUDED.key")
    """The statement of :meth:`flush` (three arrays: :meth:`flush_params`)."""

    def flush_params(self) -> tuple[list[UUID], list[int], list[bytes]]:
        """The parameters of :data:`FLUSH_SQL`: the keys generated for this unit of work."""
        rows = list(self.pending.items())
        return [oid for oid, _ in rows], [gen for _, (gen, _k) in rows], [key for _, (_g, key) in rows]

    def flush(self, cur: Cursor[Any]) -> None:
        """Insert the keys generated for this unit of work."""
        if self.pending:
            cur.execute(self.FLUSH_SQL, self.flush_params())

    def destroy(self, cur: Cursor[Any]) -> None:
        """Delete every key of the doomed notes (crypto-shredding)."""
        if self.doomed:
            cur.execute(f"DELETE FROM {KEYS_TABLE} WHERE originator_id = ANY(%s)",  # noqa: S608
                        (list(self.doomed),))
            self.shared.evict(self.doomed)

    def committed(self) -> None:
        """After commit: cache the new keys, forget the shredded ones."""
        self.shared.remember({(oid, gen): key for oid, (gen, key) in self.pending.items()
                              if oid not in self.doomed}, epoch=self.epoch)
        self.shared.evict(self.doomed)


class KeyVault(Protocol):
    """What the sealing mapper needs: keys to seal and to unseal."""

    def key_for_write(self, originator_id: UUID, version: int) -> tuple[int, bytes]: ...

    def key_for_snapshot(self, originator_id: UUID) -> tuple[int, bytes] | None: ...

    def key_for_read(self, originator_id: UUID, gen: int) -> bytes | None: ...

    def shredded(self, originator_id: UUID, gen: int) -> bool: ...


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
                if any(v not in (None, [], b"") for v in protected.values()):
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
        erased: list[str] = []
        sealed_optional = set(state.pop(SEALED_OPTIONAL, None) or ())
        if isinstance(state.get("contributed"), dict):
            oid0 = stored.originator_id if isinstance(stored.originator_id, UUID) else UUID(str(stored.originator_id))
            state["contributed"] = self._open_contribution(
                state["contributed"], oid0, stored.originator_version)
        if rest:
            (gen,) = _U32.unpack_from(rest, 0)
            nonce, sealed = rest[4:16], rest[16:]
            oid = stored.originator_id if isinstance(stored.originator_id, UUID) else UUID(str(stored.originator_id))
            key = self.keys.key_for_read(oid, gen)
            cls = resolve_topic(stored.topic)
            target = state
            if isinstance(cls, type) and issubclass(cls, CanSnapshotAggregate):
                target = state["state"] = dict(state["state"])
                fields = list(target.pop("_sealed", []))
                sealed_optional |= set(fields)  # a snapshot lists what it sealed
            else:
                fields = [f for f in PROTECTED_FIELDS
                          if f in getattr(cls, "__dataclass_fields__", {}) and f not in state]
            if key is None and not self.keys.shredded(oid, gen):
                raise EventIntegrityError(
                    f"event {stored.originator_version} of aggregate {oid}: key fault: its data "
                    f"key (generation {gen}) is missing although the note was never forgotten")
            if key is None:
                # an optional field is listed (history shows ERASED) only where this event
                # sealed it: events of 0.1.0 never had one
                erased = [f for f in fields if f not in OPTIONAL_PROTECTED or f in sealed_optional]
                for f in fields:
                    target[f] = ([] if f == "keywords" else
                                 None if f == "embedding" or f in OPTIONAL_PROTECTED else ERASED)
            else:
                try:
                    payload = AESGCM(key).decrypt(
                        nonce, sealed, oid.bytes + _AAD.pack(stored.originator_version)
                    )
                except InvalidTag:
                    raise EventIntegrityError(
                        f"event {stored.originator_version} of aggregate {oid} failed "
                        f"authentication with its data key (generation {gen}): key fault or "
                        "changed bytes (the key row or the event's stored bytes were altered)"
                    ) from None
                payload = unpack_payload(payload)
                (m,) = _U32.unpack_from(payload, 0)
                target.update(json.loads(payload[4 : 4 + m]))
                if "embedding" in fields:
                    emb = payload[4 + m :]
                    target["embedding"] = bytes(emb) if emb else None
        return state, erased

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
