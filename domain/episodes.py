"""Episodes (issue 14 step 3): an observation of the conversation ledger read as a note.

``notes.remember(kind="episode", id=OBSERVATION_ID)`` returns the observation as a
``MemoryNote`` of kind ``episode`` (content: the observation's text) and writes
nothing. Fails closed: a scope without thread raises ``NoLedgerError``, a backend
without ledger ``NotSupportedError``, an unknown id ``NoteNotFoundError``; any other
field is rejected (``NotSupportedError``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import StringConstraints, TypeAdapter

from memfabric.domain.errors import NoteNotFoundError, NotSupportedError
from memfabric.domain.ledger import conversation_uuid
from memfabric.domain.policy import count_tokens
from memfabric.domain.results import MemoryNote
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
