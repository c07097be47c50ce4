"""The argument models of the memory tools (:mod:`memfabric.adapters.tools`, which
re-exports them): each validates one tool call's JSON arguments, strictly (no extra
keys, no NUL characters); a bad call raises ``pydantic.ValidationError``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)

from memfabric.adapters.jail import MAX_PATH_CHARS
from memfabric.domain.inputs import (
    BlockLabel,
    Budget,
    Instant,
    NoteId,
    QueryText,
    RecallKinds,
    TopK,
    reject_nul,
)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


ToolPath = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATH_CHARS)]
Text = Annotated[str, StringConstraints(min_length=1), AfterValidator(_not_blank)]


class ToolArgs(BaseModel):
    """What every tool's arguments share: no extra keys, strict types, no NUL."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return reject_nul(value)


class ViewArgs(ToolArgs):
    """``memory.view``: ``path`` of a directory inside the root (default the root)."""

    path: Annotated[str, StringConstraints(max_length=MAX_PATH_CHARS)] | None = None


class ReadArgs(ToolArgs):
    """``memory.read``: ``path`` of a file inside the root."""

    path: ToolPath


class InsertArgs(ToolArgs):
    """``memory.insert``: non-blank ``text`` and exactly one of ``block`` (a working
    block label) or ``path`` (a file inside the root)."""

    text: Text
    block: BlockLabel | None = None
    path: ToolPath | None = None

    @model_validator(mode="after")
    def _one_target(self) -> InsertArgs:
        if (self.block is None) == (self.path is None):
            raise ValueError("block: give exactly one of block or path")
        return self


class RecallToolArgs(ToolArgs):
    """``memory.recall``: the arguments of ``Notes.recall`` a model may set."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    query: QueryText
    kinds: RecallKinds | None = None
    top_k: TopK | None = None
    as_of: Instant | None = None
    known_at: Instant | None = None
    budget: Budget | None = None

    @field_validator("top_k", "budget", mode="before")
    @classmethod
    def _int_only(cls, value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError("must be an integer")
        return value

    @field_validator("as_of", "known_at", mode="before")
    @classmethod
    def _text_time(cls, value: Any) -> Any:
        """An ISO 8601 date-time; without an offset it is read as UTC (models send
        such dates; the CLI reads them alike)."""
        if value is None:
            return None
        if not isinstance(value, str | datetime):
            raise ValueError("must be an ISO 8601 date-time")
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise ValueError("must be an ISO 8601 date-time") from None
        return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


class ForgetToolArgs(ToolArgs):
    """``memory.forget``: exactly one of ``id`` (12 hex) or ``block``; ``hold``."""

    id: NoteId | None = None
    block: BlockLabel | None = None
    hold: StrictBool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> ForgetToolArgs:
        if (self.id is None) == (self.block is None):
            raise ValueError("id: give exactly one of id or block")
        return self


class NoteRefArgs(ToolArgs):
    """``memory.history`` / ``memory.lineage``: a note ``id`` (12 hex)."""

    id: NoteId


class EntitiesArgs(ToolArgs):
    """``memory.entities`` (issue 32, read-only): exactly one of ``name`` (a surface to
    resolve: a name, alias, email, handle, url or phone, 1-200 characters) or ``id`` (an
    entity id, 12 hex); ``type`` (a type label) narrows a resolution; ``limit`` 1-50
    candidates (default 5)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    name: Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(_not_blank)] | None = None
    id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12}$")] | None = None
    type: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,39}$")] | None = None
    limit: Annotated[int, Field(ge=1, le=50)] = 5

    @field_validator("limit", mode="before")
    @classmethod
    def _int_only(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be an integer")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> EntitiesArgs:
        if (self.name is None) == (self.id is None):
            raise ValueError("name: give exactly one of name or id")
        return self
