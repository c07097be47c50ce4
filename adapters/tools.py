"""Five memory tools a model can call, as inert definitions (``notes.tools(root)``).

=================  ===============================  ==========================================
tool               arguments                        what it does
=================  ===============================  ==========================================
``memory.view``    ``{path?}``                      list a directory inside ``root``
``memory.read``    ``{path}``                       read one file inside ``root`` (capped)
``memory.insert``  ``{text, block? | path?}``       append to a working block or a file
``memory.recall``  ``{query, kinds?, top_k?, ...}`` ``Notes.recall`` with the same rules
``memory.forget``  ``{id? | block?, hold?}``        ``Notes.forget`` with the same rules
=================  ===============================  ==========================================

Three optional read-only tools are callable too (``read_only_definitions``; the MCP
server lists them, :meth:`MemoryTools.openai` / :meth:`MemoryTools.anthropic` render
only the five): ``memory.history`` and ``memory.lineage`` of a note ``{id}``, and
``memory.entities`` ``{name? | id?, type?, limit?}`` (issue 32: resolve a name or
identifier to ranked entity candidates, or read one entity).

Nothing is registered anywhere: :class:`MemoryTools` only holds the definitions and a
dispatcher. A host renders them for its model (:meth:`MemoryTools.openai`,
:meth:`MemoryTools.anthropic`) and routes the model's calls to
:meth:`MemoryTools.call`, naming the session. Every call is refused
(:class:`~memfabric.domain.attach.NotAttachedError`) unless that session is attached
to the handle's scope (``notes.attach(session)``), and re-checks it on each call.

Provider-safe names: OpenAI and Anthropic tool names must match
``^[a-zA-Z0-9_-]{1,64}$``, so the renderings name the tools ``memory_view``,
``memory_read``, ``memory_insert``, ``memory_recall`` and ``memory_forget`` (the dot
becomes an underscore); :meth:`MemoryTools.call` accepts either form.

Errors: a bad call raises ``pydantic.ValidationError`` (bad arguments) or a
:class:`~memfabric.domain.errors.FabricError` subclass (``NotAttachedError``,
``JailError``, ``FilePathError``, ``CapacityError``, ``ConflictError``, ...) and
writes nothing. Hosts that hand errors back to the model use :func:`tool_error` (or
:meth:`MemoryTools.call_or_error`), which turns them into a JSON tool result
``{"error": {"type": ..., "message": ...}}`` without echoing the arguments.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from memfabric.adapters.jail import (
    DEFAULT_MAX_FILE_BYTES,
    MAX_PATH_CHARS,
    MAX_VIEW_ENTRIES,
    FileJail,
    FilePathError,
    JailError,
    check_max_file_bytes,
)
from memfabric.adapters.serialize import jsonable
from memfabric.adapters.tool_args import (
    EntitiesArgs,
    ForgetToolArgs,
    InsertArgs,
    NoteRefArgs,
    ReadArgs,
    RecallToolArgs,
    Text,
    ToolArgs,
    ToolPath,
    ViewArgs,
)
from memfabric.domain.attach import NotAttachedError, gate_for
from memfabric.domain.errors import CapacityError, FabricError, NoteForgottenError, NoteNotFoundError
from memfabric.domain.inputs import (
    DEFAULT_MAX_ENTRY_TEXT_CHARS,
)
from pydantic import (
    ValidationError,
)

if TYPE_CHECKING:
    from memfabric.domain.notes import Notes

__all__ = [
    "PROVIDER_NAME_RE",
    "TOOL_NAMES",
    "EntitiesArgs",
    "FilePathError",
    "ForgetToolArgs",
    "InsertArgs",
    "JailError",
    "MemoryTools",
    "NotAttachedError",
    "NoteRefArgs",
    "ReadArgs",
    "RecallToolArgs",
    "Text",
    "ToolArgs",
    "ToolPath",
    "ToolDefinition",
    "UnknownToolError",
    "ViewArgs",
    "decode_text",
    "jsonable",
    "provider_name",
    "scrub",
    "strict_schema",
    "tool_error",
]

PROVIDER_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What OpenAI function names and Anthropic tool names must match."""

TOOL_NAMES = ("memory.view", "memory.read", "memory.insert", "memory.recall", "memory.forget")
READ_ONLY_NAMES = ("memory.history", "memory.lineage", "memory.entities")


