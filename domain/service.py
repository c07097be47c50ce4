"""The application service: ``MemoryService`` (an eventsourcing ``Application``) and
the scope-bound handle ``Notes`` that callers use.

The service decides (validation, redaction, embedding, consolidation policy) and
records decisions as events on ``Note`` aggregates; the ``NoteStore`` port supplies
transactions, projection queries and the fabric secret.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Annotated, Any
from uuid import UUID

import numpy as np
from eventsourcing.application import AggregateNotFoundError, Application
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

from memfabric.domain import policy, working
from memfabric.domain.errors import (
    EmbedderError,
    SupersessionError,
    CapacityError,
    ConflictError,
    FabricError,
    NoteExistsError,
    NoteForgottenError,
    NoteNotFoundError,
    NotSupportedError,
)
from memfabric.domain.model import (
    DEFAULT_MAX_ENTRY_TEXT_CHARS,
    AppendBlockInput,
    BlockRef,
    Explain,
    ForgetResult,
    Note as NoteView,
    RecallInput,
    RecallResult,
    RememberInput,
    Scoring,
)
from memfabric.domain.note import ERASED, Note, note_uuid
from memfabric.domain.ports import Candidate, Embedder, NeighbourQuery, NoteStore
from memfabric.domain.scope import Scope, ScopeId

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
    ``forget`` ...) and the decoded ``fields``. Once the note's key is destroyed every
    protected field of the event reads ``"<erased>"`` and ``erased`` names them (empty
    while the content is readable)."""

    version: int
    type: str
    timestamp: datetime
    cause: str
    fields: dict[str, Any]
    erased: tuple[str, ...] = ()


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


Requester = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]
"""Who asked for a forget or an erasure (recorded in the tombstone): 1-200 characters."""


