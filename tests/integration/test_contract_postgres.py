"""The contract suite on PostgreSQL (``open_fabric(dsn)`` on a fresh database)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from memfabric.adapters import Fabric, open_fabric

from tests.conftest import event_count
from tests.contract.behaviours import Backend, FabricContract
from tests.contract.fresh_user import FreshUserContract


class TestPostgresContract(FabricContract):
    @pytest.fixture
    def backend(self, dsn: str) -> Iterator[Backend]:
        opened: list[Fabric] = []

        def open_(**settings: Any) -> Fabric:
            fab = open_fabric(dsn, **settings)
            opened.append(fab)
            return fab

        yield Backend(open=open_, events=lambda: event_count(dsn))
        for fab in opened:
            fab.close()


class TestFreshUserPostgres(FreshUserContract):
    """Issue 16 follow-ups (``tests.contract.fresh_user``) on the same backend."""

    backend = TestPostgresContract.backend
