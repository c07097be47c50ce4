"""``Notes``: the scope-bound handle a host uses (``fabric.scope(tenant, resource, thread)``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Strict, StrictBool, TypeAdapter

from memfabric.domain.attach import Attachment
from memfabric.domain.attach import attach as attach_session
from memfabric.domain.bitemporal import known_at_arg
from memfabric.domain.consolidation import Consolidation
from memfabric.domain.context import ContextProvider
from memfabric.domain.errors import NotSupportedError
from memfabric.domain.notes_lifecycle import LifecycleMethods
from memfabric.domain.inputs import (
    AppendBlockInput,
    Consent,
    ContextOptions,
    Kind,
    Link,
    ListInput,
    NoteRefArgs,
    RecallInput,
    RecallMode,
    RememberInput,
    Scoring,
)
from memfabric.domain.results import (
    HistoryEntry,
    Lineage,
    MemoryNote,
    NoteCounts,
    NotePage,
    RecallResult,
)
from memfabric.domain.principal import AccessFilter
from memfabric.domain.scope import Scope
from memfabric.domain.service import MemoryService

_KIND: TypeAdapter[Kind] = TypeAdapter(Kind)
_R = TypeVar("_R")

_ITEMS: TypeAdapter[list[RememberInput | dict[str, Any]]] = TypeAdapter(
    list[Annotated[RememberInput, Strict()] | dict[str, Any]]
)




def consolidate_setting(value: Any, default: Consolidation) -> Consolidation | None:
    """A per-call ``consolidate`` argument as settings (``None``: the fabric's own);
    ``pydantic.ValidationError`` for anything but a bool, a ``Consolidation`` or a
    mapping of its fields (``enabled``, ``threshold``)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = {"enabled": True, **value}
    parsed = _ConsolidateArg.model_validate({"consolidate": value}).consolidate
    if parsed is None or isinstance(parsed, Consolidation):
        return parsed
    return default.model_copy(update={"enabled": parsed})


class _ConsolidateArg(BaseModel):
    """The per-call ``consolidate`` argument, validated under its own name."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    consolidate: StrictBool | Consolidation | None = None


def no_tools(handle: Any, service: Any, root: Any, *, max_file_bytes: int) -> Any:
    """The tools factory of a handle built without one: raises ``NotSupportedError``."""
    raise NotSupportedError("this handle was built without a tools factory (the fabric's use MemoryTools)")


class Notes(LifecycleMethods):
    """Every read and write of one scope. Never sees another scope's notes.

    Construct through ``Fabric.scope(tenant_id, resource_id=None, thread_id=None)``.
    """

    _access: AccessFilter | None = None
    """Issue 33: the principal filter a :class:`~memfabric.domain.access_notes.PrincipalNotes`
    puts on the handle it reads through (``None``: a plain handle)."""

    def __init__(self, service: MemoryService, scope: Scope, *, actor: str = "caller",
                 tools: Callable[..., Any] = no_tools) -> None:
        self._service = service
        self.scope = scope
        self.actor = actor
        self._tools = tools  # tools(handle, service, root, max_file_bytes=...): the fabric's MemoryTools

    def as_principal(self, agent_id: str) -> Any:
        """Issue 33: this scope's handle for principal ``agent_id``: every call checked
        against its memory profile and recorded in the access log (see
        :mod:`memfabric.domain.access_notes`); ``PrincipalNotFoundError`` when undefined."""
        from memfabric.domain.access_notes import PrincipalNotes  # noqa: PLC0415
        return PrincipalNotes(self, agent_id)

    def grant(self, id: str, principal: str, right: str = "read", *,  # noqa: A002
              requested_by: str | None = None) -> bool:
        """Issue 33: let ``principal`` read note ``id`` of this scope (the note's own)
        whatever its visibility, from any scope of this tenant within its profile's
        kinds: a ``Granted`` event on the principal. Returns whether anything was
        written. Raises ``ValidationError`` (bad id, principal or right: only ``read``),
        ``NoteNotFoundError``, ``NoteForgottenError``, ``PrincipalNotFoundError``."""
        return bool(self._principals().grant(self.scope, _note_id(id), principal, right,
                                             by=requested_by or self.actor))

    def revoke(self, id: str, principal: str, right: str = "read", *,  # noqa: A002
               requested_by: str | None = None) -> bool:
        """Issue 33: withdraw a :meth:`grant` (a ``Revoked`` event; none when not granted)."""
        return bool(self._principals().revoke(self.scope, _note_id(id), principal, right,
                                              by=requested_by or self.actor))

    def _principals(self) -> Any:
        if self._service.access is None:
            from memfabric.domain.errors import NotSupportedError  # noqa: PLC0415
            raise NotSupportedError("this fabric has no principal registry")
        return self._service.access

    def __repr__(self) -> str:
        return f"Notes({self.scope.key!r})"

    # ------------------------------------------------------- attach and tools
    def attach(self, session: Any, *, signal: Any = None) -> Attachment:
        """Authorise ``session`` on this scope (see :mod:`memfabric.domain.attach`)."""
        return attach_session(self._service, self.scope.key, session,
                              provider=self.context_provider(), signal=signal)

    def tools(self, root: Any = None, *, max_file_bytes: int = 50 * 1024) -> Any:
        """The five inert memory tools of this scope (see :mod:`memfabric.adapters.tools`), built
        by the factory the fabric gave this handle (else ``NotSupportedError``)."""
        return self._tools(self, self._service, root, max_file_bytes=max_file_bytes)

    @property
    def entities(self) -> Any:
        """Issue 32: the :class:`~memfabric.domain.entities.commands.Entities` of this scope
        (resolve, upsert, merge, undo_merge, forget; see ``docs/entities.md``)."""
        from memfabric.domain.entities.commands import Entities  # noqa: PLC0415
        return Entities(self._service.deps, self.scope, self.actor)

    # ----------------------------------------------------------------- writes
    def check_write(self, kind: str, operation: str = "remember") -> None:
        """Whether a write of ``kind`` would be refused before it is tried: a plain
        handle writes every kind, so this returns; a principal's handle
        (:meth:`as_principal`) raises ``AccessDenied``. Hosts that change something
        outside the fabric first (the memory tools' files) call it."""
        _KIND.validate_python(kind)

    def read_outside(self, kind: str, read: Callable[[], _R], operation: str = "read") -> _R:
        """``read()``: a read of ``kind`` memory the host makes outside the fabric (the
        memory tools' files). A plain handle reads every kind, so this only runs it; a
        principal's handle (:meth:`as_principal`) checks the profile first
        (``AccessDenied``, ``read()`` not run) and records the call as ``operation``."""
        _KIND.validate_python(kind)
        return read()

    def remember(
        self,
        *,
        kind: Kind,
        content: str | None = None,
        id: str | None = None,  # noqa: A002 - public API name
        path: str | None = None,
        block: str | None = None,
        subject: str | None = None,
        t_ref: datetime | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        keywords: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        source_entry_ids: Sequence[str] | None = None,
        context: str | None = None,
        links: Sequence[Link | Mapping[str, Any]] | None = None,
        supersedes: str | None = None,
        importance: float | None = None,
        consent: Consent | Mapping[str, Any] | None = None,
        consolidate: bool | Mapping[str, Any] | Consolidation | None = None,
        reflection_id: str | None = None,
        retention: str | None = None,
    ) -> MemoryNote:
        """Write one note and return it (``MemoryNote.outcome``: ``inserted``, ``folded`` or
        ``superseding``; for a working block ``inserted`` or ``replaced``).

        ``kind="working", block=LABEL, content=TEXT`` writes a working block: its id is
        derived from (scope, label), an explicit ``id`` or any field other than ``kind``,
        ``block`` and ``content`` is rejected; writing the label again replaces the
        content (a forgotten label starts afresh). The block must stay within
        ``limits.max_entry_text_chars`` (``ValidationError`` on ``content``, or
        ``CapacityError`` when redaction grows it past the cap); a host validator can
        reject it (``ValidatorRejectedError``); a held block refuses writes
        (``NoteForgottenError``). Working notes are never recalled.

        Fields are those of :class:`~memfabric.domain.inputs.RememberInput`. With consolidation on (the default), a ``fact``/``procedure``/``file``
        write first looks up its live same-kind candidates in this scope and folds
        into one (same normalized tokens, or same ``path`` for ``file``) or supersedes it
        (same explicit ``subject``, or — for a subject-less fact — the same inferred
        subject slot with a changed value, see :mod:`memfabric.domain.subjects`; cosine
        similarity alone never supersedes). ``MemoryNote.decision`` says why.
        ``consolidate`` overrides the fabric's setting for this call: ``False`` (insert),
        ``True`` or ``{"threshold": 0.9}`` (``pydantic.ValidationError`` otherwise). When this returns the note is durable
        and visible to the next ``recall`` in any process.

        Raises ``pydantic.ValidationError`` (bad field), ``NoteExistsError`` (explicit
        id taken), ``NoteNotFoundError`` (``supersedes`` unknown in this scope),
        ``NotSupportedError`` (``episode``), ``SupersessionError`` (``supersedes`` names a
        note already superseded, or one that starts later). The outcome ``preceding``
        means the write was older news: a newer neighbour already replaced it, so it is
        inserted with its window closed where that neighbour starts. Nothing is written
        when it raises.
        """
        given = {
            "kind": kind, "content": content, "id": id, "path": path, "block": block,
            "subject": subject, "t_ref": t_ref, "valid_from": valid_from, "valid_to": valid_to,
            "keywords": keywords, "tags": tags, "source_entry_ids": source_entry_ids,
            "context": context, "links": links, "supersedes": supersedes,
            "importance": importance, "consent": consent, "retention": retention,
        }
        if reflection_id is not None:  # issue 14: promotion (memfabric.domain.promotion)
            from memfabric.domain.promotion import promote  # noqa: PLC0415
            rest = {k: v for k, v in given.items() if v is not None and k not in ("kind", "content")}
            return promote(self._service.deps, self.scope, kind=kind, reflection_id=reflection_id,
                           content=content, fields=rest)
        if kind == "episode":  # issue 14: an observation of the ledger, read (never written)
            from memfabric.domain.episodes import read_episode  # noqa: PLC0415
            extra: dict[str, Any] = {k: v for k, v in given.items()
                                     if v is not None and k not in ("kind", "id")}
            if consolidate is not None:
                extra["consolidate"] = consolidate
            return read_episode(self._service.ledger_store, self.scope, id, extra)
        settings = consolidate_setting(consolidate, self._service.consolidation)
        item = self._service.validate_remember({k: v for k, v in given.items() if v is not None})
        return self._service.remember(self.scope, item, consolidate=settings)

    def remember_many(self, items: Iterable[Mapping[str, Any] | RememberInput], *,
                      consolidate: bool | Mapping[str, Any] | Consolidation | None = None,
                      chunk_size: int | None = 250,
                      ) -> list[MemoryNote]:
        """Bulk write: same outcome as ``remember`` on each item in order, one
        transaction (all or nothing) per ``chunk_size`` items: a batch of at most 250
        items (the default) is atomic, a larger one is atomic per chunk of 250 (earlier
        chunks stay written when a later one fails). ``chunk_size=None``: one
        transaction for the whole batch, which then holds the tenant's append lock (the
        tenant's other writes wait; other tenants' do not) for its whole duration. Items are mappings of remember
        fields; ``consolidate`` as for ``remember``."""
        settings = consolidate_setting(consolidate, self._service.consolidation)
        raw = _ITEMS.validate_python(items)  # a list of mappings, else ValidationError
        validated = [
            item if isinstance(item, RememberInput) else self._service.validate_remember(dict(item))
            for item in raw
        ]
        return self._service.remember_many(self.scope, validated, consolidate=settings,
                                           chunk_size=chunk_size)

    def link(self, from_id: str, to_id: str, relation: str = "related",
             weight: float = 1.0) -> MemoryNote:
        """Add the edge ``from_id -> to_id`` (``relation``, ``weight`` in [0, 1]) as a
        ``Linked`` event on the source note and return the source (``outcome``
        ``linked``); the same edge again replaces its weight. Both notes must be live
        notes of one scope: the source is any note visible from this scope (issue 16,
        see :meth:`get`), the target a note stored in the source's scope (links across
        threads are not made). Raises ``pydantic.ValidationError`` (bad id, relation or
        weight), ``NoteNotFoundError``, ``NoteForgottenError`` (forgotten or held),
        ``LinkError`` (a note linking to itself), ``LinkScopeError`` (a ``LinkError``:
        the target is visible from this scope but stored in another scope than the
        source); nothing is written then. See
        :mod:`memfabric.domain.links`."""
        edge = Link(id=_note_id(to_id), relation=relation, weight=weight)
        return self._service.link(self.scope, _note_id(from_id), edge.id,
                                  relation=edge.relation, weight=edge.weight)

    def unlink(self, from_id: str, to_id: str, relation: str = "related") -> MemoryNote:
        """Remove the edge ``from_id -> to_id`` of ``relation`` with an ``Unlinked``
        event (no such edge: nothing is written) and return the source (``outcome``
        ``unlinked``). Raises as :meth:`link` (the target may be forgotten)."""
        edge = Link(id=_note_id(to_id), relation=relation)
        return self._service.unlink(self.scope, _note_id(from_id), edge.id, relation=edge.relation)

    def append_block(
        self, block: str, text: str, *, expected_version: int | None = None
    ) -> MemoryNote:
        """Append ``text`` to working block ``block`` and return the block (``outcome``
        ``appended``, or ``inserted`` when the block was absent or forgotten).

        A newline is put between the block's content and ``text`` unless ``text``
        starts with one. Appends of concurrent writers land one after the other, in
        the order they take the scope's write lock; none is lost. ``expected_version``
        (the ``version`` shown by :meth:`working_value`, 0 for an absent block) makes
        the append conditional: ``ConflictError`` when the block has moved on.

        Raises ``ValidationError`` (bad label, blank ``text``), ``CapacityError``
        (the block would pass ``limits.max_entry_text_chars``), ``ConflictError``,
        ``ValidatorRejectedError``, ``NoteForgottenError`` (held block). Nothing is
        written when it raises.
        """
        item = AppendBlockInput(block=block, text=text, expected_version=expected_version)
        return self._service.append_block(self.scope, item)

    # ------------------------------------------------------------------ reads
    def working_value(self, *, known_at: datetime | None = None) -> dict[str, Any]:
        """This scope's working value, from the ``working_value`` projection:
        ``{"_fabric": {"blocks": {LABEL: {"content": str, "updated_at": datetime (UTC),
        "version": int}}}}``, one entry per live block, labels sorted. ``version`` counts
        the block's writes, appends and forgets (1 after the first write). ``known_at``
        (issue 31; timezone-aware): the blocks as recorded then (each working note of
        the scope replayed up to it; a block forgotten or held now is left out)."""
        return self._service.working_value(self.scope, known_at_arg(known_at))

    def context_provider(
        self,
        include_working: bool = True,
        include_semantic: bool = True,
        query: str | None = None,
        top_k: int | None = None,
        budget: int | None = None,
        *,
        kinds: Iterable[str] | str = ("fact", "file"),
        as_of: datetime | None = None,
        known_at: datetime | None = None,
    ) -> ContextProvider:
        """A callable that assembles this scope's memory for a prompt.

        ``provider(current)`` (``current``: the query text, chat messages whose last
        ``user`` message is the query, or ``None`` for ``query``) returns
        ``[{"type": "working-memory", "text"}, ..., {"type": "semantic-memory", "text"}, ...]``:
        every live working block in label order, then the notes ``recall`` returns for
        the query with ``kinds`` (default fact and file; procedures only when asked),
        ``as_of``, ``known_at`` (issue 31: the semantic blocks as recorded then),
        ``top_k`` (default 10) and ``budget`` (tokens, as in ``recall``).
        Forgotten, held and expired notes never appear. The text format is documented
        in :mod:`memfabric.domain.context` and ``docs/working-memory.md``.

        Raises ``ValidationError`` naming the field for a bad option.
        """
        data: dict[str, Any] = {
            "include_working": include_working, "include_semantic": include_semantic,
            "query": query, "kinds": kinds, "as_of": as_of, "budget": budget,
        }
        if known_at is not None:
            data["known_at"] = known_at
        if top_k is not None:
            data["top_k"] = top_k
        return ContextProvider(self._service, self.scope, ContextOptions.model_validate(data))

    def recall(
        self,
        query: str,
        *,
        kinds: Iterable[str] | str = ("fact", "file"),
        as_of: datetime | None = None,
        top_k: int | None = None,
        budget: int | None = None,
        scoring: Scoring | Mapping[str, Any] | None = None,
        mode: RecallMode = "hybrid",
        expand_links: bool = True,
        tags: Sequence[str] | None = None,
        subject: str | None = None,
        min_importance: float | None = None,
        min_relevance: float | None = None,
        entity: str | None = None,
        known_at: datetime | None = None,
    ) -> RecallResult:
        """Ranked live notes visible from this scope, with a parallel ``explain`` row each.

        - ``kinds``: default ``("fact", "file")``; ``procedure`` only when asked for;
          an empty or unknown kind raises ``ValidationError``.
        - ``as_of``: timezone-aware; notes whose ``[valid_from, valid_to)`` excludes it
          are omitted in SQL (default now, or ``known_at``).
        - ``known_at`` (issue 31): timezone-aware; what this call would have returned at
          that time, from what the fabric had recorded by then (notes, values,
          supersessions, folds, links, visibility; a note forgotten since never shows
          its content). Combines with ``as_of``; see ``docs/bitemporal.md``.
        - ``top_k``: default 10. ``budget``: cap on summed ``token_count``; the best hit
          is always returned and ranking stops at the first hit that would not fit.
        - ``scoring``: :class:`Scoring` weights; ``mode``: ``hybrid`` (default: convex
          fusion of cosine similarity and normalised full-text score), ``vector`` or
          ``lexical``.

        Score = relevance + recency_weight·0.5^(age/half_life) + importance_weight·importance
        (Park et al. 2023); relevance = w·max(0, cosine) + (1 − w)·lexical / best lexical
        (Bruch et al., TOIS 2023; ``scoring.fusion="rrf"`` for weighted reciprocal rank
        fusion), the cosine in ``vector`` mode. Formulas: :mod:`memfabric.domain.ranking`.
        Hits and explain rows never contain the query text.

        - ``tags`` (a hit carries every one), ``subject`` (equal), ``min_importance``:
          filters inside the recall SQL, before ranking.
        - ``min_relevance`` (default 0.05, 0 disables): hits with less evidence (cosine
          and full-text, see :mod:`memfabric.domain.ranking`) are dropped, so fewer than
          ``top_k`` come back when fewer notes match at all. The floor applies to the
          direct hits; a note added by link expansion is admitted by its link score
          instead, since its own evidence for the query may be low (see below).

        ``entity`` (issue 32): an entity id or a surface that resolves to one entity
        (``notes.entities.match``): only the notes about it, whichever alias or
        identifier they were stated under (merged entities' notes included); each explain
        row names it (``Explain.entity``). ``EntityNotFoundError`` when it names none.

        Links (issue 15): every hit carries its links (``MemoryNote.links``, to targets
        still recallable). With ``expand_links`` (default True) the same SQL statement
        also takes the notes linked, in either direction, to the candidates of both
        lists and passing every filter above (scope, kinds, validity, consent, hold,
        ``tags``, ``subject``, ``min_importance``); up to ``top_k`` of them are added
        (their ``explain.link`` is True and their score gains ``scoring.link_weight`` ×
        the best edge weight × relevance of a direct hit they link to), ranked with the
        direct hits under one ``budget``.
        """
        data: dict[str, Any] = {"query": query, "kinds": kinds, "as_of": as_of, "known_at": known_at, "mode": mode,
                                "subject": subject, "min_importance": min_importance,
                                "expand_links": expand_links}
        if tags is not None:
            data["tags"] = tags
        if min_relevance is not None:
            data["min_relevance"] = min_relevance
        if top_k is not None:
            data["top_k"] = top_k
        if budget is not None:
            data["budget"] = budget
        if scoring is not None:
            data["scoring"] = scoring
        if entity is not None:  # issue 32: the notes about one entity, stated under any alias
            from memfabric.domain.entities.recall import recall_entity  # noqa: PLC0415
            return recall_entity(self._service.deps, self.scope, RecallInput.model_validate(data), entity,
                                 access=self._access)
        return self._service.recall(self.scope, RecallInput.model_validate(data), access=self._access)

    def get(self, id: str, *, known_at: datetime | None = None) -> MemoryNote:  # noqa: A002 - public API name
        """The note ``id`` as seen from this scope (``NoteNotFoundError`` when absent);
        with ``known_at`` (issue 31) as recorded then (``NoteNotFoundError`` when it did
        not exist yet; a note forgotten since reads with its content erased).

        Issue 16: every action by id (get, history, lineage, forget, hold,
        release_hold, verify_content, link, unlink, ``supersedes=``) resolves the
        un-forgotten note of that id *visible* from this scope (this scope's own first;
        a resource-visible note of another thread of the resource, a tenant-visible
        note of the tenant), and nothing else; a forgotten note only from its own
        scope. Raises ``ScopeError`` when several other scopes' visible notes share the
        id (explicit ids): use the note's own scope then."""
        return self._service.get(self.scope, _note_id(id), known_at=known_at_arg(known_at))

    def history(self, id: str) -> list[HistoryEntry]:  # noqa: A002
        """Typed events of note ``id`` (resolved as in :meth:`get`) in order, with
        timestamps and causes."""
        return self._service.history(self.scope, _note_id(id))

    def lineage(self, id: str) -> Lineage:  # noqa: A002
        """Supersession chain (both directions), folds, links and tombstone of ``id``
        (resolved as in :meth:`get`; the chain may cross threads and stops before a note
        this scope cannot see)."""
        return self._service.lineage(self.scope, _note_id(id))

    # ---------------------------------------------------------------- browsing
    def count(
        self, *, kinds: Iterable[str] | str | None = None, tags: Sequence[str] | None = None,
        subject: str | None = None, valid_at: datetime | None = None,
        include_superseded: bool = False, known_at: datetime | None = None,
    ) -> int:
        """How many notes :meth:`list` would return over all its pages (same filters,
        ``known_at`` included):
        the *live* notes visible from this scope; superseded ones only with
        ``include_superseded=True``; held and forgotten notes never (issue 27:
        :meth:`counts` names every state of the notes homed in this scope, as
        ``erase_scope`` does in ``EraseResult.found`` and ``EraseResult.left``)."""
        args = _list_args(kinds, tags, subject, valid_at, include_superseded, None, None, known_at)
        return self._service.count_notes(self.scope, args, access=self._access)

    def counts(self) -> NoteCounts:
        """Issue 27: the notes of this handle's scope prefix by state, every kind (the
        notes ``erase_scope`` of the same ids would find: a handle without thread covers
        every thread of its resource, one without resource the whole tenant): ``live``
        (what ``count()`` counts, for the notes homed here), ``superseded``, ``held``
        and ``forgotten`` (tombstoned, legal holds excluded). No content is read.
        Returns :class:`~memfabric.domain.results.NoteCounts`."""
        s = self.scope
        return self._service.store.counts_in_scope(s.tenant_id, s.resource_id, s.thread_id)

    def list(  # noqa: A003 - public API name
        self, *, kinds: Iterable[str] | str | None = None, tags: Sequence[str] | None = None,
        subject: str | None = None, valid_at: datetime | None = None,
        include_superseded: bool = False, limit: int = 100, cursor: str | None = None,
        known_at: datetime | None = None,
    ) -> NotePage:
        """One page of the notes visible from this scope (recall's scope, visibility and
        consent rules; held and forgotten notes never listed), oldest first by
        ``(ingested_at, id)``: ``page.items`` (``MemoryNote``, ``outcome="listed"``) and
        ``page.next_cursor`` (opaque; pass it as ``cursor`` for the next page, ``None``
        on the last). Keyset paging: a note that existed when paging started is listed
        exactly once however many notes are written meanwhile.

        ``kinds`` default fact, procedure and file; ``tags`` (every one), ``subject``
        (equal); ``valid_at`` (only notes valid then; default any window);
        ``include_superseded`` (default False); ``known_at`` (issue 31: the notes as
        recorded then); ``limit`` 1-1000. Raises
        ``ValidationError`` for a bad argument or a cursor this fabric did not issue."""
        args = _list_args(kinds, tags, subject, valid_at, include_superseded, limit, cursor, known_at)
        return self._service.list_notes(self.scope, args, access=self._access)

    # ------------------------------------------------- issue 14: the ledger
    def conversation(self) -> Any:
        """The conversation :class:`~memfabric.domain.conversation.Ledger` of this
        thread scope (every call of a handle without thread raises ``NoLedgerError``)."""
        from memfabric.domain.conversation import Ledger  # noqa: PLC0415
        return Ledger(self._service.unit_of_work, self._service.ledger_store, self.scope)

    def search_conversation(
        self, query: str, *, limit: int = 20, direction: str = "backward",
        detail: str = "summary", top_k: int = 5, signal: Any = None,
    ) -> Any:
        """Lexical search of this thread's conversation: ``SearchResult`` with ``hits``
        (``entry_id``, ``score`` = the entry's IDF-weighted coverage of the query's stemmed
        terms, stop words ignored, in [0, 1] (:mod:`memfabric.domain.search_terms`),
        ``timestamp``, ``page``), ``scanned`` and ``terms``; no embedder. ``limit`` 1-100 and ``top_k`` 1-100 else
        ``ValidationError``; a set ``signal`` aborts (``LedgerAbortedError``)."""
        return self.conversation().search(query, limit=limit, direction=direction,
                                          detail=detail, top_k=top_k, signal=signal)


def _list_args(kinds: Any, tags: Any, subject: Any, valid_at: Any, include_superseded: Any,
               limit: Any, cursor: Any, known_at: Any = None) -> ListInput:
    data: dict[str, Any] = {"subject": subject, "valid_at": valid_at,
                            "include_superseded": include_superseded, "cursor": cursor,
                            "known_at": known_at}
    if kinds is not None:
        data["kinds"] = kinds
    if tags is not None:
        data["tags"] = tags
    if limit is not None:
        data["limit"] = limit
    return ListInput.model_validate(data)


def _note_id(value: str) -> str:
    """``value`` checked as a note id (``ValidationError`` on field ``id``)."""
    return NoteRefArgs(id=value).id
