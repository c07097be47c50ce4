"""Governed memory access (issue 33): the principal registry, the profile rules a call
is checked against, per-note read grants and the access record of every call.

``fabric.principals`` is a :class:`Principals`; ``notes.as_principal(agent_id)`` returns
a :class:`~memfabric.domain.access_notes.PrincipalNotes` whose every call is checked
here and recorded once in the access log (:class:`AccessLogPort`). A fabric without
principals never builds either: nothing changes and nothing is logged.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, TypeAdapter

from memfabric.domain import history, visibility
from memfabric.domain.errors import AccessDenied, NoteForgottenError, NoteNotFoundError, PrincipalNotFoundError
from memfabric.domain.note import note_uuid
from memfabric.domain.principal import (
    RETENTION_ORDER,
    AccessFilter,
    AgentId,
    MemoryProfile,
    Principal,
    Right,
    principal_uuid,
)
from memfabric.domain.retention import default_class
from memfabric.domain.scope import Scope

if TYPE_CHECKING:
    from memfabric.domain.deps import Deps

Outcome = Literal["served", "denied", "error"]

PRINCIPAL_LOCK_TENANT = "memfabric.principals"
"""Tenant id of the pseudo-scope whose write lock serialises the changes of one
principal (``Scope(PRINCIPAL_LOCK_TENANT, agent_id)``); only a lock, never a note."""

_T = TypeVar("_T")
_AGENT: TypeAdapter[str] = TypeAdapter(AgentId)
_RIGHT: TypeAdapter[str] = TypeAdapter(Right)


@dataclass(frozen=True, slots=True)
class PrincipalView:
    """A principal as the projection holds it."""

    agent_id: str
    profile: MemoryProfile
    version: int
    updated_at: datetime | None
    updated_by: str


@dataclass(frozen=True, slots=True)
class AccessRecord:
    """One governed call: who (``principal``), what (``operation``: recall, get, list,
    count, search_conversation, remember, ...), from which scope, which ``kinds``, its
    ``outcome`` (``served``, ``denied`` naming the ``rule``, or ``error`` for a call that
    failed otherwise), how many note ids it returned (``served``; the ids themselves are
    sealed in the log), the keyed hash of its query (HMAC-SHA256 under the fabric
    secret; ``query_text`` only when the host opted in), when (``at``, UTC) and its
    retention class (``operational``)."""

    at: datetime
    principal: str
    operation: str
    outcome: Outcome
    tenant_id: str
    resource_id: str
    thread_id: str
    kinds: tuple[str, ...] = ()
    served: int = 0
    rule: str | None = None
    query_hash: str | None = None
    query_text: str | None = None
    retention: str = "operational"
    ids: tuple[str, ...] = field(default=(), repr=False)
    """The ids served (sealed at rest; filled on read only with ``with_ids=True``)."""


class AccessLogPort(Protocol):
    """Where access records go: :meth:`record` never blocks on storage (a bounded
    buffer, written in the background), :meth:`query` sees every record recorded before
    it in this process."""

    def record(self, record: AccessRecord) -> None: ...

    def query(self, *, principal: str | None, since: datetime | None, until: datetime | None,
              outcome: str | None, limit: int, with_ids: bool) -> list[AccessRecord]: ...

    def flush(self, timeout: float = 5.0) -> None: ...

    def purge(self, cutoffs: dict[str, datetime], *, tenant_id: str | None,
              exclude: Sequence[str] = (), dry_run: bool = False) -> int:
        """Delete the records of each retention class in ``cutoffs`` recorded before
        its cutoff, of ``tenant_id`` (``None``: of every tenant not in ``exclude``);
        returns how many (``dry_run``: counted, nothing deleted)."""
        ...


class PrincipalStore(Protocol):
    """The principals projection, read side."""

    def principal(self, agent_id: str) -> PrincipalView | None:
        """The principal, or ``None`` when it was never defined."""
        ...

    def principals(self) -> list[PrincipalView]:
        """Every principal, by ``agent_id``."""
        ...

    def grants(self, agent_id: str, tenant_id: str) -> frozenset[UUID] | None:
        """The note aggregate ids of ``tenant_id`` granted to ``agent_id``; ``None`` when
        the store's recall joins the grants table itself (PostgreSQL)."""
        ...

    def granted_homes(self, agent_id: str, tenant_id: str, note_id: str) -> list[Scope]:
        """The home scopes of the un-forgotten notes ``note_id`` of ``tenant_id`` granted
        to ``agent_id``."""
        ...


