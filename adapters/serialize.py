"""JSON shapes of the read models, for the entry points (CLI, tools, MCP)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel


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
