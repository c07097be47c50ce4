"""``PrincipalNotes``: a scope handle bound to a principal (issue 33).

``fabric.scope(...).as_principal(agent_id)`` returns one. It offers the reads and
writes of :class:`~memfabric.domain.notes.Notes`; each call is checked against the
principal's current memory profile (read from the principals projection at every
call, so a changed profile holds from the next call) and recorded once in the access
log (``served``, ``denied`` naming the rule, or ``error``).

Reads: the call's kinds must be readable and its scope within ``recall_scope``
(else ``AccessDenied``); the rows are then restricted *inside the store's query* to
notes whose kind is readable, whose visibility is allowed and whose home matches a
pattern, or that were granted to the principal (any scope of the reader's tenant):
:class:`~memfabric.domain.principal.AccessFilter`. A note addressed by id (get,
history, lineage, link, forget, ...) must pass the same rule. Writes: see
:func:`memfabric.domain.access.check_write`. A refused call writes nothing and returns
nothing.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from memfabric.domain import access as rules
from memfabric.domain.errors import AccessDenied, NoteNotFoundError
from memfabric.domain.inputs import Consent, NoteRefArgs, RecallInput, RememberInput
from memfabric.domain.ports import NoteFilter
from memfabric.domain.principal import MemoryProfile
from memfabric.domain.results import MemoryNote
from memfabric.domain.scope import Scope

if TYPE_CHECKING:
    from memfabric.domain.notes import Notes

_T = TypeVar("_T")


class PrincipalNotes:
    """Every read and write of one scope on behalf of principal ``agent_id`` (see the
    module doc). Construct through ``Notes.as_principal(agent_id)``."""

    def __init__(self, notes: Notes, agent_id: str) -> None:
        svc = notes._service  # noqa: SLF001 - the handle it wraps
        self._notes = notes
        self._service = svc
        self._principals: rules.Principals = svc.access
        self.governor = rules.Governor(svc.access, agent_id)
        """The principal's governed calls (its profile, access filter and access records)."""
        self.agent_id = self.governor.agent_id
        self.scope: Scope = notes.scope
        self.actor = self.agent_id

    def __repr__(self) -> str:
        return f"PrincipalNotes({self.scope.key!r}, {self.agent_id!r})"

    # ------------------------------------------------------------ governance
    def _profile(self) -> MemoryProfile:
        return self.governor.profile()

    def _governed(self, operation: str, kinds: Iterable[str] | Callable[[MemoryProfile], Iterable[str]],
                  run: Callable[[MemoryProfile], _T], ids_of: Callable[[_T], Sequence[str]],
                  query: str | None = None) -> _T:
        """:meth:`memfabric.domain.access.Governor.call` from this handle's scope."""
        return self.governor.call(operation, self.scope, kinds, run, ids_of, query)

    def _filtered(self, profile: MemoryProfile) -> Notes:
        """A handle of this scope whose recall, list and count carry the access filter."""
        inner = self._handle(self.scope)
        inner._access = self.governor.filter(profile, self.scope)  # noqa: SLF001 - the handle this one owns
        return inner

    def _readable(self, profile: MemoryProfile, note_id: str, *,
                  links: bool = True) -> tuple[Scope, MemoryNote]:
        """The note ``note_id`` the principal may read from this scope: ``(the scope to
        address it from, its view with links the principal may see)``. Raises
        ``NoteNotFoundError`` (no such note in reach) or ``AccessDenied`` (rule
        ``note``)."""
        note_id = NoteRefArgs(id=note_id).id
        rules.check_read(self.agent_id, profile, self.scope, ())
        homes = rules.homes_of(self._service.deps, self._principals.store, self.agent_id, self.scope, note_id)
        if not homes:
            raise NoteNotFoundError(f"no note {note_id!r} in scope {self.scope}")
        grants = self._principals.store.grants(self.agent_id, self.scope.tenant_id)
        for home, vis, granted in homes:
            address = self.scope if not granted else home
            view = self._service.get(address, note_id)
            if rules.readable_note(self.agent_id, profile, self.scope, view.scope, vis, view.kind,
                                   rules.note_aggregate(view.scope, note_id), grants, granted=granted):
                return address, (self._with_links(profile, view) if links else view)
        raise rules.deny(self.agent_id, "note", f"note {note_id!r} is outside the profile")

    def _with_links(self, profile: MemoryProfile, view: MemoryNote) -> MemoryNote:
        """``view`` with only the links whose targets the principal may read."""
        if not view.links:
            return view
        access = self.governor.filter(profile, self.scope)
        aid = rules.note_aggregate(view.scope, view.id)
        found = self._service.store.hit_links(self.scope, [aid], filters=NoteFilter(access=access))
        keep = {(e["id"], e["relation"]) for e in found.get(aid, [])}
        kept: MemoryNote = dataclasses.replace(view, links=tuple(
            link for link in view.links if (link.id, link.relation) in keep))
        return kept

    def _refs(self, profile: MemoryProfile, views: Sequence[MemoryNote]) -> list[MemoryNote]:
        """``views`` with ``supersedes`` / ``superseded_by`` cleared where they name a note
        the principal may not read (every id a read returns is readable by its reader)."""
        known: dict[str, bool] = {}

        def ok(ref: str | None) -> bool:
            if ref is None:
                return True
            if ref not in known:
                try:
                    self._readable(profile, ref, links=False)
                    known[ref] = True
                except (AccessDenied, NoteNotFoundError):
                    known[ref] = False
            return known[ref]

        out = []
        for v in views:
            if not (ok(v.supersedes) and ok(v.superseded_by)):
                v = dataclasses.replace(v, supersedes=v.supersedes if ok(v.supersedes) else None,
                                        superseded_by=v.superseded_by if ok(v.superseded_by) else None)
            out.append(v)
        return out

    def _write_note(self, profile: MemoryProfile, note_id: str, *, retention: str | None = None,
                    readable: bool = True) -> Scope:
        """Check a write on note ``note_id`` (readable, kind writable); returns the scope
        to address it from."""
        address, view = self._readable(profile, note_id)
        vis = view.consent.visibility if view.consent is not None else None
        rules.check_write(self.agent_id, profile, view.scope, view.kind,
                          vis=vis, retention=retention or view.retention)
        return address

    # ------------------------------------------------------------------ reads
    def recall(self, query: str, *, kinds: Iterable[str] | str | None = None, **options: Any) -> Any:
        """``Notes.recall`` for the principal (same arguments; without ``kinds``, the
        default kinds the profile may read)."""
        kinds = kinds if kinds is None or isinstance(kinds, str) else tuple(kinds)  # read once

        def wanted(p: MemoryProfile) -> tuple[str, ...]:
            return _kinds(kinds, ("fact", "file"), p)

        def run(p: MemoryProfile) -> Any:
            result = self._checked(p, wanted(p)).recall(query, kinds=wanted(p), **options)
            return dataclasses.replace(result, hits=self._refs(p, result.hits))
        return self._governed("recall", wanted, run, lambda r: [h.id for h in r.hits], query=query)

    def recall_input(self, query: RecallInput) -> Any:
        """Recall with a validated ``RecallInput`` (the context provider's path)."""
        def run(p: MemoryProfile) -> Any:
            rules.check_read(self.agent_id, p, self.scope, query.kinds)
            result = self._service.recall(self.scope, query, access=self.governor.filter(p, self.scope))
            return dataclasses.replace(result, hits=self._refs(p, result.hits))
        return self._governed("recall", query.kinds, run, lambda r: [h.id for h in r.hits],
                              query=query.query)

    def _checked(self, profile: MemoryProfile, kinds: Iterable[str]) -> Notes:
        rules.check_read(self.agent_id, profile, self.scope, kinds)
        return self._filtered(profile)

    def list(self, *, kinds: Iterable[str] | str | None = None, **options: Any) -> Any:  # noqa: A003
        """``Notes.list`` for the principal (same arguments)."""
        kinds = kinds if kinds is None or isinstance(kinds, str) else tuple(kinds)  # read once

        def wanted(p: MemoryProfile) -> tuple[str, ...]:
            return _kinds(kinds, ("fact", "procedure", "file"), p)

        def run(p: MemoryProfile) -> Any:
            page = self._checked(p, wanted(p)).list(kinds=wanted(p), **options)
            return dataclasses.replace(page, items=self._refs(p, page.items))
        return self._governed("list", wanted, run, lambda page: [n.id for n in page.items])

    def count(self, *, kinds: Iterable[str] | str | None = None, **options: Any) -> int:
        """``Notes.count`` for the principal (same arguments)."""
        kinds = kinds if kinds is None or isinstance(kinds, str) else tuple(kinds)  # read once

        def wanted(p: MemoryProfile) -> tuple[str, ...]:
            return _kinds(kinds, ("fact", "procedure", "file"), p)
        return self._governed("count", wanted,
                              lambda p: self._checked(p, wanted(p)).count(kinds=wanted(p), **options),
                              lambda n: ())

    def get(self, id: str) -> MemoryNote:  # noqa: A002 - public API name
        """The note ``id`` if the principal may read it (``NoteNotFoundError`` when no
        such note is in reach, ``AccessDenied`` (rule ``note``) when the profile excludes it)."""
        return self._governed("get", (), lambda p: self._refs(p, [self._readable(p, id)[1]])[0],
                              lambda n: [n.id])

    def history(self, id: str) -> Any:  # noqa: A002
        """``Notes.history`` of a note the principal may read."""
        return self._governed("history", (), lambda p: self._service.history(
            self._readable(p, id)[0], NoteRefArgs(id=id).id), lambda h: [id])

    def lineage(self, id: str) -> Any:  # noqa: A002
        """``Notes.lineage`` of a note the principal may read."""
        return self._governed("lineage", (), lambda p: self._service.lineage(
            self._readable(p, id)[0], NoteRefArgs(id=id).id), lambda h: [id])

    def working_value(self, *, known_at: datetime | None = None) -> dict[str, Any]:
        """``Notes.working_value`` (kind ``working`` readable)."""
        def run(p: MemoryProfile) -> dict[str, Any]:
            rules.check_read(self.agent_id, p, self.scope, ["working"])
            return self._notes.working_value(known_at=known_at)
        return self._governed("working_value", ("working",), run,
                              lambda v: list(v.get("_fabric", {}).get("blocks", {})))

    def search_conversation(self, query: str, **options: Any) -> Any:
        """``Notes.search_conversation`` (kind ``episode`` readable)."""
        def run(p: MemoryProfile) -> Any:
            rules.check_read(self.agent_id, p, self.scope, ["episode"])
            return self._notes.search_conversation(query, **options)
        return self._governed("search_conversation", ("episode",), run,
                              lambda r: [h.entry_id for h in r.hits], query=query)

    def context_provider(self, *args: Any, **kwargs: Any) -> Any:
        """``Notes.context_provider`` whose working value and recall go through this
        principal's checks (each call of the provider is recorded). As for ``recall``,
        without ``kinds`` it asks for the default kinds the profile may read, and without
        ``include_working`` it reads the working value only when the profile may."""
        from memfabric.domain.context import ContextProvider  # noqa: PLC0415
        profile = self._profile()
        if "kinds" not in kwargs:
            kwargs["kinds"] = _kinds(None, ("fact", "file"), profile)
        if not args and "include_working" not in kwargs and "working" not in profile.read_kinds:
            kwargs["include_working"] = False
        plain = self._notes.context_provider(*args, **kwargs)
        return ContextProvider(_Guarded(self), self.scope, plain.options)

    def read_outside(self, kind: str, read: Callable[[], _T], operation: str = "read") -> _T:
        """``read()``, a read of ``kind`` memory made outside the fabric (the memory
        tools' files), as one governed call: the scope within ``recall_scope`` and
        ``kind`` readable (else ``AccessDenied`` naming the rule and ``read()`` is not
        run), recorded as ``operation`` (served, denied or error; no note ids)."""
        def run(p: MemoryProfile) -> _T:
            rules.check_read(self.agent_id, p, self.scope, [kind])
            return read()
        return self._governed(operation, (kind,), run, lambda _: ())

    # ----------------------------------------------------------------- writes
    def check_write(self, kind: str, operation: str = "remember") -> None:
        """Refuse now a write of ``kind`` the profile would refuse: ``AccessDenied``
        naming the rule, recorded as a denied ``operation``. A host that changes
        something outside the fabric before the write (the memory tools' files) asks
        first, so a refused write changes nothing. Allowed: returns and records nothing
        (the write itself is recorded)."""
        profile = self._profile()
        try:
            rules.check_write(self.agent_id, profile, self.scope, kind)
        except AccessDenied as exc:
            self.governor.refused(operation, self.scope, (kind,), exc)
            raise

    def remember(self, *, kind: str, **fields: Any) -> MemoryNote:
        """``Notes.remember`` checked by :func:`memfabric.domain.access.check_write`
        (and ``supersedes`` must name a note the principal may read)."""
        def run(p: MemoryProfile) -> MemoryNote:
            self._check_item(p, {"kind": kind, **fields})
            return self._notes.remember(kind=kind, **fields)  # type: ignore[arg-type]
        return self._governed("remember", (kind,), run, lambda n: [n.id])

    def remember_many(self, items: Iterable[Mapping[str, Any] | RememberInput],
                      **options: Any) -> builtins.list[MemoryNote]:
        """``Notes.remember_many``; every item is checked before anything is written."""
        batch = [i.model_dump(exclude_unset=True) if isinstance(i, RememberInput) else dict(i) for i in items]
        kinds = tuple(sorted({str(i.get("kind")) for i in batch}))

        def run(p: MemoryProfile) -> builtins.list[MemoryNote]:
            for item in batch:
                self._check_item(p, item)
            return self._notes.remember_many(batch, **options)
        return self._governed("remember_many", kinds, run, lambda ns: [n.id for n in ns])

    def _check_item(self, profile: MemoryProfile, item: Mapping[str, Any]) -> None:
        consent = item.get("consent")
        vis = None
        if consent is not None:
            vis = (consent if isinstance(consent, Consent) else Consent.model_validate(consent)).visibility
        rules.check_write(self.agent_id, profile, self.scope, str(item.get("kind")),
                          vis=vis, retention=item.get("retention"))
        if item.get("supersedes"):
            self._readable(profile, str(item["supersedes"]))

    def append_block(self, block: str, text: str, **options: Any) -> MemoryNote:
        """``Notes.append_block`` (a ``working`` write: ``propose`` suffices)."""
        def run(p: MemoryProfile) -> MemoryNote:
            rules.check_write(self.agent_id, p, self.scope, "working")
            return self._notes.append_block(block, text, **options)
        return self._governed("append_block", ("working",), run, lambda n: [n.id])

    def link(self, from_id: str, to_id: str, *args: Any, **kwargs: Any) -> MemoryNote:
        """``Notes.link``: the source is written (kind writable), the target readable."""
        def run(p: MemoryProfile) -> MemoryNote:
            address = self._write_note(p, from_id)
            self._readable(p, to_id)
            return self._scoped(address).link(from_id, to_id, *args, **kwargs)
        return self._governed("link", (), run, lambda n: [n.id])

    def unlink(self, from_id: str, to_id: str, *args: Any, **kwargs: Any) -> MemoryNote:
        """``Notes.unlink``, checked as :meth:`link`."""
        def run(p: MemoryProfile) -> MemoryNote:
            address = self._write_note(p, from_id)
            self._readable(p, to_id)
            return self._scoped(address).unlink(from_id, to_id, *args, **kwargs)
        return self._governed("unlink", (), run, lambda n: [n.id])

    def forget(self, *, id: str | None = None, block: str | None = None, **options: Any) -> Any:  # noqa: A002
        """``Notes.forget``: a note the principal may read and write, or a block."""
        def run(p: MemoryProfile) -> Any:
            if id is None:
                rules.check_write(self.agent_id, p, self.scope, "working")
                return self._notes.forget(block=block, **options)
            return self._scoped(self._write_note(p, id)).forget(id=id, **options)
        return self._governed("forget", (), run, lambda r: [id] if id and r.deleted else [])

    def set_retention(self, id: str, retention: str, **options: Any) -> MemoryNote:  # noqa: A002
        """``Notes.set_retention`` (the new class within ``retention_ceiling``)."""
        def run(p: MemoryProfile) -> MemoryNote:
            address = self._write_note(p, id, retention=retention)
            return self._scoped(address).set_retention(id, retention, **options)
        return self._governed("set_retention", (), run, lambda n: [n.id])

    def release_hold(self, id: str, **options: Any) -> MemoryNote:  # noqa: A002
        """``Notes.release_hold`` of a note the principal may read and write."""
        def run(p: MemoryProfile) -> MemoryNote:
            return self._scoped(self._write_note(p, id)).release_hold(id, **options)
        return self._governed("release_hold", (), run, lambda n: [n.id])

    def repoint(self, from_path: str, to_path: str, **options: Any) -> Any:
        """``Notes.repoint`` (a ``file`` write)."""
        def run(p: MemoryProfile) -> Any:
            rules.check_write(self.agent_id, p, self.scope, "file")
            return self._notes.repoint(from_path, to_path, **options)
        return self._governed("repoint", ("file",), run, lambda r: ())

    def delete_path(self, path: str, *args: Any, **kwargs: Any) -> Any:
        """``Notes.delete_path`` (a ``file`` write)."""
        def run(p: MemoryProfile) -> Any:
            rules.check_write(self.agent_id, p, self.scope, "file")
            return self._notes.delete_path(path, *args, **kwargs)
        return self._governed("delete_path", ("file",), run, lambda r: ())

    def _scoped(self, address: Scope) -> Notes:
        return self._notes if address == self.scope else self._handle(address)

    def _handle(self, address: Scope) -> Notes:
        """A plain handle of ``address`` acting as this principal, of the wrapped handle's
        class (this module does not import :mod:`memfabric.domain.notes`: it is imported by it)."""
        return type(self._notes)(self._service, address, actor=self.agent_id)

    # ------------------------------------------------- sessions, tools, refused
    def attach(self, session: Any, *, signal: Any = None) -> Any:
        """``Notes.attach``: authorise ``session`` on this scope (the tools' gate)."""
        return self._notes.attach(session, signal=signal)

    def tools(self, root: Any = None, *, max_file_bytes: int = 50 * 1024) -> Any:
        """The memory tools of this scope, every call through this principal."""
        factory = self._notes._tools  # noqa: SLF001 - the factory of the handle it wraps
        return factory(self, self._service, root, max_file_bytes=max_file_bytes)

    def _refused(self, operation: str) -> Any:
        def run(p: MemoryProfile) -> Any:
            raise rules.deny(self.agent_id, "operation", f"{operation} is the host's, not a principal's")
        return self._governed(operation, (), run, lambda r: ())

    def grant(self, *args: Any, **kwargs: Any) -> Any:
        """Refused (rule ``operation``): grants are made from the owner's plain handle."""
        return self._refused("grant")

    def revoke(self, *args: Any, **kwargs: Any) -> Any:
        """Refused (rule ``operation``)."""
        return self._refused("revoke")

    def counts(self, *args: Any, **kwargs: Any) -> Any:
        """Refused (rule ``operation``): the counts by state cover every kind of the
        scope prefix, the host's view (a principal counts with ``count``)."""
        return self._refused("counts")

    @property
    def entities(self) -> Any:
        """Refused (rule ``operation``): entities are not governed by memory profiles yet."""
        return self._refused("entities")

    def verify_content(self, *args: Any, **kwargs: Any) -> Any:
        """Refused (rule ``operation``): an auditor's check, made on a plain handle."""
        return self._refused("verify_content")

    def conversation(self) -> Any:
        """Refused (rule ``operation``): use :meth:`search_conversation`."""
        return self._refused("conversation")


class _Guarded:
    """The two service calls a context provider makes, through a principal's checks."""

    def __init__(self, notes: PrincipalNotes) -> None:
        self._notes = notes

    def working_value(self, scope: Scope, known_at: datetime | None = None) -> dict[str, Any]:
        return self._notes.working_value(known_at=known_at)

    def recall(self, scope: Scope, query: RecallInput) -> Any:
        return self._notes.recall_input(query)


def _kinds(kinds: Iterable[str] | str | None, default: tuple[str, ...], profile: MemoryProfile) -> tuple[str, ...]:
    """The kinds asked for, or the ``default`` ones ``profile`` may read (all of
    ``default`` when it may read none: the call is then denied naming them)."""
    if kinds is not None:
        return (kinds,) if isinstance(kinds, str) else tuple(kinds)
    readable = set(profile.read_kinds)
    return tuple(k for k in default if k in readable) or default
