"""The dependencies of the fabric's handlers (cosmicpython's ``bootstrap`` →
``inject_dependencies``): one frozen :class:`Deps`, built once by a composition root
(``memfabric.adapters.open_fabric``, ``memfabric.adapters.memory.open_memory_fabric``)
and passed to every command and query handler (:mod:`~memfabric.domain.remember`,
:mod:`~memfabric.domain.lifecycle`, :mod:`~memfabric.domain.links`,
:mod:`~memfabric.domain.history`, :mod:`~memfabric.domain.queries`, ...).

Nothing in it is assigned after construction. What changes while a fabric serves lives
behind two small explicit objects it holds: :class:`EmbedderSlot` (the embedder in use,
swapped when a ``reembed`` migrated the fabric, issue 19) and the attach
:class:`~memfabric.domain.attach.Gate` (which sessions are attached). A view as recorded
at an instant (issue 31) is another ``Deps`` (:meth:`Deps.at`).

Pure module: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

import numpy as np

from memfabric.domain.attach import AttachConfig, AttachSettings, Gate
from memfabric.domain.consolidation import Consolidation
from memfabric.domain.errors import (ConflictError, EmbedderChangedError, EmbedderError, NotSupportedError,
                                     SettingsError)
from memfabric.domain.group_commit import GroupCommit
from memfabric.domain.inputs import Limits, RememberInput
from memfabric.domain.ports import Embedder, NoteStore, RetentionStore, UnitOfWorkFactory
from memfabric.domain.results import MemoryNote
from memfabric.domain.subjects import RuleSubjectExtractor, SubjectExtractor
from memfabric.domain.settings import EvolutionSettings, LinkerSettings, WorkingValidator

__all__ = ["Deps", "EmbedderSlot", "WorkingValidator", "utc_now"]

_T = TypeVar("_T")

_DEFAULT: Any = object()


def utc_now() -> datetime:
    """The default clock: now, timezone-aware UTC."""
    return datetime.now(timezone.utc)


class EmbedderSlot:
    """The embedder a fabric serves with (``current``), the one thing of the
    dependencies that changes while it serves (issue 19).

    ``adopter``: called by :meth:`adopt` when a vector of ``current`` met an index of
    another embedder (``EmbedderChangedError``: another process's ``reembed`` migrated
    the fabric); it swaps in the recorded embedder (through :meth:`use`) and returns
    whether it changed. ``None``: no adoption. A composition root sets it once the
    fabric it reads the record through exists (``open_fabric``; the admin CLI sets a
    stand-in adopter)."""

    __slots__ = ("adopter", "current")

    def __init__(self, current: Embedder, adopter: Callable[[], bool] | None = None) -> None:
        self.current = current
        self.adopter = adopter

    def use(self, embedder: Embedder) -> None:
        """Serve with ``embedder`` from now on (what ``reembed``'s switch calls)."""
        self.current = embedder

    def adopt(self) -> bool:
        """Run the adopter; whether the embedder changed (``False`` without one)."""
        return self.adopter() if self.adopter is not None else False


def attach_config(session_id: str | None, linker: LinkerSettings, evolution: EvolutionSettings,
                  passive: bool) -> AttachConfig:
    """Who may attach (``session_id``; ``None``: any session) and what an attached
    session is granted (the issue-15 workers and ``passive``)."""
    return AttachConfig(session_id=session_id, settings=AttachSettings(
        linker=linker.enabled, evolution=evolution.enabled, passive=passive))


def subject_extractor_of(value: object) -> SubjectExtractor | None:
    """``open_fabric(subject_extractor=...)`` as an extractor: the default (or ``True``)
    is ``RuleSubjectExtractor()``, ``None``/``False`` none; raises ``SettingsError``
    for anything without ``extract(text, *, kind)``."""
    if value is _DEFAULT or value is True:
        return RuleSubjectExtractor()
    if value is None or value is False:
        return None
    if not isinstance(value, SubjectExtractor):
        raise SettingsError("subject_extractor: expected an object with extract(text, *, kind) or None")
    return value


@dataclass(frozen=True, slots=True, eq=False)
class Deps:
    """Everything a handler may use, frozen (assigning a field raises
    ``dataclasses.FrozenInstanceError``); build it with :meth:`build`.

    Ports: ``unit_of_work`` (opens a write transaction holding the locks of some
    scopes), ``store`` (the read side), ``embedders`` (the :class:`EmbedderSlot`),
    ``ledger_store`` (the conversation ledger's read side, issue 14), ``entity_store``
    (issue 32), ``retention_store`` (issue 30), ``access`` (the principal registry,
    issue 33), ``known_at_store`` (the read side as recorded at an instant, issue 31);
    ``None``: the backend has none. Settings: ``consolidation``, ``limits``,
    ``redactor`` (``str -> str`` applied to content and context before embedding),
    ``require_consent``, ``working_validator``, ``subject_extractor`` (``None``: no
    subject inference), ``linker`` / ``evolution`` / ``passive`` (issue 15),
    ``attach_config``, ``group_commit`` (issue 24; ``None`` writes each alone) and
    ``clock`` ("now" of retention decisions)."""

    unit_of_work: UnitOfWorkFactory
    store: NoteStore
    embedders: EmbedderSlot
    consolidation: Consolidation = field(default_factory=Consolidation)
    limits: Limits = field(default_factory=Limits)
    redactor: Callable[[str], str] | None = None
    require_consent: bool = False
    working_validator: WorkingValidator | None = None
    subject_extractor: SubjectExtractor | None = None
    linker: LinkerSettings = field(default_factory=LinkerSettings)
    evolution: EvolutionSettings = field(default_factory=EvolutionSettings)
    passive: bool = False
    attach_config: AttachConfig = field(default_factory=AttachConfig)
    gate: Gate = field(default_factory=Gate)
    group_commit: GroupCommit[RememberInput, MemoryNote] | None = field(default_factory=GroupCommit)
    ledger_store: Any = None
    entity_store: Any = None
    retention_store: RetentionStore | None = None
    access: Any = None
    known_at_store: Callable[[datetime], NoteStore] | None = None
    clock: Callable[[], datetime] = utc_now

    @classmethod
    def build(cls, *, unit_of_work: UnitOfWorkFactory, store: NoteStore, embedder: Embedder | EmbedderSlot,
              consolidation: Consolidation | None = None, limits: Limits | None = None,
              subject_extractor: object = _DEFAULT, session_id: str | None = None,
              linker: LinkerSettings | None = None, evolution: EvolutionSettings | None = None,
              passive: bool = False, clock: Callable[[], datetime] | None = None, **ports: Any) -> Deps:
        """The dependencies of one fabric: ``embedder`` (or its slot), the settings'
        defaults filled in (``subject_extractor``: see :func:`subject_extractor_of`;
        ``attach_config`` from ``session_id`` and the workers); ``ports``: the other
        fields by name (``redactor``, ``ledger_store``, ``access``, ...). Raises
        ``SettingsError`` for a bad ``subject_extractor``, ``TypeError`` for an
        unknown field."""
        linker, evolution = linker or LinkerSettings(), evolution or EvolutionSettings()
        slot = embedder if isinstance(embedder, EmbedderSlot) else EmbedderSlot(embedder)
        return cls(unit_of_work=unit_of_work, store=store, embedders=slot,
                   consolidation=consolidation or Consolidation(), limits=limits or Limits(),
                   subject_extractor=subject_extractor_of(subject_extractor),
                   linker=linker, evolution=evolution, passive=passive,
                   attach_config=attach_config(session_id, linker, evolution, passive),
                   clock=clock or utc_now, **ports)

    def replace(self, **changes: Any) -> Deps:
        """A copy with ``changes`` (field names); the slot, gate and group commit are
        shared unless replaced."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------- helpers
    @property
    def embedder(self) -> Embedder:
        """The embedder in use (``embedders.current``)."""
        return self.embedders.current

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The embedder's vectors for ``texts`` as a checked ``(n, dim)`` float32 array;
        raises ``EmbedderError`` for any other shape or a non-finite value."""
        embedder = self.embedder
        try:
            out = np.asarray(embedder.embed(texts), dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbedderError(f"embedder {embedder.id!r} returned no float vectors: {exc}") from exc
        if out.shape != (len(texts), embedder.dim):
            raise EmbedderError(f"embedder {embedder.id!r} returned shape {out.shape}, "
                                f"expected {(len(texts), embedder.dim)}")
        if not np.isfinite(out).all():
            raise EmbedderError(f"embedder {embedder.id!r} returned NaN or infinite values")
        return out

    def redact(self, text: str | None) -> str | None:
        """``text`` through the host's redactor (unchanged without one)."""
        if text is None or self.redactor is None:
            return text
        return self.redactor(text)

    def validate_remember(self, fields: dict[str, Any]) -> RememberInput:
        """Validate ``fields`` against :class:`RememberInput` with these limits."""
        return RememberInput.model_validate(
            fields, context={"max_entry_text_chars": self.limits.max_entry_text_chars})

    def adopting(self, call: Callable[[], _T]) -> _T:
        """``call()``, run once more after adopting the recorded embedder when it raised
        ``EmbedderChangedError`` (or ``ConflictError``: the switch appended to a note this
        write had loaded) and the embedder in use has changed since it started (another
        thread's or process's ``reembed`` switched the fabric)."""
        before = self.embedder
        try:
            return call()
        except (EmbedderChangedError, ConflictError):
            if not self.embedders.adopt() and self.embedder is before:
                raise
        return call()

    def at(self, known_at: datetime | None) -> Deps:
        """Issue 31: these dependencies reading the fabric as recorded at ``known_at``
        (``store`` replaced by :attr:`known_at_store`'s), or themselves for ``None``.
        Raises ``NotSupportedError`` when the backend keeps no versions."""
        if known_at is None:
            return self
        if self.known_at_store is None:
            raise NotSupportedError("known_at: this backend keeps no note versions")
        return dataclasses.replace(self, store=self.known_at_store(known_at))