class UnknownToolError(FabricError):
    """No tool of that name (neither the dotted nor the provider-safe form)."""


def provider_name(name: str) -> str:
    """The provider-safe form of a tool name: ``memory.view`` → ``memory_view``."""
    return name.replace(".", "_")


# --------------------------------------------------------------- definitions
@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """One tool: ``name`` (dotted), ``description``, ``input_schema`` (JSON Schema
    object), the pydantic ``args`` model that validates calls, ``read_only``."""

    name: str
    description: str
    input_schema: dict[str, Any]
    args: type[ToolArgs]
    read_only: bool

    @property
    def provider_name(self) -> str:
        """``memory_view`` etc.: the name OpenAI and Anthropic accept."""
        return provider_name(self.name)


_PATH_SCHEMA = {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS,
                "description": "Relative path inside the memory root, '/'-separated "
                               "(no '..', not absolute, no symlinks)."}
_BLOCK_SCHEMA = {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$",
                 "description": "Label of a working-memory block, e.g. 'persona' or 'todo'."}
_KINDS = ["fact", "procedure", "file"]


def _definitions(max_file_bytes: int) -> list[ToolDefinition]:
    return [
        ToolDefinition(
            "memory.view",
            "List a directory of the memory files: names, types and byte sizes "
            f"(at most {MAX_VIEW_ENTRIES} entries). Omit path for the top directory.",
            {"type": "object", "properties": {"path": {
                **_PATH_SCHEMA, "minLength": 0,
                "description": "Directory relative to the memory root; omit for the root."}},
             "additionalProperties": False},
            ViewArgs, True),
        ToolDefinition(
            "memory.read",
            f"Read one memory file (at most {max_file_bytes} bytes; 'truncated' is true "
            "when the file is longer). Use memory.view first to find files.",
            {"type": "object", "properties": {"path": _PATH_SCHEMA},
             "required": ["path"], "additionalProperties": False},
            ReadArgs, True),
        ToolDefinition(
            "memory.insert",
            "Append text to a working-memory block (block=label) or to a memory file "
            "(path=relative path; made with its folders when missing) and index the "
            "file for recall. Give exactly one of block or path. Appends only: a newline "
            f"separates it from existing content; files hold at most {max_file_bytes} bytes.",
            {"type": "object", "properties": {
                "text": {"type": "string", "minLength": 1, "description": "Text to append."},
                "block": _BLOCK_SCHEMA, "path": _PATH_SCHEMA},
             "required": ["text"], "additionalProperties": False},
            InsertArgs, False),
        ToolDefinition(
            "memory.recall",
            "Search long-term memory (facts and files by default) for notes relevant to "
            "a query; returns ranked hits with their ids and an explain row per hit.",
            {"type": "object", "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 8000,
                          "description": "What to look for, in natural language."},
                "kinds": {"type": "array", "minItems": 1, "uniqueItems": True,
                          "items": {"type": "string", "enum": _KINDS},
                          "description": "Kinds to search (default fact and file; "
                                         "procedures only when listed)."},
                "top_k": {"type": "integer", "minimum": 1, "maximum": 1000,
                          "description": "Most hits to return (default 10)."},
                "as_of": {"type": "string", "format": "date-time",
                          "description": "Recall as of this instant (ISO 8601; UTC when "
                                         "no offset is given)."},
                "known_at": {"type": "string", "format": "date-time",
                             "description": "Recall what memory had recorded at this instant "
                                            "(ISO 8601; UTC when no offset is given)."},
                "budget": {"type": "integer", "minimum": 1, "maximum": 1000000,
                           "description": "Cap on the hits' summed tokens."}},
             "required": ["query"], "additionalProperties": False},
            RecallToolArgs, True),
        ToolDefinition(
            "memory.forget",
            "Forget one note (id from memory.recall) or one working-memory block "
            "(block=label), exactly one. Its content is erased for good; hold=true keeps "
            "it under legal hold instead (never recalled).",
            {"type": "object", "properties": {
                "id": {"type": "string", "pattern": "^[0-9a-f]{12}$",
                       "description": "Id of the note (12 hex digits)."},
                "block": _BLOCK_SCHEMA,
                "hold": {"type": "boolean", "description": "Legal hold instead of erasure."}},
             "additionalProperties": False},
            ForgetToolArgs, False),
    ]


