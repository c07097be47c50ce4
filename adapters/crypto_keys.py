"""Crypto-shredding, the key side: the per-note AES-GCM data keys in ``mf_note_keys``.

:class:`KeyStore` (the shared read side with its cache), :class:`BatchKeys` (a replay's
keys, one snapshot) and :class:`TransactionKeys` (a unit of work's keys: created, inserted
and destroyed in its transaction) are the :class:`KeyVault` s the sealing mapper of
:mod:`memfabric.adapters.crypto` seals and unseals with. A missing key is a shredding
(reads ``<erased>``) exactly when a tombstone of the aggregate (an event whose class is
marked :class:`~memfabric.domain.shredding.Shredding`) is at or after its generation
(:func:`shredded`); any other missing key is an integrity fault. Re-exported by
:mod:`memfabric.adapters.crypto`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from memfabric.domain import entity as _entity  # noqa: F401 - registers Entity.EntityForgotten
from memfabric.domain import ledger as _ledger  # noqa: F401 - registers Conversation.Erased
from memfabric.domain import note as _note  # noqa: F401 - registers Note.Forgotten
from memfabric.domain import shredding
from memfabric.domain.errors import FabricError
from memfabric.projections import tables
from psycopg import Connection, Cursor

KEYS_TABLE = tables.NOTE_KEYS

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


KEYS_SELECT = f"SELECT originator_id, gen, key FROM {KEYS_TABLE} WHERE originator_id = ANY(%s)"  # noqa: S608
"""Every key of the notes of one ``uuid[]`` parameter: rows ``(originator_id, gen, key)``."""


def select_keys(conn: Connection[Any], originator_ids: list[UUID]) -> dict[tuple[UUID, int], bytes]:
    """Every key of the given notes, on ``conn`` (so in its transaction and snapshot)."""
    rows = conn.execute(KEYS_SELECT, (originator_ids,)).fetchall()
    return {(_first(r, "originator_id", 0), int(_first(r, "gen", 1))): bytes(_first(r, "key", 2)) for r in rows}


def shredding_topics() -> list[str]:
    """The stored topics of the tombstone events whose transaction destroys the
    aggregate's keys: every event class marked
    :class:`~memfabric.domain.shredding.Shredding` (``Note.Forgotten``,
    ``Conversation.Erased``, ``Entity.EntityForgotten``), derived from the classes."""
    return shredding.shredding_topics()


def forgotten_versions(conn: Connection[Any], originator_ids: list[UUID]) -> dict[UUID, int]:
    """The version of the latest tombstone (an event of :func:`shredding_topics`: a
    note's ``Forgotten``, a conversation's ``Erased``, an entity's ``EntityForgotten``)
    of each of the given aggregates that has one, on ``conn``."""
    rows = conn.execute(
        f"SELECT originator_id, max(originator_version) AS v FROM {tables.EVENTS}"  # noqa: S608
        " WHERE originator_id = ANY(%s) AND topic = ANY(%s) GROUP BY originator_id",
        (originator_ids, shredding_topics()),
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

    def __init__(self, conn: Connection[Any] | Callable[[], Connection[Any]], shared: KeyStore) -> None:
        self._connect: Callable[[], Connection[Any]] = conn if callable(conn) else (lambda: conn)
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

    @property
    def conn(self) -> Connection[Any]:
        """The transaction's connection, for the key reads (a unit of work hands a
        function that readies its connection for psycopg first)."""
        return self._connect()

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
            self.absorb(originator_ids, select_keys(self.conn, originator_ids))

    def absorb(self, originator_ids: list[UUID], found: dict[tuple[UUID, int], bytes]) -> None:
        """Take the keys ``found`` of the notes ``originator_ids`` (read by
        :data:`KEYS_SELECT` in this transaction) as :meth:`preload` does."""
        if originator_ids:
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
