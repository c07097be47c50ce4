"""memfabric adapters: PostgreSQL persistence, embedders, the embedded server, the CLI,
and the composition root ``open_fabric``."""

from memfabric.adapters.aio import AsyncFabric, AsyncNotes, open_fabric_async
from memfabric.adapters.bootstrap import Fabric, open_fabric
from memfabric.adapters.embedders import HashEmbedder

__all__ = ["AsyncFabric", "AsyncNotes", "Fabric", "HashEmbedder", "open_fabric", "open_fabric_async"]