def _read_only_definitions() -> list[ToolDefinition]:
    ref = {"type": "object", "properties": {"id": {
        "type": "string", "pattern": "^[0-9a-f]{12}$", "description": "Note id (12 hex digits)."}},
        "required": ["id"], "additionalProperties": False}
    return [
        ToolDefinition("memory.history", "The typed events of one note, in order, with "
                       "timestamps and causes (read-only).", ref, NoteRefArgs, True),
        ToolDefinition("memory.lineage", "The supersession chain, folds, links and tombstone "
                       "of one note (read-only).", ref, NoteRefArgs, True),
        ToolDefinition(
            "memory.entities",
            "Look up the people, organisations, projects and things memory knows (read-only): "
            "name= a name, alias, email, handle, url or phone gives ranked candidates with the "
            "tier that matched (identifier, exact_name, exact_alias, normalised, fuzzy); id= an "
            "entity id gives its display name, aliases and identifiers. Exactly one of the two.",
            {"type": "object", "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 200,
                         "description": "What to resolve, e.g. 'Maria Lopez' or 'maria@acme.example'."},
                "id": {"type": "string", "pattern": "^[0-9a-f]{12}$",
                       "description": "Id of an entity (12 hex digits), e.g. from a candidate."},
                "type": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,39}$",
                         "description": "Only entities of this type (person, organisation, ...)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50,
                          "description": "Most candidates to return (default 5)."}},
             "additionalProperties": False},
            EntitiesArgs, True),
    ]


# ------------------------------------------------------------------- results
def _note_json(note: Any) -> dict[str, Any]:
    data = {k: jsonable(getattr(note, k)) for k in note.__dataclass_fields__ if k != "scope"}
    data["scope"] = note.scope.key
    return data


def tool_error(exc: BaseException, arguments: Any = None) -> dict[str, Any]:
    """A JSON tool result for a refused call: ``{"error": {"type", "message"}}``.

    For ``pydantic.ValidationError`` the message lists ``field: reason`` without the
    input; for a ``FabricError`` it is the error's text with every quoted part that
    comes from ``arguments`` (a string argument, or path parts of one, e.g. a folder
    of a ``path``) replaced by ``<argument>`` (issue 26: errors never echo a path).
    Hand it back to the model as the tool result (with the provider's error flag,
    e.g. Anthropic ``is_error``)."""
    if isinstance(exc, ValidationError):
        parts = []
        for e in exc.errors(include_url=False, include_input=False, include_context=False):
            msg = str(e["msg"]).removeprefix("Value error, ")
            field = ".".join(str(p) for p in e["loc"])
            parts.append(f"{field}: {msg}" if field else msg)
        return {"error": {"type": "ValidationError", "message": "; ".join(parts)}}
    message = scrub(" ".join(str(exc).split()), arguments)
    return {"error": {"type": type(exc).__name__, "message": message}}


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def _argument_texts(arguments: Any) -> tuple[set[str], set[str]]:
    """``(whole string arguments, their '/'-separated parts)`` of ``arguments``."""
    whole: set[str] = set()
    stack = [arguments]
    while stack:
        node = stack.pop()
        if isinstance(node, str) and node:
            whole.add(node)
        elif isinstance(node, Mapping):
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    parts = {p for w in whole for p in w.split("/") if p not in ("", ".")}
    return whole, parts


def scrub(message: str, arguments: Any) -> str:
    """``message`` with each quoted span (``'...'`` or ``"..."``) that names an
    argument replaced by ``<argument>``: the span is an argument, part of one, or made
    of path parts of the arguments (a normalised or partial path)."""
    whole, parts = _argument_texts(arguments)
    if not whole:
        return message

    def hide(m: re.Match[str]) -> str:
        text = m.group(0)[1:-1]
        pieces = [p for p in text.split("/") if p not in ("", ".")]
        named = (text in whole or any(text and text in w for w in whole)
                 or (pieces and all(p in parts for p in pieces)))
        return "<argument>" if named else m.group(0)

    return _QUOTED.sub(hide, message)


