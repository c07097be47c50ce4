"""``Ledger``: the conversation-ledger handle of a thread scope (``notes.conversation()``).

Writes run in one unit of work each (the thread's write lock, the ``Conversation``
aggregate replayed, events sealed and projected in one transaction); reads use the
ledger projection (``memfabric.projections.ledger``) through a :class:`LedgerStore`.
Every input is validated with pydantic first (``ValidationError``; nothing written).
A handle without a thread raises :class:`~memfabric.domain.ledger.NoLedgerError` on
every call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TypeVar, cast
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator

from memfabric.domain.errors import NotSupportedError
from memfabric.domain.inputs import reject_nul
from memfabric.domain.ledger import (
    Conversation,
    LedgerAbortedError,
    LedgerError,
    conversation_uuid,
)
from memfabric.domain.scope import Scope
from memfabric.domain.search_terms import search_terms

if TYPE_CHECKING:
    from memfabric.domain.deps import Deps

T = TypeVar("T")

Hex12 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12}$")]
Direction = Literal["forward", "backward"]
Detail = Literal["summary", "full"]
SUMMARY_CHARS = 200
"""How many characters of an entry a ``summary`` page renders."""

_WORD_CHARS = 100_000


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware")
    return value


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """Issue 28, defect 9: a NUL character (which PostgreSQL text cannot store) in
        any string field is a ``ValidationError`` naming the field, before anything is
        written (it was eventsourcing's ``DataError`` from the ledger projection)."""
        return reject_nul(value)


class AppendInput(_Input):
    role: Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
    text: Annotated[str, StringConstraints(min_length=1, max_length=_WORD_CHARS)]
    timestamp: Annotated[datetime | None, AfterValidator(_aware)] = None
    parent_id: Hex12 | None = None
    branch: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None


class EntriesInput(_Input):
    cursor: Annotated[str, StringConstraints(pattern=r"^[0-9]{1,18}$")] | None = None
    limit: Annotated[int, Field(ge=1, le=500)] = 50
    direction: Direction = "forward"


class PageInput(_Input):
    entry_id: Hex12
    limit: Annotated[int, Field(ge=1, le=100)] = 20
    direction: Direction = "backward"
    detail: Detail = "summary"


class ObserveInput(_Input):
    text: Annotated[str, StringConstraints(min_length=1, max_length=8000)]
    source_entry_ids: Annotated[list[Hex12], Field(min_length=1, max_length=1000)]


class ReflectInput(_Input):
    text: Annotated[str, StringConstraints(min_length=1, max_length=8000)]
    source_ids: Annotated[list[Hex12], Field(max_length=1000)] = []


class WorkScopeInput(_Input):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]


class ScopeIdInput(_Input):
    scope_id: Hex12


class BindInput(_Input):
    reflection_id: Hex12
    scope_id: Hex12


class RetractInput(_Input):
    entry_id: Hex12


class EraseInput(_Input):
    requested_by: Annotated[str, StringConstraints(min_length=1, max_length=200)] = "caller"


class SearchInput(_Input):
    query: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    limit: Annotated[int, Field(ge=1, le=100)] = 20
    direction: Direction = "backward"
    detail: Detail = "summary"
    top_k: Annotated[int, Field(ge=1, le=100)] = 5


# ------------------------------------------------------------------ results
@dataclass(frozen=True, slots=True)
class LedgerEntry:
    id: str
    position: int
    role: str
    text: str
    timestamp: datetime
    parent_id: str | None = None
    branch: str | None = None


