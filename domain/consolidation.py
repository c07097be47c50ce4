"""Consolidation: how a ``fact`` / ``procedure`` / ``file`` write meets the note it
repeats or replaces. Pure: no storage, no model.

The rule lives here once and serves the single and the batch path:

1. An index proposes candidates for a write (:class:`NeighbourQuery`): the committed
   consolidation index (``UnitOfWork.neighbours``, SQL) and :class:`LocalIndex` (the
   notes the same write already touched). Both return *supersets*: live, currently
   valid, not superseded notes of the write's kind and consolidation group (issue 16:
   the same visibility, visible from its scope; :mod:`memfabric.domain.visibility`) with the same
   ``path``, the same ``subject``, the same token hash, the same *inferred* subject key
   (:mod:`memfabric.domain.subjects`; for a ``from_to`` key: the same entity), or a
   near vector.
2. :func:`choose` applies the candidate rule (:func:`is_candidate`) and picks one:
   an exact token match first, then (subject-less writes) a note the inferred key
   says the write supersedes, else (file / subject-keyed writes) the highest cosine.
3. :func:`decide` turns write + neighbour into an outcome: ``fold`` (the same note
   again), ``supersede`` (a changed fact replaces it), ``precede`` (older news: the
   neighbour already replaced it) or ``insert``; :func:`reason` says why.

**Cosine similarity never supersedes** (issue 12): "Ticket 4411 is open" and "Ticket
4412 is open" are 0.98 apart and different tickets, "Alice lives in Berlin" and "Alice
moved to Munich" only 0.3-0.6 and the same slot. A subject-less write supersedes only
when both notes carry an inferred :class:`~memfabric.domain.subjects.SubjectKey` and
:func:`memfabric.domain.subjects.supersedes` says the new one replaces the old (same
single-valued slot, changed value; negation; from-to). With no key (inference off,
non-English, no rule sure) the write folds into an exact repeat or is inserted. The
caller's explicit ``subject``/``supersedes`` and a file's ``path`` still decide first.
``threshold`` now only bounds which near vectors the batch-local index proposes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memfabric.domain.note import Note
from memfabric.domain.scope import Scope
from memfabric.domain.visibility import Visibility, meets, of_consent
from memfabric.domain.subjects import WILDCARD, SubjectKey, Supersession, supersedes

DEFAULT_THRESHOLD = 0.85
"""Cosine similarity at or above which the batch-local index proposes a neighbour (a
proposal only: similarity never supersedes)."""

FoldOutcome = Literal["insert", "fold", "supersede", "precede"]


class Consolidation(BaseModel):
    """Consolidation settings: ``enabled`` (default True) and ``threshold`` in [0, 1]
    (cosine at which batch-local near vectors are proposed as candidates, default 0.85)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = True
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)

    @classmethod
    def of(cls, option: Consolidation | bool | Mapping[str, Any]) -> Consolidation:
        """``open_fabric``'s ``consolidate``: settings, on/off, or a mapping of settings
        (``enabled`` True unless given); ``pydantic.ValidationError`` for a bad one."""
        if isinstance(option, Consolidation):
            return option
        if isinstance(option, bool):
            return cls(enabled=option)
        return cls.model_validate({"enabled": True, **option})


