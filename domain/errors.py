"""Named errors of the memory fabric.

Every error a caller can act on is a subclass of :class:`FabricError`; invalid input
models raise pydantic's ``ValidationError`` instead (it names the field). Nothing is
written when either is raised.
"""

from __future__ import annotations


class FabricError(Exception):
    """Base class of every named memfabric error."""


class NotSupportedError(FabricError):
    """The requested kind or operation is not supported (yet)."""


class NoteNotFoundError(FabricError, KeyError):
    """No note with that id exists in this scope."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "note not found"


class NoteExistsError(FabricError):
    """An explicit ``id`` was given for a note that already exists in the scope."""


class ScopeError(FabricError):
    """A request named a scope other than the handle's own, or an invalid scope."""


class NoteForgottenError(FabricError):
    """The note was forgotten (tombstoned) and cannot be changed or read."""


class NotHeldError(FabricError):
    """``release_hold`` named a note that is not under legal hold."""


class RetentionError(FabricError):
    """Issue 30: a retention change is not allowed (a note with the regulated label
    moved into a longer class without an approval reference)."""


class RetentionFloorError(RetentionError):
    """Issue 30: a regulated note cannot be erased before its floor (``floor``: when it
    ends, UTC) unless the legal erasure names an approval reference."""

    def __init__(self, message: str, floor: object = None) -> None:
        super().__init__(message)
        self.floor = floor


class NamespaceError(FabricError, ValueError):
    """A store namespace does not map onto a scope (see ``docs/langgraph.md``)."""


class CapacityError(FabricError):
    """A write would exceed a configured limit (for example ``max_entry_text_chars``)."""


class StoreValueError(FabricError, ValueError):
    """A LangGraph store value, ``ttl`` or filter cannot be stored or applied (see
    ``docs/langgraph.md``): nothing was written."""


class ConflictError(FabricError):
    """A concurrent write changed the note first; retry with fresh state."""


class GuardRefusedError(ConflictError):
    """A write that assumed what a read would say (issue 24: no entity key matches the
    subjects it names) and sent a guard in place of the read found it wrong at COMMIT.
    Nothing was written; ``remember`` writes again with the read and never raises it."""


class ValidatorRejectedError(FabricError):
    """A host-supplied validator rejected a working-memory write."""


class SupersessionError(FabricError):
    """An explicit ``supersedes`` cannot apply: the note was already superseded (supersede
    its successor instead), or the new note would start before the old one."""


class ProjectionLagError(FabricError, TimeoutError):
    """The write was committed to the log, but the separate projection runner did not
    project it in time (``inline_projections=False``); recall may not see it yet."""


class EventIntegrityError(FabricError):
    """A stored event failed authenticated decryption (its bytes were changed), or a
    note's events miss a version (a row was deleted; the message names the note and the
    missing version)."""


class ReadOnlyError(FabricError):
    """A write (or DDL, catch-up, checkpoint) was asked of a fabric opened with
    ``read_only=True`` (e.g. by an auditor role that may only ``SELECT``)."""


class EmbedderError(FabricError):
    """The embedder returned something other than ``(n, dim)`` finite float vectors."""


class EmbedderChangedError(EmbedderError):
    """The fabric's embedder was migrated (``reembed``) after this process opened it: a
    vector of the old embedder met the new index. Recall and writes adopt the recorded
    embedder and retry once; this error reaches a caller only when that fails too."""


class SettingsError(FabricError, ValueError):
    """A setting or option is invalid (an embedder size, a server option, an audit anchor)."""


class PartitionsMismatchError(SettingsError):
    """``open_fabric(partitions=N)`` on a database created with another partition count
    (issue 25): the layout is fixed at creation. Open it without ``partitions`` (its own
    count is used) or with the count it has."""


class LockTimeoutError(FabricError, TimeoutError):
    """A lock wait ran out (``lock_timeout`` of ``open_fabric``, default 30 s): another
    writer, an admin command or an outside session held a lock this call needed for
    that long. Nothing was written; retry, or find the holder in ``pg_locks``."""


class TrackingError(FabricError):
    """A projection's tracking row of the writer's tenant was already past the write's
    events (tracking is exactly-once and never moves back: someone moved it by hand, or
    a position was recorded out of order). Nothing was written."""


class ProjectionError(FabricError):
    """A projection stopped on an event; names the notification id, topic and cause."""

    def __init__(self, projection: str, notification_id: int, topic: str, cause: str):
        self.projection = projection
        self.notification_id = notification_id
        self.topic = topic
        self.cause = cause
        super().__init__(
            f"projection {projection!r} stopped at notification {notification_id} "
            f"({topic}): {cause}"
        )


class AccessDenied(FabricError):  # noqa: N818 - the name the issue gives
    """Issue 33: a principal's memory profile refuses the call; ``rule`` names the
    profile rule (``recall_scope``, ``read_kinds``, ``write_kinds``, ``writes``,
    ``visibility``, ``retention_ceiling``, ``note``, ``operation``). Nothing was written
    and nothing is returned."""

    def __init__(self, rule: str, message: str):
        self.rule = rule
        super().__init__(message)


class PrincipalNotFoundError(FabricError, KeyError):
    """Issue 33: no principal of that id was defined."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "principal not found"