class EraseScopeInput(BaseModel):
    """What ``Fabric.erase_scope`` accepts: scope ids as in :class:`Scope` (``None`` =
    every resource / thread), ``hold`` (strict bool), ``requested_by`` (1-200 chars)
    and ``batch_size`` (1-1000 notes per transaction, default 100)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tenant_id: ScopeId
    resource_id: ScopeId | None = None
    thread_id: ScopeId | None = None
    hold: StrictBool = False
    requested_by: Requester = "operator"
    batch_size: Annotated[int, Field(ge=1, le=1000)] = 100


@dataclass(frozen=True, slots=True)
class EraseResult:
    """Exact counts of one ``erase_scope`` call over the scope prefix
    ``(tenant_id, resource_id, thread_id)`` (``None`` = every resource / thread).

    ``deleted``: notes tombstoned and crypto-shredded by this call; ``held``: notes this
    call put under legal hold (``hold=True``); ``already_held``: notes found under an
    earlier hold and left as they are (content kept); ``remaining``: un-forgotten notes
    neither held nor erased after the call (0 unless notes were written into the scope
    while it was erased: run it again); ``batches``: write transactions used."""

    tenant_id: str
    resource_id: str | None
    thread_id: str | None
    deleted: int
    held: int
    already_held: int
    remaining: int
    batches: int


@dataclass(frozen=True, slots=True)
class PathForgetResult:
    """Outcome of ``Notes.delete_path``: ids of the ``file`` notes recorded against
    ``path`` that were tombstoned (``deleted``) or are under legal hold (``held``:
    put on hold by this call or kept under an earlier hold)."""

    path: str
    deleted: tuple[str, ...]
    held: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RepointResult:
    """Outcome of ``Notes.repoint``: ids of the ``file`` notes moved from
    ``from_path`` to ``to_path`` (``repointed``) and of held notes on ``from_path``
    that stay where the hold froze them (``held``)."""

    from_path: str
    to_path: str
    repointed: tuple[str, ...]
    held: tuple[str, ...]


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
        working_validator: working.WorkingValidator | None = None,
    ) -> None:
        super().__init__(env)
        self.embedder = embedder
        self.consolidation = consolidation or Consolidation()
        self.limits = limits or Limits()
        self.redactor = redactor
        self.require_consent = require_consent
        self.working_validator = working_validator
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

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """The embedder's vectors for ``texts`` as a checked ``(n, dim)`` float32 array;
        raises ``EmbedderError`` for any other shape or a non-finite value."""
        try:
            out = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbedderError(f"embedder {self.embedder.id!r} returned no float vectors: {exc}") from exc
        if out.shape != (len(texts), self.embedder.dim):
            raise EmbedderError(
                f"embedder {self.embedder.id!r} returned shape {out.shape}, "
                f"expected {(len(texts), self.embedder.dim)}"
            )
        if not np.isfinite(out).all():
            raise EmbedderError(f"embedder {self.embedder.id!r} returned NaN or infinite values")
        return out

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
            forgotten_at=note.forgotten_at,
        )

    def _commit(self, batch: _Batch) -> None:
        """Append the batch's events in decision order and project its aggregates, in
        the open write transaction."""
        self.save(*batch.events, projected=list(batch.aggregates.values()))

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
        the result equals remembering the items one by one. ``working`` items write
        their block (see :meth:`_change_block`) and are never embedded."""
        for item in items:
            if item.kind == "episode":
                raise NotSupportedError(
                    "kind 'episode' is a view over a conversation ledger and is not supported yet"
                )
        if not items:
            return []
        notes = [item for item in items if item.kind != "working"]
        texts = [self._redact(item.text) or "" for item in notes]
        vectors = self._embed(texts) if texts else []
        hashes = [policy.token_hash(policy.normalized_tokens(text)) for text in texts]
        consolidate = self.consolidation.enabled if consolidate is None else consolidate
        asks = [consolidate and item.id is None and item.supersedes is None for item in notes]
        results: list[NoteView] = []
        with self.store.write(scope) as tx:
            now = _now()
            found = iter(tx.nearest_many(scope, [
                NeighbourQuery(item.kind, vec, h, item.path, item.subject)
                for item, vec, h, ask in zip(notes, vectors, hashes, asks, strict=True) if ask
            ], now=now))
            prepared = iter(enumerate(zip(texts, vectors, hashes, asks, strict=True)))
            batch = _Batch(len(items), self.embedder.dim)
            if consolidate and len(notes) > 1:
                batch.prepare(np.asarray(vectors, dtype=np.float32), self.consolidation.threshold)
            for item in items:
                if item.kind == "working":
                    assert item.block is not None and item.content is not None
                    batch.item = None
                    results.append(self._change_block(tx, scope, item.block, batch, content=item.content))
                    continue
                batch.item, (text, vector, token_hash, ask) = next(prepared)
                stored = next(found) if ask else []
                results.append(
                    self._remember_one(scope, item, text, vector, token_hash, stored, now, ask, batch)
                )
            self._commit(batch)
        return results

    def _remember_one(
        self,
        scope: Scope,
        item: RememberInput,
        text: str,
        vector: np.ndarray,
        token_hash: str,
        stored_candidates: list[policy.Neighbour],
        now: datetime,
        consolidate: bool,
        batch: _Batch,
    ) -> NoteView:
        context = self._redact(item.context)
        embedding = _vector_bytes(vector)
        token_count = policy.count_tokens(text)
        if item.id is not None and (item.id in batch.by_note_id or self._exists(scope, item.id)):
            raise NoteExistsError(f"id: note {item.id!r} already exists in scope {scope}")
        for link in item.links:
            target = batch.by_note_id.get(link.id)
            if target is None:
                try:
                    target = self._load(scope, link.id)
                except NoteNotFoundError:
                    raise NoteNotFoundError(f"links: no note {link.id!r} in scope {scope}") from None
            if not target.live:
                raise NoteForgottenError(f"links: note {link.id!r} is forgotten or held")

        old: Note | None = None
        outcome: policy.FoldOutcome = "insert"
        neighbour: policy.Neighbour | None = None
        if item.supersedes is not None:
            old = batch.by_note_id.get(item.supersedes) or self._load(scope, item.supersedes)
            if not old.live:
                raise NoteForgottenError(f"supersedes: note {item.supersedes!r} is forgotten or held")
            if old.superseded_by is not None:
                raise SupersessionError(
                    f"supersedes: note {old.note_id!r} was already superseded by "
                    f"{old.superseded_by!r}; supersede that note instead"
                )
            if (item.valid_from is not None and old.valid_from is not None
                    and item.valid_from < old.valid_from):
                raise SupersessionError(
                    f"valid_from: {item.valid_from.isoformat()} is before the superseded note's "
                    f"valid_from {old.valid_from.isoformat()}"
                )
            outcome = "supersede"
        elif consolidate:
            local = batch.nearest(item, token_hash, vector, now, self.consolidation.threshold)
            # A stored candidate the batch already changed is judged by `local` instead.
            stored = None
            for cand in stored_candidates:
                if cand.note_id not in batch.by_note_id:
                    stored = _better(stored, cand, token_hash)
            neighbour = _better(local, stored, token_hash)
            outcome = policy.decide_fold(
                kind=item.kind, tokens=token_hash, path=item.path, subject=item.subject,
                neighbour=neighbour, threshold=self.consolidation.threshold,
                valid_from=item.valid_from, valid_to=item.valid_to,
            )
            if outcome in ("fold", "supersede"):
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
        if outcome == "precede" and neighbour is not None and neighbour.valid_from is not None:
            # Older news: the neighbour already replaced it; close its window there.
            if item.valid_to is None or item.valid_to > neighbour.valid_from:
                note.supersede(successor_id=neighbour.note_id, valid_to=neighbour.valid_from,
                               cause=f"supersession:{neighbour.note_id}")
        batch.add(note, vector, token_hash)
        if outcome == "supersede" and old is not None:
            close_at = valid_from or now
            if old.valid_from is not None and close_at < old.valid_from:
                close_at = old.valid_from  # never an inverted window: the old one becomes empty
            old.supersede(successor_id=note_id, valid_to=close_at,
                          cause=f"supersession:{note_id}")
            batch.add(old, None, None)
        return self.view(note, outcome={"supersede": "superseding", "precede": "preceding"}.get(outcome, "inserted"))

    # ------------------------------------------------------------ working blocks
    def append_block(self, scope: Scope, item: AppendBlockInput) -> NoteView:
        """Append to a working block (see ``Notes.append_block``)."""
        with self.store.write(scope) as tx:
            batch = _Batch()
            view = self._change_block(
                tx, scope, item.block, batch, append=item.text,
                expected_version=item.expected_version,
            )
            self._commit(batch)
        return view

    def _change_block(
        self,
        tx: Any,
        scope: Scope,
        label: str,
        batch: _Batch,
        *,
        content: str | None = None,
        append: str | None = None,
        expected_version: int | None = None,
    ) -> NoteView:
        """Write (``content``) or append to (``append``) block ``label`` under the scope's
        write lock. The block's version is read inside the lock, so concurrent changes
        land one after the other; ``expected_version`` turns a stale read into a
        ``ConflictError``. Nothing is recorded when a check fails: the block would pass
        ``limits.max_entry_text_chars`` (``CapacityError``), it is held
        (``NoteForgottenError``) or the host validator rejects it."""
        note_id = working.block_note_id(scope, label)
        note = batch.by_note_id.get(note_id)
        if note is None:
            try:
                note = self._load(scope, note_id)
            except NoteNotFoundError:
                note = None
        if note is not None and note.held:
            raise NoteForgottenError(f"block: block {label!r} is under legal hold and cannot be written")
        live = note is not None and not note.forgotten
        current = note.content if live and note is not None else None
        if expected_version is not None:
            actual = note.block_version if live and note is not None else 0
            if actual != expected_version:
                raise ConflictError(
                    f"expected_version: block {label!r} is at version {actual}, "
                    f"not {expected_version}; read it again and retry"
                )
        if append is not None:
            text = self._redact(append) or ""
            if current and not text.startswith("\n"):
                text = "\n" + text
            new = (current or "") + text
        else:
            new = self._redact(content) or ""
        cap = self.limits.max_entry_text_chars
        if len(new) > cap:
            field_name = "content" if append is None else "text"
            raise CapacityError(
                f"{field_name}: block {label!r} would hold {len(new)} characters; "
                f"limits.max_entry_text_chars is {cap}"
            )
        tokens = policy.count_tokens(new)
        if note is None:
            note = Note.remember(
                scope=scope, note_id=note_id, kind="working", content=new, path=None,
                block=label, subject=None, t_ref=None, valid_from=None, valid_to=None,
                keywords=[], tags=[], source_entry_ids=[], context=None, links=[],
                supersedes=None, importance=0.5, consent=None, embedding=None,
                embedder_id=None, dim=self.embedder.dim, token_count=tokens, cause="caller",
            )
            outcome = "inserted"
        elif live and append is not None:
            note.append_block(text=text, token_count=tokens)
            outcome = "appended"
        else:
            note.write_block(content=new, token_count=tokens)
            outcome = "replaced" if live else "inserted"
        if self.working_validator is not None:
            if batch.working is None:
                batch.working = tx.working_blocks(scope)
            entry = working.block_entry(note)
            assert entry is not None
            proposed = {**batch.working, label: entry}
            working.check_working_value(
                self.working_validator, working.working_value(proposed), label
            )
            batch.working = proposed
        batch.add(note, None, None)
        return self.view(note, outcome=outcome)

    def working_value(self, scope: Scope) -> dict[str, Any]:
        """The working value of exactly ``scope`` (see ``Notes.working_value``)."""
        return working.working_value(self.store.working_blocks(scope))

    # -------------------------------------------------------------------- recall
    def recall(self, scope: Scope, query: RecallInput) -> RecallResult:
        """Ranked live notes visible from ``scope`` (see ``Notes.recall``)."""
        as_of = query.as_of or _now()
        scoring = query.scoring or Scoring()
        limit = max(query.top_k * OVERSAMPLE, MIN_CANDIDATES)
        embedding = None
        if query.mode != "lexical":
            embedding = self._embed([query.query])[0]
        candidates = self.store.recall(
            scope,
            embedding=embedding,
            query=query.query if query.mode != "vector" else None,
            kinds=query.kinds,
            as_of=as_of,
            limit=limit,
            require_consent=self.require_consent,
        )
        weight = scoring.vector_weight
        if weight is None:
            weight = float(getattr(self.embedder, "vector_weight", policy.DEFAULT_VECTOR_WEIGHT))
        best_lex = max((c.lexical or 0.0 for c in candidates), default=0.0)
        scored = [
            (self._score(c, query.mode, as_of, scoring, weight, best_lex), c) for c in candidates
        ]
        scored.sort(key=lambda pair: (-pair[0][0], pair[1].fields["ingested_at"], pair[1].note_id))
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
                    lexical=None if cand.lexical is None
                    else round(cand.lexical / best_lex if best_lex > 0 else 0.0, 6),
                    vector_rank=cand.vector_rank,
                    lexical_rank=cand.lexical_rank,
                )
            )
        return RecallResult(hits=hits, explain=explain)

    @staticmethod
    def _score(
        cand: Candidate, mode: str, as_of: datetime, scoring: Scoring,
        vector_weight: float, best_lex: float,
    ) -> tuple[float, float, float]:
        lexical = (cand.lexical or 0.0) / best_lex if best_lex > 0 else 0.0
        if mode == "vector":
            relevance = max(0.0, cand.similarity or 0.0)
        elif mode == "lexical":
            relevance = lexical
        elif scoring.fusion == "rrf":
            relevance = policy.weighted_rrf_relevance(cand.vector_rank, cand.lexical_rank, vector_weight)
        else:
            relevance = policy.convex_relevance(cand.similarity, lexical, vector_weight)
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
            consent=f["consent"],
            version=int(f["version"]),
            context=f["context"],
            keywords=tuple(f["keywords"] or ()),
            fold_count=int(f["fold_count"]),
            updated_at=f["updated_at"],
            outcome="recalled",
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
            erased = tuple(fields.pop("_erased", ()))
            for name in erased:
                fields[name] = ERASED
            if isinstance(fields.get("embedding"), bytes | bytearray):
                fields["embedding"] = f"<{len(fields['embedding'])} bytes float32>"
            out.append(
                HistoryEntry(
                    version=event.originator_version,
                    type=type(event).__name__,
                    timestamp=event.timestamp,
                    cause=str(fields.get("cause", "caller")),
                    fields=fields,
                    erased=erased,
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
        tomb = None
        if note.forgotten or note.held:  # the latest tombstone (a block can be rewritten)
            tomb = next((h.fields for h in reversed(history) if h.type == "Forgotten"), None)
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
    def _tombstone(
        self, notes: Sequence[Note], *, hold: bool, requested_by: str, cause: str
    ) -> _Tally:
        """Inside an open write transaction: give every live note of ``notes`` its
        ``Forgotten`` tombstone (reason ``legal_hold`` with ``hold``) and save them in
        one go, destroying the keys of the tombstoned (not held) notes and updating
        every projection in that same transaction. Forgotten notes are skipped; held
        notes stay as they are (a hold is neither lifted nor erased here)."""
        tally = _Tally()
        changed: list[Note] = []
        for note in notes:
            if note.forgotten:
                continue
            if note.held:
                tally.already_held.append(note.note_id)
                continue
            digest = self.store.content_hmac(note.content) if note.content is not None else None
            note.forget(
                content_hmac=digest,
                reason="legal_hold" if hold else "forgotten",
                requested_by=requested_by,
                cause=cause,
            )
            changed.append(note)
            (tally.held if hold else tally.deleted).append(note.note_id)
        if changed:
            self.save(*changed, projected=changed, shred=[] if hold else [n.id for n in changed])
        return tally

    def forget(
        self, scope: Scope, note_id: str, *, hold: bool, requested_by: str,
        block: str | None = None,
    ) -> ForgetResult:
        """Tombstone (or hold) one note of ``scope``; see ``Notes.forget``. A note that
        is absent from ``scope`` or already forgotten gives ``deleted=0, held=False``;
        a held note gives ``deleted=0, held=True`` and is left unchanged."""
        with self.store.write(scope):
            try:
                note = self._load(scope, note_id)
            except NoteNotFoundError:
                return ForgetResult(id=note_id if block is None else None, block=block, deleted=0, held=False)
            tally = self._tombstone([note], hold=hold, requested_by=requested_by, cause="caller")
        return ForgetResult(
            id=note.note_id if block is None else None,
            block=block,
            deleted=len(tally.deleted),
            held=bool(tally.held or tally.already_held),
        )

    def delete_path(
        self, scope: Scope, path: str, *, hold: bool, requested_by: str
    ) -> PathForgetResult:
        """Tombstone (or hold) every ``file`` note of ``scope`` recorded against
        ``path``; see ``Notes.delete_path``."""
        with self.store.write(scope) as tx:
            notes = [self._load(scope, note_id) for note_id in tx.note_ids_by_path(scope, path)]
            tally = self._tombstone(notes, hold=hold, requested_by=requested_by, cause="delete_path")
        return PathForgetResult(
            path=path, deleted=tuple(tally.deleted),
            held=tuple(tally.held + tally.already_held),
        )

    def repoint(self, scope: Scope, from_path: str, to_path: str) -> RepointResult:
        """Move the live ``file`` notes of ``scope`` recorded against ``from_path`` to
        ``to_path``; see ``Notes.repoint``."""
        with self.store.write(scope) as tx:
            notes = [self._load(scope, note_id) for note_id in tx.note_ids_by_path(scope, from_path)]
            moved = [n for n in notes if n.live and n.kind == "file"]
            for note in moved:
                note.repoint(to_path=to_path)
            if moved:
                self.save(*moved, projected=moved)
        return RepointResult(
            from_path=from_path, to_path=to_path,
            repointed=tuple(n.note_id for n in moved),
            held=tuple(n.note_id for n in notes if n.held),
        )

    def erase_scope(
        self, tenant_id: str, resource_id: str | None = None, thread_id: str | None = None,
        *, hold: bool = False, requested_by: str = "operator", batch_size: int = 100,
    ) -> EraseResult:
        """Tombstone (or, with ``hold``, hold) every un-forgotten note of a scope
        prefix, ``batch_size`` notes per transaction; see ``Fabric.erase_scope``."""
        args = EraseScopeInput(
            tenant_id=tenant_id, resource_id=resource_id, thread_id=thread_id, hold=hold,
            requested_by=requested_by, batch_size=batch_size,
        )
        t, r, th = args.tenant_id, args.resource_id, args.thread_id
        deleted = held = already_held = batches = 0
        after = None
        while True:
            page = self.store.notes_in_scope(t, r, th, after=after, limit=args.batch_size)
            if not page:
                break
            after = page[-1]
            already_held += sum(1 for ref in page if ref.held)
            targets = [ref for ref in page if not ref.held]
            if not targets:
                continue
            with self.store.write_scopes([ref.scope for ref in targets]):
                notes: list[Note] = []
                for ref in targets:
                    note = self.repository.get(ref.aggregate_id)
                    assert isinstance(note, Note)
                    notes.append(note)
                tally = self._tombstone(
                    notes, hold=args.hold, requested_by=args.requested_by, cause="erase_scope"
                )
            batches += 1
            deleted += len(tally.deleted)
            held += len(tally.held)
            already_held += len(tally.already_held)  # held by someone else meanwhile
        remaining, _ = self.store.count_in_scope(t, r, th)
        return EraseResult(
            tenant_id=t, resource_id=r, thread_id=th, deleted=deleted, held=held,
            already_held=already_held, remaining=remaining, batches=batches,
        )

    def forget_block(
        self, scope: Scope, label: str, *, hold: bool, requested_by: str
    ) -> ForgetResult:
        """Tombstone (or hold) working block ``label`` of ``scope``; see ``Notes.forget``.
        Raises ``ValidationError`` for a malformed label."""
        label = BlockRef(block=label).block
        return self.forget(
            scope, working.block_note_id(scope, label), hold=hold,
            requested_by=requested_by, block=label,
        )

    def verify_content(self, scope: Scope, note_id: str, text: str) -> bool:
        """True when ``text`` matches the tombstone's keyed hash (constant-time compare).

        Raises ``NoteNotFoundError`` when the note is absent, ``FabricError`` when it has
        no tombstone."""
        import hmac as _hmac

        tomb = next(
            (h.fields for h in reversed(self.history(scope, note_id)) if h.type == "Forgotten"),
            None,
        )
        if tomb is None:
            raise FabricError(f"id: note {note_id!r} has no tombstone")
        expected = tomb.get("content_hmac") or ""
        return _hmac.compare_digest(expected, self.store.content_hmac(text))


@dataclass
class _Tally:
    """Note ids a tombstoning pass changed, by outcome."""

    deleted: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    already_held: list[str] = field(default_factory=list)


class _Batch:
    """Aggregates touched in one write transaction, so later items of a
    ``remember_many`` batch see earlier ones exactly as if committed.

    Batch-local neighbours are found through indexes (token hash, path, subject) and one
    matrix-vector product over the batch's vectors, so a batch of n notes costs
    O(n²·dim) float operations in numpy, not O(n²) Python steps."""

    def __init__(self, capacity: int = 0, dim: int = 0) -> None:
        self.aggregates: dict[UUID, Note] = {}
        self.events: list[Any] = []
        self.by_note_id: dict[str, Note] = {}
        self.working: dict[str, working.BlockEntry] | None = None
        self._matrix = np.zeros((max(capacity, 1), max(dim, 1)), dtype=np.float32)
        self._row_ids: list[str] = []
        self._row_of: dict[str, int] = {}
        self._hash_of: dict[str, str] = {}
        self._by_hash: dict[tuple[str, str], list[str]] = {}
        self._by_path: dict[str, list[str]] = {}
        self._by_subject: dict[tuple[str, str], list[str]] = {}
        self._similar: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._note_of_item: dict[int, str] = {}
        self._item_of_note: dict[str, int] = {}
        self.item: int | None = None  # index (among the batch's embedded items) being decided

    def prepare(self, vectors: np.ndarray, threshold: float, block: int = 512) -> None:
        """Precompute, for every item i, the earlier items j < i with cosine ≥
        ``threshold`` (blocked matrix products: O(n²·dim) flops in BLAS, O(n) memory
        per block), so each decision reads a short candidate list."""
        n = len(vectors)
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, n, block):
            stop = min(start + block, n)
            sims = vectors[start:stop] @ vectors[:stop].T
            for r in range(stop - start):
                i = start + r
                row = sims[r, :i]
                js = np.flatnonzero(row >= threshold)
                out.append((js, row[js]))
        self._similar = out

    def add(self, note: Note, vector: np.ndarray | None, token_hash: str | None) -> None:
        """Track ``note`` and take its pending events (so the log keeps decision order);
        with a vector, (re-)index it as a consolidation candidate."""
        self.events.extend(note.collect_events())
        self.aggregates[note.id] = note
        self.by_note_id[note.note_id] = note
        if vector is None or token_hash is None:
            return
        nid = note.note_id
        row = self._row_of.get(nid)
        if row is None:
            row = len(self._row_ids)
            if row >= self._matrix.shape[0]:
                grown = np.zeros((row * 2, vector.shape[0]), dtype=np.float32)
                grown[: self._matrix.shape[0], : self._matrix.shape[1]] = self._matrix
                self._matrix = grown
            elif self._matrix.shape[1] != vector.shape[0]:
                self._matrix = np.zeros((self._matrix.shape[0], vector.shape[0]), dtype=np.float32)
            self._row_ids.append(nid)
            self._row_of[nid] = row
            if note.path is not None:
                self._by_path.setdefault(note.path, []).append(nid)
            if note.subject is not None:
                self._by_subject.setdefault((note.kind, note.subject), []).append(nid)
        self._matrix[row] = vector
        if self.item is not None:
            self._note_of_item[self.item] = nid
            self._item_of_note[nid] = self.item
        old_hash = self._hash_of.get(nid)
        if old_hash != token_hash:
            if old_hash is not None:
                self._by_hash[(note.kind, old_hash)].remove(nid)
            self._by_hash.setdefault((note.kind, token_hash), []).append(nid)
            self._hash_of[nid] = token_hash

    def _current(self, nid: str, kind: str, now: datetime) -> Note | None:
        note = self.by_note_id[nid]
        if (
            note.kind == kind
            and note.live
            and note.superseded_by is None
            and (note.valid_to is None or note.valid_to > now)
        ):
            return note
        return None

    def _neighbour(self, nid: str, vector: np.ndarray, now: datetime, kind: str) -> policy.Neighbour | None:
        note = self._current(nid, kind, now)
        if note is None:
            return None
        sim = float(np.dot(self._matrix[self._row_of[nid]], vector))
        return policy.Neighbour(nid, sim, self._hash_of[nid], note.path, note.subject,
                                note.valid_from, note.valid_to)

    def nearest(
        self, item: RememberInput, token_hash: str, vector: np.ndarray, now: datetime,
        threshold: float,
    ) -> policy.Neighbour | None:
        """The batch-local neighbour with the projection query's rules: ``file`` by path,
        subject-keyed by subject, else an exact token match, else the most similar
        vector at or above ``threshold`` (a local note below it cannot change the
        decision: it would be an insert either way)."""
        if item.kind == "file" or item.subject is not None:
            ids = (self._by_path.get(item.path or "", []) if item.kind == "file"
                   else self._by_subject.get((item.kind, item.subject or ""), []))
            best: policy.Neighbour | None = None
            for nid in ids:
                best = _better(best, self._neighbour(nid, vector, now, item.kind), token_hash)
            return best
        for nid in reversed(self._by_hash.get((item.kind, token_hash), [])):
            exact = self._neighbour(nid, vector, now, item.kind)
            if exact is not None and exact.subject is None:
                return exact
        best = None
        if self._similar is not None and self.item is not None:
            js, sims = self._similar[self.item]
            for j, sim in zip(js.tolist(), sims.tolist(), strict=True):
                nid = self._note_of_item.get(j)
                if nid is None or self._item_of_note.get(nid) != j:
                    continue  # item j wrote no note, or its note took a later vector
                note = self._current(nid, item.kind, now)
                if note is not None and note.subject is None:
                    cand = policy.Neighbour(nid, sim, self._hash_of[nid], note.path, note.subject,
                                            note.valid_from, note.valid_to)
                    best = _better(best, cand, token_hash)
            return best
        n = len(self._row_ids)
        if n == 0:
            return None
        all_sims = self._matrix[:n] @ vector
        for row in np.flatnonzero(all_sims >= threshold):
            cand = self._neighbour(self._row_ids[row], vector, now, item.kind)
            if cand is not None and cand.subject is None:
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
