"""The LangGraph store configured with a principal (issue 33):
``MemfabricStore(fabric, principal="agent-a")``.

Every op of a batch is one governed call of the principal
(:class:`memfabric.domain.access.Governor`): checked against its current memory
profile, recorded once in the access log (``served``, ``denied`` naming the rule, or
``error``) under the operation ``langgraph.get``, ``langgraph.search``,
``langgraph.put``, ``langgraph.delete`` or ``langgraph.list_namespaces`` with the
namespace's scope (a search of the empty prefix and ``list_namespaces``: empty scope
columns) and the note ids it returned or wrote (sealed).

- reads (get, search, list_namespaces): ``fact`` (the store's kind) must be in
  ``read_kinds``; every query the read makes carries the principal's
  :class:`~memfabric.domain.principal.AccessFilter` for the scope it reads
  (:func:`memfabric.projections.principals.access_condition` in PostgreSQL,
  ``AccessFilter.admits`` in memory), so only items whose namespace matches
  ``recall_scope`` and items granted to the principal (``notes.grant``) are returned;
  ``list_namespaces`` lists the namespaces holding a readable item.
- a get of a namespace outside ``recall_scope``, or a search of a prefix no
  ``recall_scope`` pattern reaches, returns only granted items; finding none it is
  refused (rule ``recall_scope``), so an item the principal may not read is neither
  returned nor told apart from a missing one.
- writes (put, delete): a put replaces and a delete forgets the key's live version,
  so the principal must write *and* read ``fact`` notes of the namespace
  (:func:`~memfabric.domain.access.check_write` with ``thread`` visibility, the
  store's, then :func:`~memfabric.domain.access.check_read`). The writes of a batch
  are checked before any op runs: a refused one refuses the batch and nothing is
  written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from langgraph.store.base import GetOp, Op, PutOp, Result, SearchOp

from memfabric.adapters.langgraph_values import scope_of
from memfabric.domain import access as rules
from memfabric.domain.errors import AccessDenied
from memfabric.domain.principal import AccessFilter, MemoryProfile
from memfabric.domain.scope import Scope

Access = Callable[[Scope], AccessFilter | None]
"""What a read from a scope adds to its query: a principal's filter, or ``None``."""
Apply = Callable[[Op, Access], tuple[Result, list[str]]]
"""Runs an op: ``(its result, the ids of the notes it returned or wrote)``."""

KINDS = ("fact",)
"""The kind of every store note."""


def plain(scope: Scope) -> None:
    """The :data:`Access` of a store without a principal: nothing added."""
    return None


def operation_of(op: Op) -> tuple[str, Scope | None]:
    """The access-log operation of ``op`` and the scope it is recorded with (``None``:
    across tenants). ``NamespaceError`` for a namespace that maps onto no scope (then
    nothing is checked or recorded)."""
    if isinstance(op, GetOp):
        return "langgraph.get", scope_of(op.namespace)
    if isinstance(op, PutOp):
        return ("langgraph.delete" if op.value is None else "langgraph.put"), scope_of(op.namespace)
    if isinstance(op, SearchOp):
        prefix = tuple(op.namespace_prefix)[:3]
        return "langgraph.search", scope_of(prefix) if prefix else None
    return "langgraph.list_namespaces", None


def reaches(profile: MemoryProfile, prefix: Sequence[str]) -> bool:
    """Whether a namespace at or under ``prefix`` can match one of ``recall_scope``."""
    levels = tuple(prefix)[:3]
    return any(all(want is None or want == got
                   for want, got in zip((p.tenant, p.resource, p.thread)[: len(levels)], levels, strict=True))
               for p in profile.patterns())


def _check_found(agent_id: str, op: Op, profile: MemoryProfile, scope: Scope | None, operation: str) -> None:
    """Refuse (rule ``recall_scope``) a get or search that found nothing outside the
    profile's reach: it could only have returned granted items (see the module doc)."""
    if isinstance(op, GetOp):
        where, near = tuple(op.namespace), scope is not None and profile.covers(scope)
    elif isinstance(op, SearchOp):
        where = tuple(op.namespace_prefix)
        near = reaches(profile, where)
    else:
        return
    if not near:
        raise rules.deny(agent_id, "recall_scope", f"{operation} of {where} reaches none of "
                         f"{list(profile.recall_scope)} and nothing there is granted")


class GovernedOps:
    """The ops of one principal's store (see the module doc); ``apply`` runs an op."""

    def __init__(self, governor: rules.Governor, apply: Apply) -> None:
        self.governor = governor
        self.apply = apply

    def check_write(self, profile: MemoryProfile, scope: Scope) -> None:
        """A put or delete in ``scope``: write, then read, ``fact`` notes there."""
        agent = self.governor.agent_id
        rules.check_write(agent, profile, scope, "fact", vis="thread")
        rules.check_read(agent, profile, scope, KINDS)

    def check_writes(self, ops: Sequence[Op]) -> None:
        """Refuse now (``AccessDenied``, recorded as the denied op) the first put or
        delete of ``ops`` the profile refuses, before any op runs."""
        profile = self.governor.profile()
        for op in ops:
            if isinstance(op, PutOp):
                operation, scope = operation_of(op)
                assert scope is not None
                try:
                    self.check_write(profile, scope)
                except AccessDenied as exc:
                    self.governor.refused(operation, scope, KINDS, exc)
                    raise

    def run(self, op: Op) -> Result:
        """``op`` as one governed call (checked, run with the principal's access filter,
        recorded once)."""
        operation, scope = operation_of(op)

        def call(profile: MemoryProfile) -> tuple[Result, list[str]]:
            if isinstance(op, PutOp):
                assert scope is not None
                self.check_write(profile, scope)
            else:
                rules.check_kinds(self.governor.agent_id, profile, KINDS)
            result, ids = self.apply(op, lambda s: self.governor.filter(profile, s))
            if not ids:
                _check_found(self.governor.agent_id, op, profile, scope, operation)
            return result, ids

        query = op.query if isinstance(op, SearchOp) else None
        return self.governor.call(operation, scope, KINDS, call, lambda r: r[1], query)[0]
