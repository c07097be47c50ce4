"""The application service: ``MemoryService`` (an eventsourcing ``Application``) and
the scope-bound handle ``Notes`` that callers use.

The service decides (validation, redaction, embedding, consolidation policy) and
records decisions as events on ``Note`` aggregates; the ``NoteStore`` port supplies
transactions, projection queries and the fabric secret.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

import numpy as np
from eventsourcing.application import AggregateNotFoundError, Application
from pydantic import BaseModel, ConfigDict, Field

from memfabric.domain import policy
from memfabric.domain.errors import (
    FabricError,
    NoteExistsError,
    NoteForgottenError,
    NoteNotFoundError,
    NotSupportedError,
    ScopeError,
)
from memfabric.domain.model import (
    DEFAULT_MAX_ENTRY_TEXT_CHARS,
    Explain,
    ForgetResult,
    Note as NoteView,
    RecallInput,
    RecallResult,
    RememberInput,
    Scoring,
)
from memfabric.domain.note import Note, note_uuid
from memfabric.domain.ports import Candidate, Embedder, NoteStore
from memfabric.domain.scope import Scope

OVERSAMPLE = 4
"""Candidates fetched per requested hit (each list), before re-ranking. Also used for
the consolidation neighbour query's HNSW ``ef_search`` floor."""

MIN_CANDIDATES = 40


