"""Host features on the in-memory reference backend."""

from __future__ import annotations

from typing import Any

import pytest
from memfabric.adapters.memory import open_memory_fabric

from tests.host_behaviours import HostBehaviours


class TestHostMemory(HostBehaviours):
    @pytest.fixture
    def fab(self) -> Any:
        return open_memory_fabric()
