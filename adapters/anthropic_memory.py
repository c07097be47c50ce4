"""Anthropic's client-side memory tool (``memory_20250818``) backed by memfabric.

:class:`FabricMemoryTool` subclasses the SDK's ``BetaAbstractMemoryTool`` (optional
extra ``memfabric[anthropic]``). The model's ``/memories/...`` files live in a
:class:`~memfabric.adapters.jail.FileJail` (no ``..``, no absolute escape, no
symlinks, files capped at ``max_file_bytes``) and every change is a memfabric event
on the file's ``file`` note (path = the file's path below ``/memories``):

==============  ==============================================================
command         events
==============  ==============================================================
``view``        none (a directory listing or the file with line numbers)
``create``      a new file (refused when it exists); ``remember(kind="file")``
``str_replace`` the file rewritten atomically; the note refreshed (a remember
                with the same path supersedes or folds into it)
``insert``      the same, with the text inserted at ``insert_line``
``delete``      the file (or the directory with its files) removed;
                ``delete_path`` tombstones each note (crypto-shredded)
``rename``      the file or directory moved; ``repoint`` moves each note to
                its new path (same id, nothing re-embedded)
==============  ==============================================================

The indexed text is the file's text cut at ``limits.max_entry_text_chars``. Every
command first checks that ``session`` is attached to the scope (``notes.attach``);
refusals come back to the model as the SDK's ``ToolError`` (``is_error``).

Over a principal's handle (``notes.as_principal(agent)``, issue 33) the files are that
principal's ``file`` memory: every read of them (``view``, and the reads
``str_replace`` and ``insert`` make first) goes through ``notes.read_outside`` (the
scope within ``recall_scope``, ``file`` in ``read_kinds``; recorded as
``memory.view``, ``memory.str_replace``, ``memory.insert``), every change through
``notes.check_write`` before the jail is touched; a refusal is ``AccessDenied`` naming
the rule, nothing read or changed.

Usage::

    with notes.attach(session):
        tool = FabricMemoryTool(notes, "/srv/memory/acme", session=session)
        client.beta.messages.tool_runner(..., tools=[tool])
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from anthropic.lib.tools import BetaAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)
from memfabric.adapters.tools import MemoryTools, decode_text, tool_error
from memfabric.domain.errors import CapacityError, FabricError
from memfabric.domain.notes import Notes
from pydantic import ValidationError

__all__ = ["MEMORY_PREFIX", "FabricMemoryTool"]

MEMORY_PREFIX = "/memories"
_WIDTH = 6


def _size(n: int) -> str:
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f}K"
    return f"{n / (1024 * 1024):.1f}M"


_Command = TypeVar("_Command")


def _guarded(method: Callable[[FabricMemoryTool, _Command], str]) -> Callable[[FabricMemoryTool, _Command], str]:
    """Issue 26: a command checks that the session is attached before anything else,
    whether the SDK's runner calls it through ``execute`` or a host calls it directly;
    a refusal or a memfabric error becomes the SDK's ``ToolError`` (``is_error``)."""
    @functools.wraps(method)
    def run(self: FabricMemoryTool, command: _Command) -> str:
        try:
            self.tools.require_attached(self.session)
            return method(self, command)
        except (FabricError, ValidationError) as exc:
            err = tool_error(exc)["error"]
            raise ToolError(f"Error: {err['message']} ({err['type']})") from exc
    return run


