"""Promotion (issue 14 step 4): a ``fact`` or ``procedure`` derived from a reflection.

``notes.remember(kind="fact"|"procedure", reflection_id=R)`` takes its content from
reflection ``R`` of the thread's conversation ledger — only when ``R`` is bound to a
work scope that is CLOSED — and records ``promoted_from: {reflection_id, scope_id}`` on
the note's ``Remembered`` event (shown by ``lineage``). The check and the write run in
one unit of work holding the thread's write lock, so the conversation cannot change or
be erased in between. A promotion always inserts a new note (no consolidation: the
record of where it came from is never folded away). Rejected (nothing written):
``content`` together with ``reflection_id`` (``ValidationError``), another kind, or
``supersedes``/``links`` (``NotSupportedError``), no thread (``NoLedgerError``), an
unknown, unbound or still-open reflection (``LedgerError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, StringConstraints, model_validator

from memfabric.domain import policy
from memfabric.domain.errors import NoteExistsError, NotSupportedError
from memfabric.domain.ledger import Conversation, LedgerError, conversation_uuid
from memfabric.domain.note import Note
from memfabric.domain.remember import new_note_id, vector_bytes
from memfabric.domain.results import MemoryNote, note_view
from memfabric.domain.scope import Scope
from memfabric.domain.visibility import stored_consent

if TYPE_CHECKING:
    from memfabric.domain.deps import Deps


class PromoteInput(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: str
    reflection_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12}$")]
    content: str | None = None

    @model_validator(mode="after")
    def _no_content(self) -> PromoteInput:
        if self.content is not None:
            raise ValueError("content: not allowed with reflection_id (the reflection is the content)")
        return self


def promote(deps: Deps, scope: Scope, *, kind: str, reflection_id: Any, content: Any,
            fields: dict[str, Any]) -> MemoryNote:
    """Write the promoted note (see the module doc)."""
    args = PromoteInput(kind=kind, reflection_id=reflection_id, content=content)
    if args.kind not in ("fact", "procedure"):
        raise NotSupportedError(f"reflection_id: only a fact or a procedure is promoted, not {args.kind!r}")
    for name in ("supersedes", "links", "path", "block"):
        if fields.get(name) is not None:
            raise NotSupportedError(f"{name}: not supported with reflection_id")
    aggregate_id = conversation_uuid(scope)
    if deps.ledger_store is None:
        raise NotSupportedError("this backend has no conversation ledger")
    with deps.unit_of_work([scope]) as uow:
        conv = cast(Any, uow).load_aggregate(aggregate_id)
        if not isinstance(conv, Conversation):
            raise LedgerError(f"unknown reflection {args.reflection_id}")
        reflection, scope_id = conv.promotable(args.reflection_id)
        item = deps.validate_remember({"kind": args.kind, "content": reflection.text, **fields})
        if item.id is not None and uow.exists(scope, item.id):
            raise NoteExistsError(f"id: note {item.id!r} already exists in scope {scope}")
        text = deps.redact(item.text) or ""
        embedding = deps.embed([text])[0]
        note = Note.remember(
            scope=scope, note_id=item.id or new_note_id(), kind=item.kind, content=text,
            path=None, block=None, subject=item.subject, t_ref=item.t_ref,
            valid_from=item.valid_from, valid_to=item.valid_to, keywords=list(item.keywords),
            tags=list(item.tags), source_entry_ids=list(item.source_entry_ids) or list(reflection.source_ids),
            context=deps.redact(item.context), links=[], supersedes=None,
            importance=0.5 if item.importance is None else item.importance,
            consent=stored_consent(item.kind, item.consent.model_dump() if item.consent else None),
            embedding=vector_bytes(embedding), embedder_id=deps.embedder.id, dim=deps.embedder.dim,
            token_count=policy.count_tokens(text), cause="promotion",
            promoted_from={"reflection_id": args.reflection_id, "scope_id": scope_id},
            retention=item.retention,
        )
        uow.add(note)
        uow.commit()
    return note_view(note, "inserted")
