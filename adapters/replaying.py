"""The sealing mapper as the projections replay with it (issue 34: ``memfabric.projections``
imports nothing from the adapters; what it needs of the sealing side is handed to it).

:class:`ReplayingMapper` is :class:`memfabric.projections.replay.ReplayMapper`: the
fabric's :class:`~memfabric.adapters.crypto.SealingMapper` (``bound``,
``decode_state``, ``to_domain_event`` ..., every attribute read through to it) plus
``batch_keys()``, a fresh :class:`~memfabric.adapters.crypto.BatchKeys` for each replay.
"""

from __future__ import annotations

from typing import Any

from memfabric.adapters.crypto import BatchKeys


class ReplayingMapper:
    """``mapper`` (a sealing mapper) with :meth:`batch_keys` (see the module doc)."""

    def __init__(self, mapper: Any) -> None:
        self.mapper = mapper

    def batch_keys(self) -> BatchKeys:
        """An empty key reader: ``load(conn, ids)`` reads one batch's keys."""
        return BatchKeys()

    def bound(self, keys: Any) -> Any:
        """The sealing mapper unsealing with ``keys`` (``SealingMapper.bound``)."""
        return self.mapper.bound(keys)

    def decode_state(self, stored: Any) -> Any:
        """``SealingMapper.decode_state``: ``(fields, erased)`` of one stored event."""
        return self.mapper.decode_state(stored)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.mapper, name)