class FabricMemoryTool(BetaAbstractMemoryTool):
    """The memory tool for one scope: ``notes`` (its handle), ``root`` (the directory
    that plays ``/memories``), ``session`` (must be attached to the scope)."""

    def __init__(self, notes: Notes, root: str | os.PathLike[str], *, session: object,
                 max_file_bytes: int = 50 * 1024,
                 cache_control: BetaCacheControlEphemeralParam | None = None) -> None:
        super().__init__(cache_control=cache_control)
        self.notes = notes
        self.session = session
        self.tools: MemoryTools = notes.tools(root, max_file_bytes=max_file_bytes)
        assert self.tools.jail is not None
        self.jail = self.tools.jail

    # ------------------------------------------------------------- helpers
    def _rel(self, path: str) -> str:
        if not isinstance(path, str) or not (
            path == MEMORY_PREFIX or path.startswith(MEMORY_PREFIX + "/")
        ):
            raise ToolError(f"Error: paths must start with {MEMORY_PREFIX}")
        return path[len(MEMORY_PREFIX):].lstrip("/")

    def execute(self, command: Any) -> Any:
        """Run the command (each command method checks the gate itself)."""
        return super().execute(command)

    def _read(self, rel: str) -> str:
        res = self.jail.read(rel)
        if res.truncated:
            raise CapacityError(f"path: the file is larger than {self.jail.max_file_bytes} bytes")
        return decode_text(res.data, final=True)

    def _text(self, rel: str, operation: str) -> str:
        """The text of file ``rel``, read through the handle's profile as ``operation``."""
        return self.notes.read_outside("file", lambda: self._read(rel), operation)

    def _put(self, rel: str, text: str, *, exclusive: bool = False) -> None:
        self.notes.check_write("file")  # a refused principal changes no file
        self.jail.write(rel, text.encode("utf-8"), exclusive=exclusive)
        self.tools.refresh_note(self.jail.relpath(self.jail.parts(rel)))

    # ------------------------------------------------------------ commands
    @_guarded
    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        rel = self._rel(command.path)
        return self.notes.read_outside("file", lambda: self._view(rel, command), "memory.view")

    def _view(self, rel: str, command: BetaMemoryTool20250818ViewCommand) -> str:
        if self.jail.is_dir(rel):
            listing = self.jail.listdir(rel)
            base = command.path.rstrip("/")
            lines = [f"{_size(e.size or 0)}\t{base}/{e.name}{'/' if e.type == 'dir' else ''}"
                     for e in listing.entries if not e.name.startswith(".")
                     and e.type in ("file", "dir")]
            more = f"\n({listing.total - len(listing.entries)} more not shown)" if listing.truncated else ""
            return (f"Here're the files and directories in {command.path}, excluding hidden "
                    "items:\n" + "\n".join(lines) + more)
        lines = self._read(rel).split("\n")
        start = 1
        if command.view_range and len(command.view_range) == 2:
            lo, hi = command.view_range
            start = max(1, lo)
            lines = lines[start - 1: len(lines) if hi == -1 else hi]
        numbered = [f"{str(i + start).rjust(_WIDTH)}\t{line}" for i, line in enumerate(lines)]
        return f"Here's the content of {command.path} with line numbers:\n" + "\n".join(numbered)

    @_guarded
    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        rel = self._rel(command.path)
        self._put(rel, command.file_text, exclusive=True)
        return f"File created successfully at: {command.path}"

    @_guarded
    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        rel = self._rel(command.path)
        content = self._text(rel, "memory.str_replace")
        count = content.count(command.old_str) if command.old_str else 0
        if count == 0:
            raise ToolError(f"No replacement was performed, old_str did not appear verbatim "
                            f"in {command.path}.")
        if count > 1:
            raise ToolError(f"No replacement was performed. Multiple occurrences of old_str "
                            f"in {command.path}. Please ensure it is unique")
        self._put(rel, content.replace(command.old_str, command.new_str, 1))
        return "The memory file has been edited."

    @_guarded
    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        rel = self._rel(command.path)
        lines = self._text(rel, "memory.insert").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if command.insert_line < 0 or command.insert_line > len(lines):
            raise ToolError(f"Invalid `insert_line` parameter: {command.insert_line}. "
                            f"It should be within the range [0, {len(lines)}].")
        lines.insert(command.insert_line, command.insert_text.rstrip("\n"))
        self._put(rel, "\n".join(lines) + "\n")
        return f"The file {command.path} has been edited."

    @_guarded
    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        rel = self._rel(command.path)
        if not self.jail.parts(rel, allow_root=True):
            raise ToolError(f"Error: cannot delete the {MEMORY_PREFIX} directory itself")
        files = self.jail.files_under(rel)
        self.notes.check_write("file", "delete_path")
        self.jail.remove(rel)
        for path in files:
            self.notes.delete_path(path)
        return f"Successfully deleted {command.path}"

    @_guarded
    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        old, new = self._rel(command.old_path), self._rel(command.new_path)
        if not self.jail.parts(old, allow_root=True):
            raise ToolError(f"Error: cannot rename the {MEMORY_PREFIX} directory itself")
        src = self.jail.relpath(self.jail.parts(old))
        dst = self.jail.relpath(self.jail.parts(new))
        files = self.jail.files_under(src)
        self.notes.check_write("file", "repoint")
        self.jail.rename(src, dst)
        for path in files:
            self.notes.repoint(path, dst + path[len(src):])
        return f"Successfully renamed {command.old_path} to {command.new_path}"
