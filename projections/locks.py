"""Advisory-lock keys and bounded lock waits: what the projection engine, the unit of
work, the audit chain and ``open_fabric`` lock with (re-exported by
:mod:`memfabric.projections.engine`)."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from memfabric.domain.errors import LockTimeoutError


def advisory_key(name: str) -> int:
    """Stable signed 63-bit advisory-lock key for ``name`` (BLAKE2b)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


@lru_cache(maxsize=65_536)
def keyed_advisory_key(secret: bytes, name: str) -> int:
    """The advisory-lock key of ``name`` keyed by the fabric secret (BLAKE2b with
    ``key=secret``): a session that cannot read the secret cannot predict it, so it
    cannot take a writer's lock to stall it (issue 28, defect 7). Cached: a write asks
    for a dozen (its projections', its scopes', its tenant's)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8, key=secret[:64]).digest()
    return int.from_bytes(digest, "big", signed=True)


LOCK_TIMEOUT = 30.0
"""Default seconds any memfabric lock wait may last (``open_fabric(lock_timeout=...)``)."""


@contextmanager
def bounded_locks(name: str) -> Iterator[None]:
    """Turn PostgreSQL's ``lock_not_available`` (a ``lock_timeout`` ran out), raised
    directly or wrapped by eventsourcing, into ``LockTimeoutError`` naming ``name``."""
    try:
        yield
    except Exception as exc:
        if lock_timed_out(exc):
            raise LockTimeoutError(f"{name}: a lock wait ran out ({exc}); nothing was written by this call") from exc
        raise


def lock_timed_out(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is ``lock_not_available``."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
