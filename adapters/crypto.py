"""Crypto-shredding: per-note AES-GCM data keys and the sealing event mapper.

Each ``Note`` aggregate gets a 256-bit data key, stored in ``mf_note_keys`` (outside
the event log). The mapper seals the protected fields of every event
(``memfabric.domain.note.PROTECTED_FIELDS``: content, context, keywords, embedding,
appended text) with that key; the rest of the event stays readable JSON. ``forget``
deletes the key rows in the same transaction as the tombstone event, after which the
protected fields of every earlier event are unrecoverable ciphertext and read back as
``<erased>``.

Stored state layout (``state`` column of ``memfabric_events``)::

    b"MF1" | u32 len(plain) | plain JSON | [ u32 key_gen | 12-byte nonce | AES-GCM ciphertext ]

The AES-GCM associated data is ``originator_id.bytes + u64 originator_version``, so a
ciphertext cannot be moved to another event. The sealed payload is
``u32 len(json) | JSON of protected text fields | raw float32 embedding bytes``.

Snapshots (when ``IS_SNAPSHOTTING_ENABLED`` is set) are sealed the same way: the
protected attributes of the snapshotted aggregate state are moved into the sealed
payload (with the note's latest existing key) and their names are listed in the plain
``_sealed`` entry of the state, so an erased snapshot still says what it lost.
"""

from __future__ import annotations

import contextvars
import json
import os
import struct
import threading
import time
from collections import OrderedDict
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.domain import CanSnapshotAggregate
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic, resolve_topic
from memfabric.domain.errors import EventIntegrityError
from memfabric.domain.note import ERASED, PROTECTED_FIELDS
from psycopg import Cursor

KEYS_TABLE = "mf_note_keys"
MAGIC = b"MF1"
_U32 = struct.Struct(">I")
_AAD = struct.Struct(">Q")

_pending: contextvars.ContextVar[dict[UUID, tuple[int, bytes]] | None] = contextvars.ContextVar(
    "memfabric_pending_keys", default=None
)

KEYS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {KEYS_TABLE} ("
    " originator_id uuid NOT NULL, gen integer NOT NULL, key bytea NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (originator_id, gen))"
)


class KeyStore:
    """Per-note data keys in ``mf_note_keys``.

    New keys are generated in memory while events are mapped and written by the
    recorder inside the event-insert transaction (:meth:`flush`); :meth:`destroy` deletes
    them in the forgetting transaction. Decryption keys are cached for ``ttl`` seconds
    (default 2) per process; the write path always checks the table for existing notes.
    """

    def __init__(self, datastore: Any, ttl: float = 2.0, maxsize: int = 4096) -> None:
        self.datastore = datastore
        self.ttl = ttl
        self.maxsize = maxsize
        self._cache: OrderedDict[tuple[UUID, int], tuple[float, bytes]] = OrderedDict()
        self._latest: dict[UUID, tuple[float, int]] = {}
        self._lock = threading.Lock()

    # -- write side
    def key_for_write(self, originator_id: UUID, version: int) -> tuple[int, bytes]:
        """(gen, key) to seal an event at ``version``: a fresh key for a new note (or a
        note whose keys were destroyed), else the latest existing one."""
        pending = _pending.get()
        if pending is None:
            pending = {}
            _pending.set(pending)
        if originator_id in pending:
            return pending[originator_id]
        if version > 1:
            found = self._select_latest(originator_id)
            if found is not None:
                return found
        key = AESGCM.generate_key(bit_length=256)
        pending[originator_id] = (version, key)
        return version, key

    def key_for_snapshot(self, originator_id: UUID) -> tuple[int, bytes] | None:
        """(gen, key) to seal a snapshot of an existing note: its latest key (pending or
        stored), or ``None`` when the note has no key (it was forgotten)."""
        found = (_pending.get() or {}).get(originator_id)
        return found if found is not None else self._select_latest(originator_id)

    def flush(self, cur: Cursor[Any]) -> None:
        """Insert the keys generated since the last flush (inside the caller's transaction)."""
        pending = _pending.get()
        if not pending:
            return
        rows = [(oid, gen, key) for oid, (gen, key) in pending.items()]
        cur.execute(
            f"INSERT INTO {KEYS_TABLE} (originator_id, gen, key)"
            " SELECT * FROM unnest(%s::uuid[], %s::int[], %s::bytea[])"
            " ON CONFLICT (originator_id, gen) DO UPDATE SET key = EXCLUDED.key",
            ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
        )
        now = time.monotonic()
        with self._lock:
            for oid, gen, key in rows:
                self._put((oid, gen), key, now)
        pending.clear()

    def discard_pending(self) -> None:
        """Forget keys generated for a transaction that rolled back."""
        pending = _pending.get()
        if pending:
            pending.clear()

    def destroy(self, cur: Cursor[Any], originator_ids: list[UUID]) -> int:
        """Delete every key of the given notes (crypto-shredding); returns rows deleted."""
        cur.execute(f"DELETE FROM {KEYS_TABLE} WHERE originator_id = ANY(%s)", (originator_ids,))
        doomed = set(originator_ids)
        with self._lock:
            for key in [k for k in self._cache if k[0] in doomed]:
                del self._cache[key]
        return cur.rowcount

    # -- read side
    def key_for_read(self, originator_id: UUID, gen: int) -> bytes | None:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get((originator_id, gen))
            if hit is not None and now - hit[0] < self.ttl:
                return hit[1]
        found = (_pending.get() or {}).get(originator_id)
        if found is not None and found[0] == gen:
            return found[1]
        with self.datastore.get_connection() as conn:
            row = conn.execute(
                f"SELECT key FROM {KEYS_TABLE} WHERE originator_id = %s AND gen = %s",
                (originator_id, gen),
            ).fetchone()
        if row is None:
            return None
        key = bytes(row["key"])
        with self._lock:
            self._put((originator_id, gen), key, now)
        return key

    def preload(self, originator_ids: list[UUID]) -> None:
        """Fetch the keys of many notes at once (for replays)."""
        if not originator_ids:
            return
        with self.datastore.get_connection() as conn:
            rows = conn.execute(
                f"SELECT originator_id, gen, key FROM {KEYS_TABLE} WHERE originator_id = ANY(%s)",
                (originator_ids,),
            ).fetchall()
        now = time.monotonic()
        with self._lock:
            for row in rows:
                self._put((row["originator_id"], row["gen"]), bytes(row["key"]), now)

    def _select_latest(self, originator_id: UUID) -> tuple[int, bytes] | None:
        with self.datastore.get_connection() as conn:
            row = conn.execute(
                f"SELECT gen, key FROM {KEYS_TABLE} WHERE originator_id = %s"
                " ORDER BY gen DESC LIMIT 1",
                (originator_id,),
            ).fetchone()
        if row is None:
            return None
        return int(row["gen"]), bytes(row["key"])

    def _put(self, k: tuple[UUID, int], key: bytes, now: float) -> None:
        self._cache[k] = (now, key)
        self._cache.move_to_end(k)
        while len(self._cache) > self.maxsize:
            self._cache.popitem(last=False)