@dataclass(frozen=True, slots=True)
class NeighbourQuery:
    """One write's consolidation lookup: its kind, unit vector (float32, ``(dim,)``),
    token hash (:func:`memfabric.domain.policy.token_hash`), path, subject, inferred
    key and ``visibility`` (issue 16: the write meets only notes of the same
    visibility visible from its scope, see :mod:`memfabric.domain.visibility`;
    default ``thread``: the notes of exactly its scope)."""

    kind: str
    embedding: np.ndarray
    token_hash: str
    path: str | None
    subject: str | None
    inferred: SubjectKey | None = None
    visibility: Visibility = "thread"


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A candidate note as the rule sees it: id, cosine ``similarity`` to the write,
    token hash, path, subject, validity window and ``home`` (the scope the note lives
    in; ``None``: the writer's own scope)."""

    note_id: str
    similarity: float
    tokens: str
    path: str | None
    subject: str | None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    inferred: SubjectKey | None = None
    home: Scope | None = None
    visibility: Visibility | None = None
    """The note's visibility (``None``: the write's own); issue 16."""


def key_to_dict(key: SubjectKey | None) -> dict[str, Any] | None:
    """A subject key as stored on the ``Remembered`` event (``inferred_subject``)."""
    if key is None:
        return None
    return {"key": key.key, "entity": key.entity, "attribute": key.attribute, "value": key.value,
            "rule": key.rule, "polarity": key.polarity, "single_valued": key.single_valued,
            "previous": key.previous}


def key_from_dict(d: Any) -> SubjectKey | None:
    """The inverse of :func:`key_to_dict` (``None`` for a missing or erased value)."""
    if not isinstance(d, dict) or "entity" not in d:
        return None
    return SubjectKey(entity=d["entity"], attribute=d["attribute"], value=d["value"], rule=d["rule"],
                      polarity=bool(d.get("polarity", True)),
                      single_valued=bool(d.get("single_valued", True)), previous=d.get("previous"))


def note_key(note: Note) -> SubjectKey | None:
    """The inferred subject key a note was remembered with (``None`` for notes written
    before issue 12, with inference off, or with no key)."""
    return key_from_dict(getattr(note, "inferred_subject", None))


def inferred_supersession(query: NeighbourQuery, neighbour: Neighbour) -> Supersession | None:
    """Whether the write's inferred key supersedes the neighbour's (subject-less
    writes only)."""
    if query.kind == "file" or query.subject is not None:
        return None
    return supersedes(query.inferred, neighbour.inferred)


def is_candidate(query: NeighbourQuery, neighbour: Neighbour) -> bool:
    """The candidate rule: a ``file`` write meets only notes of the same ``path``; a
    subject-keyed write only notes with the same ``subject``; any other write only
    notes without a subject (a subject-keyed note changes only through its subject)."""
    if query.kind == "file":
        return neighbour.path == query.path
    if query.subject is not None:
        return neighbour.subject == query.subject
    return neighbour.subject is None


def choose(query: NeighbourQuery, candidates: Iterable[Neighbour]) -> Neighbour | None:
    """The neighbour the write is decided against: among the candidates the rule
    admits, one of the write's own visibility first (issue 16), then an exact token
    match, then the highest similarity; ties go to the earlier candidate (callers list
    the write's own batch first: it is newer)."""
    best: Neighbour | None = None
    keyed = query.kind == "file" or query.subject is not None
    for cand in candidates:
        if not is_candidate(query, cand):
            continue
        if not keyed and cand.tokens != query.token_hash and inferred_supersession(query, cand) is None:
            continue  # similarity alone decides nothing
        if best is None or _rank(query, cand) > _rank(query, best):
            best = cand
    return best


def _rank(query: NeighbourQuery, n: Neighbour) -> tuple[bool, bool, float]:
    # issue 16: a note of the write's own visibility first (a narrower note of the
    # writer's scope only when no such note qualifies), then an exact repeat
    same = n.visibility is None or n.visibility == query.visibility
    return (same, n.tokens == query.token_hash, n.similarity)


def decide(
    query: NeighbourQuery,
    neighbour: Neighbour | None,
    *,
    threshold: float,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
) -> FoldOutcome:
    """How the write consolidates with ``neighbour`` (from :func:`choose`).

    - no neighbour → ``insert``;
    - equal normalized tokens → ``fold``;
    - ``file`` or subject-keyed writes: otherwise ``supersede``;
    - subject-less writes: ``supersede`` when the inferred keys say so
      (:func:`inferred_supersession`), else ``insert`` — never on similarity
      (``threshold`` is accepted for compatibility and unused).

    Then time is respected: a repeat whose window is disjoint from the neighbour's is
    a recurrence (``insert``), and a changed fact that starts before the neighbour
    starts is history the neighbour already replaced (``precede``)."""
    del threshold
    if neighbour is None:
        return "insert"
    same = neighbour.tokens == query.token_hash
    keyed = query.kind == "file" or query.subject is not None
    if same:
        outcome: FoldOutcome = "fold"
    elif keyed or inferred_supersession(query, neighbour) is not None:
        outcome = "supersede"
    else:
        return "insert"
    if outcome == "fold" and windows_disjoint(
        (valid_from, valid_to), (neighbour.valid_from, neighbour.valid_to)
    ):
        return "insert"
    if (outcome == "supersede" and valid_from is not None
            and neighbour.valid_from is not None and valid_from < neighbour.valid_from):
        return "precede"
    return outcome


def reason(query: NeighbourQuery, neighbour: Neighbour | None, outcome: FoldOutcome) -> dict[str, Any] | None:
    """Why the write had ``outcome`` against ``neighbour`` (recorded on its events and
    shown by ``lineage`` and ``MemoryNote.decision``): ``basis`` is ``exact_repeat``,
    ``path``, ``explicit_subject`` or ``inferred_subject`` (then with ``subject_key``,
    ``old_value``, ``new_value``, ``decision_rule`` and ``extraction_rules``), plus the
    neighbour's ``note_id`` and ``similarity``. ``None`` for a plain insert."""
    if neighbour is None or outcome == "insert":
        return None
    base: dict[str, Any] = {"note_id": neighbour.note_id, "similarity": round(neighbour.similarity, 4)}
    if neighbour.tokens == query.token_hash:
        return {"basis": "exact_repeat", **base}
    if query.kind == "file":
        return {"basis": "path", "path": query.path, **base}
    if query.subject is not None:
        return {"basis": "explicit_subject", "subject": query.subject, **base}
    sup = inferred_supersession(query, neighbour)
    if sup is None:
        return None
    return {"basis": "inferred_subject", **sup.as_event_fields(), **base}


def windows_disjoint(
    a: tuple[datetime | None, datetime | None], b: tuple[datetime | None, datetime | None]
) -> bool:
    """True when half-open windows ``[from, to)`` (``None`` = unbounded) neither overlap
    nor touch."""
    (a_from, a_to), (b_from, b_to) = a, b
    if a_to is not None and b_from is not None and a_to < b_from:
        return True
    return b_to is not None and a_from is not None and b_to < a_from


def is_current(note: Note, kind: str, now: datetime) -> bool:
    """Whether ``note`` can be a candidate for a write of ``kind`` at ``now``: same
    kind, live, not superseded and its window not closed."""
    return (note.kind == kind and note.live and note.superseded_by is None
            and (note.valid_to is None or note.valid_to > now))


class LocalIndex:
    """Consolidation candidates among the notes one write has touched, so the later
    items of a ``remember_many`` see the earlier ones exactly as if committed.

    Rows are found through dicts (token hash, path, subject) and vectors through one
    matrix-vector product over the batch (or, after :meth:`prepare`, a precomputed
    list per item), so a batch of n notes costs O(n²·dim) float operations in numpy,
    not O(n²) Python steps."""

    def __init__(self, dim: int, capacity: int = 0, *, scope: Scope | None = None) -> None:
        self._scope = scope
        """The writer's scope (issue 16: which local notes meet which write,
        :func:`memfabric.domain.visibility.meets`; ``None``: every note is the writer's)."""
        self._dim = max(dim, 1)
        self._matrix = np.zeros((max(capacity, 1), self._dim), dtype=np.float32)
        self._notes: dict[str, Note] = {}
        self._row_ids: list[str] = []
        self._row_of: dict[str, int] = {}
        self._hash_of: dict[str, str] = {}
        self._by_hash: dict[tuple[str, str], list[str]] = {}
        self._by_path: dict[str, list[str]] = {}
        self._by_subject: dict[tuple[str, str], list[str]] = {}
        self._by_inferred: dict[tuple[str, str], list[str]] = {}
        self._by_entity: dict[tuple[str, str], list[str]] = {}
        self._similar: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._note_of_item: dict[int, str] = {}
        self._item_of_note: dict[str, int] = {}

    def __contains__(self, note_id: object) -> bool:
        return note_id in self._notes

    def prepare(self, vectors: np.ndarray, threshold: float, block: int = 512) -> None:
        """Precompute, for every item i of the write, the earlier items j < i with
        cosine ≥ ``threshold`` (blocked matrix products: O(n²·dim) flops in BLAS, O(n)
        memory per block). Below the threshold a local note cannot change a decision."""
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, len(vectors), block):
            stop = min(start + block, len(vectors))
            sims = vectors[start:stop] @ vectors[:stop].T
            for r in range(stop - start):
                row = sims[r, : start + r]
                js = np.flatnonzero(row >= threshold)
                out.append((js, row[js]))
        self._similar = out

    def touch(self, note: Note) -> None:
        """Record that the write changed ``note`` without re-indexing it (e.g. it was
        superseded): the committed index's row for it is stale from now on."""
        self._notes[note.note_id] = note

    def add(self, note: Note, vector: np.ndarray, token_hash: str, item: int | None) -> None:
        """(Re-)index ``note`` with its current vector and token hash; ``item`` is the
        index of the write item that produced it (``None`` outside a batch)."""
        nid = note.note_id
        self._notes[nid] = note
        row = self._row_of.get(nid)
        if row is None:
            row = self._new_row(nid)
            if note.path is not None:
                self._by_path.setdefault(note.path, []).append(nid)
            if note.subject is not None:
                self._by_subject.setdefault((note.kind, note.subject), []).append(nid)
            key = note_key(note)
            if key is not None and note.subject is None:
                self._by_inferred.setdefault((note.kind, key.key), []).append(nid)
                self._by_entity.setdefault((note.kind, key.entity), []).append(nid)
        self._matrix[row] = vector
        if item is not None:
            self._note_of_item[item] = nid
            self._item_of_note[nid] = item
        old = self._hash_of.get(nid)
        if old != token_hash:
            if old is not None:
                self._by_hash[(note.kind, old)].remove(nid)
            self._by_hash.setdefault((note.kind, token_hash), []).append(nid)
            self._hash_of[nid] = token_hash

    def nearest(self, vector: np.ndarray, kind: str, k: int) -> list[tuple[str, float]]:
        """The ``k`` local notes of ``kind`` nearest to ``vector`` that are live and not
        superseded, with their cosine similarity (the linker's batch neighbours)."""
        n = len(self._row_ids)
        if n == 0 or k <= 0:
            return []
        sims = self._matrix[:n] @ np.asarray(vector, np.float32)
        out: list[tuple[str, float]] = []
        for row in np.argsort(-sims, kind="stable"):
            note = self._notes[self._row_ids[int(row)]]
            if note.kind == kind and note.live and note.superseded_by is None:
                out.append((note.note_id, float(sims[int(row)])))
                if len(out) >= k:
                    break
        return out

    def _new_row(self, nid: str) -> int:
        row = len(self._row_ids)
        if row >= self._matrix.shape[0]:
            grown = np.zeros((row * 2, self._dim), dtype=np.float32)
            grown[: self._matrix.shape[0]] = self._matrix
            self._matrix = grown
        self._row_ids.append(nid)
        self._row_of[nid] = row
        return row

    def candidates(
        self, query: NeighbourQuery, now: datetime, *, threshold: float, item: int | None = None,
    ) -> list[Neighbour]:
        """A superset of the rule's candidates among the local notes: same path (file),
        same subject (subject-keyed), else the newest same-token note and the notes at
        cosine ≥ ``threshold``. ``item``: the write item's index, to use :meth:`prepare`."""
        if query.kind == "file":
            return self._rows(self._by_path.get(query.path or "", []), query, now)
        if query.subject is not None:
            return self._rows(self._by_subject.get((query.kind, query.subject), []), query, now)
        out = self._newest_exact(query, now)
        out += self._rows(self._inferred_ids(query), query, now)
        out += self._rows(self._similar_ids(query, threshold, item), query, now)
        return out

    def _inferred_ids(self, query: NeighbourQuery) -> list[str]:
        """Notes of the write's inferred key (a ``from_to`` key: of its entity)."""
        key = query.inferred
        if key is None:
            return []
        if key.attribute == WILDCARD:
            return list(self._by_entity.get((query.kind, key.entity), []))
        return list(self._by_inferred.get((query.kind, key.key), []))

    def _newest_exact(self, query: NeighbourQuery, now: datetime) -> list[Neighbour]:
        for nid in reversed(self._by_hash.get((query.kind, query.token_hash), [])):
            found = self._rows([nid], query, now)
            if found and found[0].subject is None:
                return found
        return []

    def _similar_ids(self, query: NeighbourQuery, threshold: float, item: int | None) -> list[str]:
        if self._similar is not None and item is not None:
            js, _ = self._similar[item]
            ids = (self._note_of_item.get(j) for j in js.tolist())
            # item j wrote no note, or its note has taken a later item's vector
            return [nid for j, nid in zip(js.tolist(), ids, strict=True)
                    if nid is not None and self._item_of_note.get(nid) == j]
        n = len(self._row_ids)
        if n == 0:
            return []
        sims = self._matrix[:n] @ query.embedding
        return [self._row_ids[r] for r in np.flatnonzero(sims >= threshold).tolist()]

    def _meets(self, note: Note, query: NeighbourQuery) -> bool:
        writer = self._scope or note.scope
        return meets(writer, query.visibility, note.scope, of_consent(note.consent))

    def _rows(self, ids: Sequence[str], query: NeighbourQuery, now: datetime) -> list[Neighbour]:
        out = []
        for nid in ids:
            note = self._notes[nid]
            if not is_current(note, query.kind, now) or not self._meets(note, query):
                continue  # issue 16: only the write's consolidation group
            sim = float(np.dot(self._matrix[self._row_of[nid]], query.embedding))
            out.append(Neighbour(nid, sim, self._hash_of[nid], note.path, note.subject,
                                 note.valid_from, note.valid_to, note_key(note), note.scope,
                                 of_consent(note.consent)))
        return out
