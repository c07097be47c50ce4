"""The value type of subject inference: :class:`SubjectKey` (entity, attribute, value).

Kept in its own small module so that the text helpers, the rules and the public
:mod:`memfabric.domain.subjects` facade can all use it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MAX_KEY_CHARS", "WILDCARD", "SubjectKey"]

MAX_KEY_CHARS = 200
WILDCARD = "*"
"""Attribute of a ``from_to`` key that names no attribute (matched through its value)."""


@dataclass(frozen=True, slots=True)
class SubjectKey:
    """The slot a statement fills: ``entity|attribute`` and the value it puts there.

    ``key`` is the normalised ``"entity|attribute"`` string (≤ 200 chars), the thing two
    notes must share to be about the same subject.  ``single_valued`` is False for
    relations that hold several values at once (their value is then part of ``key``).
    ``polarity`` is False for a negation ("is no longer", "does not like").
    ``previous`` is the value a "from A to B" statement says was replaced.
    """

    entity: str
    attribute: str
    value: str
    rule: str
    polarity: bool = True
    single_valued: bool = True
    previous: str | None = None
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.entity}|{self.attribute}"[:MAX_KEY_CHARS])