class _DefineArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    agent_id: AgentId
    profile: MemoryProfile
    by: AgentId = "host"


class Principals:
    """``fabric.principals``: define principals, read them back, and the access log.

    ``log_query_text`` (default False): whether access records keep the query text
    (else only its keyed hash)."""

    def __init__(self, deps: Deps, store: PrincipalStore, log: AccessLogPort) -> None:
        self._deps = deps
        self.store = store
        self.log = log
        self.log_query_text = False

    def define(self, agent_id: str, profile: MemoryProfile | dict[str, Any], *, by: str = "host") -> PrincipalView:
        """Define principal ``agent_id`` with ``profile`` (a :class:`MemoryProfile` or a
        mapping of its fields), or replace its profile: a ``Defined`` or
        ``ProfileChanged`` event recording ``by``; no event when the profile is the
        current one. Raises ``pydantic.ValidationError`` naming the field; nothing is
        written then. Returns the principal as the projection now holds it."""
        args = _DefineArgs.model_validate({"agent_id": agent_id, "profile": profile, "by": by})
        lock = Scope(tenant_id=PRINCIPAL_LOCK_TENANT, resource_id=args.agent_id)
        with self._deps.unit_of_work([lock]) as uow:
            found = uow.load_aggregate(principal_uuid(args.agent_id))  # type: ignore[attr-defined]
            if isinstance(found, Principal):
                changed = found.change(args.profile, args.by)
                aggregate = found
            else:
                aggregate, changed = Principal.define(args.agent_id, args.profile, args.by), True
            if changed:
                uow.add_aggregate(aggregate)  # type: ignore[attr-defined]
                uow.commit()
        if changed:
            self._deps.store.await_position(uow.position)
        view = self.store.principal(args.agent_id)
        assert view is not None
        return view

    def get(self, agent_id: str) -> PrincipalView:
        """The principal ``agent_id`` (``PrincipalNotFoundError`` when never defined)."""
        view = self.store.principal(_AGENT.validate_python(agent_id))
        if view is None:
            raise PrincipalNotFoundError(f"no principal {agent_id!r}: define it with fabric.principals.define")
        return view

    def list(self) -> list[PrincipalView]:  # noqa: A003 - public API name
        """Every principal, by ``agent_id``."""
        return self.store.principals()

    def access_log(self, *, principal: str | None = None, since: datetime | None = None,
                   until: datetime | None = None, outcome: str | None = None, limit: int = 1000,
                   with_ids: bool = False) -> builtins.list[AccessRecord]:
        """The access records (oldest first) of ``principal`` (default all) recorded at
        or after ``since`` and before ``until``, of one ``outcome`` (served, denied,
        error) when given, at most ``limit`` (1-100000); ``with_ids`` unseals the ids
        each call served. Pending records of this process are flushed first."""
        args = _LogQuery.model_validate({"principal": principal, "since": since, "until": until,
                                         "outcome": outcome, "limit": limit})
        self.log.flush()
        return self.log.query(principal=args.principal, since=args.since, until=args.until,
                              outcome=args.outcome, limit=args.limit, with_ids=with_ids)

    def with_query(self, record: AccessRecord, query: str) -> AccessRecord:
        """``record`` with the keyed hash of ``query`` (HMAC-SHA256 under the fabric
        secret) and, when :attr:`log_query_text` is set, the query itself."""
        return dataclasses.replace(record, query_hash=self._deps.store.content_hmac(query),
                                   query_text=query if self.log_query_text else None)

    # ----------------------------------------------------------------- grants
    def grant(self, owner: Scope, note_id: str, agent_id: str, right: str, *, by: str) -> bool:
        """Grant ``agent_id`` ``right`` (``read``) on the note ``note_id`` of ``owner``
        (the note's own scope). Returns whether an event was written."""
        return self._change_grant(owner, note_id, agent_id, right, by=by, grant=True)

    def revoke(self, owner: Scope, note_id: str, agent_id: str, right: str, *, by: str) -> bool:
        """Withdraw a grant (see :meth:`grant`); returns whether an event was written."""
        return self._change_grant(owner, note_id, agent_id, right, by=by, grant=False)

    def _change_grant(self, owner: Scope, note_id: str, agent_id: str, right: str, *, by: str,
                      grant: bool) -> bool:
        who, _ = _AGENT.validate_python(agent_id), _RIGHT.validate_python(right)
        home, _vis = history.locate(self._deps, owner, note_id)
        if home != owner:
            raise NoteNotFoundError(f"no note {note_id!r} of scope {owner} (grant from the note's own scope)")
        lock = Scope(tenant_id=PRINCIPAL_LOCK_TENANT, resource_id=who)
        with self._deps.unit_of_work(sorted([owner, lock], key=lambda s: s.key)) as uow:
            note = uow.load(owner, note_id)
            if note is None:
                raise NoteNotFoundError(f"no note {note_id!r} in scope {owner}")
            if note.forgotten:
                raise NoteForgottenError(f"note {note_id!r} is forgotten")
            principal = uow.load_aggregate(principal_uuid(who))  # type: ignore[attr-defined]
            if not isinstance(principal, Principal):
                raise PrincipalNotFoundError(f"no principal {who!r}: define it first")
            changed = (principal.grant(note.id, owner.tenant_id, by) if grant
                       else principal.revoke(note.id, by))
            if changed:
                uow.add_aggregate(principal)  # type: ignore[attr-defined]
                uow.commit()
        if changed:
            self._deps.store.await_position(uow.position)
        return changed


