"""The attach gate: a fabric is inert until a host attaches a session.

Importing memfabric or opening a fabric starts nothing: no worker, no timer, no tool,
no context provider. :meth:`Notes.attach(session, signal=None)
<memfabric.domain.notes.Notes.attach>` is the only way to authorise a session; it
returns an :class:`Attachment` and flips the fabric's :class:`Gate` open for that
session and scope. Tools (and, later, background workers) read the gate on every call;
nothing runs per turn. ``Attachment.detach()`` (or leaving its ``with`` block, or
setting its ``signal``) closes the gate again.

A *session* is any object with a string ``id``; when it has an ``entries`` attribute,
that must be callable (a transcript accessor, e.g. an agent SDK's session). Anything
else fails closed with :class:`SessionError`.

A composition root pins the one session allowed with the dependencies'
``attach_config = AttachConfig(session_id=..., settings=...)``
(``open_fabric(session_id=..., linker=..., evolution=..., passive=...)``, built by
:meth:`memfabric.domain.deps.Deps.build`). Without a pinned session any valid session
may attach.

Pure module: no I/O, no threads.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

from memfabric.domain.errors import FabricError

__all__ = [
    "AbortSignal",
    "AttachConfig",
    "AttachSettings",
    "Attachment",
    "Gate",
    "NotAttachedError",
    "SessionError",
    "attach",
    "check_session",
    "config_for",
    "gate_for",
]


class NotAttachedError(FabricError):
    """The session is not attached (never attached, detached, or its signal was set)."""


class SessionError(FabricError):
    """Not a session (no string ``id``, or a non-callable ``entries``), or not the
    session this fabric was configured with."""


@runtime_checkable
class AbortSignal(Protocol):
    """An abort handle such as :class:`threading.Event`: anything with ``is_set()``."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class AttachSettings:
    """What is live for an attached session (all False unless the fabric enables it).

    - ``linker``: the linker worker runs on this scope's writes (``open_fabric(linker=...)``,
      inline in the write's unit of work; :mod:`memfabric.domain.links`).
    - ``evolution``: the evolution worker patches neighbours' keywords and missing context.
    - ``passive``: the fabric is passive, so neither worker runs.
    """

    linker: bool = False
    evolution: bool = False
    passive: bool = False


@dataclass(frozen=True, slots=True)
class AttachConfig:
    """How a fabric is configured for attaching: ``session_id`` (only this session may
    attach; ``None``: any valid session) and the :class:`AttachSettings` it grants."""

    session_id: str | None = None
    settings: AttachSettings = AttachSettings()


def check_session(session: object, config: AttachConfig | None = None) -> str:
    """The session's id, or :class:`SessionError` when ``session`` is not a session
    or not the one ``config`` names."""
    if isinstance(session, Attachment):
        session = session.session
    sid = getattr(session, "id", None)
    if not isinstance(sid, str) or not sid:
        raise SessionError("session: not a session (needs a non-empty string id)")
    if hasattr(session, "entries") and not callable(session.entries):
        raise SessionError("session: not a session (entries must be callable)")
    if config is not None and config.session_id is not None and sid != config.session_id:
        raise SessionError("session: not the session this fabric was configured with")
    return sid


