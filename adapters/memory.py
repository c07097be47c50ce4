"""In-memory reference implementations of the ports: no database, no threads.

Faithful enough to be the contract reference the PostgreSQL adapters are checked
against (``tests/contract``), and fast enough for unit tests:

- :class:`InMemoryEventLog`: stored domain events per aggregate in version order, a
  global notification position, aggregates replayed with ``event.mutate``. Protected
  fields (:data:`memfabric.domain.note.PROTECTED_FIELDS`) are kept apart per note in a
  key-vault-like dict; :meth:`InMemoryEventLog.shred` empties a note's entry, and from
  then on its earlier events read those fields as the PostgreSQL sealing mapper does
  (``adapters/crypto.py`` ``SealingMapper.decode_state``): ``keywords`` as ``[]``,
  ``embedding`` as ``None``, every other one as :data:`~memfabric.domain.note.ERASED`,
  with the names listed in ``_erased``.
- The read models are the projections' own pure row functions
  (``recall_index.row_for``, ``consolidation_index.row_for``, ``note_scope.row_for``,
  ``working.block_entry``) kept in dicts, updated at commit with the log.
- :class:`InMemoryUnitOfWork`: a ``threading.Lock`` per scope key, taken in sorted
  order; reads see committed state plus the aggregates it added; :meth:`commit`
  appends the events and updates the read models atomically; leaving without commit
  discards everything.
- :class:`InMemoryNoteStore`: recall with the recall index's filters (scope
  visibility, kinds, ``valid_from <= as_of < valid_to``, consent), an exact cosine
  vector list and a lexical list. **The lexical score is not PostgreSQL's**: terms
  are lower-cased word tokens (letters and digits) with English stop words dropped,
  and no stemming (PostgreSQL's ``english`` configuration stems: "cats" matches
  "cat" there, not here); the score is the same BM25-with-``k1 = 0`` IDF sum
  ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the query terms a note contains.

:func:`open_memory_fabric` wires them into a :class:`MemoryFabric`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import hmac
import math
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Annotated, Any
from uuid import UUID

import numpy as np
from pydantic import Field, TypeAdapter
from memfabric.adapters import memory_versions
from memfabric.adapters.embedders import HashEmbedder
from memfabric.domain import link_terms, links, replay, visibility
from memfabric.domain.link_terms import TermPostings
from memfabric.domain.consolidation import Consolidation, Neighbour, NeighbourQuery
from memfabric.domain.errors import FabricError
from memfabric.domain.inputs import EraseScopeInput, Limits
from memfabric.domain.note import ERASED, OPTIONAL_PROTECTED, PROTECTED_FIELDS, Note, note_uuid
from memfabric.domain.notes import Notes
from memfabric.domain.ports import Candidate, DueRef, Embedder, ListQuery, NoteFilter, NoteRef
from memfabric.domain.retention import DECAY_KINDS, ERASABLE, RetentionConfig, Windows
from memfabric.domain.sweep import BATCH_SIZE, Progress, SweepResult
from memfabric.domain.results import EraseResult, NoteCounts
from memfabric.domain.scope import Scope
from memfabric.domain.deps import Deps
from memfabric.domain.service import MemoryService
from memfabric.domain.working import BlockEntry, WorkingValidator, block_entry
from memfabric.projections import consolidation_index, link_graph, note_scope, recall_index, retention_index

ENGLISH_STOP_WORDS: frozenset[str] = frozenset(["i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours", "yourself", "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself", "it", "its", "itself", "they", "them", "their", "theirs", "themselves", "what", "which", "who", "whom", "this", "that", "these", "those", "am", "is", "are", "was", "were", "be", "been", "being", "have", "has", "had", "having", "do", "does", "did", "doing", "a", "an", "the", "and", "but", "if", "or", "because", "as", "until", "while", "of", "at", "by", "for", "with", "about", "against", "between", "into", "through", "during", "before", "after", "above", "below", "to", "from", "up", "down", "in", "out", "on", "off", "over", "under", "again", "further", "then", "once", "here", "there", "when", "where", "why", "how", "all", "any", "both", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not", "only", "own", "same", "so", "than", "too", "very", "s", "t", "can", "will", "just", "don", "should", "now"])
"""English stop words (the Snowball list PostgreSQL's ``english.stop`` also derives from)."""

_WORD = re.compile(r"[^\W_]+")


def lexical_terms(text: str) -> list[str]:
    """Distinct lower-cased word tokens of ``text`` without English stop words, in
    order of first appearance (no stemming: see the module doc)."""
    out: list[str] = []
    for m in _WORD.finditer(text.lower()):
        word = m.group(0)
        if word not in ENGLISH_STOP_WORDS and word not in out:
            out.append(word)
    return out


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity as pgvector computes it (``1 - (a <=> b)``), 0 for a zero vector."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    value = float(np.dot(a.astype(np.float64), b.astype(np.float64)) / (na * nb))
    return 0.0 if math.isnan(value) else value


@dataclass(frozen=True, slots=True)
class _Stored:
    """One stored event: its class, plain (unprotected) state, and whether it had
    protected fields (kept in the vault under ``(aggregate, version)``)."""

    cls: type[Any]
    state: dict[str, Any]
    sealed: bool
    position: int


class InMemoryEventLog:
    """The event log and the read models, in memory (see the module doc).

    ``lock`` guards every read and write of the shared state; a commit holds it
    for the whole append-and-project step, so readers never see half a commit."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.position = 0
        self.secret = os.urandom(32)
        self._events: dict[UUID, list[_Stored]] = {}
        self._vault: dict[UUID, dict[int, dict[str, Any]]] = {}
        self._contrib: dict[UUID, dict[tuple[UUID, int], Any]] = {}
        """Evolution patches by the note that contributed them (issue 15): shredded with it."""
        self.link_rows: dict[UUID, list[dict[str, Any]]] = {}
        self.recall_rows: dict[UUID, dict[str, Any]] = {}
        self.consolidation_rows: dict[UUID, dict[str, Any]] = {}
        self.scope_rows: dict[UUID, dict[str, Any]] = {}
        self.retention_rows: dict[UUID, dict[str, Any]] = {}
        """Issue 30: ``retention_index.row_for`` rows."""
        self.retention_config: RetentionConfig = RetentionConfig()
        self.blocks: dict[UUID, tuple[str, str, BlockEntry]] = {}
        self.projectors: list[Callable[[Sequence[Any]], None]] = []
        """Issue 32: read models of other aggregates (the entity index), called at every
        append with the notes and other aggregates it saved, under :attr:`lock`."""
        self.version_rows: dict[UUID, list[Any]] = {}
        """Issue 31: each note's recorded versions (:mod:`memfabric.adapters.memory_versions`)."""
        self._scope_locks: dict[str, threading.Lock] = {}

    # ---------------------------------------------------------------- locks
    def scope_lock(self, key: str) -> threading.Lock:
        """The write lock of scope ``key`` (created on first use)."""
        with self.lock:
            found = self._scope_locks.get(key)
            if found is None:
                found = self._scope_locks[key] = threading.Lock()
            return found

    # ------------------------------------------------------------------ log
    def event_count(self) -> int:
        """Stored events, all aggregates."""
        with self.lock:
            return sum(len(v) for v in self._events.values())

    def aggregate_ids(self) -> list[UUID]:
        """Every aggregate with events (issue 14: the ledger lists its conversations)."""
        with self.lock:
            return list(self._events)

    def has(self, aggregate_id: UUID) -> bool:
        with self.lock:
            return aggregate_id in self._events

    def events(self, aggregate_id: UUID) -> list[Any]:
        """The aggregate's domain events in version order, decoded as the sealing mapper
        decodes them (protected fields erased once the note was shredded)."""
        with self.lock:
            stored = list(self._events.get(aggregate_id, []))
            vault = self._vault.get(aggregate_id)
            return [self._decode(aggregate_id, s, vault) for s in stored]

    def _decode(self, aggregate_id: UUID, stored: _Stored,
                vault: dict[int, dict[str, Any]] | None) -> Any:
        state = copy.deepcopy(stored.state)
        sealed_by = state.get("contributed")
        if isinstance(sealed_by, dict) and "sealed_by" in sealed_by:
            found = self._contrib.get(UUID(sealed_by["sealed_by"]), {}).get(
                (aggregate_id, int(state["originator_version"])))
            state["contributed"] = copy.deepcopy(found)
        if stored.sealed:
            version = int(state["originator_version"])
            protected = None if vault is None else vault.get(version)
            if protected is None:
                fields = [f for f in PROTECTED_FIELDS
                          if f in getattr(stored.cls, "__dataclass_fields__", {})]
                for f in fields:
                    state[f] = ([] if f == "keywords" else
                                None if f == "embedding" or f in OPTIONAL_PROTECTED else ERASED)
                state["_erased"] = fields
            else:
                state.update(copy.deepcopy(protected))
        event = object.__new__(stored.cls)
        object.__setattr__(event, "__dict__", state)
        return event

    def forgotten_scopes(self) -> list[tuple[str, str, str]]:
        """``(tenant, resource, thread)`` (``''`` when absent) of each forgotten note: an
        aggregate with a ``Forgotten`` event and no retention row (issue 27 counts)."""
        with self.lock:
            tombs = (next((s.state for s in reversed(stored) if s.cls is Note.Forgotten), None)
                     for aid, stored in self._events.items() if aid not in self.retention_rows)
            return [(t["tenant_id"], t.get("resource_id") or "", t.get("thread_id") or "")
                    for t in tombs if t is not None]

    def replay(self, aggregate_id: UUID) -> Note | None:
        """The aggregate replayed from its events (``None`` when absent)."""
        note: Any = None
        for event in self.events(aggregate_id):
            note = replay.step(event, note)
        return note if isinstance(note, Note) else None

    def append(self, events: Sequence[Any], notes: Sequence[Note], doomed: set[UUID],
               others: Sequence[Any] = ()) -> int:
        """Append ``events`` (protected fields to the vault), destroy the vault entries
        of ``doomed`` and update the read models from ``notes``; returns the last
        position (one atomic step under :attr:`lock`)."""
        with self.lock:
            for event in events:
                state = copy.deepcopy(dict(vars(event)))
                state.pop("_erased", None)
                aid: UUID = state["originator_id"]
                protected = {k: state.pop(k) for k in PROTECTED_FIELDS if k in state}
                if state.get("contributed") is not None and state.get("source"):
                    source = UUID(state["source"])
                    self._contrib.setdefault(source, {})[(aid, int(state["originator_version"]))] = (
                        state["contributed"])
                    state["contributed"] = {"sealed_by": str(source)}
                if protected:
                    self._vault.setdefault(aid, {})[int(state["originator_version"])] = protected
                self.position += 1
                self._events.setdefault(aid, []).append(
                    _Stored(type(event), state, bool(protected), self.position))
            for aid in doomed:
                self._vault.pop(aid, None)
                self._contrib.pop(aid, None)
            for note in notes:
                self._project(note)
            for projector in self.projectors:
                projector([*notes, *others])
            memory_versions.record(self, list(dict.fromkeys(
                [n.id for n in notes if isinstance(n, Note)] + [a for a in doomed if a in self.version_rows])), _put)
            return self.position

    def _project(self, note: Note) -> None:
        aid = note.id
        _put(self.recall_rows, aid, recall_index.COLUMNS, recall_index.row_for(note))
        _put(self.consolidation_rows, aid, consolidation_index.COLUMNS,
             consolidation_index.row_for(note))
        _put(self.scope_rows, aid, note_scope.COLUMNS, note_scope.row_for(note))
        _put(self.retention_rows, aid, retention_index.COLUMNS, retention_index.row_for(note))
        edges = [dict(zip(link_graph.COLUMNS, row, strict=True)) for row in link_graph.rows_for(note)]
        if edges:
            self.link_rows[aid] = edges
        else:
            self.link_rows.pop(aid, None)
        entry = block_entry(note)
        if entry is None or note.block is None:
            self.blocks.pop(aid, None)
        else:
            self.blocks[aid] = (note.scope.key, note.block, BlockEntry(**entry))


def _put(table: dict[UUID, dict[str, Any]], aid: UUID, columns: Sequence[str],
         row: tuple[Any, ...] | None) -> None:
    if row is None:
        table.pop(aid, None)
        return
    data = dict(zip(columns, row, strict=True))
    if "valid" in data:
        valid = data.pop("valid")
        data["valid_from"], data["valid_to"] = valid.lower, valid.upper
    consent = data.get("consent")
    if consent is not None and hasattr(consent, "obj"):
        data["consent"] = consent.obj
    table[aid] = copy.deepcopy(data)


def _in_group(row: dict[str, Any], scope: Scope, vis: visibility.Visibility) -> bool:
    """``consolidation_index._REACH``: the row is in the consolidation group of a write
    of ``vis`` from ``scope`` (issue 16)."""
    return visibility.meets(scope, vis, _home(row), visibility.of_consent({"visibility": row["visibility"]}))


def _current(row: dict[str, Any], scope: Scope, q: NeighbourQuery, now: datetime) -> bool:
    return (_in_group(row, scope, q.visibility) and row["kind"] == q.kind
            and (row["valid_to"] is None or row["valid_to"] > now))


def _in_scope_of_kind(row: dict[str, Any], scope: Scope, kind: str, now: datetime) -> bool:
    """A current row of exactly ``scope`` and ``kind`` (the shared-term linker's notes)."""
    t, r, th = scope.sql()
    return (row["tenant_id"] == t and row["resource_id"] == r and row["thread_id"] == th
            and row["kind"] == kind and (row["valid_to"] is None or row["valid_to"] > now))


def _home(row: dict[str, Any]) -> Scope:
    return Scope(tenant_id=row["tenant_id"], resource_id=row["resource_id"] or None,
                 thread_id=row["thread_id"] or None)


def _resolve(log: InMemoryEventLog, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
    """Like ``note_scope.resolve``: homes of the notes ``note_id`` seen from ``scope``."""
    with log.lock:
        rows = [dict(r) for r in log.scope_rows.values() if r["note_id"] == note_id]
    found = []
    for r in rows:
        home = Scope(tenant_id=r["tenant_id"], resource_id=r["resource_id"] or None,
                     thread_id=r["thread_id"] or None)
        if visibility.visible(home, visibility.of_consent({"visibility": r["visibility"]}), scope):
            found.append((home, str(r["visibility"])))
    found.sort(key=lambda f: (f[0] != scope, f[0].sql()))
    return found[:3]


class InMemoryUnitOfWork:
    """One write transaction in memory (the ``UnitOfWork`` port; see the module doc)."""

    def __init__(self, log: InMemoryEventLog, scopes: Sequence[Scope]) -> None:
        self._log = log
        self._keys = sorted({s.key for s in scopes})
        self._held: list[threading.Lock] = []
        self._events: list[Any] = []
        self._aggregates: dict[UUID, Note] = {}
        self._others: dict[UUID, Any] = {}
        self._doomed: set[UUID] = set()
        self._open = False
        self._committed = False
        self._position = 0

    def __enter__(self) -> InMemoryUnitOfWork:
        try:
            for key in self._keys:
                lock = self._log.scope_lock(key)
                lock.acquire()
                self._held.append(lock)
        except BaseException:
            self._release()
            raise
        self._open = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._open = False
        if not self._committed:
            self._events.clear()
            self._aggregates.clear()
            self._others.clear()
            self._doomed.clear()
        self._release()

    def _release(self) -> None:
        while self._held:
            self._held.pop().release()

    def _check(self) -> None:
        if not self._open:
            raise FabricError("the unit of work is not open")

    @property
    def position(self) -> int:
        return self._position

    # ------------------------------------------------------------------ reads
    def load(self, scope: Scope, note_id: str) -> Note | None:
        found = self.load_ids([note_uuid(scope, note_id)])
        return found[0] if found else None

    def load_unreadable(self, aggregate_ids: Sequence[UUID]) -> list[Note]:
        return self.load_ids(aggregate_ids)  # no keys in memory: nothing can be unreadable

    def load_ids(self, aggregate_ids: Sequence[UUID]) -> list[Note]:
        self._check()
        out: list[Note] = []
        for aid in aggregate_ids:
            note = self._aggregates.get(aid) or self._log.replay(aid)
            if note is not None:
                out.append(note)
        return out

    def exists(self, scope: Scope, note_id: str) -> bool:
        self._check()
        aid = note_uuid(scope, note_id)
        return aid in self._aggregates or self._log.has(aid)

    def neighbours(self, scope: Scope, queries: Sequence[NeighbourQuery], *,
                   now: datetime, per_query: int = 3) -> list[list[Neighbour]]:
        """Like ``consolidation_index.select_neighbours`` (``per_query`` per lookup) on
        the committed consolidation rows."""
        self._check()
        with self._log.lock:
            rows = list(self._log.consolidation_rows.values())
        out: list[list[Neighbour]] = []
        for q in queries:
            mine = [r for r in rows if _current(r, scope, q, now)]
            newest = sorted(mine, key=lambda r: r["ingested_at"], reverse=True)
            picked: list[dict[str, Any]]
            if q.kind == "file":
                picked = [r for r in newest if r["path"] == q.path][:per_query]
            elif q.subject is not None:
                picked = [r for r in newest if r["subject"] == q.subject][:per_query]
            else:
                plain = [r for r in mine if r["subject"] is None]
                exact = [r for r in newest if r["subject"] is None and r["token_hash"] == q.token_hash][:1]
                near = sorted(plain, key=lambda r: -_cosine(r["embedding"], q.embedding))[:per_query]
                picked = exact + near + _same_inferred(newest, q, per_query * 3)
            out.append([
                Neighbour(r["note_id"], _cosine(r["embedding"], q.embedding), r["token_hash"],
                          r["path"], r["subject"], r["valid_from"], r["valid_to"],
                          consolidation_index.key_of_row(r), _home(r),
                          visibility.of_consent({"visibility": r["visibility"]}))
                for r in picked
            ])
        return out

    def term_postings(self, scope: Scope, kind: str, terms: Sequence[str], *,
                      now: datetime, latest: bool = False) -> TermPostings:
        """Like ``consolidation_index.select_term_postings`` on the committed rows."""
        self._check()
        with self._log.lock:
            rows = [r for r in self._log.consolidation_rows.values() if _in_scope_of_kind(r, scope, kind, now)]
        newest = sorted(rows, key=lambda r: r["note_id"])
        newest.sort(key=lambda r: r["ingested_at"], reverse=True)  # ties: note id ascending
        ids: dict[str, list[str]] = {}
        at: dict[str, float] = {}
        wanted = set(terms)
        for r in newest:
            for term in set(r.get("link_terms") or ()) & wanted:
                got = ids.setdefault(term, [])
                if len(got) <= link_terms.DF_CAP:
                    got.append(r["note_id"])
                    at[r["note_id"]] = r["ingested_at"].timestamp()
        return TermPostings(min(len(rows), link_terms.N_CAP), ids, at,
                            newest[0]["note_id"] if newest and latest else None)

    def resolve(self, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
        """Like :meth:`InMemoryNoteStore.resolve` (the committed note-scope rows)."""
        self._check()
        return _resolve(self._log, scope, note_id)

    def note_ids_by_path(self, scope: Scope, path: str) -> list[str]:
        self._check()
        t, r, th = scope.sql()
        with self._log.lock:
            return sorted(
                row["note_id"] for row in self._log.scope_rows.values()
                if (row["tenant_id"], row["resource_id"], row["thread_id"]) == (t, r, th)
                and row["path"] == path)

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        self._check()
        return _blocks(self._log, scope)

    def content_hmac(self, text: str) -> str:
        return hmac.new(self._log.secret, text.encode(), hashlib.sha256).hexdigest()

    # ----------------------------------------------------------------- writes
    def add(self, note: Note) -> None:
        self._check()
        self._events.extend(note.collect_events())
        self._aggregates[note.id] = note

    def shred(self, note: Note) -> None:
        self._check()
        self._doomed.add(note.id)

    # ------------------- issue 14: other aggregates (the ledger), saved, not projected
    def load_aggregate(self, aggregate_id: UUID) -> Any:
        self._check()
        held = self._others.get(aggregate_id)
        if held is not None:
            return held
        found: Any = None
        for event in self._log.events(aggregate_id):
            found = replay.step(event, found)
        return found

    def load_ledger_head(self, aggregate_id: UUID, scope: Scope) -> Any:
        return self.load_aggregate(aggregate_id)  # in memory a replay is the head

    def add_aggregate(self, aggregate: Any) -> None:
        self._check()
        self._events.extend(aggregate.collect_events())
        self._others[aggregate.id] = aggregate

    def shred_aggregate(self, aggregate: Any) -> None:
        self._check()
        self._doomed.add(aggregate.id)

    def commit(self) -> None:
        self._check()
        if self._events or self._doomed:
            self._position = self._log.append(self._events, list(self._aggregates.values()),
                                              self._doomed, list(self._others.values()))
        self._committed = True


def _blocks(log: InMemoryEventLog, scope: Scope) -> dict[str, BlockEntry]:
    with log.lock:
        return {label: BlockEntry(**entry) for key, label, entry in log.blocks.values()
                if key == scope.key}


def _same_inferred(newest: list[dict[str, Any]], q: NeighbourQuery, limit: int) -> list[dict[str, Any]]:
    """Like the ``inferred`` lookup of ``consolidation_index.select_neighbours``: current
    subject-less notes with the query's inferred key (a from-to key: the same entity)."""
    ikey, ient = consolidation_index.inferred_key_of(q), consolidation_index.inferred_entity_of(q)
    if ikey is None and ient is None:
        return []
    found = [r for r in newest if r["subject"] is None and r["inferred_key"] is not None
             and (r["inferred_key"] == ikey
                  or (ient is not None and r["inferred_entity"] == ient))]
    return found[:limit]


class InMemoryNoteStore:
    """The read side (``NoteStore`` port) on the in-memory read models."""

    def __init__(self, log: InMemoryEventLog) -> None:
        self.log = log

    def recall(
        self, scope: Scope, *, embedding: np.ndarray | None, query: str | None,
        kinds: Sequence[str], as_of: datetime, limit: int, require_consent: bool,
        filters: NoteFilter | None = None,
        expand: int = 0,
    ) -> list[Candidate]:
        """Candidates like ``recall_index.select_candidates``: the top ``limit`` by
        cosine and the top ``limit`` by the lexical score (see the module doc), every
        filter applied first; ``expand``: plus that many linked notes (issue 15)."""
        with self.log.lock:
            rows = [copy.deepcopy(r) for r in self.log.recall_rows.values()
                    if _admits(r, scope, kinds, as_of, require_consent, filters) and _filtered(r, filters)]
        by_id = {r["aggregate_id"]: r for r in rows}
        sims: dict[UUID, float] = {}
        vranks: dict[UUID, int] = {}
        if embedding is not None:
            q = np.asarray(embedding, np.float32)
            sims = {r["aggregate_id"]: _cosine(r["embedding"], q) for r in rows}
            order = sorted(rows, key=lambda r: (1.0 - sims[r["aggregate_id"]], r["aggregate_id"]))
            vranks = {r["aggregate_id"]: i + 1 for i, r in enumerate(order[:limit])}
        lex: dict[UUID, float] = {}
        lranks: dict[UUID, int] = {}
        if query is not None:
            terms = lexical_terms(query)
            # like the recall statement: at most MAX_QUERY_TERMS distinct terms, the longest
            terms = sorted(terms, key=lambda w: (-len(w), w))[: recall_index.MAX_QUERY_TERMS]
            lex = _lexical_scores(rows, terms)
            order = sorted((by_id[a] for a in lex),
                           key=lambda r: (-lex[r["aggregate_id"]], r["ingested_at"], r["aggregate_id"]))
            lranks = {r["aggregate_id"]: i + 1 for i, r in enumerate(order[:limit])}
        seeds = set(vranks) | set(lranks)
        with self.log.lock:
            edges = [dict(e) for es in self.log.link_rows.values() for e in es]
        linked = _linked(edges, seeds, by_id, expand) if expand > 0 else {}
        among = _among(edges, seeds) if expand > 0 else {}
        if embedding is not None:
            q = np.asarray(embedding, np.float32)
            sims.update({aid: _cosine(by_id[aid]["embedding"], q) for aid in linked})
        out: list[Candidate] = []
        for aid in [*sorted(seeds), *linked]:
            row = by_id[aid]
            fields = _returned(row)
            out.append(Candidate(
                aggregate_id=aid, note_id=row["note_id"],
                similarity=sims[aid] if embedding is not None else None,
                lexical=lex.get(aid, 0.0) if query is not None else None,
                vector_rank=vranks.get(aid), lexical_rank=lranks.get(aid), fields=fields,
                link=max(w for _, w in linked[aid]) if aid in linked else None,
                link_from=tuple(linked[aid] if aid in linked else among.get(aid, ()))))
        return out

    def hit_links(self, scope: Scope, aggregate_ids: Sequence[UUID],
                  filters: NoteFilter | None = None) -> dict[UUID, list[dict[str, Any]]]:
        """Like ``recall_index.select_links``."""
        with self.log.lock:
            edges = [dict(e) for es in self.log.link_rows.values() for e in es]
            indexed = {aid: dict(r) for aid, r in self.log.recall_rows.items()}
        out = {aid: _links_of(aid, edges, indexed, scope, filters) for aid in aggregate_ids}
        return {aid: links for aid, links in out.items() if links}

    def _listed(self, query: ListQuery) -> list[dict[str, Any]]:
        with self.log.lock:
            return [copy.deepcopy(r) for r in self.log.recall_rows.values() if _lists(r, query)]

    def list_notes(
        self, query: ListQuery, *, after: tuple[datetime, UUID] | None, limit: int,
    ) -> list[Candidate]:
        """Like ``recall_index.select_page``: ordered by ``(ingested_at, aggregate_id)``."""
        rows = sorted(self._listed(query), key=lambda r: (r["ingested_at"], r["aggregate_id"]))
        if after is not None:
            rows = [r for r in rows if (r["ingested_at"], r["aggregate_id"]) > after]
        return [Candidate(aggregate_id=r["aggregate_id"], note_id=r["note_id"], similarity=None,
                          lexical=None, vector_rank=None, lexical_rank=None, fields=_returned(r))
                for r in rows[:limit]]

    def count_notes(self, query: ListQuery) -> int:
        return len(self._listed(query))

    def scopes_with(self, *, tenant_id: str | None, tags: Sequence[str]) -> list[Scope]:
        with self.log.lock:
            keys = {(r["tenant_id"], r["resource_id"], r["thread_id"])
                    for r in self.log.recall_rows.values()
                    if (tenant_id is None or r["tenant_id"] == tenant_id)
                    and all(t in r["tags"] for t in tags)}
        return [Scope(tenant_id=t, resource_id=r or None, thread_id=th or None)
                for t, r, th in sorted(keys)]

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        return _blocks(self.log, scope)

    def _prefix(self, tenant_id: str, resource_id: str | None,
                thread_id: str | None) -> list[dict[str, Any]]:
        with self.log.lock:
            return [dict(r) for r in self.log.scope_rows.values()
                    if r["tenant_id"] == tenant_id
                    and (resource_id is None or r["resource_id"] == resource_id)
                    and (thread_id is None or r["thread_id"] == thread_id)]

    def notes_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None,
        *, after: NoteRef | None, limit: int,
    ) -> list[NoteRef]:
        def key(r: dict[str, Any]) -> tuple[str, str, UUID]:
            return (r["resource_id"], r["thread_id"], r["aggregate_id"])

        rows = sorted(self._prefix(tenant_id, resource_id, thread_id), key=key)
        if after is not None:
            start = (after.scope.resource_id or "", after.scope.thread_id or "", after.aggregate_id)
            rows = [r for r in rows if key(r) > start]
        return [
            NoteRef(aggregate_id=r["aggregate_id"],
                    scope=Scope(tenant_id=r["tenant_id"], resource_id=r["resource_id"] or None,
                                thread_id=r["thread_id"] or None),
                    note_id=r["note_id"], held=bool(r["held"]))
            for r in rows[:limit]
        ]

    def counts_in_scope(self, tenant_id: str, resource_id: str | None,
                        thread_id: str | None) -> NoteCounts:
        """Like ``counts_pg.scope_counts``: retention rows by state, and the notes with a
        ``Forgotten`` event and no row (:meth:`InMemoryEventLog.forgotten_scopes`)."""
        def within(t: str, r: str, th: str) -> bool:
            return t == tenant_id and resource_id in (None, r) and thread_id in (None, th)

        with self.log.lock:
            rows = [row for row in self.log.retention_rows.values()
                    if within(row["tenant_id"], row["resource_id"], row["thread_id"])]
            gone = sum(1 for key in self.log.forgotten_scopes() if within(*key))
        held = sum(1 for r in rows if r["held"])
        superseded = sum(1 for r in rows if r["superseded"] and not r["held"])
        return NoteCounts(live=len(rows) - held - superseded, superseded=superseded, held=held,
                          forgotten=gone)

    def resolve(self, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
        """Like ``note_scope.resolve``: homes of the notes ``note_id`` seen from ``scope``."""
        return _resolve(self.log, scope, note_id)

    def load(self, aggregate_id: UUID) -> Note | None:
        return self.log.replay(aggregate_id)

    def stored_events(self, aggregate_id: UUID) -> Iterator[Any]:
        yield from self.log.events(aggregate_id)

    def content_hmac(self, text: str) -> str:
        return hmac.new(self.log.secret, text.encode(), hashlib.sha256).hexdigest()

    def await_position(self, position: int) -> None:
        """Projections are updated with the commit: nothing to wait for."""


def _visible(row: dict[str, Any], scope: Scope) -> bool:
    """``recall_index.scope_filter`` in Python: same tenant, and the note's own
    (resource, thread), or ``tenant`` visibility, or ``resource`` visibility with the
    same non-empty resource."""
    t, r, th = scope.sql()
    return row["tenant_id"] == t and (
        (row["resource_id"] == r and row["thread_id"] == th)
        or row["visibility"] == "tenant"
        or (row["visibility"] == "resource" and row["resource_id"] == r and r != ""))


def _in_prefix(row: dict[str, Any], scope: Scope) -> bool:
    """Rows of the scope prefix (``None`` parts match any resource / thread)."""
    t, r, th = scope.sql()
    return row["tenant_id"] == t and (scope.resource_id is None or row["resource_id"] == r) and (
        scope.thread_id is None or row["thread_id"] == th)


def _valid_at(row: dict[str, Any], at: datetime) -> bool:
    lo, hi = row["valid_from"], row["valid_to"]
    return not ((lo is not None and at < lo) or (hi is not None and at >= hi))


def _consented(row: dict[str, Any], require_consent: bool) -> bool:
    granted = row["consent_granted"]
    return granted is True if require_consent else granted is not False


def _linked(edges: Sequence[dict[str, Any]], seeds: set[UUID], admitted: dict[UUID, Any],
            expand: int) -> dict[UUID, list[tuple[UUID, float]]]:
    """``recall_index._EXPAND``: notes linked either way to a seed, admitted by the
    filters, not seeds, with their ``(seed, weight)`` edges sorted by seed; top
    ``expand`` by largest weight, then id."""
    found: dict[UUID, list[tuple[UUID, float]]] = {}
    for e in edges:
        for here, there in ((e["from_aggregate_id"], e["to_aggregate_id"]),
                            (e["to_aggregate_id"], e["from_aggregate_id"])):
            if here in seeds and there not in seeds and there in admitted:
                found.setdefault(there, []).append((here, float(np.float32(e["weight"]))))
    order = sorted(found, key=lambda a: (-max(w for _, w in found[a]), a))[:expand]
    return {a: sorted(found[a], key=lambda x: str(x[0])) for a in order}


def _among(edges: Sequence[dict[str, Any]], seeds: set[UUID]) -> dict[UUID, list[tuple[UUID, float]]]:
    """``recall_index._EXPAND`` (``lc``): per seed its edges (either way) to other seeds,
    sorted by seed."""
    found: dict[UUID, list[tuple[UUID, float]]] = {}
    for e in edges:
        a, b = e["from_aggregate_id"], e["to_aggregate_id"]
        if a in seeds and b in seeds:
            w = float(np.float32(e["weight"]))
            found.setdefault(b, []).append((a, w))
            found.setdefault(a, []).append((b, w))
    return {a: sorted(v, key=lambda x: str(x[0])) for a, v in found.items()}


def _links_of(aid: UUID, edges: Sequence[dict[str, Any]], indexed: dict[UUID, dict[str, Any]],
              scope: Scope, filters: NoteFilter | None = None) -> list[dict[str, Any]]:
    """``recall_index._LINKS``: a note's edges to targets indexed and visible from ``scope``."""
    out = []
    for e in edges:
        target = indexed.get(e["to_aggregate_id"])
        if e["from_aggregate_id"] != aid or target is None or not _seen(target, scope, filters):
            continue
        out.append({"id": e["to_note_id"], "relation": e["relation"],
                    "weight": float(np.float32(e["weight"]))})
    return sorted(out, key=lambda x: (x["id"], x["relation"]))



def _seen(row: dict[str, Any], scope: Scope, filters: NoteFilter | None) -> bool:
    """``recall_index._scope_access``: the scope rule, or a principal's rule around it
    (issue 33, ``AccessFilter.admits``)."""
    visible = _visible(row, scope)
    access = None if filters is None else filters.access
    if access is None:
        return visible
    return row["tenant_id"] == scope.tenant_id and access.admits(row, visible)


def _admits(row: dict[str, Any], scope: Scope, kinds: Sequence[str], as_of: datetime,
            require_consent: bool, filters: NoteFilter | None = None) -> bool:
    """``recall_index.scope_filter`` + kinds + validity + consent, in Python."""
    return (_seen(row, scope, filters) and row["kind"] in kinds and _valid_at(row, as_of)
            and _consented(row, require_consent))


def _returned(row: dict[str, Any]) -> dict[str, Any]:
    """The fields ``recall_index.RETURNED`` selects from a row."""
    fields = {k: v for k, v in row.items()
              if k not in ("embedding", "valid", "token_hash", "embedder_id")}
    fields["importance"] = float(np.float32(fields["importance"]))  # a ``real`` column
    return fields


def _filtered(row: dict[str, Any], filters: NoteFilter | None) -> bool:
    """``recall_index.filter_sql`` in Python."""
    if filters is None:
        return True
    if not all(t in row["tags"] for t in filters.tags):
        return False
    if filters.subject is not None and row["subject"] != filters.subject:
        return False
    return filters.min_importance is None or float(np.float32(row["importance"])) >= filters.min_importance


def _lists(row: dict[str, Any], query: ListQuery) -> bool:
    """``recall_index._list_where`` in Python."""
    visible = _in_prefix(row, query.scope) if query.prefix else _seen(row, query.scope, query.filters)
    return (visible and row["kind"] in query.kinds
            and (query.valid_at is None or _valid_at(row, query.valid_at))
            and (query.include_superseded or row["superseded_by"] is None)
            and _consented(row, query.require_consent) and _filtered(row, query.filters))


def _lexical_scores(rows: Sequence[dict[str, Any]], terms: Sequence[str]) -> dict[UUID, float]:
    """BM25 IDF sum (``k1 = 0``) of the query ``terms`` each row contains, for rows
    containing at least one; ``N`` = the admitted rows (capped like PostgreSQL's)."""
    if not terms:
        return {}
    n = float(min(len(rows), recall_index.IDF_CORPUS_CAP))
    docs = {r["aggregate_id"]: set(lexical_terms(" ".join(
        part for part in (r["content"], r.get("context"), *(r.get("keywords") or ())) if part)))
        for r in rows}
    matched = {aid: [t for t in terms if t in words] for aid, words in docs.items()}
    matched = {aid: ts for aid, ts in matched.items() if ts}
    df = {t: sum(1 for ts in matched.values() if t in ts) for t in terms}
    idf = {t: math.log(1 + (max(n, df[t]) - df[t] + 0.5) / (df[t] + 0.5)) for t in terms if df[t]}
    return {aid: float(sum(idf[t] for t in ts)) for aid, ts in matched.items()}


class InMemoryRetentionStore:
    """``RetentionStore`` on the in-memory log: ``retention_index.select_due`` in Python."""

    def __init__(self, log: InMemoryEventLog) -> None:
        self.log = log

    def config(self, *, cached: bool = False) -> RetentionConfig:
        return self.log.retention_config

    def classes(self, aggregate_ids: Sequence[UUID]) -> dict[UUID, str]:
        with self.log.lock:
            rows = self.log.retention_rows
            return {a: str(rows[a]["retention"]) for a in aggregate_ids if a in rows}

    def record(self, config: RetentionConfig) -> None:
        self.log.retention_config = config

    def tenants(self, *, after: str | None) -> list[str]:
        with self.log.lock:
            found = {r["tenant_id"] for r in self.log.retention_rows.values()}
        return sorted(t for t in found if after is None or t > after)

    def due(self, tenant_id: str, windows: Windows, now: datetime, *, after: UUID | None,
            limit: int) -> list[DueRef]:
        with self.log.lock:
            rows = [dict(r) for r in self.log.retention_rows.values()
                    if r["tenant_id"] == tenant_id and (after is None or r["aggregate_id"] > after)
                    and _due(r, windows, now)]
        rows.sort(key=lambda r: r["aggregate_id"])
        return [DueRef(aggregate_id=r["aggregate_id"], scope=_home(r), note_id=r["note_id"],
                       visibility=r["visibility"]) for r in rows[:limit]]


def _due(row: dict[str, Any], windows: Windows, now: datetime) -> bool:
    """``retention_index.due_sql`` in Python."""
    if (not row["expired"] and not row["superseded"] and row["valid_to"] is not None
            and row["valid_to"] <= now):
        return True
    span = windows.window(row["retention"])
    if (span is not None and row["written_at"] <= now - span
            and (row["retention"] in ERASABLE or not row["expired"])):
        return True
    decay = windows.decay
    if decay is None or row["held"] or row["superseded"] or row["expired"] or row["kind"] not in DECAY_KINDS:
        return False
    idle = now - decay.after
    return (row["importance"] > decay.floor and row["written_at"] <= idle
            and (row["decayed_at"] is None or row["decayed_at"] <= idle))


class MemoryFabric:
    """An in-memory fabric: the same service as ``Fabric``, on in-memory ports.

    - ``scope(tenant_id, resource_id=None, thread_id=None)`` → :class:`Notes`
    - ``erase_scope(...)``: as ``Fabric.erase_scope``.
    - ``log``: the :class:`InMemoryEventLog` (``log.event_count()`` for tests).
    """

    def __init__(self, service: MemoryService, log: InMemoryEventLog, store: InMemoryNoteStore) -> None:
        self.service = service
        self.log = log
        self.store = store

    partition_count: int = 1
    """``open_memory_fabric(partitions=N)`` (issue 25; nothing is laid out in memory)."""

    def partitions(self) -> int:
        """The partition count the fabric was opened with (1 by default)."""
        return self.partition_count

    def scope(self, tenant_id: str, resource_id: str | None = None, thread_id: str | None = None) -> Notes:
        """The handle of one scope; raises ``pydantic.ValidationError`` for bad ids."""
        return Notes(self.service, Scope(tenant_id=tenant_id, resource_id=resource_id, thread_id=thread_id))

    def erase_scope(
        self, tenant_id: str, resource_id: str | None = None, thread_id: str | None = None,
        hold: bool = False, *, requested_by: str = "operator", batch_size: int = 100,
        approval: str | None = None,
    ) -> EraseResult:
        """Tombstone (or hold) every un-forgotten note of a scope prefix (see
        ``Fabric.erase_scope``); ``pydantic.ValidationError`` for bad arguments."""
        args = EraseScopeInput(
            tenant_id=tenant_id, resource_id=resource_id, thread_id=thread_id, hold=hold,
            requested_by=requested_by, batch_size=batch_size, approval=approval,
        )
        result = self.service.erase_scope(args)
        if args.hold:
            return result
        from memfabric.domain.conversation import erase_conversations  # noqa: PLC0415
        n = erase_conversations(self.service.deps, args.tenant_id, args.resource_id, args.thread_id,
                                args.requested_by)  # issue 14
        from memfabric.domain.entity_commands import erase_entities  # noqa: PLC0415
        erase_entities(self.service.deps, args.tenant_id, args.resource_id, args.thread_id,
                       args.requested_by)  # issue 32
        return dataclasses.replace(result, conversations=n)

    def sweep(self, now: datetime | None = None, *, tenant: str | None = None, limit: int | None = None,
              dry_run: bool = False, batch_size: int = BATCH_SIZE,
              progress: Progress | None = None) -> SweepResult:
        """Apply the retention rules at ``now`` (see ``Fabric.sweep``)."""
        return self.service.sweep(now, tenant=tenant, limit=limit, dry_run=dry_run,
                                  batch_size=batch_size, progress=progress)

    def catch_up(self) -> dict[str, int]:
        """Projections are always at the log head: their positions."""
        return {"recall_index": self.log.position, "working_value": self.log.position,
                "note_scope": self.log.position, "consolidation": self.log.position,
                "retention": self.log.position}

    @property
    def principals(self) -> Any:
        """Issue 33: the principal registry (``memfabric.domain.access.Principals``)."""
        return self.service.access

    def access_log(self, **query: Any) -> Any:
        """Issue 33: access records (see ``Principals.access_log``)."""
        return self.service.access.access_log(**query)

    def close(self) -> None:
        """Flush the access log (nothing else to release)."""
        self.service.access.log.close()

    def __enter__(self) -> MemoryFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_memory_fabric(
    *,
    embedder: Embedder | None = None,
    consolidate: bool | Consolidation | dict[str, Any] = True,
    limits: Limits | dict[str, Any] | None = None,
    redactor: Callable[[str], str] | None = None,
    require_consent: bool = False,
    working_validator: WorkingValidator | None = None,
    linker: Any = None,
    evolution: Any = None,
    passive: bool = False,
    retention: RetentionConfig | dict[str, Any] | None = None,
    partitions: int | None = None,
    clock: Callable[[], datetime] | None = None,
) -> MemoryFabric:
    """An in-memory fabric with ``open_fabric``'s settings (no ``dsn``, no projections
    runner: projections always update with the write). ``partitions`` (issue 25) is
    validated like ``open_fabric``'s (1..256) and reported by ``partitions()``; it lays
    nothing out (there are no tables). ``clock``: "now" of retention decisions
    (default: the wall clock, UTC; tests pass a fake one). Raises ``pydantic.ValidationError`` for bad
    ``consolidate`` / ``limits`` / ``retention`` / ``partitions`` settings."""
    count = _PARTITIONS.validate_python(1 if partitions is None else partitions)
    consolidation = Consolidation.of(consolidate)
    retention_config = RetentionConfig.of(retention)
    limits_model = limits if isinstance(limits, Limits) else Limits.model_validate(limits or {})
    log = InMemoryEventLog()
    store = InMemoryNoteStore(log)

    def unit_of_work(scopes: Sequence[Scope]) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(log, scopes)

    from memfabric.adapters.memory_entities import InMemoryEntityStore  # noqa: PLC0415
    from memfabric.adapters.memory_ledger import InMemoryLedgerStore  # noqa: PLC0415
    from memfabric.adapters.principals_store import wire_memory  # noqa: PLC0415
    retention_store = InMemoryRetentionStore(log)  # issue 30
    deps = Deps.build(
        unit_of_work=unit_of_work, store=store, embedder=embedder or HashEmbedder(),
        consolidation=consolidation, limits=limits_model, redactor=redactor,
        require_consent=require_consent, working_validator=working_validator, clock=clock,
        **links.worker_settings(linker, evolution, passive),
        ledger_store=InMemoryLedgerStore(log),  # issue 14: the conversation ledger
        retention_store=retention_store,
        entity_store=InMemoryEntityStore(log),  # issue 32: the entity index
        known_at_store=lambda known_at: memory_versions.MemoryKnownAtStore(store, known_at),  # issue 31
    )
    retention_store.record(retention_config)
    service = MemoryService(deps.replace(access=wire_memory(deps, log)))  # issue 33: principals, access log
    fabric = MemoryFabric(service, log, store)
    fabric.partition_count = count
    return fabric


_PARTITIONS: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(strict=True, ge=1, le=256)])