class _LogQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    principal: AgentId | None = None
    since: datetime | None = None
    until: datetime | None = None
    outcome: Outcome | None = None
    limit: int = 1000

    def model_post_init(self, context: Any) -> None:
        if not 1 <= self.limit <= 100_000:
            raise ValueError("limit: 1-100000")


# ------------------------------------------------------------------- the rules
def deny(agent_id: str, rule: str, detail: str) -> AccessDenied:
    """The error of a refused call, naming the rule."""
    return AccessDenied(rule, f"principal {agent_id!r} denied by rule {rule}: {detail}")


def check_read(agent_id: str, profile: MemoryProfile, scope: Scope, kinds: Iterable[str]) -> None:
    """A read of ``kinds`` from ``scope``: the scope matches ``recall_scope`` and every
    kind is in ``read_kinds``; raises :class:`AccessDenied` naming the rule otherwise."""
    if not profile.covers(scope):
        raise deny(agent_id, "recall_scope", f"scope {scope} matches none of {list(profile.recall_scope)}")
    check_kinds(agent_id, profile, kinds)


def check_kinds(agent_id: str, profile: MemoryProfile, kinds: Iterable[str]) -> None:
    """Every kind of ``kinds`` is in ``read_kinds`` (else :class:`AccessDenied`, rule
    ``read_kinds``)."""
    bad = sorted(set(kinds) - set(profile.read_kinds))
    if bad:
        raise deny(agent_id, "read_kinds", f"kinds {bad} are not in read_kinds {list(profile.read_kinds)}")


