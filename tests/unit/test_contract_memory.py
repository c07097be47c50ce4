"""The contract suite on the in-memory reference backend (no database)."""

from __future__ import annotations

from typing import Any

import pytest
from memfabric.adapters.memory import MemoryFabric, open_memory_fabric

from tests.contract.behaviours import Backend, FabricContract
from tests.contract.fresh_user import FreshUserContract


class TestMemoryContract(FabricContract):
    @pytest.fixture
    def backend(self) -> Backend:
        opened: list[MemoryFabric] = []

        def open_(**settings: Any) -> MemoryFabric:
            fab = open_memory_fabric(**settings)
            opened.append(fab)
            return fab

        return Backend(open=open_, events=lambda: opened[-1].log.event_count())


class TestFreshUserMemory(FreshUserContract):
    """Issue 16 follow-ups (``tests.contract.fresh_user``) on the same backend."""

    backend = TestMemoryContract.backend
