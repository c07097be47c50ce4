"""The context provider: what a prompt should see from a scope's memory, as plain text.

``Notes.context_provider(...)`` returns a :class:`ContextProvider`; calling it with the
current query (or the conversation's messages) returns ordered context blocks::

    [{"type": "working-memory", "text": ...}, ...,   # one per live block, label order
     {"type": "semantic-memory", "text": ...}, ...]  # one per recalled note, rank order

Text format (times are UTC, ISO 8601 to the second)::

    Working memory block "persona" (version 3, updated 2026-01-02T10:00:00Z):
    <block content>

    Memory note 1a2b3c4d5e6f (fact, valid from 2025-01-01T00:00:00Z until 2026-01-01T00:00:00Z):
    <note content>

A note's parenthesis names its kind, then ``path <path>`` for a file note, then its
validity when it has one (``valid from X``, ``valid until Y`` or both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from memfabric.domain.inputs import ContextOptions, RecallInput
from memfabric.domain.results import MemoryNote, RecallResult
from memfabric.domain.scope import Scope
from memfabric.domain.working import FABRIC_KEY


class ContextSource(Protocol):
    """What a provider reads: the working value of a scope and a recall from it (the
    fabric's service, or a principal's checked handle)."""

    def working_value(self, scope: Scope, known_at: datetime | None = None) -> dict[str, Any]: ...

    def recall(self, scope: Scope, query: RecallInput) -> RecallResult: ...

Messages = Sequence[Mapping[str, Any]]
"""Chat messages ``{"role": ..., "content": str | [{"type": "text", "text": str}, ...]}``."""


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_block(label: str, entry: Mapping[str, Any]) -> str:
    """Plain text of one working block (see the module doc)."""
    return (
        f'Working memory block "{label}" (version {entry["version"]}, '
        f'updated {_iso(entry["updated_at"])}):\n{entry["content"]}'
    )


def render_note(note: MemoryNote) -> str:
    """Plain text of one recalled note: id, kind, file path and validity when present."""
    about = [note.kind]
    if note.path is not None:
        about.append(f"path {note.path}")
    validity = []
    if note.valid_from is not None:
        validity.append(f"from {_iso(note.valid_from)}")
    if note.valid_to is not None:
        validity.append(f"until {_iso(note.valid_to)}")
    if validity:
        about.append("valid " + " ".join(validity))
    return f"Memory note {note.id} ({', '.join(about)}):\n{note.content or ''}"


def last_user_text(messages: Messages) -> str | None:
    """The text of the last message whose role is ``user`` (text parts joined by
    newlines), or ``None`` when there is none or it holds no text."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, Sequence):
            text = "\n".join(
                str(part["text"]) for part in content
                if isinstance(part, Mapping) and part.get("type") == "text" and "text" in part
            )
        else:
            text = ""
        return text if text.strip() else None
    return None


class ContextProvider:
    """Callable built by ``Notes.context_provider``; see the module doc for the output.

    ``provider(current=None)``: ``current`` is the query text, a list of chat messages
    (the last ``user`` message is the query) or ``None`` (the provider's own ``query``).
    Semantic blocks follow ``recall`` exactly (kinds, validity at ``as_of`` or now,
    ``top_k``, ``budget``); no query means no semantic blocks. A query string longer
    than 8000 characters or blank raises ``ValidationError`` (field ``query``); the text
    of a user message is cut to its last 8000 characters.
    """

    def __init__(self, source: ContextSource, scope: Scope, options: ContextOptions) -> None:
        self._source = source
        self._scope = scope
        self.options = options

    def __call__(self, current: str | Messages | None = None) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        if self.options.include_working:
            blocks = self._source.working_value(self._scope, self.options.known_at)[FABRIC_KEY]["blocks"]
            out += [
                {"type": "working-memory", "text": render_block(label, entry)}
                for label, entry in blocks.items()
            ]
        if self.options.include_semantic:
            query = self._query(current)
            if query is not None:
                recall = RecallInput(
                    query=query, kinds=self.options.kinds, as_of=self.options.as_of,
                    known_at=self.options.known_at,
                    top_k=self.options.top_k, budget=self.options.budget,
                    min_relevance=self.options.min_relevance,
                )
                result = self._source.recall(self._scope, recall)
                out += [{"type": "semantic-memory", "text": render_note(n)} for n in result.hits]
        return out

    def _query(self, current: str | Messages | None) -> str | None:
        if isinstance(current, str):
            return current
        if current is not None:
            text = last_user_text(current)
            if text is not None:
                return text[-8000:]
        return self.options.query
