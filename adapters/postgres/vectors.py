"""pgvector's types on pooled connections, and the dumper of pre-encoded vectors."""

from __future__ import annotations

import weakref
from typing import Any

import psycopg
from pgvector.psycopg.vector import register_vector_info
from psycopg import Connection
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types import TypeInfo

from memfabric.projections import recall_partition
from memfabric.projections.batch import VectorBinary


class VectorTypes:
    """Registers pgvector's psycopg adapters, and the dumper of
    :class:`~memfabric.projections.batch.VectorBinary` (a vector a write statement
    encoded already), once per pooled connection (no query after the first
    connection). ``partitions``: the fabric's partition count when known, recorded on
    each connection for the recall statement (:mod:`memfabric.projections.recall_partition`)."""

    def __init__(self) -> None:
        self.info: TypeInfo | None = None
        self.done: weakref.WeakSet[Connection[Any]] = weakref.WeakSet()
        self.partitions: int | None = None

    def ensure(self, conn: Connection[Any]) -> None:
        if conn in self.done:
            return
        info = self.info
        if info is None:
            info = self.info = TypeInfo.fetch(conn, "vector")
        if info is None:
            raise psycopg.ProgrammingError("the vector type (pgvector) is not installed in this database")
        register_vector_info(conn, info)
        conn.adapters.register_dumper(VectorBinary, _binary_dumper(info.oid))
        if self.partitions is not None:  # issue 25: recall names the tenant's partition
            recall_partition.known_count(conn, self.partitions)
        self.done.add(conn)


def _binary_dumper(oid: int) -> type[Dumper]:
    """A binary dumper of :class:`VectorBinary` for the ``vector`` type ``oid``. Its
    class has no oid, so psycopg does not register it by oid (a COPY's ``vector``
    column keeps pgvector's dumper); each instance sends ``oid``."""

    class VectorBinaryDumper(Dumper):
        format = Format.BINARY

        def __init__(self, cls: type, context: Any = None) -> None:
            super().__init__(cls, context)
            self.oid = oid

        def dump(self, obj: Any) -> bytes:
            return bytes(obj)

    return VectorBinaryDumper
