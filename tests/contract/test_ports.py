"""The port contracts (``tests.contract.ports``) on both backends: every abstract class
subclassed once for the in-memory backend and once for PostgreSQL (a fresh database)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memfabric.adapters import open_fabric, open_memory_fabric
from memfabric.adapters.postgres.ledger import PostgresLedgerStore
from memfabric.adapters.memory.ledger import InMemoryLedgerStore
from memfabric.adapters.memory.uow import InMemoryUnitOfWork
from memfabric.adapters.postgres.uow import PostgresUnitOfWork
from memfabric.domain.scope import Scope

from tests.conftest import event_count
from tests.contract.ports import LedgerStoreContract, NoteStoreContract, Ports, UnitOfWorkContract


@pytest.fixture
def memory_ports() -> Iterator[Ports]:
    """The in-memory backend's ports."""
    with open_memory_fabric() as fab:
        def unit_of_work(scopes: Any) -> InMemoryUnitOfWork:
            return InMemoryUnitOfWork(fab.log, scopes)

        yield Ports(fab, unit_of_work, fab.store, InMemoryLedgerStore(fab.log), fab.log.event_count)


@pytest.fixture
def postgres_ports(dsn: str) -> Iterator[Ports]:
    """The PostgreSQL backend's ports on a fresh database (inline projections)."""
    with open_fabric(dsn) as fab:
        def unit_of_work(scopes: list[Scope]) -> PostgresUnitOfWork:
            return PostgresUnitOfWork(fab.log, fab.engine, fab.store.vectors, fab.store.secret, scopes,
                                      inline_all=True)

        yield Ports(fab, unit_of_work, fab.store, PostgresLedgerStore(fab.log, fab.store.router),
                    lambda: event_count(dsn))


class TestUnitOfWorkMemory(UnitOfWorkContract):
    @pytest.fixture
    def ports(self, memory_ports: Ports) -> Ports:
        return memory_ports


class TestUnitOfWorkPostgres(UnitOfWorkContract):
    @pytest.fixture
    def ports(self, postgres_ports: Ports) -> Ports:
        return postgres_ports


class TestNoteStoreMemory(NoteStoreContract):
    @pytest.fixture
    def ports(self, memory_ports: Ports) -> Ports:
        return memory_ports


class TestNoteStorePostgres(NoteStoreContract):
    @pytest.fixture
    def ports(self, postgres_ports: Ports) -> Ports:
        return postgres_ports


class TestLedgerStoreMemory(LedgerStoreContract):
    @pytest.fixture
    def ports(self, memory_ports: Ports) -> Ports:
        return memory_ports


class TestLedgerStorePostgres(LedgerStoreContract):
    @pytest.fixture
    def ports(self, postgres_ports: Ports) -> Ports:
        return postgres_ports