# --------------------------------------------------------------------- tools
class MemoryTools:
    """The five memory tools of one scope, inert until called for an attached session.

    Construct through ``notes.tools(root=None, *, max_file_bytes=50*1024)``. Without
    ``root`` the file tools (view, read, the path form of insert) fail closed with
    :class:`JailError`; block operations, recall and forget work.
    """

    def __init__(self, notes: Notes, service: object, root: str | os.PathLike[str] | None = None,
                 *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.notes = notes
        self._service = service
        self._gate = gate_for(service)
        self.max_file_bytes = check_max_file_bytes(max_file_bytes)
        self.jail = FileJail(root, max_file_bytes=max_file_bytes) if root is not None else None
        self.definitions: list[ToolDefinition] = _definitions(max_file_bytes)
        self.read_only_definitions: list[ToolDefinition] = _read_only_definitions()
        self._by_name: dict[str, ToolDefinition] = {}
        for d in (*self.definitions, *self.read_only_definitions):
            self._by_name[d.name] = d
            self._by_name[d.provider_name] = d
        self._handlers: dict[str, Callable[[Any], Any]] = {
            "memory.view": self._view, "memory.read": self._read, "memory.insert": self._insert,
            "memory.recall": self._recall, "memory.forget": self._forget,
            "memory.history": self._history, "memory.lineage": self._lineage,
            "memory.entities": self._entities,
        }

    def __repr__(self) -> str:
        return f"MemoryTools({self.notes.scope.key!r}, root={self.jail.root if self.jail else None!r})"

    # ------------------------------------------------------------ rendering
    def openai(self, *, strict: bool = False) -> list[dict[str, Any]]:
        """OpenAI function-calling tools: ``[{"type": "function", "function": {"name",
        "description", "parameters"}}]`` with provider-safe names. ``strict=True``:
        ``"strict": true`` and the parameters in strict mode's subset
        (:func:`strict_schema`: every property required, optional ones nullable, only
        the keywords strict mode supports); a ``null`` argument means absent."""
        out: list[dict[str, Any]] = []
        for d in self.definitions:
            fn: dict[str, Any] = {"name": d.provider_name, "description": d.description,
                                  "parameters": strict_schema(d.input_schema) if strict else _copy(d.input_schema)}
            if strict:
                fn["strict"] = True
            out.append({"type": "function", "function": fn})
        return out

    def anthropic(self) -> list[dict[str, Any]]:
        """Anthropic tool-use tools: ``[{"name", "description", "input_schema"}]`` with
        provider-safe names."""
        return [{"name": d.provider_name, "description": d.description,
                 "input_schema": _copy(d.input_schema)} for d in self.definitions]

    def definition(self, name: str) -> ToolDefinition:
        """The definition of ``name`` (dotted or provider-safe), else ``UnknownToolError``."""
        d = self._by_name.get(name) if isinstance(name, str) else None
        if d is None:
            raise UnknownToolError("name: no such memory tool")
        return d

    # -------------------------------------------------------------- calling
    def call(self, name: str, arguments: Mapping[str, Any] | None = None, *,
             session: object) -> dict[str, Any]:
        """Run tool ``name`` (``memory.view`` or ``memory_view`` ...) with ``arguments``
        for ``session`` and return a JSON-serialisable result.

        A ``null`` argument counts as absent (OpenAI strict mode sends every property).
        Order of checks, each writing nothing when it fails: the tool exists
        (``UnknownToolError``), the session is attached to this scope
        (``NotAttachedError``), the arguments validate (``ValidationError``), then the
        tool's own rules (``JailError``, ``FilePathError``, ``CapacityError``, ...)."""
        d = self.definition(name)
        self.require_attached(session)
        given = ({k: v for k, v in arguments.items() if v is not None} if isinstance(arguments, Mapping)
                 else ({} if arguments is None else arguments))
        args = d.args.model_validate(given)
        result: dict[str, Any] = self._handlers[d.name](args)
        return result

    def call_or_error(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                      session: object) -> tuple[dict[str, Any], bool]:
        """:meth:`call`, with a refused call turned into :func:`tool_error`'s result:
        returns ``(result, is_error)``. Other exceptions propagate."""
        try:
            return self.call(name, arguments, session=session), False
        except (FabricError, ValidationError) as exc:
            return tool_error(exc, arguments), True

    def require_attached(self, session: object) -> None:
        """``NotAttachedError`` unless ``session`` is attached to this scope."""
        self._gate.require(session, self.notes.scope.key)

    # ------------------------------------------------------------- handlers
    def _require_jail(self) -> FileJail:
        if self.jail is None:
            raise JailError("path: no memory root is configured; only block operations work")
        return self.jail

    @property
    def max_entry_text_chars(self) -> int:
        limits = getattr(self._service, "limits", None)
        value = getattr(limits, "max_entry_text_chars", DEFAULT_MAX_ENTRY_TEXT_CHARS)
        return int(value)

    def _view(self, args: ViewArgs) -> dict[str, Any]:
        jail = self._require_jail()
        listing = self.notes.read_outside("file", lambda: jail.listdir(args.path), "memory.view")
        return {"path": listing.path, "entries": [asdict(e) for e in listing.entries],
                "total": listing.total, "truncated": listing.truncated}

    def _read(self, args: ReadArgs) -> dict[str, Any]:
        jail = self._require_jail()
        res = self.notes.read_outside("file", lambda: jail.read(args.path), "memory.read")
        return {"path": res.path, "content": decode_text(res.data, final=not res.truncated),
                "size": res.size, "truncated": res.truncated}

    def _insert(self, args: InsertArgs) -> dict[str, Any]:
        if args.block is not None:
            return self._insert_block(args.block, args.text)
        assert args.path is not None
        return self.insert_file(args.path, args.text)

    def _insert_block(self, block: str, text: str) -> dict[str, Any]:
        blocks = self.notes.working_value().get("_fabric", {}).get("blocks", {})
        current = blocks.get(block)
        version = int(current["version"]) if current else 0
        content = str(current["content"]) if current else ""
        sep = 1 if content and not text.startswith("\n") else 0
        cap = self.max_entry_text_chars
        if len(content) + sep + len(text) > cap:
            raise CapacityError(
                f"text: block {block!r} would grow to {len(content) + sep + len(text)} "
                f"characters; limits.max_entry_text_chars is {cap}")
        note = self.notes.append_block(block, text, expected_version=version)
        return {"block": block, "id": note.id, "version": note.version,
                "chars": len(note.content or ""), "outcome": note.outcome}

    def insert_file(self, path: str, text: str) -> dict[str, Any]:
        """The path form of ``memory.insert`` (no gate check: callers check it)."""
        jail = self._require_jail()
        self.notes.check_write("file")  # a refused principal changes no file
        appended = jail.append(path, text)
        note = self.refresh_note(appended.path)
        return {"path": appended.path, "bytes_written": appended.written,
                "size": appended.size, "created": appended.created, **note}

    def refresh_note(self, rel: str) -> dict[str, Any]:
        """Re-index file ``rel`` (a checked relative path) as its ``file`` note: the
        file's text, cut at ``limits.max_entry_text_chars`` (``note_truncated``).
        A remember with the same path folds into the existing note."""
        jail = self._require_jail()
        res = jail.read(rel)
        text = decode_text(res.data, final=not res.truncated).replace("\x00", "\ufffd")
        cap = self.max_entry_text_chars
        indexed = text[:cap]
        truncated = len(text) > cap or res.truncated
        if not indexed.strip():
            return {"note_id": None, "note_outcome": None, "note_truncated": truncated}
        note = self.notes.remember(kind="file", path=rel, content=indexed)
        return {"note_id": note.id, "note_outcome": note.outcome, "note_truncated": truncated}

    def _recall(self, args: RecallToolArgs) -> dict[str, Any]:
        options: dict[str, Any] = {"as_of": args.as_of, "known_at": args.known_at}
        if args.kinds is not None:
            options["kinds"] = args.kinds
        if args.top_k is not None:
            options["top_k"] = args.top_k
        if args.budget is not None:
            options["budget"] = args.budget
        res = self.notes.recall(args.query, **options)
        return {"hits": [_note_json(h) for h in res.hits],
                "explain": [jsonable(e) for e in res.explain]}

    def _forget(self, args: ForgetToolArgs) -> dict[str, Any]:
        path = self._jailed_file(args.id) if args.id is not None else None
        if path is not None:
            return self.forget_file(path, args.id, hold=args.hold)
        res = self.notes.forget(id=args.id, block=args.block, hold=args.hold)
        return dict(jsonable(res))

    def _jailed_file(self, note_id: str) -> str | None:
        """The jail path of ``note_id`` when it is a live ``file`` note of this scope
        whose file is in the jail, else ``None``."""
        if self.jail is None:
            return None
        try:
            note = self.notes.get(note_id)
        except (NoteNotFoundError, NoteForgottenError):
            return None
        if (note.kind != "file" or not note.path or note.forgotten or note.held
                or note.scope != self.notes.scope):
            return None
        try:
            return note.path if self.jail.files_under(note.path) == [note.path] else None
        except FabricError:  # gone, or no longer a plain path inside the jail
            return None

    def forget_file(self, path: str, note_id: str | None, *, hold: bool) -> dict[str, Any]:
        """Issue 26: forgetting a file note removes its file from the jail, then
        tombstones (or holds) every ``file`` note of the path (``delete_path``), so no
        later read or insert brings the text back. ``{id, block, deleted, held, path,
        file_removed}``."""
        jail = self._require_jail()
        self.notes.check_write("file", "delete_path")
        jail.remove(path)
        res = self.notes.delete_path(path, hold=hold)
        return {"id": note_id, "block": None, "deleted": len(res.deleted), "held": bool(res.held),
                "path": path, "file_removed": True}

    def _history(self, args: NoteRefArgs) -> dict[str, Any]:
        return {"id": args.id, "events": jsonable(self.notes.history(args.id))}

    def _lineage(self, args: NoteRefArgs) -> dict[str, Any]:
        return dict(jsonable(self.notes.lineage(args.id)))

    def _entities(self, args: EntitiesArgs) -> dict[str, Any]:
        """``{"candidates": [{id, tier, score, type, display_name}]}`` for ``name``
        (``notes.entities.resolve``), ``{"entity": {...}}`` for ``id`` (``get``)."""
        if args.id is not None:
            e = self.notes.entities.get(args.id)
            return {"entity": {k: jsonable(getattr(e, k)) for k in e.__dataclass_fields__ if k != "scope"}
                    | {"scope": e.scope.key}}
        assert args.name is not None
        found = self.notes.entities.resolve(args.name, type=args.type, limit=args.limit)
        return {"candidates": [jsonable(c) for c in found]}


STRICT_KEYWORDS: dict[str, frozenset[str]] = {
    "string": frozenset({"type", "description", "enum", "const", "pattern", "format"}),
    "integer": frozenset({"type", "description", "enum", "const", "minimum", "maximum",
                          "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
    "number": frozenset({"type", "description", "enum", "const", "minimum", "maximum",
                         "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
    "boolean": frozenset({"type", "description", "const"}),
    "array": frozenset({"type", "description", "items", "minItems", "maxItems"}),
    "object": frozenset({"type", "description", "properties", "required", "additionalProperties"}),
}
"""Keywords OpenAI's strict mode (Structured Outputs) supports, by JSON type; others
(``minLength``, ``maxLength``, ``uniqueItems``) are dropped from a strict rendering and
still checked by the tool's pydantic model."""


def strict_schema(schema: dict[str, Any], *, nullable: bool = False) -> dict[str, Any]:
    """``schema`` (a plain, typed JSON Schema without combinators) in OpenAI strict
    mode's subset: every object lists all its properties in ``required`` and has
    ``additionalProperties: false``; a property that was optional gets the type
    ``[type, "null"]``; only :data:`STRICT_KEYWORDS` are kept. A new dict."""
    kind = schema["type"]
    out: dict[str, Any] = {k: jsonable(v) for k, v in schema.items() if k in STRICT_KEYWORDS[kind]}
    if kind == "object":
        props: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        out["properties"] = {name: strict_schema(sub, nullable=name not in required)
                             for name, sub in props.items()}
        out["required"] = list(props)
        out["additionalProperties"] = False
    elif kind == "array":
        out["items"] = strict_schema(schema["items"])
    if nullable:
        out["type"] = [kind, "null"]
    return out


def _copy(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = jsonable(schema)
    return out


def decode_text(data: bytes, *, final: bool) -> str:
    """UTF-8 text of ``data`` (invalid bytes replaced); when cut (``final=False``) an
    incomplete trailing character is dropped instead of replaced."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return str(decoder.decode(data, final=final))