class Limits(BaseModel):
    """Size limits: ``max_entry_text_chars`` (default 8000) caps content, context and
    working blocks."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_entry_text_chars: int = Field(default=DEFAULT_MAX_ENTRY_TEXT_CHARS, ge=1, le=1_000_000)


class Consolidation(BaseModel):
    """Consolidation settings: ``enabled`` (default True) and ``threshold`` in [0, 1]
    (cosine, default 0.85)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = True
    threshold: float = Field(default=policy.DEFAULT_FOLD_THRESHOLD, ge=0.0, le=1.0)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One event of a note's history: ``version`` (1-based), ``type`` (event class
    name), ``timestamp`` (UTC), ``cause`` (``caller``, ``fold``, ``supersession:<id>``,
    ``forget`` ...) and the decoded ``fields`` (protected fields read ``<erased>`` once
    the note's key is destroyed)."""

    version: int
    type: str
    timestamp: datetime
    cause: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Lineage:
    """Supersession chain and fold/link facts of one note.

    ``predecessors``: ids this note replaced, nearest first; ``successors``: ids that
    replaced it, nearest first; ``folds``: timestamps of ``Folded`` events; ``links``:
    link edges ``{id, relation, weight}``; ``tombstone``: the ``Forgotten`` event's
    fields when the note was forgotten or held, else ``None``."""

    id: str
    predecessors: list[str]
    successors: list[str]
    folds: list[datetime]
    links: list[dict[str, Any]]
    tombstone: dict[str, Any] | None
    chain: list[dict[str, Any]] = field(default_factory=list)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _vector_bytes(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


def new_note_id() -> str:
    """A fresh 12-hex note id (random, from ``uuid4``)."""
    return uuid.uuid4().hex[:12]


class MemoryService(Application[UUID]):
    """Event-sourced memory application. Construct through ``memfabric.adapters.open_fabric``.

    ``store`` (a ``NoteStore``) and ``embedder`` are injected by the bootstrap after the
    eventsourcing infrastructure is built from the environment.
    """

    name = "memfabric"

    def __init__(
        self,
        env: dict[str, str] | None = None,
        *,
        embedder: Embedder,
        consolidation: Consolidation | None = None,
        limits: Limits | None = None,
        redactor: Callable[[str], str] | None = None,
        require_consent: bool = False,
    ) -> None:
        super().__init__(env)
        self.embedder = embedder
        self.consolidation = consolidation or Consolidation()
        self.limits = limits or Limits()
        self.redactor = redactor
        self.require_consent = require_consent
        self.store: NoteStore  # set by the bootstrap

    # ------------------------------------------------------------------ helpers
    def _load(self, scope: Scope, note_id: str) -> Note:
        try:
            note = self.repository.get(note_uuid(scope, note_id))
        except AggregateNotFoundError:
            raise NoteNotFoundError(f"no note {note_id!r} in scope {scope}") from None
        assert isinstance(note, Note)
        return note

    def _exists(self, scope: Scope, note_id: str) -> bool:
        return bool(self.recorder.select_events(note_uuid(scope, note_id), limit=1))

    def _redact(self, text: str | None) -> str | None:
        if text is None or self.redactor is None:
            return text
        return self.redactor(text)

    def view(self, note: Note, outcome: str = "inserted") -> NoteView:
        """Read model of an aggregate."""
        return NoteView(
            id=note.note_id,
            kind=note.kind,
            content=note.content,
            scope=note.scope,
            ingested_at=note.created_on,
            token_count=note.token_count,
            path=note.path,
            block=note.block,
            subject=note.subject,
            t_ref=note.t_ref,
            valid_from=note.valid_from,
            valid_to=note.valid_to,
            keywords=tuple(note.keywords),
            tags=tuple(note.tags),
            source_entry_ids=tuple(note.source_entry_ids),
            context=note.context,
            links=tuple(note.links),
            supersedes=note.supersedes,
            superseded_by=note.superseded_by,
            importance=note.importance,
            consent=note.consent,
            version=note.version,
            fold_count=note.fold_count,
            updated_at=note.updated_at,
            forgotten=note.forgotten,
            held=note.held,
            outcome=outcome,
        )

    # ------------------------------------------------------------------ remember
    def validate_remember(self, fields: dict[str, Any]) -> RememberInput:
        """Validate ``fields`` against :class:`RememberInput` with this fabric's limits."""
        return RememberInput.model_validate(
            fields, context={"max_entry_text_chars": self.limits.max_entry_text_chars}
        )

    def remember(self, scope: Scope, item: RememberInput, *, consolidate: bool | None = None) -> NoteView:
        """Write one note (see ``Notes.remember``)."""
        return self.remember_many(scope, [item], consolidate=consolidate)[0]

    def remember_many(
        self, scope: Scope, items: Sequence[RememberInput], *, consolidate: bool | None = None
    ) -> list[NoteView]:
        """Write notes in order inside one transaction per batch; each item is decided
        against the projection *and* the notes written earlier in the same batch, so
        the result equals remembering the items one by one."""
        for item in items:
            if item.kind == "episode":
                raise NotSupportedError(
                    "kind 'episode' is a view over a conversation ledger and is not supported yet"
                )
            if item.kind == "working":
                raise NotSupportedError("kind 'working' is written with Notes.write_block")
        if not items:
            return []
        texts = [self._redact(item.text) or "" for item in items]
        vectors = self.embedder.embed(texts)
        consolidate = self.consolidation.enabled if consolidate is None else consolidate
        results: list[NoteView] = []
        with self.store.write(scope) as tx:
            now = _now()
            batch = _Batch()
            for item, text, vector in zip(items, texts, vectors, strict=True):
                results.append(
                    self._remember_one(tx, scope, item, text, vector, now, consolidate, batch)
                )
            self.save(*batch.aggregates.values(), projected=list(batch.aggregates.values()))
        return results

    def _remember_one(
        self,
        tx: Any,
        scope: Scope,
        item: RememberInput,
        text: str,
        vector: np.ndarray,
        now: datetime,
        consolidate: bool,
        batch: _Batch,
    ) -> NoteView:
        tokens = policy.normalized_tokens(text)
        token_hash = policy.token_hash(tokens)
        context = self._redact(item.context)
        embedding = _vector_bytes(vector)
        token_count = policy.count_tokens(text)
        explicit = item.id is not None or item.supersedes is not None
        if item.id is not None and (item.id in batch.by_note_id or self._exists(scope, item.id)):
            raise NoteExistsError(f"note {item.id!r} already exists in scope {scope}")

        old: Note | None = None
        outcome: policy.FoldOutcome = "insert"
        if item.supersedes is not None:
            old = batch.by_note_id.get(item.supersedes) or self._load(scope, item.supersedes)
            if not old.live:
                raise NoteForgottenError(f"note {item.supersedes!r} is forgotten or held")
            outcome = "supersede"
        elif consolidate and not explicit:
            local = batch.nearest(item, token_hash, vector, now)
            stored = tx.nearest(
                scope, kind=item.kind, embedding=vector, token_hash=token_hash,
                path=item.path, subject=item.subject, now=now,
            )
            if stored is not None and stored.note_id in batch.by_note_id:
                stored = None  # the batch holds its current state; `local` covered it
            neighbour = _better(local, stored, token_hash)
            outcome = policy.decide_fold(
                kind=item.kind, tokens=token_hash, path=item.path, subject=item.subject,
                neighbour=neighbour, threshold=self.consolidation.threshold,
            )
            if outcome != "insert":
                assert neighbour is not None
                old = batch.by_note_id.get(neighbour.note_id) or self._load(scope, neighbour.note_id)

        if outcome == "fold":
            assert old is not None
            old.fold(
                content=text, context=context, keywords=list(item.keywords), tags=list(item.tags),
                source_entry_ids=list(item.source_entry_ids),
                links=[link.model_dump() for link in item.links], embedding=embedding,
                embedder_id=self.embedder.id, token_count=token_count,
                importance=item.importance,
                consent=item.consent.model_dump() if item.consent else None,
                t_ref=item.t_ref, valid_from=item.valid_from, valid_to=item.valid_to, cause="fold",
            )
            batch.add(old, vector, token_hash)
            return self.view(old, outcome="folded")

        note_id = item.id or new_note_id()
        valid_from = item.valid_from
        if outcome == "supersede" and valid_from is None:
            valid_from = now
        note = Note.remember(
            scope=scope, note_id=note_id, kind=item.kind, content=text, path=item.path, block=None,
            subject=item.subject, t_ref=item.t_ref, valid_from=valid_from, valid_to=item.valid_to,
            keywords=list(item.keywords), tags=list(item.tags),
            source_entry_ids=list(item.source_entry_ids), context=context,
            links=[link.model_dump() for link in item.links],
            supersedes=old.note_id if (outcome == "supersede" and old is not None) else None,
            importance=0.5 if item.importance is None else item.importance,
            consent=item.consent.model_dump() if item.consent else None,
            embedding=embedding, embedder_id=self.embedder.id, dim=self.embedder.dim,
            token_count=token_count, cause="caller",
        )
        if outcome == "supersede" and old is not None:
            old.supersede(successor_id=note_id, valid_to=valid_from or now,
                          cause=f"supersession:{note_id}")
            batch.add(old, None, None)
        batch.add(note, vector, token_hash)
        return self.view(note, outcome="superseding" if outcome == "supersede" else "inserted")

    # -------------------------------------------------------------------- recall
    def recall(self, scope: Scope, query: RecallInput) -> RecallResult:
        """Ranked live notes visible from ``scope`` (see ``Notes.recall``)."""
        as_of = query.as_of or _now()
        scoring = query.scoring or Scoring()
        limit = max(query.top_k * OVERSAMPLE, MIN_CANDIDATES)
        embedding = None
        if query.mode != "lexical":
            embedding = self.embedder.embed([query.query])[0]
        candidates = self.store.recall(
            scope,
            embedding=embedding,
            query=query.query if query.mode != "vector" else None,
            kinds=query.kinds,
            as_of=as_of,
            limit=limit,
            require_consent=self.require_consent,
        )
        scored = [(self._score(c, query.mode, as_of, scoring), c) for c in candidates]
        scored.sort(key=lambda pair: (-pair[0][0], pair[1].note_id))
        hits: list[NoteView] = []
        explain: list[Explain] = []
        used = 0
        for (total, relevance, rec), cand in scored[: query.top_k]:
            tokens = int(cand.fields["token_count"])
            if query.budget is not None and hits and used + tokens > query.budget:
                break
            used += tokens
            hits.append(self._candidate_view(scope, cand))
            explain.append(
                Explain(
                    id=cand.note_id,
                    score=round(total, 6),
                    similarity=None if cand.similarity is None else round(cand.similarity, 6),
                    recency=round(rec, 6),
                    importance=float(cand.fields["importance"]),
                    link=0.0,
                    valid=(cand.fields["valid_from"], cand.fields["valid_to"]),
                    relevance=round(relevance, 6),
                    lexical=None if cand.lexical is None else round(cand.lexical, 6),
                    vector_rank=cand.vector_rank,
                    lexical_rank=cand.lexical_rank,
                )
            )
        return RecallResult(hits=hits, explain=explain)

    @staticmethod
    def _score(
        cand: Candidate, mode: str, as_of: datetime, scoring: Scoring
    ) -> tuple[float, float, float]:
        if mode == "vector":
            relevance = max(0.0, cand.similarity or 0.0)
        elif mode == "lexical":
            relevance = policy.rrf_relevance(None, cand.lexical_rank) * 2.0
        else:
            relevance = policy.rrf_relevance(cand.vector_rank, cand.lexical_rank)
        f = cand.fields
        reference = f["t_ref"] or f["valid_from"] or f["ingested_at"]
        rec = policy.recency(reference, as_of, scoring.half_life)
        total = policy.score(
            relevance, rec, float(f["importance"]), 0.0,
            recency_weight=scoring.recency_weight,
            importance_weight=scoring.importance_weight,
            link_weight=scoring.link_weight,
        )
        return total, relevance, rec

    @staticmethod
    def _candidate_view(scope: Scope, cand: Candidate) -> NoteView:
        f = cand.fields
        return NoteView(
            id=cand.note_id,
            kind=f["kind"],
            content=f["content"],
            scope=Scope(
                tenant_id=f["tenant_id"],
                resource_id=f["resource_id"] or None,
                thread_id=f["thread_id"] or None,
            ),
            ingested_at=f["ingested_at"],
            token_count=int(f["token_count"]),
            path=f["path"],
            subject=f["subject"],
            t_ref=f["t_ref"],
            valid_from=f["valid_from"],
            valid_to=f["valid_to"],
            tags=tuple(f["tags"] or ()),
            source_entry_ids=tuple(f["source_entry_ids"] or ()),
            supersedes=f["supersedes"],
            importance=float(f["importance"]),
            consent=f.get("consent"),
            version=int(f["version"]),
        )

    # ------------------------------------------------------------------- reading
    def get(self, scope: Scope, note_id: str) -> NoteView:
        """The note ``note_id`` of ``scope`` (``NoteNotFoundError`` when absent)."""
        return self.view(self._load(scope, note_id), outcome="read")

    def history(self, scope: Scope, note_id: str) -> list[HistoryEntry]:
        """Every event of the note in version order (``NoteNotFoundError`` when absent)."""
        events = list(self.store.stored_events(note_uuid(scope, note_id)))
        if not events:
            raise NoteNotFoundError(f"no note {note_id!r} in scope {scope}")
        out = []
        for event in events:
            fields = {
                k: v for k, v in vars(event).items()
                if k not in ("originator_id", "originator_version", "timestamp", "originator_topic")
            }
            if isinstance(fields.get("embedding"), bytes | bytearray):
                fields["embedding"] = f"<{len(fields['embedding'])} bytes float32>"
            out.append(
                HistoryEntry(
                    version=event.originator_version,
                    type=type(event).__name__,
                    timestamp=event.timestamp,
                    cause=str(fields.get("cause", "caller")),
                    fields=fields,
                )
            )
        return out

    def lineage(self, scope: Scope, note_id: str) -> Lineage:
        """Predecessors and successors along ``supersedes`` (both directions), folds,
        links and the tombstone of ``note_id``. Cycles cannot arise: a note can only
        supersede a note that existed before it, and each step is checked."""
        note = self._load(scope, note_id)
        seen = {note.note_id}
        preds: list[str] = []
        cur = note
        while cur.supersedes and cur.supersedes not in seen:
            seen.add(cur.supersedes)
            preds.append(cur.supersedes)
            cur = self._load(scope, cur.supersedes)
        succs: list[str] = []
        cur = note
        while cur.superseded_by and cur.superseded_by not in seen:
            seen.add(cur.superseded_by)
            succs.append(cur.superseded_by)
            cur = self._load(scope, cur.superseded_by)
        history = self.history(scope, note_id)
        folds = [h.timestamp for h in history if h.type == "Folded"]
        tomb = next((h.fields for h in history if h.type == "Forgotten"), None)
        chain = []
        for nid in [*reversed(preds), note.note_id, *succs]:
            n = self._load(scope, nid)
            chain.append({
                "id": nid, "valid_from": n.valid_from, "valid_to": n.valid_to,
                "ingested_at": n.created_on, "forgotten": n.forgotten, "held": n.held,
                "content": n.content, "folds": n.fold_count,
            })
        return Lineage(id=note_id, predecessors=preds, successors=succs, folds=folds,
                       links=list(note.links), tombstone=tomb, chain=chain)

    # -------------------------------------------------------------------- forget
    def forget(
        self, scope: Scope, note_id: str, *, hold: bool, requested_by: str,
        block: str | None = None,
    ) -> ForgetResult:
        """Tombstone (or hold) one note of ``scope``; see ``Notes.forget``."""
        with self.store.write(scope):
            try:
                note = self._load(scope, note_id)
            except NoteNotFoundError:
                return ForgetResult(id=note_id if block is None else None, block=block, deleted=0, held=False)
            if note.forgotten:
                return ForgetResult(id=note.note_id if block is None else None, block=block, deleted=0, held=False)
            if note.held:
                return ForgetResult(id=note.note_id if block is None else None, block=block, deleted=0, held=True)
            digest = self.store.content_hmac(note.content) if note.content is not None else None
            note.forget(
                content_hmac=digest,
                reason="legal_hold" if hold else "forgotten",
                requested_by=requested_by,
            )
            self.save(note, projected=[note], shred=[] if hold else [note.id])
        return ForgetResult(
            id=note.note_id if block is None else None,
            block=block,
            deleted=0 if hold else 1,
            held=hold,
        )

    def verify_content(self, scope: Scope, note_id: str, text: str) -> bool:
        """True when ``text`` matches the tombstone's keyed hash (constant-time compare).

        Raises ``NoteNotFoundError`` when the note is absent, ``FabricError`` when it has
        no tombstone."""
        import hmac as _hmac

        note = self._load(scope, note_id)
        tomb = next(
            (h.fields for h in self.history(scope, note_id) if h.type == "Forgotten"), None
        )
        if tomb is None:
            raise FabricError(f"note {note_id!r} has no tombstone")
        expected = tomb.get("content_hmac") or ""
        del note
        return _hmac.compare_digest(expected, self.store.content_hmac(text))


class _Batch:
    """Aggregates touched in one write transaction, so later items of a
    ``remember_many`` batch see earlier ones exactly as if committed."""

    def __init__(self) -> None:
        self.aggregates: dict[UUID, Note] = {}
        self.by_note_id: dict[str, Note] = {}
        self.vectors: dict[str, tuple[np.ndarray, str]] = {}

    def add(self, note: Note, vector: np.ndarray | None, token_hash: str | None) -> None:
        self.aggregates[note.id] = note
        self.by_note_id[note.note_id] = note
        if vector is not None and token_hash is not None:
            self.vectors[note.note_id] = (vector, token_hash)

    def _candidates(self, kind: str, now: datetime) -> Iterable[Note]:
        for note in self.by_note_id.values():
            if (
                note.kind == kind
                and note.live
                and note.superseded_by is None
                and (note.valid_to is None or note.valid_to > now)
            ):
                yield note

    def nearest(
        self, item: RememberInput, token_hash: str, vector: np.ndarray, now: datetime
    ) -> policy.Neighbour | None:
        """The batch-local neighbour with the same rules as the projection query:
        ``file`` by path, subject-keyed by subject, else an exact token match first and
        the most similar vector otherwise."""
        best: policy.Neighbour | None = None
        for note in self._candidates(item.kind, now):
            vec, th = self.vectors.get(note.note_id, (None, None))
            if vec is None or th is None:
                continue
            if item.kind == "file" and note.path != item.path:
                continue
            if item.kind != "file" and item.subject is not None and note.subject != item.subject:
                continue
            cand = policy.Neighbour(note.note_id, float(np.dot(vec, vector)), th, note.path, note.subject)
            best = _better(best, cand, token_hash)
        return best


def _better(
    a: policy.Neighbour | None, b: policy.Neighbour | None, token_hash: str
) -> policy.Neighbour | None:
    """Pick the neighbour the fold policy should see: exact token match first, then
    the higher similarity."""
    if a is None:
        return b
    if b is None:
        return a
    a_exact, b_exact = a.tokens == token_hash, b.tokens == token_hash
    if a_exact != b_exact:
        return a if a_exact else b
    return a if a.similarity >= b.similarity else b
