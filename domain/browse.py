"""Browsing: keyset pages of the notes visible from a scope (``Notes.list``).

Pages come from the recall index (every live ``fact``/``procedure``/``file`` row),
ordered by ``(ingested_at, aggregate_id)``: a note's key never changes, so a note that
existed when paging started is listed exactly once however many notes are written
meanwhile (no ``OFFSET``). The cursor is the key of the last item, as opaque URL-safe
base64; a cursor that does not decode raises ``ValidationError`` on ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from uuid import UUID

from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from memfabric.domain.ports import ListQuery, NoteStore
from memfabric.domain.ranking import candidate_view
from memfabric.domain.results import NotePage

_VERSION = "1"


def encode_cursor(ingested_at: datetime, aggregate_id: UUID) -> str:
    """The opaque cursor after the row ``(ingested_at, aggregate_id)``."""
    raw = f"{_VERSION}|{ingested_at.isoformat()}|{aggregate_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """The key an :func:`encode_cursor` cursor names (``ValidationError`` otherwise)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, at, aid = raw.split("|")
        if version != _VERSION:
            raise ValueError(version)
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError(at)
        return when, UUID(aid)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        error = InitErrorDetails(type=PydanticCustomError("cursor", "not a cursor this fabric issued"),
                                 loc=("cursor",), input=cursor)
        raise ValidationError.from_exception_data("ListInput", [error]) from None


def page(store: NoteStore, query: ListQuery, *, cursor: str | None, limit: int) -> NotePage:
    """One page of ``limit`` notes after ``cursor`` (``next_cursor`` ``None`` on the last)."""
    after = decode_cursor(cursor) if cursor is not None else None
    rows = store.list_notes(query, after=after, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    items = [candidate_view(c, "listed") for c in rows]
    last = rows[-1] if rows else None
    next_cursor = (encode_cursor(last.fields["ingested_at"], last.aggregate_id)
                   if more and last is not None else None)
    return NotePage(items=items, next_cursor=next_cursor)