def covers_group(profile: MemoryProfile, scope: Scope, vis: visibility.Visibility) -> bool:
    """Whether a pattern covers every home a write of ``vis`` from ``scope`` may
    consolidate with (its group, :func:`memfabric.domain.visibility.group`)."""
    reach = visibility.reach(scope, vis)
    t, r, _ = scope.sql()
    for p in profile.patterns():
        if p.tenant not in (None, t):
            continue
        if reach == "tenant" and p.resource is None and p.thread is None:
            return True
        if reach == "resource" and p.resource in (None, r) and p.thread is None:
            return True
    return reach == "exact" and profile.covers(scope)


def check_write(agent_id: str, profile: MemoryProfile, scope: Scope, kind: str, *,
                vis: visibility.Visibility | None = None, retention: str | None = None) -> None:
    """A write of ``kind`` (visibility ``vis``, retention class ``retention``) from
    ``scope``: ``writes`` allows it (``propose``: working blocks only; ``commit``: any),
    the kind is in ``write_kinds``, its group is within ``recall_scope``, ``vis`` in
    ``visibility`` and ``retention`` within ``retention_ceiling``."""
    if profile.writes == "none" or (profile.writes == "propose" and kind != "working"):
        raise deny(agent_id, "writes", f"writes={profile.writes!r} does not allow a {kind} write")
    if kind not in profile.write_kinds:
        raise deny(agent_id, "write_kinds", f"kind {kind!r} is not in write_kinds {list(profile.write_kinds)}")
    vis = vis or visibility.DEFAULT_VISIBILITY.get(kind, visibility.LEGACY_VISIBILITY)
    if not covers_group(profile, scope, vis):
        raise deny(agent_id, "recall_scope", f"a {vis}-visible write from {scope} reaches beyond "
                   f"{list(profile.recall_scope)}")
    if kind != "working" and vis not in profile.visibility:
        raise deny(agent_id, "visibility", f"visibility {vis!r} is not in {list(profile.visibility)}")
    cls = retention or default_class(kind)
    ceiling = profile.retention_ceiling
    if ceiling is not None and RETENTION_ORDER.get(cls, 99) > RETENTION_ORDER[ceiling]:
        raise deny(agent_id, "retention_ceiling", f"class {cls!r} is longer than the ceiling {ceiling!r}")


def access_filter(store: PrincipalStore, agent_id: str, profile: MemoryProfile,
                  scope: Scope) -> AccessFilter:
    """The filter a read of ``agent_id`` from ``scope`` pushes into the store's query."""
    return AccessFilter(principal=agent_id, kinds=tuple(profile.read_kinds),
                        visibilities=tuple(profile.visibility), patterns=profile.patterns(),
                        grants=store.grants(agent_id, scope.tenant_id))


def readable_note(agent_id: str, profile: MemoryProfile, reader: Scope, home: Scope,
                  vis: str, kind: str, aggregate_id: UUID, grants: frozenset[UUID] | None,
                  granted: bool = False) -> bool:
    """Whether one note (of ``home``, ``vis``, ``kind``) is readable by the principal
    from ``reader``: ``AccessFilter.admits`` for a single note found by id."""
    if kind not in profile.read_kinds or home.tenant_id != reader.tenant_id:
        return False
    row = {"kind": kind, "visibility": vis, "aggregate_id": aggregate_id,
           "tenant_id": home.tenant_id, "resource_id": home.sql()[1], "thread_id": home.sql()[2]}
    f = AccessFilter(principal=agent_id, kinds=tuple(profile.read_kinds),
                     visibilities=tuple(profile.visibility), patterns=profile.patterns(),
                     grants=frozenset({aggregate_id}) if granted else grants)
    return f.admits(row, visibility.visible(home, vis, reader))  # type: ignore[arg-type]


def homes_of(deps: Deps, store: PrincipalStore, agent_id: str, reader: Scope,
             note_id: str) -> list[tuple[Scope, str, bool]]:
    """Where note ``note_id`` addressed by the principal from ``reader`` may live:
    ``(home, visibility, granted)`` for the note visible from ``reader`` and every
    granted note of that id in ``reader``'s tenant."""
    out: list[tuple[Scope, str, bool]] = []
    granted = store.granted_homes(agent_id, reader.tenant_id, note_id)
    found = deps.store.resolve(reader, note_id)
    if found:
        home, vis = found[0]
        out.append((home, vis, home in granted))
    out += [(home, visibility.LEGACY_VISIBILITY, True) for home in granted
            if all(h != home for h, _, _ in out)]
    return out


