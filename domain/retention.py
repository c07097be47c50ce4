"""Retention classes (issue 30): what a class means, its windows, and what a sweep
decides for one note.

Every note carries a ``retention`` class (recorded in its ``Remembered`` event, changed
only by ``RetentionChanged``):

- ``ephemeral``: forgotten (tombstone + crypto-shredding, cause ``retention``) once its
  window (default ``1d``) has closed;
- ``operational``: the same with a longer window (default ``90d``);
- ``durable``: never erased by a sweep; with a window configured it is *expired* (a
  ``Note.Expired`` event: no longer recalled, still readable) once it closes;
- ``regulated``: kept at least its ``floor`` (no forget, no sweep erases it before, unless
  a legal erasure names an approval reference) and forgotten by the sweep at its
  ``ceiling``; no floor and no ceiling by default.

Windows run from the note's last write (``written_at``: its creation, or its latest
fold or block write). Defaults per kind (:func:`default_class`): ``working`` and
``episode`` notes and notes promoted from the conversation ledger are
``operational``; ``fact``, ``procedure`` and ``file`` notes are ``durable``.

A note once ``regulated`` keeps the *regulated label* (``Note.regulated``) when moved to
another class: its floor still applies, and moving it into a longer class
(:data:`RANK`) needs an approval reference.

Windows are configured per fabric with per-tenant overrides (:class:`RetentionConfig`,
``open_fabric(..., retention={...})``) and stored in the database, so every process
decides with the same values. Nothing runs on its own: ``fabric.sweep()`` or
``memfabric sweep`` applies them (:mod:`memfabric.domain.sweep`).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    from memfabric.domain.note import Note

RetentionClass = Literal["ephemeral", "operational", "durable", "regulated"]
CLASSES: tuple[str, ...] = ("ephemeral", "operational", "durable", "regulated")

RANK: dict[str, int] = {"ephemeral": 0, "operational": 1, "regulated": 2, "durable": 3}
"""How long a class keeps a note, shortest first (``durable`` is never erased)."""

ERASABLE: frozenset[str] = frozenset({"ephemeral", "operational", "regulated"})
"""Classes whose closed window means erasure (``regulated``: at its ceiling)."""

SWEEP_REQUESTED_BY = "retention-sweep"
"""``requested_by`` of the tombstones and erasures a retention sweep writes."""

OUTCOMES: tuple[str, ...] = ("expired", "forgotten", "skipped_held", "skipped_floor", "decayed")
"""What a sweep did with a due note: ``expired`` (a ``Note.Expired`` event only),
``forgotten`` (a ``Forgotten`` tombstone carrying the class and the sweep's ``now``, which
also expires the note; key destroyed),
``skipped_held`` (under legal hold: untouched), ``skipped_floor`` (its regulated floor
has not passed: untouched), ``decayed`` (an ``ImportanceDecayed`` event: its importance
lowered, see :class:`Decay`; only with decay configured)."""

Outcome = Literal["expired", "forgotten", "skipped_held", "skipped_floor", "decayed"]

DECAY_KINDS: tuple[str, ...] = ("fact", "procedure", "file")
"""The kinds whose importance a sweep may lower (the kinds recall ranks by importance)."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w|y)\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


MAX_DURATION = timedelta(days=1000 * 365)
"""The longest window a duration may name (1,000 years; ``"never"`` for none): a longer
one would overflow the dates it is added to or subtracted from."""


def parse_duration(value: Any) -> timedelta | None:
    """``"90d"``, ``"12h"``, ``"7y"`` (a year is 365 days), ``"30m"``, ``"45s"``,
    ``"2w"``, a ``timedelta`` or a number of seconds; ``None``/``"never"`` for no
    window. Raises ``ValueError`` for anything else, a value that is not positive or
    one longer than :data:`MAX_DURATION`."""
    if value is None or value == "never":
        return None
    try:
        out = _as_timedelta(value)
    except OverflowError:
        raise ValueError(f"a duration must be at most 1000y, not {value!r}") from None
    if out <= timedelta(0):
        raise ValueError(f"a duration must be positive, not {value!r}")
    if out > MAX_DURATION:
        raise ValueError(f"a duration must be at most 1000y, not {value!r}")
    return out


