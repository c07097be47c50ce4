"""``Notes``: the scope-bound handle a host uses (``fabric.scope(tenant, resource, thread)``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from memfabric.domain.errors import ScopeError
from memfabric.domain.model import (
    ForgetResult,
    Note,
    RecallInput,
    RecallResult,
    RememberInput,
    Scoring,
)
from memfabric.domain.scope import Scope
from memfabric.domain.service import HistoryEntry, Lineage, MemoryService


class Notes:
    """Every read and write of one scope. Never sees another scope's notes.

    Construct through ``Fabric.scope(tenant_id, resource_id=None, thread_id=None)``.
    """

    def __init__(self, service: MemoryService, scope: Scope, *, actor: str = "caller") -> None:
        self._service = service
        self.scope = scope
        self.actor = actor

    def __repr__(self) -> str:
        return f"Notes({self.scope.key!r})"

    def _check_scope(self, scope: Scope | Mapping[str, Any] | None) -> None:
        if scope is None:
            return
        other = scope if isinstance(scope, Scope) else Scope.model_validate(scope)
        if other != self.scope:
            raise ScopeError(f"this handle serves scope {self.scope}, not {other}")

    # ----------------------------------------------------------------- writes
    def remember(self, **fields: Any) -> Note:
        """Write one note and return it (``Note.outcome``: ``inserted``, ``folded`` or
        ``superseding``).

        Fields are those of :class:`~memfabric.domain.model.RememberInput` (snake_case or
        camelCase). With consolidation on (the default), a ``fact``/``procedure``/``file``
        write first looks up its nearest live same-kind note in this scope and folds
        into it (same normalized tokens, or same ``path`` for ``file``) or supersedes it
        (cosine ≥ threshold, or same ``subject``). When this returns the note is durable
        and visible to the next ``recall`` in any process.

        Raises ``pydantic.ValidationError`` (bad field), ``NoteExistsError`` (explicit
        id taken), ``NoteNotFoundError`` (``supersedes`` unknown in this scope),
        ``NotSupportedError`` (``episode``). Nothing is written when it raises.
        """
        item = self._service.validate_remember(fields)
        return self._service.remember(self.scope, item)

    def remember_many(self, items: Iterable[Mapping[str, Any] | RememberInput]) -> list[Note]:
        """Bulk write: same outcome as ``remember`` on each item in order, in one
        transaction (all or nothing). Items are mappings of remember fields."""
        validated = [
            item if isinstance(item, RememberInput) else self._service.validate_remember(dict(item))
            for item in items
        ]
        return self._service.remember_many(self.scope, validated)

    # ------------------------------------------------------------------ reads
    def recall(
        self,
        query: str,
        *,
        kinds: Iterable[str] | str = ("fact", "file"),
        as_of: datetime | None = None,
        top_k: int | None = None,
        budget: int | None = None,
        scoring: Scoring | Mapping[str, Any] | None = None,
        mode: str = "hybrid",
    ) -> RecallResult:
        """Ranked live notes visible from this scope, with a parallel ``explain`` row each.

        - ``kinds``: default ``("fact", "file")``; ``procedure`` only when asked for;
          an empty or unknown kind raises ``ValidationError``.
        - ``as_of``: timezone-aware; notes whose ``[valid_from, valid_to)`` excludes it
          are omitted in SQL (default now).
        - ``top_k``: default 10. ``budget``: cap on summed ``token_count``; the best hit
          is always returned and ranking stops at the first hit that would not fit.
        - ``scoring``: :class:`Scoring` weights; ``mode``: ``hybrid`` (default, RRF of
          full-text and vector ranks), ``vector`` or ``lexical``.

        Score = relevance + recency_weight·0.5^(age/half_life) + importance_weight·importance
        (Park et al. 2023); relevance is the normalised reciprocal-rank fusion of the
        vector and lexical ranks (Cormack et al. 2009), or the cosine similarity in
        ``vector`` mode. Hits and explain rows never contain the query text.
        """
        data: dict[str, Any] = {"query": query, "kinds": kinds, "as_of": as_of, "mode": mode}
        if top_k is not None:
            data["top_k"] = top_k
        if budget is not None:
            data["budget"] = budget
        if scoring is not None:
            data["scoring"] = scoring
        return self._service.recall(self.scope, RecallInput.model_validate(data))

    def get(self, id: str) -> Note:  # noqa: A002 - public API name
        """The note ``id`` of this scope (``NoteNotFoundError`` when absent)."""
        return self._service.get(self.scope, _note_id(id))

    def history(self, id: str) -> list[HistoryEntry]:  # noqa: A002
        """Typed events of note ``id`` in order, with timestamps and causes."""
        return self._service.history(self.scope, _note_id(id))

    def lineage(self, id: str) -> Lineage:  # noqa: A002
        """Supersession chain (both directions), folds, links and tombstone of ``id``."""
        return self._service.lineage(self.scope, _note_id(id))

    # ----------------------------------------------------------------- forget
    def forget(
        self, *, id: str | None = None, block: str | None = None, hold: bool = False,  # noqa: A002
        requested_by: str | None = None,
    ) -> ForgetResult:
        """Tombstone a note (``id=``) or a working block (``block=``), exactly one.

        Without ``hold`` the note's data key is destroyed and its projection rows deleted
        in the same transaction (crypto-shredding): its content can no longer be read
        from the log. ``hold=True`` keeps the content under legal hold; a held note is
        never recalled, never in context, never a fold or link candidate.
        ``deleted`` is 1 for a tombstoned note or block, 0 when held or not in this scope.
        """
        if (id is None) == (block is None):
            raise ValueError("forget: give exactly one of id= or block=")
        if id is not None:
            return self._service.forget(
                self.scope, _note_id(id), hold=hold, requested_by=requested_by or self.actor
            )
        return self._service.forget_block(
            self.scope, block or "", hold=hold, requested_by=requested_by or self.actor
        )

    def verify_content(self, id: str, text: str) -> bool:  # noqa: A002
        """Whether ``text`` matches the tombstone hash of forgotten note ``id``."""
        return self._service.verify_content(self.scope, _note_id(id), text)


def _note_id(value: str) -> str:
    try:
        return RememberInput.model_validate({"kind": "fact", "content": "x", "id": value}).id or ""
    except ValidationError:
        raise
