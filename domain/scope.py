"""The tenant / resource / thread scope every note lives in."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
ScopeId = Annotated[str, StringConstraints(pattern=_ID_PATTERN)]
SCOPE_ID_RE = re.compile(_ID_PATTERN)


class Scope(BaseModel):
    """Where a note lives: ``tenant_id`` (required), then optional ``resource_id`` and ``thread_id``.

    Each id is 1-128 characters of ``[A-Za-z0-9._:@-]`` starting with a letter or digit.
    Absent parts are ``None``; in SQL they are stored as the empty string so that
    equality filters stay index-friendly. Raises ``pydantic.ValidationError`` naming
    the field on bad input. A ``thread_id`` without a ``resource_id`` is allowed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: ScopeId
    resource_id: ScopeId | None = None
    thread_id: ScopeId | None = None

    @property
    def key(self) -> str:
        """Stable text key ``tenant/resource/thread`` (absent parts empty)."""
        return f"{self.tenant_id}/{self.resource_id or ''}/{self.thread_id or ''}"

    def sql(self) -> tuple[str, str, str]:
        """The three scope columns as stored (``''`` for absent parts)."""
        return (self.tenant_id, self.resource_id or "", self.thread_id or "")

    def __str__(self) -> str:
        return self.key


@lru_cache(maxsize=4096)
def stored_scope(tenant_id: str, resource_id: str | None, thread_id: str | None) -> Scope:
    """The scope of a note or row as the fabric stored it (``''`` or ``None`` for an
    absent part): one frozen instance per scope, built without validating again ids the
    fabric validated when it wrote them (a pydantic construction per row was a visible
    part of a write's and a read's time, issue 24)."""
    return Scope.model_construct(tenant_id=tenant_id, resource_id=resource_id or None, thread_id=thread_id or None)
