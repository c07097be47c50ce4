"""Who sees a note, and which notes a write consolidates with (issue 16). Pure.

A note lives in the scope it was written from, its *home* ``(tenant, resource,
thread)``, and carries a visibility in its stored consent:

- ``thread``: seen only from its home scope;
- ``resource``: seen from every scope of its tenant and resource, threads included,
  and from the user-level scope ``(tenant, resource)``; a note whose home has no
  resource is seen only from its home;
- ``tenant``: seen from every scope of its tenant.

Another tenant never sees anything. The rule runs in SQL
(``memfabric.projections.recall_index.scope_filter``); :func:`visible` is the same
rule in Python (the in-memory twin and the tests).

**Defaults per kind** (:data:`DEFAULT_VISIBILITY`, applied when the caller's consent
gives no ``visibility``): ``fact`` and ``procedure`` are ``resource`` (what a user
said or how they work follows them across their threads); ``file`` is ``thread`` (a
file note mirrors a file of the thread's workspace; path commands act on the scope's
own files); ``working`` blocks are the thread's working value and have no consent at
all (per scope); an ``episode`` is a view of one thread's conversation ledger
(``thread``). The resolved visibility is stored explicitly on every new note, so a
later change of defaults never changes an existing note. Events written before
issue 16 stored no visibility (``consent`` ``None`` or without the key): they read
as :data:`LEGACY_VISIBILITY` (``thread``), exactly as they were written. Nothing is
migrated.

**Consolidation groups.** A write of visibility ``v`` from scope ``S`` is decided
against the live notes of the same kind that are (a) of the *same visibility* and
visible from ``S`` (:func:`group`): ``thread`` → the notes of exactly ``S``;
``resource`` → the resource-visible notes of every thread of ``S``'s resource (and of
the user-level scope); ``tenant`` → the tenant-visible notes of the whole tenant; or
(b) notes of ``S`` itself with a *narrower* visibility (:func:`meets`). So a fact
written from thread-2 folds into (or supersedes) the same fact written from thread-1,
the event landing on thread-1's note, whose home stays thread-1; a thread-only note
never meets another thread's notes; repeating in a thread a fact that an older release
wrote there thread-only folds into that note (one live note, still thread-only: a fold
takes the narrower consent, never widens). A wider note is never narrowed by a write
of another audience: a thread-only write never meets a resource-visible note. Every
note a write may change is guarded by a lock all its possible writers take
(:func:`write_locks`: the scope's own, ``(tenant, resource)`` for resource- and
tenant-visible writes, ``(tenant)`` for tenant-visible ones), so two concurrent
writers in two threads cannot both insert the same fact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from memfabric.domain.scope import Scope

Visibility = Literal["thread", "resource", "tenant"]
Reach = Literal["exact", "resource", "tenant"]

LEGACY_VISIBILITY: Visibility = "thread"
"""What a stored consent without a visibility means (every note written before issue 16
without an explicit ``consent.visibility``)."""

DEFAULT_VISIBILITY: Mapping[str, Visibility] = {
    "fact": "resource", "procedure": "resource", "file": "thread",
    "working": "thread", "episode": "thread",
}
"""The visibility a new note of each kind gets when the caller names none."""


def of_consent(consent: Mapping[str, Any] | None) -> Visibility:
    """The visibility a stored consent dict means (:data:`LEGACY_VISIBILITY` when it
    is ``None`` or has no ``visibility``)."""
    vis = (consent or {}).get("visibility")
    return vis if vis in ("thread", "resource", "tenant") else LEGACY_VISIBILITY


def stored_consent(kind: str, consent: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The consent to record on a new note of ``kind``: the caller's (a
    ``Consent.model_dump()``, or ``None``) with its visibility resolved through
    :data:`DEFAULT_VISIBILITY`; ``None`` for ``working`` notes (no consent)."""
    if kind == "working":
        return None
    out = {"visibility": None, "granted": None, "purposes": [], **(consent or {})}
    if out["visibility"] is None:
        out["visibility"] = DEFAULT_VISIBILITY.get(kind, LEGACY_VISIBILITY)
    return out


def reach(scope: Scope, visibility: Visibility) -> Reach:
    """Which homes a note of ``visibility`` seen from ``scope`` can have: ``exact``
    (``scope`` itself: thread visibility, or resource visibility without a resource),
    ``resource`` (any home of ``scope``'s tenant and resource) or ``tenant``."""
    if visibility == "tenant":
        return "tenant"
    if visibility == "resource" and scope.resource_id is not None:
        return "resource"
    return "exact"


def lock_scope(scope: Scope, visibility: Visibility) -> Scope:
    """The scope whose write lock serialises the writers of ``scope``'s group for
    ``visibility``: ``scope`` itself, ``(tenant, resource)`` or ``(tenant)``."""
    how = reach(scope, visibility)
    if how == "tenant":
        return Scope(tenant_id=scope.tenant_id)
    if how == "resource":
        return Scope(tenant_id=scope.tenant_id, resource_id=scope.resource_id)
    return scope


def visible(home: Scope, visibility: Visibility, reader: Scope) -> bool:
    """Whether a note of ``home`` and ``visibility`` is seen from ``reader`` (the rule
    of the module doc; the SQL twin is ``recall_index.scope_filter``)."""
    if home.tenant_id != reader.tenant_id:
        return False
    if home.sql()[1:] == reader.sql()[1:] or visibility == "tenant":
        return True
    return (visibility == "resource" and reader.resource_id is not None
            and home.resource_id == reader.resource_id)


_ALL: tuple[Visibility, ...] = ("thread", "resource", "tenant")
ORDER: Mapping[str, int] = {"thread": 0, "resource": 1, "tenant": 2}
"""Visibilities from narrowest to widest."""


def narrower(visibility: Visibility) -> list[Visibility]:
    """The visibilities narrower than ``visibility`` (``thread`` < ``resource`` < ``tenant``)."""
    return [v for v in _ALL if ORDER[v] < ORDER[visibility]]


def group(scope: Scope, visibility: Visibility) -> tuple[Reach, Visibility]:
    """The consolidation group of a write: ``(reach, visibility)``; its candidates are
    the notes of that visibility whose home is within the reach of ``scope``, and the
    notes of ``scope`` itself with a :func:`narrower` visibility."""
    return reach(scope, visibility), visibility


def meets(writer: Scope, visibility: Visibility, home: Scope, note_visibility: Visibility) -> bool:
    """Whether a write of ``visibility`` from ``writer`` may consolidate with a note of
    ``home`` and ``note_visibility`` (the group rule of the module doc, in Python)."""
    if note_visibility == visibility:
        how = reach(writer, visibility)
        if how == "tenant":
            return home.tenant_id == writer.tenant_id
        if how == "resource":
            return home.sql()[:2] == writer.sql()[:2]
        return home == writer
    return home == writer and ORDER[note_visibility] < ORDER[visibility]


def write_locks(scope: Scope, visibility: Visibility) -> set[Scope]:
    """The locks a write of ``visibility`` from ``scope`` takes: ``scope``'s and the
    group lock (:func:`lock_scope`) of ``visibility`` and of every narrower one, so
    every note a write may change is guarded by a lock every other writer that may
    change it also takes."""
    return {scope, lock_scope(scope, visibility), *(lock_scope(scope, v) for v in narrower(visibility))}