def _as_timedelta(value: Any) -> timedelta:
    """:func:`parse_duration`'s reading of ``value`` before its bounds are checked."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        if value != value:  # NaN
            raise ValueError(f"not a duration: {value!r}")
        return timedelta(seconds=float(value))
    if isinstance(value, str) and (m := _DURATION.match(value)):
        return timedelta(seconds=float(m.group(1)) * _UNIT[m.group(2)])
    raise ValueError(f"not a duration: {value!r} (use e.g. '90d', '12h', '7y' or 'never')")


def format_duration(value: timedelta | None) -> str:
    """The inverse of :func:`parse_duration` in whole seconds (``"never"`` for ``None``)."""
    return "never" if value is None else f"{int(value.total_seconds())}s"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Regulated(_Model):
    """``floor``: no erasure before (``None``: none); ``ceiling``: the sweep forgets
    the note then (``None``: never). ``ceiling >= floor``."""

    floor: timedelta | None = None
    ceiling: timedelta | None = None

    @field_validator("floor", "ceiling", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta | None:
        return parse_duration(value)

    @model_validator(mode="after")
    def _order(self) -> Regulated:
        if self.floor is not None and self.ceiling is not None and self.ceiling < self.floor:
            raise ValueError("regulated.ceiling: must not be shorter than the floor")
        return self


class Decay(_Model):
    """Importance decay of idle notes (off unless configured, ``"decay": {"after":
    "30d"}``). Reads leave no trace in the log, so "never recalled" is defined by what
    the log knows: a note is *idle* at ``now`` when it has not been written (created,
    folded, block-written: :func:`written_at`) and not decayed for ``after``. A sweep
    multiplies the importance of each idle, live (not superseded, expired, held or
    forgotten) ``fact``/``procedure``/``file`` note by ``factor`` (default 0.5), never
    below ``floor`` (default 0.1), with one ``ImportanceDecayed`` event; so an idle note
    loses importance once per ``after`` of idleness, and a write starts the clock again.
    A link, a recall or a ``get`` does not."""

    after: timedelta
    factor: float = Field(0.5, gt=0.0, lt=1.0)
    floor: float = Field(0.1, ge=0.0, le=1.0)

    @field_validator("after", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        parsed = parse_duration(value)
        if parsed is None:
            raise ValueError("decay.after: give a duration (leave decay out to turn it off)")
        return parsed


class Windows(_Model):
    """The windows of the four classes (durations from the note's last write) and the
    recall recency half-life per class (``half_life``: ``None`` keeps the query's)."""

    ephemeral: timedelta | None = timedelta(days=1)
    operational: timedelta | None = timedelta(days=90)
    durable: timedelta | None = None
    regulated: Regulated = Regulated()
    half_life: dict[RetentionClass, timedelta] = Field(default_factory=dict)
    decay: Decay | None = None
    ledger: RetentionClass = "operational"
    """The class of the conversation ledgers (issue 30): a thread's conversation is one
    aggregate with one key, so its entries go together, when this class's window since
    the conversation's last entry or observation closes (``durable``: never)."""

    @field_validator("ephemeral", "operational", "durable", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta | None:
        return parse_duration(value)

    @field_validator("regulated", mode="before")
    @classmethod
    def _regulated(cls, value: Any) -> Any:
        if isinstance(value, (str, int, float, timedelta)) or value is None:
            return {"floor": None, "ceiling": value}  # a bare duration is the ceiling
        return value

    @field_validator("half_life", mode="before")
    @classmethod
    def _half_lives(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("half_life: a mapping of class to duration")
        out = {}
        for k, v in value.items():
            parsed = parse_duration(v)
            if parsed is None:
                raise ValueError(f"half_life.{k}: give a duration")
            out[k] = parsed
        return out

    def window(self, retention: str) -> timedelta | None:
        """How long after its last write a note of ``retention`` is due (``regulated``:
        its ceiling); ``None``: never."""
        if retention == "regulated":
            return self.regulated.ceiling
        found: timedelta | None = getattr(self, retention)
        return found


class RetentionConfig(_Model):
    """A fabric's retention settings: the fabric-wide :class:`Windows` fields plus
    ``tenants`` (per-tenant overrides, each a partial ``Windows``). Accepted as
    ``{"operational": "90d", "regulated": {"floor": "7y", "ceiling": "10y"},
    "tenants": {"acme": {"operational": "30d"}}}``. ``decay``: :class:`Decay` settings
    (``None``, the default: off; a tenant may set its own or ``None``); ``ledger``: the
    class of the conversation ledgers (default ``operational``)."""

    ephemeral: Any = "1d"
    operational: Any = "90d"
    durable: Any = None
    regulated: Any = None
    half_life: dict[str, Any] = Field(default_factory=dict)
    decay: Any = None
    ledger: Any = "operational"
    tenants: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> RetentionConfig:
        self.for_tenant(None)
        for tenant in self.tenants:
            self.for_tenant(tenant)
        return self

    def base(self) -> dict[str, Any]:
        """The fabric-wide fields as given."""
        return {"ephemeral": self.ephemeral, "operational": self.operational,
                "durable": self.durable, "regulated": self.regulated or {},
                "half_life": dict(self.half_life), "decay": self.decay, "ledger": self.ledger}

    def for_tenant(self, tenant_id: str | None) -> Windows:
        """The windows that apply to ``tenant_id`` (its overrides over the fabric's)."""
        fields = self.base()
        override = self.tenants.get(tenant_id or "", {}) if tenant_id is not None else {}
        if not isinstance(override, dict):
            raise ValueError(f"tenants.{tenant_id}: a mapping of windows")
        for key, value in override.items():
            if key == "regulated" and isinstance(value, dict) and isinstance(fields["regulated"], dict):
                fields["regulated"] = {**fields["regulated"], **value}
            elif key == "half_life" and isinstance(value, dict):
                fields["half_life"] = {**fields["half_life"], **value}
            else:
                fields[key] = value
        return Windows.model_validate(fields)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable form (durations as ``"<n>s"``) that :meth:`of` reads back."""
        def windows(w: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for key, value in w.items():
                if key == "regulated":
                    reg = Windows.model_validate({"regulated": value}).regulated
                    out[key] = {"floor": format_duration(reg.floor), "ceiling": format_duration(reg.ceiling)}
                elif key == "half_life":
                    out[key] = {k: format_duration(parse_duration(v)) for k, v in value.items()}
                elif key == "decay":
                    out[key] = None if value is None else _decay_json(value)
                elif key == "ledger":
                    out[key] = Windows.model_validate({"ledger": value}).ledger
                else:
                    out[key] = format_duration(parse_duration(value))
            return out
        return {**windows(self.base()),
                "tenants": {t: windows(dict(o)) for t, o in sorted(self.tenants.items())}}

    @classmethod
    def of(cls, value: RetentionConfig | dict[str, Any] | None) -> RetentionConfig:
        """Validate ``value`` (``None``: the defaults); ``pydantic.ValidationError``
        naming the field for a bad one."""
        if isinstance(value, RetentionConfig):
            return value
        return cls.model_validate(value or {})


def _decay_json(value: Any) -> dict[str, Any]:
    d = value if isinstance(value, Decay) else Decay.model_validate(value)
    return {"after": format_duration(d.after), "factor": d.factor, "floor": d.floor}


# ------------------------------------------------------------------- a note's class
def default_class(kind: str, promoted: bool = False) -> str:
    """The class of a note written without one: ``operational`` for ``working`` and
    ``episode`` notes and for notes promoted from the ledger, else ``durable``."""
    return "operational" if kind in ("working", "episode") or promoted else "durable"


def class_of(note: Note) -> str:
    """The note's class (a note of a log before issue 30: its kind's default)."""
    found = getattr(note, "retention", None)
    return found if found else default_class(note.kind, getattr(note, "promoted_from", None) is not None)


def regulated_label(note: Note) -> bool:
    """Whether the note is or was ``regulated`` (its floor applies)."""
    return bool(getattr(note, "regulated", False)) or class_of(note) == "regulated"


def written_at(note: Note) -> datetime:
    """Where the note's windows start: its latest fold or block write, else creation."""
    found: datetime | None = getattr(note, "written_at", None)
    return found or note.created_on


def expired_at(note: Note) -> datetime | None:
    """When a ``Note.Expired`` event expired the note (``None``: not expired)."""
    return getattr(note, "expired_at", None)


def floor_until(note: Note, windows: Windows) -> datetime | None:
    """The end of the note's regulated floor, or ``None`` when none applies."""
    if not regulated_label(note) or windows.regulated.floor is None:
        return None
    return written_at(note) + windows.regulated.floor


def under_floor(note: Note, windows: Windows, now: datetime) -> datetime | None:
    """The floor's end when it has not passed at ``now`` (the note cannot be erased),
    else ``None``."""
    until = floor_until(note, windows)
    return until if until is not None and now < until else None


def window_closed(note: Note, windows: Windows, now: datetime) -> bool:
    """Whether the note's class window has closed at ``now``."""
    span = windows.window(class_of(note))
    return span is not None and written_at(note) + span <= now


def interval_over(note: Note, now: datetime) -> bool:
    """A note whose ``valid_to`` has passed and that no newer note replaced (a
    supersession already closed that window with its own event)."""
    return note.valid_to is not None and note.valid_to <= now and note.superseded_by is None


def decide(note: Note, windows: Windows, now: datetime) -> Outcome | None:
    """What a sweep at ``now`` does with ``note`` (``None``: nothing is due). Order:
    forgotten notes are never due; a due held note is ``skipped_held``; an erasable
    class whose window closed is ``forgotten`` unless its regulated floor has not
    passed (``skipped_floor``); a closed durable window or a passed ``valid_to`` on a
    note not yet expired is ``expired``."""
    if note.forgotten:
        return None
    erase = class_of(note) in ERASABLE and window_closed(note, windows, now)
    expire = expired_at(note) is None and (window_closed(note, windows, now) or interval_over(note, now))
    if not erase and not expire:
        return None
    if note.held:
        return "skipped_held"
    if erase:
        return "skipped_floor" if under_floor(note, windows, now) is not None else "forgotten"
    return "expired"


def decide_decay(note: Note, windows: Windows, now: datetime) -> float | None:
    """The lowered importance of an idle note at ``now`` (:class:`Decay`), or ``None``
    (decay off, not a decaying kind, not live, not idle, or already at the floor).
    Called only for a note :func:`decide` leaves alone."""
    d = windows.decay
    if (d is None or note.forgotten or note.held or note.kind not in DECAY_KINDS
            or note.superseded_by is not None or expired_at(note) is not None):
        return None
    if idle_from(note) + d.after > now:
        return None
    lowered = max(d.floor, round(note.importance * d.factor, 6))
    return lowered if lowered < note.importance else None


def idle_from(note: Note) -> datetime:
    """Since when a note is idle: its last write or its last decay, whichever is later."""
    decayed: datetime | None = getattr(note, "decayed_at", None)
    wrote = written_at(note)
    return wrote if decayed is None or decayed < wrote else decayed


def empty_counts() -> dict[str, dict[str, int]]:
    """``{class: {outcome: 0}}`` for every class and outcome."""
    return {c: dict.fromkeys(OUTCOMES, 0) for c in CLASSES}
