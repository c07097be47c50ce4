"""Working memory: labelled blocks an agent reads every turn, and the scope's working value.

A working block is a ``Note`` of kind ``working`` whose id is derived from its scope
and label (:func:`block_note_id`), so writing the same label again reaches the same
aggregate. Its events are ``Remembered`` (first write), ``BlockWritten`` (replace, or
the first write after a forget), ``BlockAppended`` and ``Forgotten``; ``block_version``
counts them.

The working value of a scope is::

    {"_fabric": {"blocks": {LABEL: {"content": str, "updated_at": datetime, "version": int}}}}

with one entry per live block (forgotten and held blocks are absent). Each entry is a
pure function of its note's state (:func:`block_entry`), which is what the
``working_value`` projection stores and what a host validator is shown.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, cast

from pydantic import BaseModel, ValidationError

from memfabric.domain import policy
from memfabric.domain.errors import (
    CapacityError,
    ConflictError,
    EventIntegrityError,
    NoteExistsError,
    NoteForgottenError,
    ValidatorRejectedError,
)
from memfabric.domain.inputs import block_id_mark
from memfabric.domain.note import Note
from memfabric.domain.results import MemoryNote, Outcome, note_view
from memfabric.domain.scope import Scope
from memfabric.domain.settings import WorkingValidator as WorkingValidator  # re-exported

if TYPE_CHECKING:
    from memfabric.domain.inputs import AppendBlockInput, Limits
    from memfabric.domain.ports import Embedder, NoteStore, UnitOfWork, UnitOfWorkFactory

FABRIC_KEY = "_fabric"


class BlockDeps(Protocol):
    """What block writes use of the handlers' dependencies (a
    :class:`memfabric.domain.deps.Deps`): the unit of work, the read side (to await
    a write), the limits, the host's validator, the embedder (its ``dim``) and the
    redactor."""

    @property
    def unit_of_work(self) -> UnitOfWorkFactory: ...

    @property
    def store(self) -> NoteStore: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def working_validator(self) -> WorkingValidator | None: ...

    @property
    def embedder(self) -> Embedder: ...

    def redact(self, text: str | None) -> str | None: ...


class BlockEntry(TypedDict):
    """One block of the working value: its text, last change (UTC) and version."""

    content: str
    updated_at: datetime
    version: int



def block_note_id(scope: Scope, label: str) -> str:
    """The 12-hex note id of block ``label`` in ``scope``: 8 hex of BLAKE2b of both and
    the 4-hex mark of :func:`~memfabric.domain.inputs.is_block_id` (issue 27), so a
    label names one note per scope, the same label in two scopes is two notes, and no
    explicit id of another kind can take it."""
    prefix = hashlib.blake2b(f"block#{scope.key}#{label}".encode(), digest_size=4).hexdigest()
    return prefix + block_id_mark(prefix)


def legacy_block_note_id(scope: Scope, label: str) -> str:
    """The id blocks written before issue 27 have (12 hex of BLAKE2b): still found."""
    return hashlib.blake2b(f"block#{scope.key}#{label}".encode(), digest_size=6).hexdigest()


def find_block(uow: UnitOfWork, scope: Scope, label: str) -> tuple[str, Note | None]:
    """``(note id, note)`` of block ``label`` in ``scope``: the block at its derived id,
    else an older block at its legacy id (a working note of that label), else
    ``(derived id, None)``. A note of another kind at the legacy id is never the block
    (it does not make the label unusable)."""
    derived = block_note_id(scope, label)
    note = uow.load(scope, derived)
    if note is not None:
        return derived, note
    legacy = uow.load(scope, legacy_block_note_id(scope, label))
    if legacy is not None and legacy.kind == "working" and legacy.block == label:
        return legacy.note_id, legacy
    return derived, None


def erasure_block_id(uow: UnitOfWork, scope: Scope, label: str) -> str:
    """The id ``forget(block=label)`` tombstones: the derived id when it exists or no
    note is at the legacy id; else the legacy id when that note is this label's
    working block, or cannot be decoded (a key fault: it is tombstoned blind)."""
    derived, legacy = block_note_id(scope, label), legacy_block_note_id(scope, label)
    if uow.exists(scope, derived) or not uow.exists(scope, legacy):
        return derived
    try:
        note = uow.load(scope, legacy)
    except EventIntegrityError:
        return legacy
    return legacy if note is not None and note.kind == "working" and note.block == label else derived


def check_block_note(note: Note | None, label: str) -> None:
    """Raise ``NoteExistsError`` when the note at block ``label``'s derived id is not a
    working note (a fact given that id explicitly): ids of different kinds never
    collide, so a block operation must never read, append to or forget it."""
    if note is not None and note.kind != "working":
        raise NoteExistsError(
            f"block: the id {note.note_id} of block {label!r} is taken by a {note.kind} note; "
            "use another label")


def block_entry(note: Note) -> BlockEntry | None:
    """The working-value entry of a working note, or ``None`` when it has none
    (not a working note, forgotten, held, expired (issue 30) or empty)."""
    if (note.kind != "working" or not note.live or note.content is None or note.block is None
            or getattr(note, "expired_at", None) is not None):
        return None
    changed = note.updated_at or note.created_on
    return BlockEntry(
        content=note.content,
        updated_at=changed.astimezone(timezone.utc),
        version=int(note.block_version),
    )


def working_value(blocks: Mapping[str, BlockEntry]) -> dict[str, Any]:
    """The working value holding ``blocks`` (labels sorted)."""
    return {FABRIC_KEY: {"blocks": {label: dict(blocks[label]) for label in sorted(blocks)}}}


def check_working_value(
    validator: WorkingValidator, value: dict[str, Any], label: str
) -> None:
    """Run a host validator on the working value a write of block ``label`` would
    produce; raises ``ValidatorRejectedError`` (naming the block) when it rejects."""
    if isinstance(validator, type) and issubclass(validator, BaseModel):
        try:
            validator.model_validate(value)
        except ValidationError as exc:
            raise ValidatorRejectedError(
                f"block: the working-value validator rejected block {label!r}: {exc}"
            ) from exc
        return
    try:
        verdict = cast(Callable[[dict[str, Any]], Any], validator)(value)
    except Exception as exc:  # a host's callable signals rejection by raising
        raise ValidatorRejectedError(
            f"block: the working-value validator rejected block {label!r}: {exc}"
        ) from exc
    if verdict is False:
        raise ValidatorRejectedError(
            f"block: the working-value validator rejected block {label!r}"
        )


def append_block(deps: BlockDeps, scope: Scope, item: AppendBlockInput) -> MemoryNote:
    """Append ``item.text`` to the working block ``item.block`` of ``scope`` in one unit
    of work (``item.expected_version``: see :meth:`BlockWriter.change`, whose errors it
    raises) and wait until the write is readable."""
    with deps.unit_of_work([scope]) as uow:
        view = BlockWriter(deps, uow, scope).change(
            item.block, append=item.text, expected_version=item.expected_version)
        uow.commit()
    deps.store.await_position(uow.position)
    return view


class BlockWriter:
    """Writes and appends working blocks of one scope inside a unit of work.

    The block's version is read inside the scope's write lock, so concurrent changes
    land one after the other. The working value a host validator sees is the committed
    one (read once per unit of work) plus the blocks this unit of work changed."""

    def __init__(self, deps: BlockDeps, uow: UnitOfWork, scope: Scope) -> None:
        self.deps, self.uow, self.scope = deps, uow, scope
        self._value: dict[str, BlockEntry] | None = None

    def change(
        self, label: str, *, content: str | None = None, append: str | None = None,
        expected_version: int | None = None,
    ) -> MemoryNote:
        """Write (``content``) or append to (``append``) block ``label``.

        ``expected_version`` turns a stale read into a ``ConflictError``. Nothing is
        recorded when a check fails: the block would pass
        ``limits.max_entry_text_chars`` (``CapacityError``), it is held
        (``NoteForgottenError``) or the host validator rejects it
        (``ValidatorRejectedError``)."""
        _, note = find_block(self.uow, self.scope, label)
        check_block_note(note, label)
        if note is not None and note.held:
            raise NoteForgottenError(f"block: block {label!r} is under legal hold and cannot be written")
        live = note is not None and not note.forgotten
        current = note.content if note is not None and live else None
        if expected_version is not None:
            actual = note.block_version if note is not None and live else 0
            if actual != expected_version:
                raise ConflictError(
                    f"expected_version: block {label!r} is at version {actual}, "
                    f"not {expected_version}; read it again and retry")
        text, new = self._new_content(current, content, append)
        self._check_cap(label, new, append is None)
        tokens = policy.count_tokens(new)
        outcome: Outcome
        if note is None:
            note = self._create(label, new, tokens)
            outcome = "inserted"
        elif live and append is not None:
            note.append_block(text=text, token_count=tokens)
            outcome = "appended"
        else:
            note.write_block(content=new, token_count=tokens)
            outcome = "replaced" if live else "inserted"
        self._validate(label, note)
        self.uow.add(note)
        return note_view(note, outcome)

    def _new_content(self, current: str | None, content: str | None, append: str | None) -> tuple[str, str]:
        """``(appended text, new block content)``; a newline separates an append from
        existing content unless the text starts with one."""
        if append is None:
            new = self.deps.redact(content) or ""
            return new, new
        text = self.deps.redact(append) or ""
        if current and not text.startswith("\n"):
            text = "\n" + text
        return text, (current or "") + text

    def _check_cap(self, label: str, new: str, replacing: bool) -> None:
        cap = self.deps.limits.max_entry_text_chars
        if len(new) > cap:
            raise CapacityError(
                f"{'content' if replacing else 'text'}: block {label!r} would hold {len(new)} "
                f"characters; limits.max_entry_text_chars is {cap}")

    def _create(self, label: str, content: str, tokens: int) -> Note:
        return Note.remember(
            scope=self.scope, note_id=block_note_id(self.scope, label), kind="working",
            content=content, path=None, block=label, subject=None, t_ref=None, valid_from=None,
            valid_to=None, keywords=[], tags=[], source_entry_ids=[], context=None, links=[],
            supersedes=None, importance=0.5, consent=None, embedding=None, embedder_id=None,
            dim=self.deps.embedder.dim, token_count=tokens, cause="caller",
        )

    def _validate(self, label: str, note: Note) -> None:
        validator = self.deps.working_validator
        if validator is None:
            return
        if self._value is None:
            self._value = self.uow.working_blocks(self.scope)
        entry = block_entry(note)
        assert entry is not None
        proposed = {**self._value, label: entry}
        check_working_value(validator, working_value(proposed), label)
        self._value = proposed
