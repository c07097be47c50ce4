"""The pool hands out the connection returned last (issue 24).

psycopg_pool's pool is a queue: a connection goes back at its end and the next request
takes the one idle longest. A process whose one thread writes in a loop therefore
alternated between every connection of its pool (two by default, more once a second
thread has borrowed one): each backend prepared and planned every statement shape for
itself and kept its own caches warm, and the server held two or three backends per
writer. Measured with 8 writer processes on 8 tenants (2026-12-03, scratch CPU budget,
load 6-8): 24 backends and 2.4-2.9 ms of backend CPU per write with the queue, 16 and
2.0 ms with one connection per process. A stack keeps a thread on the connection it
used last; connections that stay idle sit at the far end, where the pool's shrinking
(``max_idle``) closes them first.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.postgres import ConnectionPool


class LastInFirstOutPool(ConnectionPool[Any]):
    """eventsourcing's (psycopg_pool's) pool, taking the most recently returned
    connection first (see the module doc); everything else is the pool's own."""

    def _get_ready_connection(self, timeout: float | None) -> Any:
        """psycopg_pool's choice (called under the pool's lock) after moving the
        connection returned last to the front of its queue."""
        if self._pool:
            self._pool.rotate(1)
        return super()._get_ready_connection(timeout)


def last_in_first_out(datastore: Any) -> None:
    """Make eventsourcing's ``datastore.pool`` (not yet opened) a
    :class:`LastInFirstOutPool`; a pool of another class is left as it is."""
    if type(datastore.pool) is ConnectionPool:
        datastore.pool.__class__ = LastInFirstOutPool
