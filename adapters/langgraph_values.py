"""The values of the LangGraph store (``memfabric.adapters.langgraph``): the scope of a
namespace, a value's JSON text, its ``ttl``, the keyed field hashes its note carries as
tags and the search ``filter`` split into its SQL part (those hashes) and its Python
part. Pure."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memfabric.domain.errors import NamespaceError, StoreValueError
from memfabric.domain.scope import SCOPE_ID_RE, Scope

WIDE_TAG = "lg:wide"
"""Tag of an item with more scalar fields than :data:`MAX_FIELD_TAGS`: filters on a
prefix holding one run in Python only."""
FIELD_TAG_PREFIX = "lg:f:"
MAX_FIELD_TAGS = 60
"""Field hashes one item carries at most (a note has at most 64 tags)."""
MAX_DEPTH = 64
"""Deepest nesting of lists and objects a value may have."""
MAX_TTL_MINUTES = 100 * 366 * 24 * 60
"""Largest ``ttl``: about 100 years, in minutes."""
_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


# -------------------------------------------------------------- namespaces
def check_labels(namespace: tuple[str, ...]) -> None:
    for label in namespace:
        if not isinstance(label, str) or not SCOPE_ID_RE.fullmatch(label):
            raise NamespaceError(f"namespace label {label!r}: 1-128 characters of [A-Za-z0-9._:@-]")


def scope_of(namespace: tuple[str, ...]) -> Scope:
    """The scope of a namespace of 1-3 scope ids (``NamespaceError`` otherwise; a label
    must match the scope id pattern in full, so a trailing newline is refused)."""
    if not 1 <= len(namespace) <= 3:
        raise NamespaceError(f"namespace {namespace!r}: 1 to 3 labels (tenant, resource, thread)")
    check_labels(namespace)
    rest: list[str | None] = [*namespace[1:], None, None]
    return Scope(tenant_id=namespace[0], resource_id=rest[0], thread_id=rest[1])


def namespace_of(scope: Scope) -> tuple[str, ...]:
    return tuple(p for p in (scope.tenant_id, scope.resource_id, scope.thread_id) if p is not None)


# ------------------------------------------------------------------ values
def _depth_ok(value: Any) -> bool:
    """Whether ``value`` nests lists / objects at most :data:`MAX_DEPTH` deep (iterative,
    so a deep value cannot exhaust the interpreter stack)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list | tuple):
            if depth >= MAX_DEPTH:
                return False
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return True


def value_json(value: Any) -> tuple[dict[str, Any], str]:
    """``(value as a dict, its JSON text with sorted keys)``. Raises ``StoreValueError``
    for a value that is not a mapping with string keys, nests deeper than
    :data:`MAX_DEPTH` or holds something JSON cannot represent."""
    if not hasattr(value, "items"):
        raise StoreValueError(f"value: a mapping (dict), not {type(value).__name__}")
    out = dict(value)
    if not all(isinstance(k, str) for k in out):
        raise StoreValueError("value: top-level keys must be strings")
    if not _depth_ok(out):
        raise StoreValueError(f"value: nested more than {MAX_DEPTH} levels deep")
    try:
        text = json.dumps(out, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreValueError(f"value: not representable as JSON ({exc})") from None
    return out, text


def checked_ttl(ttl: Any) -> float | None:
    """``ttl`` in minutes: ``None`` or a finite number in (0, :data:`MAX_TTL_MINUTES`]
    (``StoreValueError`` otherwise, e.g. -5, ``inf``, ``nan``, ``1e12``)."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise StoreValueError(f"ttl: minutes as a number, not {type(ttl).__name__}")
    minutes = float(ttl)
    if not math.isfinite(minutes) or not 0 < minutes <= MAX_TTL_MINUTES:
        raise StoreValueError(f"ttl: {ttl!r} minutes: a finite number above 0 and at most {MAX_TTL_MINUTES}")
    return minutes


def _scalar_key(value: Any) -> Any:
    """The form a scalar is hashed in, so values Python compares equal hash alike
    (``True == 1 == 1.0``); ``None`` for a value no equality can match (NaN) or that is
    not a scalar."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() else value
    if isinstance(value, str | int):
        return value
    return None


def field_tags(hmac: Callable[[str], str], value: dict[str, Any]) -> list[str]:
    """The keyed field hashes of ``value`` (top-level scalars, sorted by name), or
    ``[WIDE_TAG]`` when there are more than :data:`MAX_FIELD_TAGS`."""
    tags = [t for t in (field_tag(hmac, k, v) for k, v in sorted(value.items())) if t is not None]
    return [WIDE_TAG] if len(tags) > MAX_FIELD_TAGS else tags


def field_tag(hmac: Callable[[str], str], name: str, value: Any) -> str | None:
    """``lg:f:`` + the first 32 hex of the fabric's HMAC-SHA256 of ``[name, value]``
    (``None`` for a value that has no hash, :func:`_scalar_key`)."""
    norm = _scalar_key(value)
    if norm is None:
        return None
    return FIELD_TAG_PREFIX + hmac(json.dumps(["lg-field", name, norm], ensure_ascii=False))[:32]


# ----------------------------------------------------------------- filters
def _compare(value: Any, op: str, wanted: Any) -> bool:
    """LangGraph's operator semantics; a value that cannot be compared does not match
    (instead of failing the whole search)."""
    if op == "$eq":
        return bool(value == wanted)
    if op == "$ne":
        return bool(value != wanted)
    try:
        a, b = float(value), float(wanted)
    except (TypeError, ValueError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _matches(value: Any, wanted: Any) -> bool:
    """``langgraph.store.memory._compare_values`` with :func:`_compare` for operators."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_compare(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (isinstance(value, list | tuple) and len(value) == len(wanted)
                and all(_matches(a, b) for a, b in zip(value, wanted, strict=True)))
    return bool(value == wanted)


def _check_operators(wanted: Any, where: str) -> None:
    if isinstance(wanted, dict):
        for k, v in wanted.items():
            if isinstance(k, str) and k.startswith("$") and k not in _OPERATORS:
                raise StoreValueError(f"filter {where}: unsupported operator {k!r} (one of {sorted(_OPERATORS)})")
            _check_operators(v, f"{where}.{k}")


@dataclass(frozen=True, slots=True)
class ItemFilter:
    """A search ``filter`` in two parts: ``tags``, the field hashes every matching item
    carries (from top-level equalities and ``$eq``, run in SQL), and :meth:`admits`,
    the whole filter (operators, nested objects) on the decoded value."""

    spec: dict[str, Any]
    tags: tuple[str, ...]

    @classmethod
    def of(cls, spec: dict[str, Any] | None, hmac: Callable[[str], str]) -> ItemFilter:
        """Raises ``StoreValueError`` for an operator LangGraph does not define."""
        spec = dict(spec or {})
        _check_operators(spec, "")
        tags: list[str] = []
        for name, wanted in spec.items():
            eq = wanted.get("$eq") if isinstance(wanted, dict) and set(wanted) == {"$eq"} else wanted
            tag = field_tag(hmac, name, eq) if not isinstance(eq, dict | list | tuple) else None
            if tag is not None:
                tags.append(tag)
        return cls(spec, tuple(tags))

    def admits(self, value: dict[str, Any]) -> bool:
        return all(_matches(value.get(k), v) for k, v in self.spec.items())
