"""Principals and memory profiles (issue 33). Pure.

A *principal* is an agent the host names (``agent_id``, the scope-id alphabet). Its
:class:`MemoryProfile` says what it may do with memory:

- ``read_kinds`` / ``write_kinds``: the note kinds it may read / write;
- ``recall_scope``: scope patterns (``"acme/u1/*"``) the handle's scope must match and
  every note it reads must live in (see :class:`ScopePattern`);
- ``visibility``: the note visibilities (``thread``, ``resource``, ``tenant``) it may read
  and write;
- ``writes``: ``none`` (read-only), ``propose`` (working blocks only: a proposal on the
  thread's scratch that a committing writer or the host acts on) or ``commit`` (every
  write of its ``write_kinds``);
- ``retention_ceiling``: the longest retention class it may give a note (``None``: any).

A profile is recorded as events on a :class:`Principal` aggregate (``Defined`` then
``ProfileChanged``: who changed what, when), which also carries the per-note read
grants (``Granted`` / ``Revoked``, by note aggregate id: a grant event holds no note
id, no content, so forgetting the note leaves nothing readable in it). The projection
is :mod:`memfabric.projections.principals`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from memfabric.domain.inputs import Kind
from memfabric.domain.scope import SCOPE_ID_RE, Scope, ScopeId
from memfabric.domain.visibility import Visibility

_NAMESPACE = uuid5(NAMESPACE_URL, "https://memfabric.dev/principal")

AgentId = ScopeId
"""A principal's id: 1-128 characters of ``[A-Za-z0-9._:@-]``, starting alphanumeric."""

Writes = Literal["none", "propose", "commit"]
RetentionCeiling = Literal["ephemeral", "operational", "regulated", "durable"]
RETENTION_ORDER: dict[str, int] = {"ephemeral": 0, "operational": 1, "regulated": 2, "durable": 3}
"""Retention classes from shortest-kept to longest (``durable`` is never erased)."""

Right = Literal["read"]


def principal_uuid(agent_id: str) -> UUID:
    """The aggregate id of principal ``agent_id`` (uuid5, stable)."""
    return uuid5(_NAMESPACE, agent_id)


def _check_pattern(value: str) -> str:
    parts = value.split("/")
    if len(parts) > 3 or any(p != "*" and not SCOPE_ID_RE.match(p) for p in parts):
        raise ValueError(f"scope pattern {value!r}: 1-3 '/'-separated parts, each '*' or a scope id")
    return value


ScopePatternText = Annotated[str, StringConstraints(min_length=1, max_length=400),
                             AfterValidator(_check_pattern)]


@dataclass(frozen=True, slots=True)
class ScopePattern:
    """A parsed ``recall_scope`` pattern: per level (tenant, resource, thread) the
    stored value it requires (``""``: that level absent) or ``None`` (any value).

    ``"acme/u1/*"``: tenant acme, resource u1, any thread (none included);
    ``"acme/*"``: all of tenant acme; ``"acme/u1"``: exactly the user-level scope;
    ``"acme/*/t1"``: thread t1 of any resource of acme. A trailing ``*`` covers every
    deeper level; a missing level without one means that level is absent."""

    tenant: str | None
    resource: str | None
    thread: str | None

    @classmethod
    def parse(cls, text: str) -> ScopePattern:
        parts = _check_pattern(text).split("/")
        wide = parts[-1] == "*"
        levels: list[str | None] = [None if p == "*" else p for p in parts]
        levels += [None if wide else ""] * (3 - len(parts))
        return cls(levels[0], levels[1], levels[2])

    def like(self) -> str:
        """The pattern as a SQL ``LIKE`` pattern on ``tenant/resource/thread`` (stored
        columns, ``""`` for absent parts): ``%`` for a ``*`` level (a key has exactly two
        slashes and ids none, so ``%`` never spans a level), ``_`` escaped."""
        def part(value: str | None) -> str:
            return "%" if value is None else value.replace("_", "\\_")
        return "/".join(part(v) for v in (self.tenant, self.resource, self.thread))

    def matches(self, tenant: str, resource: str, thread: str) -> bool:
        """Whether stored scope columns (``""`` for absent parts) match."""
        return all(want is None or want == got for want, got in
                   ((self.tenant, tenant), (self.resource, resource), (self.thread, thread)))


