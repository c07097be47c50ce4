"""Setting types the handlers' dependencies (:class:`memfabric.domain.deps.Deps`)
hold, in a module of their own so that ``deps`` imports no handler module: the two
opt-in write-path workers of :mod:`memfabric.domain.links` (issue 15,
:class:`LinkerSettings`, :class:`EvolutionSettings`, :func:`worker_settings` from
``open_fabric``'s ``linker`` / ``evolution`` / ``passive``) and the host's
:data:`WorkingValidator` (:mod:`memfabric.domain.working`). Pure module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_FLOOR = 0.3
"""Least cosine similarity of a linked / patched neighbour."""

MAX_WORKER_CAP = 32
"""Upper bound of ``top_k`` and ``max_patches``."""



class LinkerSettings(BaseModel):
    """The linker worker: ``enabled`` (default False), ``top_k`` edges per new note
    (1-32, default 3), ``floor`` (least similarity, default 0.3) and ``by``: which
    neighbours it links, ``"similarity"`` (default: the nearest vectors, weight = cosine)
    or ``"terms"`` (the notes sharing the most rare terms, weight from their IDF, see
    :mod:`memfabric.domain.link_terms`; suits conversational turns, whose related turns
    share a name or a thing rather than wording).

    ``adjacent`` (0-1, default 0: none) is the weight of one more edge, relation
    ``follows``, from a new note to the newest live, current note of exactly its scope
    and kind, the one inserted just before it (the previous turn of a conversation: an
    answer follows its question), when the two are at most ``adjacent_window`` seconds
    apart (default 3600; each note's time is its ``t_ref``, else its write time). It
    comes on top of the ``top_k`` edges. For conversations:
    ``{"by": "terms", "top_k": 8, "adjacent": 0.5}`` (``scripts/eval_links.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    enabled: bool = False
    top_k: int = Field(default=3, ge=1, le=MAX_WORKER_CAP)
    floor: float = Field(default=DEFAULT_FLOOR, ge=0.0, le=1.0)
    by: Literal["similarity", "terms"] = "similarity"
    adjacent: float = Field(default=0.0, ge=0.0, le=1.0)
    adjacent_window: float = Field(default=3600.0, gt=0.0, le=366 * 86400.0)


class EvolutionSettings(BaseModel):
    """The evolution worker: ``enabled`` (default False), ``max_patches`` per new note
    (1-32, default 8), ``max_bytes`` per patch (64-4096, default 512) and ``floor``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    enabled: bool = False
    max_patches: int = Field(default=8, ge=1, le=MAX_WORKER_CAP)
    max_bytes: int = Field(default=512, ge=64, le=4096)
    floor: float = Field(default=DEFAULT_FLOOR, ge=0.0, le=1.0)


def worker_settings(linker: LinkerSettings | dict[str, Any] | None,
                    evolution: EvolutionSettings | dict[str, Any] | None,
                    passive: bool) -> dict[str, Any]:
    """The worker arguments of :meth:`memfabric.domain.deps.Deps.build` from ``open_fabric``'s ``linker``/``evolution``
    (``pydantic.ValidationError`` for a bad setting)."""
    return {
        "linker": linker if isinstance(linker, LinkerSettings) else LinkerSettings.model_validate(linker or {}),
        "evolution": (evolution if isinstance(evolution, EvolutionSettings)
                      else EvolutionSettings.model_validate(evolution or {})),
        "passive": passive,
    }


WorkingValidator = type[BaseModel] | Callable[[dict[str, Any]], Any]
"""A host's check of the working value: a pydantic model class (validated with
``model_validate``) or a callable that raises or returns ``False`` to reject."""
