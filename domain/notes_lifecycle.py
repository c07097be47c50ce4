"""The lifecycle half of :class:`memfabric.domain.notes.Notes`: forget and legal hold,
retention class changes, tombstone checks and the file commands (``repoint``,
``delete_path``). A mixin: ``Notes`` inherits it, so ``notes.forget(...)`` is unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memfabric.domain.errors import ScopeError
from memfabric.domain.inputs import DeletePathArgs, ForgetArgs, ReleaseHoldArgs, RetentionArgs, RepointArgs, VerifyArgs
from memfabric.domain.results import ForgetResult, MemoryNote, PathForgetResult, RepointResult
from memfabric.domain.scope import Scope
from memfabric.domain.service import MemoryService


class LifecycleMethods:
    """Forget, hold, retention and file commands of one scope's handle (see ``Notes``)."""

    _service: MemoryService
    scope: Scope
    actor: str

    def _check_scope(self, scope: Scope | Mapping[str, Any] | None) -> None:
        if scope is None:
            return
        other = scope if isinstance(scope, Scope) else Scope.model_validate(scope)
        if other != self.scope:
            raise ScopeError(f"this handle serves scope {self.scope}, not {other}")

    # ----------------------------------------------------------------- forget
    def forget(
        self, *, id: str | None = None, block: str | None = None, hold: bool = False,  # noqa: A002
        requested_by: str | None = None, approval: str | None = None,
    ) -> ForgetResult:
        """Tombstone a note (``id=``) or a working block (``block=``), exactly one.

        Without ``hold`` the note's data key is destroyed and its projection rows deleted
        in the same transaction (crypto-shredding): its content can no longer be read
        from the log. ``hold=True`` keeps the content under legal hold; a held note is
        never recalled, never in context, never a fold or link candidate.
        ``deleted`` is 1 for a tombstoned note or block, 0 when held or not visible from
        this scope (a note resolves as in :meth:`get`; a block is of exactly this scope).
        A forgotten block's content is cleared and ``forgotten_at`` stamped; its label is
        free again (the next write starts it afresh). A held block refuses writes.

        The ``Forgotten`` event is the tombstone: id, kind, scope, HMAC-SHA256 of the
        content under the fabric secret, ``supersedes``/``superseded_by``,
        ``source_entry_ids``, link ids, reason (``forgotten`` or ``legal_hold``), time,
        ``requested_by`` (default: this handle's actor) and cause. A held note cannot
        be forgotten (``deleted=0, held=True``); forgetting twice is a no-op.

        Issue 30: a note with the regulated label is not erased before its floor
        (``RetentionFloorError`` naming the floor's end; nothing written) unless
        ``approval`` names the legal erasure's approval reference (1-200 characters,
        recorded in the tombstone). Holding is always allowed.

        Raises ``pydantic.ValidationError`` when both or neither of ``id``/``block``
        are given, for a malformed id or label, a non-bool ``hold`` or a
        ``requested_by`` outside 1-200 characters; nothing is written then.
        """
        args = ForgetArgs(id=id, block=block, hold=hold, requested_by=requested_by, approval=approval)
        who = args.requested_by or self.actor
        if args.id is not None:
            return self._service.forget(self.scope, args.id, hold=args.hold, requested_by=who,
                                        approval=args.approval)
        assert args.block is not None
        return self._service.forget_block(self.scope, args.block, hold=args.hold, requested_by=who,
                                          approval=args.approval)

    def set_retention(self, id: str, retention: str, *, approval: str | None = None,  # noqa: A002
                      requested_by: str | None = None) -> MemoryNote:
        """Issue 30: move note ``id`` to retention class ``retention`` (``ephemeral |
        operational | durable | regulated``) with one ``RetentionChanged`` event (none
        when it already has it); returns the note (``outcome="retained"``). A note
        carrying the regulated label (regulated now or before) moved into a longer class
        (ephemeral < operational < regulated < durable) needs ``approval``, an approval
        reference recorded in the event (``RetentionError`` otherwise). Raises
        ``pydantic.ValidationError`` for a bad id, class or reference,
        ``NoteNotFoundError``, ``NoteForgottenError``; nothing is written then."""
        args = RetentionArgs.model_validate({"id": id, "retention": retention, "approval": approval,
                                             "requested_by": requested_by})
        return self._service.set_retention(self.scope, args.id, args.retention,
                                           requested_by=args.requested_by or self.actor,
                                           approval=args.approval)

    def verify_content(self, id: str, text: str) -> bool:  # noqa: A002
        """Whether ``text`` matches the tombstone hash (HMAC-SHA256 under the fabric
        secret, constant-time compare) of forgotten or held note ``id``: an auditor's
        check that the erased content was a given text. For a note written with a
        redactor the hash is of the redacted text.

        Raises ``pydantic.ValidationError`` (malformed id, ``text`` not a string),
        ``NoteNotFoundError`` (no such note in this scope), ``FabricError`` (the note
        has no tombstone)."""
        args = VerifyArgs(id=id, text=text)
        return self._service.verify_content(self.scope, args.id, args.text)

    # ------------------------------------------------------------------ files
    def repoint(
        self, from_path: str, to_path: str, *, scope: Scope | Mapping[str, Any] | None = None
    ) -> RepointResult:
        """Make the ``file`` notes of this scope recorded against ``from_path`` follow
        their file to ``to_path`` (a rename or move).

        Each live ``file`` note whose path is exactly ``from_path`` gets one
        ``Repointed`` event; its id, content, embedding (nothing is re-embedded),
        ``source_entry_ids`` and every other field stay as they are, and its recall
        row shows the new path. Held notes stay on ``from_path`` (listed in
        ``held``); other kinds and other paths are never touched. One SQL read on the
        note-scope index selects the notes by path (never by content), under the
        scope's write lock. ``scope``, when given (a :class:`Scope` or a mapping with
        ``tenant_id``/``resource_id``/``thread_id``), must be this handle's own scope.

        Returns :class:`~memfabric.domain.service.RepointResult`. Raises
        ``pydantic.ValidationError`` (a path empty or over 1024 characters, or equal
        paths), ``ScopeError`` (another scope); nothing is written then.
        """
        self._check_scope(scope)
        args = RepointArgs(from_path=from_path, to_path=to_path)
        return self._service.repoint(self.scope, args.from_path, args.to_path)

    def delete_path(
        self, path: str, hold: bool = False, *, requested_by: str | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
    ) -> PathForgetResult:
        """Tombstone every ``file`` note of this scope recorded against ``path`` (the
        file was deleted), exactly as :meth:`forget` does for one note: keys destroyed
        and projection rows deleted in one transaction; with ``hold=True`` the notes
        are put under legal hold instead. Notes already held are kept (listed in
        ``held``). One SQL read selects the notes by path, never by content.
        ``scope``, when given, must be this handle's own scope.

        Returns :class:`~memfabric.domain.service.PathForgetResult`. Raises
        ``pydantic.ValidationError`` (bad ``path``, ``hold`` or ``requested_by``),
        ``ScopeError`` (another scope); nothing is written then.
        """
        self._check_scope(scope)
        args = DeletePathArgs(path=path, hold=hold, requested_by=requested_by)
        return self._service.delete_path(
            self.scope, args.path, hold=args.hold, requested_by=args.requested_by or self.actor
        )

    # -------------------------------------------------------------- lifecycle
    def release_hold(self, id: str, *, requested_by: str | None = None) -> MemoryNote:  # noqa: A002
        """Lift the legal hold of note ``id`` (a ``HoldReleased`` event recording
        ``requested_by``, default this handle's actor): it is recalled, listed and in
        context again; the hold's tombstone stays in :meth:`history`. Returns the note
        (``outcome="released"``).

        Raises ``NoteNotFoundError`` (no such note in this scope), ``NoteForgottenError``
        (tombstoned), ``NotHeldError`` (not held), ``ValidationError`` (bad id or
        ``requested_by``); nothing is written then."""
        args = ReleaseHoldArgs(id=id, requested_by=requested_by)
        return self._service.release_hold(self.scope, args.id, requested_by=args.requested_by or self.actor)
