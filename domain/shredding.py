"""Which events crypto-shred: the tombstone event classes say so themselves.

A tombstone event class (``Note.Forgotten``, ``Conversation.Erased``,
``Entity.EntityForgotten``) derives from :class:`Shredding`. Two things follow from the
classes alone, so no adapter keeps a list of topics or event names:

- the unit of work that appends an event of such a class destroys that aggregate's data
  keys in the same transaction (:func:`shreds_keys` over the aggregate's pending events),
  unless the event keeps them (:meth:`Shredding.keeps_keys`: a legal hold is a
  ``Forgotten`` event that keeps its content);
- the crypto layer reads a missing data key of an aggregate as *shredded* (its fields
  read ``<erased>``) exactly when the aggregate has an event of one of these topics at
  or after the key's generation (:func:`shredding_topics`; the topics are the stored
  ``module:Class.Event`` paths, stable across releases).

A class is found once its module is imported (a subclass walk); a new tombstone event
is one class deriving from :class:`Shredding`, nothing else to register.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from eventsourcing.utils import get_topic


class Shredding:
    """Marker base of a tombstone event class (list it after ``Aggregate.Event``).

    ``shreds`` (class attribute, default ``True``): events of this class destroy their
    aggregate's keys and their topic is a shredding topic; a subclass may set it to
    ``False`` to opt out."""

    shreds: ClassVar[bool] = True

    def keeps_keys(self) -> bool:
        """Whether this event, although of a shredding class, leaves the keys in place
        (default ``False``; ``Note.Forgotten`` with reason ``legal_hold`` keeps them)."""
        return False


def _declared(cls: type) -> bool:
    """Whether ``cls`` is the class its ``module:qualname`` names. eventsourcing
    re-creates each event class nested in an aggregate on that aggregate's own
    ``Event`` base; the class as first declared is never stored, so it is skipped."""
    obj: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


def _walk(cls: type[Shredding]) -> Iterator[type[Shredding]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _walk(sub)


def shredding_classes() -> list[type[Shredding]]:
    """Every imported event class marked :class:`Shredding` (with ``shreds`` true), in
    topic order."""
    found = {get_topic(c): c for c in _walk(Shredding) if c.shreds and _declared(c)}
    return [found[t] for t in sorted(found)]


def shredding_topics() -> list[str]:
    """The stored topics of :func:`shredding_classes`, sorted (e.g.
    ``memfabric.domain.note:Note.Forgotten``)."""
    return [get_topic(c) for c in shredding_classes()]


def shreds(event: Any) -> bool:
    """Whether appending ``event`` destroys its aggregate's data keys: an event of a
    shredding class that does not keep them."""
    return isinstance(event, Shredding) and event.shreds and not event.keeps_keys()


def shreds_keys(events: Iterable[Any]) -> bool:
    """Whether any of ``events`` (an aggregate's pending events) :func:`shreds`."""
    return any(shreds(e) for e in events)