class SealingMapper(Mapper[UUID]):
    """An eventsourcing ``Mapper`` that seals protected fields per note (see module doc)."""

    def __init__(self, transcoder: Transcoder, keys: KeyStore) -> None:
        super().__init__(transcoder=transcoder)
        self.keys = keys

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
                    raise ValueError(
                        f"cannot snapshot note {originator_id}: it has protected content but no data key"
                    )
                inner.update(protected)  # a forgotten note: nothing left to seal
                protected = {}
            else:
                inner["_sealed"] = list(protected)
            state["state"] = inner
        else:
            protected = {k: state.pop(k) for k in PROTECTED_FIELDS if k in state}
        plain = self.transcoder.encode(state)
        out = [MAGIC, _U32.pack(len(plain)), plain]
        if protected:
            embedding = protected.pop("embedding", None)
            text = json.dumps(protected, separators=(",", ":"), ensure_ascii=False).encode()
            payload = _U32.pack(len(text)) + text + (embedding or b"")
            gen, key = found or self.keys.key_for_write(originator_id, version)
            nonce = os.urandom(12)
            sealed = AESGCM(key).encrypt(nonce, payload, originator_id.bytes + _AAD.pack(version))
            out += [_U32.pack(gen), nonce, sealed]
        return StoredEvent(
            originator_id=originator_id,
            originator_version=version,
            topic=topic,
            state=b"".join(out),
        )

    def decode_state(self, stored: StoredEvent) -> tuple[dict[str, Any], list[str]]:
        """Plain event fields with protected ones unsealed, or marked erased; returns
        ``(fields, erased_field_names)``."""
        data = stored.state
        if not data.startswith(MAGIC):
            raise ValueError("not a memfabric event state")
        (n,) = _U32.unpack_from(data, 3)
        state: dict[str, Any] = self.transcoder.decode(data[7 : 7 + n])
        rest = data[7 + n :]
        erased: list[str] = []
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
            else:
                fields = [f for f in PROTECTED_FIELDS if f in getattr(cls, "__dataclass_fields__", {})]
            if key is None:
                erased = fields
                for f in fields:
                    target[f] = [] if f == "keywords" else (None if f == "embedding" else ERASED)
            else:
                try:
                    payload = AESGCM(key).decrypt(
                        nonce, sealed, oid.bytes + _AAD.pack(stored.originator_version)
                    )
                except InvalidTag:
                    raise EventIntegrityError(
                        f"event {stored.originator_version} of aggregate {oid} failed "
                        "authentication: its stored bytes were changed"
                    ) from None
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