class Gate:
    """Which sessions are attached to one fabric, and to which scopes.

    Thread-safe; reading it costs a dictionary lookup and, when the attachment has a
    signal, one ``is_set()`` call.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], list[Attachment]] = {}

    def _add(self, att: Attachment) -> None:
        with self._lock:
            self._open.setdefault((att.session_id, att.scope_key), []).append(att)

    def _remove(self, att: Attachment) -> None:
        with self._lock:
            live = self._open.get((att.session_id, att.scope_key), [])
            if att in live:
                live.remove(att)
            if not live:
                self._open.pop((att.session_id, att.scope_key), None)

    def is_attached(self, session: object, scope_key: str) -> bool:
        """Whether ``session`` (a session object, or its id) has a live attachment for
        the scope ``scope_key``. An attachment whose signal is set is closed here."""
        sid = session if isinstance(session, str) else _quiet_id(session)
        if sid is None:
            return False
        with self._lock:
            live = list(self._open.get((sid, scope_key), ()))
        for att in live:
            if att.active:
                return True
        return False

    def any_attached(self, scope_key: str) -> bool:
        """Whether any session has a live attachment for the scope ``scope_key`` (what
        the write-path workers of issue 15 check)."""
        with self._lock:
            live = [att for (_, key), atts in self._open.items() if key == scope_key for att in atts]
        return any(att.active for att in live)

    def require(self, session: object, scope_key: str) -> None:
        """Raise :class:`NotAttachedError` unless :meth:`is_attached`."""
        if not self.is_attached(session, scope_key):
            raise NotAttachedError(
                "session is not attached to this scope: call notes.attach(session) first"
            )


def _quiet_id(session: object) -> str | None:
    if isinstance(session, Attachment):
        return session.session_id
    try:
        return check_session(session)
    except SessionError:
        return None


class Attachment:
    """A live authorisation of one session on one scope (see :func:`attach`).

    - ``session``: the session object; ``session_id`` its id.
    - ``context_provider``: the scope's context provider, refusing
      (:class:`NotAttachedError`) once detached.
    - ``settings``: the :class:`AttachSettings` that are live.
    - ``detach()``: close the gate for this attachment (idempotent). Also a context
      manager: leaving the ``with`` block detaches.
    - ``active``: open, i.e. not detached and its ``signal`` (if any) not set.
    """

    def __init__(
        self, gate: Gate, session: object, session_id: str, scope_key: str,
        settings: AttachSettings, provider: Callable[..., Any],
        signal: AbortSignal | None = None,
    ) -> None:
        self._gate = gate
        self.session = session
        self.session_id = session_id
        self.scope_key = scope_key
        self.settings = settings
        self.signal = signal
        self._provider = provider
        self._detached = False

    @property
    def active(self) -> bool:
        if self._detached:
            return False
        if self.signal is not None and self.signal.is_set():
            self.detach()
            return False
        return True

    def context_provider(self, current: Any = None) -> Any:
        """Assemble this scope's memory for a prompt (see ``Notes.context_provider``);
        :class:`NotAttachedError` once detached."""
        if not self.active:
            raise NotAttachedError("session is detached: the context provider is closed")
        return self._provider(current)

    def detach(self) -> None:
        """Close the gate for this attachment; tools refuse its session from now on."""
        if not self._detached:
            self._detached = True
            self._gate._remove(self)  # noqa: SLF001 - the gate and its attachments are one unit

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def __repr__(self) -> str:
        state = "active" if self.active else "detached"
        return f"Attachment(session={self.session_id!r}, scope={self.scope_key!r}, {state})"


_GATES: weakref.WeakKeyDictionary[object, Gate] = weakref.WeakKeyDictionary()
_GATES_LOCK = threading.Lock()


def gate_for(owner: object) -> Gate:
    """The gate of one fabric: ``owner.gate`` when it holds one (the fabric's
    :class:`~memfabric.domain.deps.Deps` and its service do), else one keyed by
    ``owner`` (created empty on first use)."""
    own = getattr(owner, "gate", None)
    if isinstance(own, Gate):
        return own
    with _GATES_LOCK:
        gate = _GATES.get(owner)
        if gate is None:
            gate = _GATES[owner] = Gate()
        return gate


def config_for(owner: object) -> AttachConfig:
    """The fabric's :class:`AttachConfig` (``owner.attach_config``), default: any
    session, every feature off."""
    config = getattr(owner, "attach_config", None)
    return config if isinstance(config, AttachConfig) else AttachConfig()


def attach(
    owner: object, scope_key: str, session: object, *,
    provider: Callable[..., Any], signal: object = None,
) -> Attachment:
    """Authorise ``session`` on the scope ``scope_key`` of the fabric ``owner``.

    Raises :class:`SessionError` (not a session, not the configured one, or a
    ``signal`` without ``is_set()``); nothing is opened then. A signal that is already set yields a closed attachment.
    """
    config = config_for(owner)
    sid = check_session(session, config)
    if signal is not None and not callable(getattr(signal, "is_set", None)):
        raise SessionError("signal: must have an is_set() method (e.g. threading.Event)")
    gate = gate_for(owner)
    att = Attachment(gate, session, sid, scope_key, config.settings, provider,
                     signal if isinstance(signal, AbortSignal) else None)
    gate._add(att)  # noqa: SLF001
    return att
