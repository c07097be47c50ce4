"""memfabric's public surface: the composition roots (``open_fabric`` on PostgreSQL,
``open_memory_fabric`` in memory), the scope handle, read models, inputs, errors,
embedders, subject extraction and the agent tools.

Everything a host uses is importable from here; the modules behind it
(``memfabric.domain.*``, ``memfabric.projections.*``, ``memfabric.adapters.*``) are the
implementation and may move between releases.
"""

from memfabric.adapters.aio import AsyncFabric, AsyncNotes, open_fabric_async
from memfabric.adapters.bootstrap import Fabric, open_fabric
from memfabric.adapters.embedders import HashEmbedder, embedder_from_name
from memfabric.adapters.memory import MemoryFabric, open_memory_fabric
from memfabric.adapters.status import fabric_status
from memfabric.adapters.tools import MemoryTools, ToolDefinition, UnknownToolError, tool_error
from memfabric.domain.attach import Attachment, AttachSettings, NotAttachedError, SessionError
from memfabric.domain.consolidation import Consolidation
from memfabric.domain.context import ContextProvider
from memfabric.domain.errors import (
    CapacityError,
    ConflictError,
    EmbedderChangedError,
    EmbedderError,
    EventIntegrityError,
    FabricError,
    LockTimeoutError,
    NoteExistsError,
    NoteForgottenError,
    NamespaceError,
    NoteNotFoundError,
    NotHeldError,
    NotSupportedError,
    ProjectionError,
    ProjectionLagError,
    ReadOnlyError,
    RetentionError,
    RetentionFloorError,
    ScopeError,
    SettingsError,
    SupersessionError,
    TrackingError,
    ValidatorRejectedError,
)
from memfabric.domain.inputs import Consent, Kind, Limits, RecallMode, Scoring
from memfabric.domain.inputs import Link as LinkInput
from memfabric.domain.notes import Notes
from memfabric.domain.ports import Embedder
from memfabric.domain.results import (
    ConsentInfo,
    NotePage,
    EraseResult,
    Explain,
    ForgetResult,
    HistoryEntry,
    Lineage,
    Link,
    MemoryNote,
    NoteCounts,
    Outcome,
    PathForgetResult,
    RecallResult,
    RepointResult,
)
from memfabric.domain.links import EvolutionSettings, LinkError, LinkerSettings, LinkScopeError
from memfabric.domain.retention import RetentionConfig
from memfabric.domain.scope import Scope
from memfabric.domain.sweep import SweepResult
from memfabric.domain.conversation import EntriesPage, Ledger, LedgerEntry, LedgerSession, Page, SearchHit, SearchResult
from memfabric.domain.ledger import LedgerAbortedError, LedgerError, NoLedgerError
from memfabric.domain.subjects import RuleSubjectExtractor, SubjectExtractor, SubjectKey
from memfabric.projections.rebuild import ProjectionAdmin
from memfabric.domain.access import AccessRecord, Principals, PrincipalView
from memfabric.domain.access_notes import PrincipalNotes
from memfabric.domain.errors import AccessDenied, PrincipalNotFoundError
from memfabric.domain.principal import MemoryProfile
from memfabric.adapters.jail import FilePathError, JailError
from memfabric.domain.entities import EntityCandidate, EntityView, MergeResult, UpsertResult
from memfabric.domain.entities.commands import Entities
from memfabric.domain.entity import EntityError, EntityNotFoundError, IdentifierConflictError

__all__ = [
    "AsyncFabric", "AsyncNotes", "NamespaceError", "NotHeldError", "NotePage", "open_fabric_async",
    "AttachSettings", "Attachment", "CapacityError", "ConflictError", "Consent", "ConsentInfo",
    "Consolidation", "ContextProvider", "Embedder", "EmbedderChangedError", "EmbedderError", "EraseResult",
    "EventIntegrityError", "Explain", "Fabric", "FabricError", "LockTimeoutError", "ForgetResult", "HashEmbedder",
    "HistoryEntry", "Kind", "Limits", "Lineage", "Link", "LinkInput", "MemoryFabric", "MemoryNote",
    "MemoryTools", "NotAttachedError", "NotSupportedError", "NoteExistsError", "NoteForgottenError",
    "NoteNotFoundError", "Notes", "Outcome", "PathForgetResult", "ProjectionError", "TrackingError",
    "ProjectionLagError", "ReadOnlyError", "RecallMode", "RecallResult", "RepointResult", "RuleSubjectExtractor",
    "Scope", "ScopeError", "Scoring", "SessionError", "SettingsError", "SubjectExtractor",
    "SubjectKey", "SupersessionError", "ToolDefinition", "UnknownToolError",
    "ValidatorRejectedError", "embedder_from_name", "open_fabric", "open_memory_fabric", "tool_error",
    "LinkError", "LinkScopeError", "LinkerSettings", "EvolutionSettings",
    # issue 14: the conversation ledger
    "EntriesPage", "Ledger", "LedgerAbortedError", "LedgerEntry", "LedgerSession", "LedgerError", "NoLedgerError",
    "Page", "SearchHit", "SearchResult",
    # issue 30: retention
    "RetentionConfig", "RetentionError", "RetentionFloorError", "SweepResult",
    # issue 27: administration
    "NoteCounts", "ProjectionAdmin", "fabric_status",
    # issue 33: governed access
    "AccessDenied", "AccessRecord", "MemoryProfile", "PrincipalNotFoundError", "PrincipalNotes", "Principals",
    "PrincipalView",
    # the file tools' jail (typed errors of memory_view/memory_read on files)
    "FilePathError", "JailError",
    # issue 32: entities
    "Entities", "EntityCandidate", "EntityView", "MergeResult", "UpsertResult",
    "EntityError", "EntityNotFoundError", "IdentifierConflictError",
]
