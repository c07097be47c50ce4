"""Episodes (issue 14 step 3): an observation of the conversation ledger read as a note.

``notes.remember(kind="episode", id=OBSERVATION_ID)`` returns the observation as a
``MemoryNote`` of kind ``episode`` (content: the observation's text) and writes
nothing. Fails closed: a scope without thread raises ``NoLedgerError``, a backend
without ledger ``NotSupportedError``, an unknown id ``NoteNotFoundError``; any other
field is rejected (``NotSupportedError``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import StringConstraints, TypeAdapter

from memfabric.domain.errors import NoteNotFoundError, NotSupportedError
from memfabric.domain.ledger import conversation_uuid
from memfabric.domain.policy import count_tokens
from memfabric.domain.ports import Candidate
from memfabric.domain.results import MemoryNote
from memfabric.domain.search_terms import word_terms
from memfabric.domain.scope import Scope

_ID: TypeAdapter[str] = TypeAdapter(Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12}$")])


def read_episode(store: Any, scope: Scope, observation_id: Any, extra: dict[str, Any]) -> MemoryNote:
    """The episode note of observation ``observation_id`` (see the module doc)."""
    if extra:
        raise NotSupportedError(
            f"remember(kind='episode') reads an observation by id only; got {sorted(extra)}")
    aggregate_id = conversation_uuid(scope)
    oid = _ID.validate_python(observation_id)
    if store is None:
        raise NotSupportedError("this backend has no conversation ledger")
    row = store.observation(aggregate_id, oid)
    if row is None:
        raise NoteNotFoundError(f"no observation {oid} in the conversation of {scope.key}")
    text = str(row["text"])
    return MemoryNote(id=oid, kind="episode", content=text, scope=scope,
                      ingested_at=row["created_at"], token_count=count_tokens(text),
                      source_entry_ids=tuple(row["source_entry_ids"]), outcome="read")


def candidates(store: Any, scope: Scope, query: str, *, as_of: datetime, limit: int,
               require_consent: bool) -> list[Candidate]:
    """Recall candidates of kind ``episode``: observations of this thread's conversation
    matching the query's terms (lexical: ``ts_rank``), created at or before ``as_of``
    (the caller's ``as_of``, or ``known_at`` when earlier: an observation's ``created_at``
    is its event's recorded time).
    None for a scope without thread or a backend without ledger; none either when the
    fabric requires consent (observations carry none: fail closed)."""
    if store is None or scope.thread_id is None or require_consent:
        return []
    words = word_terms(query)
    rows = store.search_observations([conversation_uuid(scope)], words, limit, until=as_of)
    out = []
    for rank, r in enumerate(rows, start=1):
        text = str(r["text"])
        fields = {
            "tenant_id": scope.tenant_id, "resource_id": scope.resource_id or "",
            "thread_id": scope.thread_id, "kind": "episode", "note_id": r["observation_id"],
            "importance": 0.5, "token_count": count_tokens(text), "tags": [], "path": None,
            "subject": None, "content": text, "source_entry_ids": list(r["source_entry_ids"]),
            "supersedes": None, "t_ref": None, "ingested_at": r["created_at"], "version": 1,
            "valid_from": None, "valid_to": None, "visibility": "thread",
            "consent_granted": None, "context": None, "keywords": [], "fold_count": 0,
            "updated_at": None, "consent": None,
        }
        out.append(Candidate(aggregate_id=r["aggregate_id"], note_id=r["observation_id"],
                             similarity=None, lexical=float(r["rank"]), vector_rank=None,
                             lexical_rank=rank, fields=fields))
    return out
