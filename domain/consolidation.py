"""Consolidation: how a ``fact`` / ``procedure`` / ``file`` write meets the note it
repeats or replaces. Pure: no storage, no model.

The rule lives here once and serves the single and the batch path:

1. An index proposes candidates for a write (:class:`NeighbourQuery`): the committed
   consolidation index (``UnitOfWork.neighbours``, SQL) and :class:`LocalIndex` (the
   notes the same write already touched). Both return *supersets*: live, currently
   valid, not superseded notes of exactly the write's scope and kind with the same
   ``path``, the same ``subject``, the same token hash, or a near vector.
2. :func:`choose` applies the candidate rule (:func:`is_candidate`) and picks one:
   an exact token match first, then the highest cosine similarity.
3. :func:`decide` turns write + neighbour into an outcome: ``fold`` (the same note
   again), ``supersede`` (a changed fact replaces it), ``precede`` (older news: the
   neighbour already replaced it) or ``insert``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memfabric.domain.note import Note

DEFAULT_THRESHOLD = 0.85
"""Cosine similarity at or above which a changed same-kind note supersedes its neighbour."""

FoldOutcome = Literal["insert", "fold", "supersede", "precede"]


class Consolidation(BaseModel):
    """Consolidation settings: ``enabled`` (default True) and ``threshold`` in [0, 1]
    (cosine, default 0.85)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = True
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)


@dataclass(frozen=True, slots=True)
class NeighbourQuery:
    """One write's consolidation lookup: its kind, unit vector (float32, ``(dim,)``),
    token hash (:func:`memfabric.domain.policy.token_hash`), path and subject."""

    kind: str
    embedding: np.ndarray
    token_hash: str
    path: str | None
    subject: str | None


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A candidate note as the rule sees it: id, cosine ``similarity`` to the write,
    token hash, path, subject and validity window."""

    note_id: str
    similarity: float
    tokens: str
    path: str | None
    subject: str | None
    valid_from: datetime | None = None
    valid_to: datetime | None = None


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
    admits, an exact token match first, then the highest similarity; ties go to the
    earlier candidate (callers list the write's own batch first: it is newer)."""
    best: Neighbour | None = None
    for cand in candidates:
        if not is_candidate(query, cand):
            continue
        if best is None or _rank(query, cand) > _rank(query, best):
            best = cand
    return best


def _rank(query: NeighbourQuery, n: Neighbour) -> tuple[bool, float]:
    return (n.tokens == query.token_hash, n.similarity)


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
    - ``file`` or subject-keyed writes: equal tokens → ``fold``, else ``supersede``;
    - otherwise equal normalized tokens → ``fold``; similarity ≥ ``threshold`` →
      ``supersede``; below → ``insert``.

    Then time is respected: a repeat whose window is disjoint from the neighbour's is
    a recurrence (``insert``), and a changed fact that starts before the neighbour
    starts is history the neighbour already replaced (``precede``)."""
    if neighbour is None:
        return "insert"
    same = neighbour.tokens == query.token_hash
    keyed = query.kind == "file" or query.subject is not None
    if same:
        outcome: FoldOutcome = "fold"
    elif keyed or neighbour.similarity >= threshold:
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

    def __init__(self, dim: int, capacity: int = 0) -> None:
        self._dim = max(dim, 1)
        self._matrix = np.zeros((max(capacity, 1), self._dim), dtype=np.float32)
        self._notes: dict[str, Note] = {}
        self._row_ids: list[str] = []
        self._row_of: dict[str, int] = {}
        self._hash_of: dict[str, str] = {}
        self._by_hash: dict[tuple[str, str], list[str]] = {}
        self._by_path: dict[str, list[str]] = {}
        self._by_subject: dict[tuple[str, str], list[str]] = {}
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
        out += self._rows(self._similar_ids(query, threshold, item), query, now)
        return out

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

    def _rows(self, ids: Sequence[str], query: NeighbourQuery, now: datetime) -> list[Neighbour]:
        out = []
        for nid in ids:
            note = self._notes[nid]
            if not is_current(note, query.kind, now):
                continue
            sim = float(np.dot(self._matrix[self._row_of[nid]], query.embedding))
            out.append(Neighbour(nid, sim, self._hash_of[nid], note.path, note.subject,
                                 note.valid_from, note.valid_to))
        return out
