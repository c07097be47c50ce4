"""JSON shapes of the read models, and the text of times and errors, for the entry points
(CLI, tools, MCP, console)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from eventsourcing import persistence as es_persistence
from pydantic import BaseModel, ValidationError

from memfabric.domain.errors import FabricError
from memfabric.domain.inputs import BLOCK_LABEL_RE, NOTE_ID_RE
from memfabric.domain.scope import SCOPE_ID_RE


def jsonable(value: Any) -> Any:
    """A JSON-serialisable copy of a read model: datetimes as ISO 8601 text, durations
    in seconds, a scope as its key, a stored vector as ``"<N bytes float32>"``."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes float32>"
    if isinstance(value, timedelta):
        return value.total_seconds()
    if is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "key") and hasattr(value, "tenant_id"):
            return str(value.key)
        return {k: jsonable(v) for k, v in asdict(value).items()}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


PATTERNS = {
    SCOPE_ID_RE.pattern: "must be 1-128 letters, digits or ._:@- starting with a letter or digit",
    NOTE_ID_RE.pattern: "must be 12 lowercase hex digits",
    BLOCK_LABEL_RE.pattern: "must be 1-64 lowercase letters, digits or ._- starting with a letter or digit",
}
"""Plain words for the regular expressions of the input models."""


def parse_time(value: str | None, field: str = "as_of") -> datetime | None:
    """An ISO 8601 instant; without a timezone it means UTC (``2026-01-01`` is midnight UTC)."""
    if value is None:
        return None
    try:
        ts = datetime.fromisoformat(value.strip())
    except ValueError:
        raise FabricError(f"{field}: {value!r} is not an ISO 8601 time (e.g. 2026-01-31 or "
                          "2026-01-31T12:00:00+01:00)") from None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def error_lines(exc: BaseException | str) -> list[str]:
    """One readable line per error: ``field: message`` for each pydantic error (no URL,
    no input dump), else the exception's text on one line."""
    if isinstance(exc, str):
        return [exc]
    if isinstance(exc, ValidationError):
        lines = []
        for e in exc.errors(include_url=False, include_input=False):
            msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
            msg = PATTERNS.get(str(e.get("ctx", {}).get("pattern")), msg)
            field = ".".join(str(part) for part in e["loc"])
            # a model-level (cross-field) error has no loc; its message names the field
            lines.append(f"{field}: {msg}" if field else msg)
        return lines
    text = " ".join(str(exc).split())
    if isinstance(exc, psycopg.OperationalError | es_persistence.OperationalError):
        text = f"cannot use the database: {text}"
    return [text or type(exc).__name__]
