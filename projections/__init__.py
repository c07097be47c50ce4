"""memfabric.projections: one read model per module, listed once in
:mod:`memfabric.projections.registry` (:func:`default_projections`)."""

from __future__ import annotations

from typing import Any

__all__ = ["default_projections"]


def default_projections(embedder: Any, mapper: Any = None) -> list[Any]:
    """Every registered projection for ``embedder``
    (:func:`memfabric.projections.registry.default_projections`)."""
    from memfabric.projections.registry import default_projections as build  # noqa: PLC0415 - keeps the package import light

    return build(embedder, mapper)