class MemoryProfile(BaseModel):
    """What a principal may do with memory (see the module doc). Unknown fields and bad
    values raise ``pydantic.ValidationError`` naming the field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    read_kinds: tuple[Kind, ...] = ()
    write_kinds: tuple[Kind, ...] = ()
    recall_scope: tuple[ScopePatternText, ...] = Field(min_length=1, max_length=64)
    visibility: tuple[Visibility, ...] = ("thread", "resource", "tenant")
    writes: Writes = "none"
    retention_ceiling: RetentionCeiling | None = None

    def patterns(self) -> tuple[ScopePattern, ...]:
        return tuple(ScopePattern.parse(p) for p in self.recall_scope)

    def covers(self, scope: Scope) -> bool:
        """Whether ``scope`` matches one of :attr:`recall_scope`."""
        return any(p.matches(*scope.sql()) for p in self.patterns())


@dataclass(frozen=True, slots=True)
class AccessFilter:
    """What the store adds to a read's conditions for a principal (pushed into the
    query, never applied afterwards): a row is admitted when it is visible from the
    reader's scope *and* its kind is in ``kinds``, its visibility in ``visibilities``
    and its home matches one of ``patterns``; or when it is a note of the reader's
    tenant granted to ``principal`` (whatever its scope and visibility; its kind must
    still be in ``kinds``). ``grants``: the granted aggregate ids, filled by stores that
    do not join the grants table themselves (the in-memory one)."""

    principal: str
    kinds: tuple[str, ...]
    visibilities: tuple[str, ...]
    patterns: tuple[ScopePattern, ...]
    grants: frozenset[UUID] | None = None

    def admits(self, row: dict[str, Any], visible: bool) -> bool:
        """The rule in Python (the in-memory store; the SQL twin is
        ``projections.principals.access_condition``)."""
        if row["kind"] not in self.kinds:
            return False
        if visible and row["visibility"] in self.visibilities and any(
                p.matches(row["tenant_id"], row["resource_id"], row["thread_id"]) for p in self.patterns):
            return True
        return self.grants is not None and row["aggregate_id"] in self.grants


class Principal(Aggregate):
    """One principal: ``agent_id``, ``profile`` (a :class:`MemoryProfile` dump), who set
    it (``updated_by``) and when, and ``grants`` ``{note aggregate id: tenant_id}``."""

    class Defined(Aggregate.Created):
        """The principal was defined with ``profile`` by ``by``."""

        agent_id: str
        profile: dict[str, Any]
        by: str

    class ProfileChanged(Aggregate.Event):
        """The profile was replaced by ``profile`` (by ``by``)."""

        profile: dict[str, Any]
        by: str

        def apply(self, p: Principal) -> None:
            p.profile, p.updated_by, p.updated_at = self.profile, self.by, self.timestamp

    class Granted(Aggregate.Event):
        """Read access to note ``note`` (aggregate id, text) of ``tenant_id``, by ``by``."""

        note: str
        tenant_id: str
        right: str
        by: str

        def apply(self, p: Principal) -> None:
            p.grants[self.note] = self.tenant_id

    class Revoked(Aggregate.Event):
        """The read grant of note ``note`` was withdrawn by ``by``."""

        note: str
        right: str
        by: str

        def apply(self, p: Principal) -> None:
            p.grants.pop(self.note, None)

    def __init__(self, *, agent_id: str, profile: dict[str, Any], by: str) -> None:
        self.agent_id = agent_id
        self.profile = profile
        self.updated_by = by
        self.updated_at: datetime | None = None
        self.grants: dict[str, str] = {}

    @classmethod
    def define(cls, agent_id: str, profile: MemoryProfile, by: str) -> Principal:
        return cls._create(cls.Defined, id=principal_uuid(agent_id), agent_id=agent_id,
                           profile=profile.model_dump(mode="json"), by=by)

    def change(self, profile: MemoryProfile, by: str) -> bool:
        """Record ``profile`` (no event when it is the current one); returns whether it changed."""
        dumped = profile.model_dump(mode="json")
        if dumped == self.profile:
            return False
        self.trigger_event(self.ProfileChanged, profile=dumped, by=by)
        return True

    def grant(self, note: UUID, tenant_id: str, by: str) -> bool:
        if self.grants.get(str(note)) == tenant_id:
            return False
        self.trigger_event(self.Granted, note=str(note), tenant_id=tenant_id, right="read", by=by)
        return True

    def revoke(self, note: UUID, by: str) -> bool:
        if str(note) not in self.grants:
            return False
        self.trigger_event(self.Revoked, note=str(note), right="read", by=by)
        return True

    def memory_profile(self) -> MemoryProfile:
        return MemoryProfile.model_validate(self.profile)

    def granted(self, tenant_id: str) -> frozenset[UUID]:
        """The note aggregate ids of ``tenant_id`` granted to this principal."""
        return frozenset(UUID(a) for a, t in self.grants.items() if t == tenant_id)