def record_for(agent_id: str, operation: str, scope: Scope | None, kinds: Sequence[str], *,
               at: datetime) -> AccessRecord:
    """The record of a call before its outcome is known (``scope`` ``None``: a call
    across tenants, recorded with empty scope columns)."""
    t, r, th = scope.sql() if scope is not None else ("", "", "")
    return AccessRecord(at=at, principal=agent_id, operation=operation, outcome="error",
                        tenant_id=t, resource_id=r, thread_id=th, kinds=tuple(kinds))


def finished(record: AccessRecord, outcome: Outcome, *, ids: Sequence[str] = (),
             rule: str | None = None) -> AccessRecord:
    """``record`` with its outcome, ids served and rule."""
    return dataclasses.replace(record, outcome=outcome, ids=tuple(ids), served=len(ids), rule=rule)


def note_aggregate(home: Scope, note_id: str) -> UUID:
    """The aggregate id of note ``note_id`` of ``home``."""
    return note_uuid(home, note_id)


class Governor:
    """The governed calls of one principal: what a scope handle for it
    (:class:`~memfabric.domain.access_notes.PrincipalNotes`) and the framework adapters
    configured with it (the LangGraph store, the Agents SDK session) share. Raises
    ``PrincipalNotFoundError`` when the fabric has no registry (``principals`` ``None``)
    or ``agent_id`` was never defined."""

    def __init__(self, principals: Principals | None, agent_id: str) -> None:
        if principals is None:
            raise PrincipalNotFoundError("this fabric has no principal registry")
        self.principals = principals
        self.agent_id = principals.get(agent_id).agent_id

    def profile(self) -> MemoryProfile:
        """The principal's current profile (read from the projection at every call)."""
        return self.principals.get(self.agent_id).profile

    def filter(self, profile: MemoryProfile, scope: Scope) -> AccessFilter:
        """The :class:`AccessFilter` a read from ``scope`` pushes into the store's query."""
        return access_filter(self.principals.store, self.agent_id, profile, scope)

    def call(self, operation: str, scope: Scope | None,
             kinds: Iterable[str] | Callable[[MemoryProfile], Iterable[str]],
             run: Callable[[MemoryProfile], _T], ids_of: Callable[[_T], Sequence[str]],
             query: str | None = None) -> _T:
        """``run(profile)`` recorded once (the profile read once per call): served with
        ``ids_of(result)``, denied with the rule of its ``AccessDenied``, or error; the
        exception is re-raised. ``kinds``: the kinds asked for, or a function of the
        profile; ``query``: the call's query text (recorded as its keyed hash)."""
        at = datetime.now(timezone.utc)
        profile = self.profile()
        asked = tuple(kinds(profile) if callable(kinds) else kinds)
        record = record_for(self.agent_id, operation, scope, asked, at=at)
        if query is not None:
            record = self.principals.with_query(record, query)
        try:
            result = run(profile)
        except AccessDenied as exc:
            self.principals.log.record(finished(record, "denied", rule=exc.rule))
            raise
        except BaseException:
            self.principals.log.record(finished(record, "error"))
            raise
        self.principals.log.record(finished(record, "served", ids=ids_of(result)))
        return result

    def refused(self, operation: str, scope: Scope | None, kinds: Sequence[str], exc: AccessDenied) -> None:
        """Record ``exc`` as the denied ``operation`` (a check made before the call runs)."""
        record = record_for(self.agent_id, operation, scope, kinds, at=datetime.now(timezone.utc))
        self.principals.log.record(finished(record, "denied", rule=exc.rule))
