"""How a unit of work's failures are told apart (:mod:`.uow`): the tracking statement's
refusal, the one-round-trip write's gap check, a prepared statement gone from the
server; each found in the exception or the ones it was raised from."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from memfabric.projections.engine import GAP_MESSAGE
from memfabric.projections.entities import KEYS_FOUND_MESSAGE


def caused_by(exc: BaseException | None, test: Callable[[BaseException], bool]) -> bool:
    """Whether ``exc`` or one it was raised from (five links deep) passes ``test``."""
    seen = 0
    while exc is not None and seen < 5:
        if test(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def tracking_refused(exc: BaseException | None) -> bool:
    """The tracking statement's refusal (``ProjectionEngine._record_all``: a cast error naming the projection)."""
    return caused_by(exc, lambda e: "memfabric: failed to record tracking" in str(e))


def gap_refused(exc: BaseException | None) -> bool:
    """The one-round-trip write's gap check (``ProjectionEngine.send_fast``)."""
    return caused_by(exc, lambda e: GAP_MESSAGE in str(e))


def guard_refused(exc: BaseException | None) -> bool:
    """A guard sent in place of a read refused (``PostgresUnitOfWork.guard``: the entity
    keys a write assumed absent, ``entities.keys_absent_guard``)."""
    return caused_by(exc, lambda e: KEYS_FOUND_MESSAGE in str(e))


def statements_lost(exc: BaseException | None) -> bool:
    """A prepared statement of the wire was gone from the server (deallocated behind psycopg's back)."""
    return caused_by(exc, lambda e: isinstance(e, psycopg.errors.InvalidSqlStatementName))
