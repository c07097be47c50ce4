"""memfabric adapters: PostgreSQL persistence, embedders, the embedded server, the CLI,
and the composition root ``open_fabric``."""

from memfabric.adapters.bootstrap import Fabric, open_fabric
from memfabric.adapters.embedders import HashEmbedder

__all__ = ["Fabric", "HashEmbedder", "open_fabric"]