@dataclass(frozen=True, slots=True)
class EntriesPage:
    """Entries in the order asked for; ``next_cursor`` continues in that direction
    (``None`` at the end)."""

    entries: tuple[LedgerEntry, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Page:
    """Entries around an anchor, chronological; ``before``/``after`` cursors page on
    (``None`` at either end); ``text`` renders them (``summary``: each entry cut at
    :data:`SUMMARY_CHARS` characters)."""

    anchor_id: str
    entries: tuple[LedgerEntry, ...]
    before_cursor: str | None
    after_cursor: str | None
    text: str


@dataclass(frozen=True, slots=True)
class SearchHit:
    entry_id: str
    score: float
    timestamp: datetime
    page: Page


@dataclass(frozen=True, slots=True)
class SearchResult:
    hits: tuple[SearchHit, ...]
    scanned: int
    terms: tuple[str, ...]


# -------------------------------------------------------------------- ports
class LedgerStore(Protocol):
    """The read side of the ledger (the ledger projection)."""

    def entries(self, aggregate_id: UUID, *, after: int | None, before: int | None,
                limit: int, descending: bool) -> list[dict[str, Any]]: ...

    def window(self, aggregate_id: UUID, position: int, limit: int, *,
               backward: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...

    def position(self, aggregate_id: UUID, entry_id: str) -> int | None: ...

    def search(self, aggregate_id: UUID, terms: Sequence[str],
               top_k: int) -> tuple[list[dict[str, Any]], int]:
        """The ``top_k`` live entries of highest IDF-weighted coverage of the search
        ``terms`` (:mod:`memfabric.domain.search_terms`; ties: newer first), each row
        with its ``score``, and the number of entries holding any of the terms."""
        ...

    def observation(self, aggregate_id: UUID, observation_id: str) -> dict[str, Any] | None: ...

    def search_observations(self, aggregate_ids: Sequence[UUID], words: Sequence[str],
                            limit: int, *, until: datetime | None = None) -> list[dict[str, Any]]:
        """The best ``limit`` observations of the conversations matching any of
        ``words``, only those created at or before ``until`` when given."""
        ...

    def threads(self, tenant_id: str, resource_id: str | None,
                thread_id: str | None) -> list[tuple[UUID, str, str | None, str]]: ...

    def due_threads(self, tenant_id: str, before: datetime, *, after: UUID | None,
                    limit: int) -> list[tuple[UUID, str | None, str]]: ...

    def live_tenants(self, *, after: str | None) -> list[str]: ...

    def load(self, aggregate_id: UUID) -> Conversation | None: ...


class LedgerUnitOfWork(Protocol):
    """What the ledger needs of a unit of work (PostgresUnitOfWork provides it)."""

    def __enter__(self) -> LedgerUnitOfWork: ...

    def __exit__(self, *exc: object) -> None: ...

    def load_aggregate(self, aggregate_id: UUID) -> Any: ...

    def load_ledger_head(self, aggregate_id: UUID, scope: Scope) -> Any: ...

    def add_aggregate(self, aggregate: Any) -> None: ...


    def commit(self) -> None: ...


def new_id() -> str:
    """A fresh 12-hex id (never of a block id's form: an observation's id may become an
    episode note's)."""
    from memfabric.domain.inputs import fresh_id  # noqa: PLC0415

    return fresh_id()


def _utc(at: datetime) -> datetime:
    """``at`` in ``timezone.utc`` (issue 26: a driver returns the session's zone, e.g.
    ``ZoneInfo('Etc/UTC')``; every timestamp memfabric returns uses one tz object)."""
    return at.astimezone(timezone.utc)


def _entry(row: dict[str, Any]) -> LedgerEntry:
    return LedgerEntry(id=row["entry_id"], position=int(row["position"]), role=row["role"],
                       text=row["text"], timestamp=_utc(row["at"]), parent_id=row.get("parent_id"),
                       branch=row.get("branch"))


def render(entries: Sequence[LedgerEntry], detail: Detail) -> str:
    lines = []
    for e in entries:
        text = e.text
        if detail == "summary" and len(text) > SUMMARY_CHARS:
            text = text[: SUMMARY_CHARS - 1] + "…"
        lines.append(f"[{e.timestamp:%Y-%m-%d %H:%M}] {e.role}: {text}")
    return "\n".join(lines)


class Ledger:
    """The conversation ledger of one thread scope; see the module doc."""

    def __init__(self, unit_of_work: Callable[[Sequence[Scope]], Any], store: LedgerStore | None,
                 scope: Scope) -> None:
        self._unit_of_work = unit_of_work
        self._store = store
        self.scope = scope

    def __repr__(self) -> str:
        return f"Ledger({self.scope.key!r})"

    @property
    def aggregate_id(self) -> UUID:
        return conversation_uuid(self.scope)  # NoLedgerError without a thread

    def _ready(self) -> tuple[UUID, LedgerStore]:
        aggregate_id = self.aggregate_id
        if self._store is None:
            raise NotSupportedError("this backend has no conversation ledger")
        return aggregate_id, self._store

    def _write(self, change: Callable[[Conversation], T], *, head: bool = False) -> T:
        """Run ``change`` on the conversation in one unit of work; ``head``: on its write
        head (appends and retractions: no replay, constant cost in the thread's length)."""
        aggregate_id, _ = self._ready()
        with cast(LedgerUnitOfWork, self._unit_of_work([self.scope])) as uow:
            if head:
                conv = uow.load_ledger_head(aggregate_id, self.scope)
            else:
                conv = uow.load_aggregate(aggregate_id)
            if conv is None:
                conv = Conversation.start(self.scope)
            out = change(conv)
            uow.add_aggregate(conv)
            uow.commit()
        return out

    # ------------------------------------------------------------------ writes
    def append(self, role: str, text: str, *, timestamp: datetime | None = None,
               parent_id: str | None = None, branch: str | None = None) -> LedgerEntry:
        """Append one entry; returns it (with its 12-hex ``id`` and ``position``)."""
        self._ready()
        args = AppendInput(role=role, text=text, timestamp=timestamp, parent_id=parent_id,
                           branch=branch)
        return self.extend([args])[0]

    def extend(self, items: Sequence[AppendInput | dict[str, Any]]) -> list[LedgerEntry]:
        """Append many entries in one transaction (all or nothing)."""
        self._ready()
        parsed = [i if isinstance(i, AppendInput) else AppendInput.model_validate(i) for i in items]
        now = datetime.now(timezone.utc)

        def change(conv: Conversation) -> list[LedgerEntry]:
            out = []
            for a in parsed:
                e = conv.append(entry_id=new_id(), role=a.role, text=a.text,
                                at=a.timestamp or now, parent_id=a.parent_id, branch=a.branch)
                out.append(LedgerEntry(e.entry_id, e.position, e.role, e.text, e.timestamp,
                                       e.parent_id, e.branch))
            return out
        return self._write(change, head=True) if parsed else []

    def observe(self, text: str, *, source_entry_ids: Sequence[str]) -> str:
        """Record an observation over live entries; returns its 12-hex id."""
        self._ready()
        args = ObserveInput(text=text, source_entry_ids=list(source_entry_ids))
        oid = new_id()
        self._write(lambda c: c.observe(observation_id=oid, text=args.text,
                                        source_entry_ids=list(args.source_entry_ids)))
        return oid

    def reflect(self, text: str, *, source_ids: Sequence[str] = ()) -> str:
        """Record a reflection over entries, observations or reflections; returns its id."""
        self._ready()
        args = ReflectInput(text=text, source_ids=list(source_ids))
        rid = new_id()
        self._write(lambda c: c.reflect(reflection_id=rid, text=args.text,
                                        source_ids=list(args.source_ids)))
        return rid

    def open_work_scope(self, name: str) -> str:
        self._ready()
        args = WorkScopeInput(name=name)
        sid = new_id()
        self._write(lambda c: c.open_work_scope(scope_id=sid, name=args.name))
        return sid

    def close_work_scope(self, scope_id: str) -> None:
        self._ready()
        args = ScopeIdInput(scope_id=scope_id)
        self._write(lambda c: c.close_work_scope(args.scope_id))

    def bind(self, reflection_id: str, scope_id: str) -> None:
        """Bind a reflection to an open work scope (promotable once the scope closes)."""
        self._ready()
        args = BindInput(reflection_id=reflection_id, scope_id=scope_id)
        self._write(lambda c: c.bind(reflection_id=args.reflection_id, scope_id=args.scope_id))

    def retract(self, entry_id: str) -> None:
        """Hide an entry from pages and search (the log keeps an ``EntryRetracted``)."""
        self._ready()
        args = RetractInput(entry_id=entry_id)
        self._write(lambda c: c.retract(args.entry_id), head=True)

    def erase(self, *, requested_by: str = "caller", cause: str = "caller") -> dict[str, Any]:
        """Tombstone the conversation and destroy its key: every text is shredded.
        Returns the erased counts. The thread can be written again afterwards."""
        self._ready()
        args = EraseInput(requested_by=requested_by)

        def change(conv: Conversation) -> dict[str, Any]:
            counts = conv.summary()
            conv.erase(requested_by=args.requested_by, cause=cause)
            return counts
        return self._write(change)  # Erased shreds: the unit of work destroys the key

    # ------------------------------------------------------------------- reads
    def session(self, session_id: str) -> LedgerSession:
        """A host's agent session that carries this ledger: ``id`` and ``entries()``,
        what ``Notes.attach`` accepts (``ValidationError`` for an empty id)."""
        return LedgerSession(id=_SessionId(id=session_id).id, ledger=self)

    def state(self) -> Conversation | None:
        """The aggregate replayed from the log (reflections, work scopes, bindings)."""
        aggregate_id, store = self._ready()
        return store.load(aggregate_id)

    def entries(self, cursor: str | None = None, limit: int = 50,
                direction: Direction = "forward") -> EntriesPage:
        """Live entries from ``cursor`` (exclusive) in ``direction``: ``forward`` from the
        first, ``backward`` from the latest."""
        aggregate_id, store = self._ready()
        args = EntriesInput(cursor=cursor, limit=limit, direction=direction)
        at = int(args.cursor) if args.cursor is not None else None
        backward = args.direction == "backward"
        rows = store.entries(aggregate_id, after=None if backward else at,
                             before=at if backward else None, limit=args.limit + 1,
                             descending=backward)
        more = len(rows) > args.limit
        got = tuple(_entry(r) for r in rows[: args.limit])
        return EntriesPage(got, str(got[-1].position) if more and got else None)

    def page(self, entry_id: str, limit: int = 20, direction: Direction = "backward",
             detail: Detail = "summary") -> Page:
        """``limit`` entries ending (``backward``) or starting (``forward``) at
        ``entry_id``, chronological, rendered; ``LedgerError`` for an unknown entry."""
        aggregate_id, store = self._ready()
        args = PageInput(entry_id=entry_id, limit=limit, direction=direction, detail=detail)
        pos = store.position(aggregate_id, args.entry_id)
        if pos is None:
            raise LedgerError(f"unknown entry {args.entry_id}")
        return self._page_at(aggregate_id, store, args.entry_id, pos, args.limit,
                             args.direction, args.detail)

    def _page_at(self, aggregate_id: UUID, store: LedgerStore, entry_id: str, pos: int,
                 limit: int, direction: Direction, detail: Detail) -> Page:
        backward = direction == "backward"
        rows, beyond = store.window(aggregate_id, pos, limit + 1, backward=backward)
        more = len(rows) > limit
        if backward:
            got = [_entry(r) for r in reversed(rows[:limit])]
            before_c = str(got[0].position) if more and got else None
            after_c = str(pos) if beyond else None
        else:
            got = [_entry(r) for r in rows[:limit]]
            before_c = str(pos) if beyond else None
            after_c = str(got[-1].position) if more and got else None
        return Page(entry_id, tuple(got), before_c, after_c, render(got, detail))

    def search(self, query: str, *, limit: int = 20, direction: Direction = "backward",
               detail: Detail = "summary", top_k: int = 5, signal: Any = None) -> SearchResult:
        """Lexical search of the live entries (see ``Notes.search_conversation``)."""
        aggregate_id, store = self._ready()
        args = SearchInput(query=query, limit=limit, direction=direction, detail=detail, top_k=top_k)
        if signal is not None and not callable(getattr(signal, "is_set", None)):
            raise NotSupportedError("signal: expected an object with is_set()")
        words = search_terms(args.query)
        if signal is not None and signal.is_set():
            raise LedgerAbortedError("search_conversation aborted by its signal")
        rows, scanned = store.search(aggregate_id, words, args.top_k) if words else ([], 0)
        hits = []
        for row in rows:
            if signal is not None and signal.is_set():
                raise LedgerAbortedError("search_conversation aborted by its signal")
            page = self._page_at(aggregate_id, store, row["entry_id"], int(row["position"]), args.limit,
                                 args.direction, args.detail)
            hits.append(SearchHit(row["entry_id"], round(float(row["score"]), 6), _utc(row["at"]), page))
        return SearchResult(tuple(hits), scanned, tuple(words))


def erase_conversations(deps: Deps, tenant_id: str, resource_id: str | None,
                        thread_id: str | None, requested_by: str) -> int:
    """Erase (``Erased`` tombstone, key destroyed) every conversation of a scope prefix
    with something left in it; returns how many. ``erase_scope`` calls it."""
    store = deps.ledger_store
    if store is None:
        return 0
    n = 0
    for _, tenant, resource, thread in store.threads(tenant_id, resource_id, thread_id):
        scope = Scope(tenant_id=tenant, resource_id=resource, thread_id=thread)
        Ledger(deps.unit_of_work, store, scope).erase(requested_by=requested_by,
                                                         cause="erase_scope")
        n += 1
    return n


class _SessionId(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: Annotated[str, StringConstraints(min_length=1, max_length=200)]


@dataclass(frozen=True, slots=True)
class LedgerSession:
    """An agent session carrying a thread's conversation: ``id`` (the host's session
    id) and ``entries(limit=50)`` (the latest entries, oldest first). Pass it to
    ``Notes.attach``: the attach gate accepts a session whose ``entries`` is callable."""

    id: str
    ledger: Ledger

    def entries(self, limit: int = 50) -> list[LedgerEntry]:
        page = self.ledger.entries(limit=limit, direction="backward")
        return list(reversed(page.entries))
