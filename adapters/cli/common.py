"""What the ``memfabric`` commands share (a leaf: it imports no command module).

The help style (:class:`HelpGroup`), the two consoles, the common options (``--dsn``,
``--data-dir``, ``--tenant`` ...), the errors a command reports in one line
(:data:`HANDLED`), opening a fabric from the options (:func:`open_for_command`), times
(:func:`parse_time`) and the one-line error output (:func:`error_lines`, :func:`fail`).

Errors print one line each, ``error: <field>: <message>``, on stderr; with ``--json``
an error is one JSON object on stderr, ``{"error": "<message>", "type": "<class>"}``.
Exit codes: 0 success; 1 a check failed; 2 bad input or another named error.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import psycopg
import typer
from eventsourcing import persistence as es_persistence
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - an older typer on click
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

from memfabric.adapters.bootstrap import Fabric, open_fabric
from memfabric.adapters.serialize import PATTERNS as PATTERNS, error_lines as error_lines, parse_time as parse_time
from memfabric.domain.errors import FabricError


def _plain_flags(params: Iterable[Any]) -> None:
    """Blank the ``<bool>`` type typer shows after every flag (``--json <bool>``)."""
    for param in params:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", "") is None:
            param.metavar = ""


class HelpGroup(TyperGroup):
    """A typer group whose help shows flags (``--json``, ``--help``) without a type."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        _plain_flags(params)
        return params

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            _plain_flags(cmd.get_params(ctx))
        return cmd

    def main(self, args: Sequence[str] | None = None, *pargs: Any, **kwargs: Any) -> Any:
        """Click's entry point. A usage error (a missing option, a bad value, an unknown
        command) is one line on stderr, exit code 2, like every other error:
        ``error: <message> (see 'memfabric <command> --help')``, or with ``--json``
        among the arguments one JSON object ``{"error": ..., "type": "UsageError"}``.
        No arguments at all still print the help."""
        if not kwargs.get("standalone_mode", True):
            return super().main(args, *pargs, **kwargs)
        argv = list(sys.argv[1:] if args is None else args)
        kwargs["standalone_mode"] = False
        try:
            code = super().main(argv, *pargs, **kwargs)
        except click_exceptions.ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: no arguments, the help
                exc.show()
            else:
                sys.stderr.write(_usage_line(exc, as_json="--json" in argv) + "\n")
            sys.exit(exc.exit_code)
        except typer.Abort:
            sys.stderr.write((json.dumps({"error": "aborted", "type": "Abort"}) if "--json" in argv
                              else "error: aborted") + "\n")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _usage_line(exc: Any, *, as_json: bool) -> str:
    """One line for click's usage error ``exc`` (JSON with ``as_json``)."""
    message = " ".join(exc.format_message().split())
    if as_json:
        return json.dumps({"error": message, "type": type(exc).__name__})
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"error: {message}{hint}"


console = Console()
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

DsnOpt = Annotated[str | None, typer.Option(
    "--dsn", metavar="URL", help="PostgreSQL URL (default $MEMFABRIC_DSN, else the embedded server).")]
DataDirOpt = Annotated[str | None, typer.Option(
    "--data-dir", metavar="DIR", help="Data directory of the embedded server (default $MEMFABRIC_HOME/pg).")]
TenantOpt = Annotated[str, typer.Option("--tenant", "-t", metavar="ID", help="Tenant id.")]
ResourceOpt = Annotated[str | None, typer.Option(
    "--resource", "-r", metavar="ID", help="Resource id (e.g. a user).")]
ThreadOpt = Annotated[str | None, typer.Option("--thread", metavar="ID", help="Thread id (e.g. a conversation).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
EmbedderOpt = Annotated[str | None, typer.Option(
    "--embedder", metavar="NAME",
    help="hash, hash:<dim>, wordllama or minilm (default: the one the database records).")]

HANDLED = (ValidationError, FabricError, psycopg.Error, es_persistence.PersistenceError)
"""Errors a command reports in one line each (exit 2) instead of a traceback (eventsourcing
re-raises psycopg's ``DataError``, ``OperationalError`` ... as its own ``PersistenceError``s)."""


def make_embedder(name: str | None) -> Any:
    """The embedder ``--embedder NAME`` names (``None``: the database's recorded one);
    ``FabricError`` for an unknown name or a missing extra."""
    if name is None:
        return None
    from memfabric.adapters.embedders import embedder_from_name

    try:
        return embedder_from_name(name)
    except (ValueError, ImportError) as exc:
        detail = " ".join(str(exc).split())
        raise FabricError(detail if detail.startswith("embedder:") else f"embedder: {detail}") from None


def env_read_only() -> bool:
    """``$MEMFABRIC_READ_ONLY`` is 1, yes or true: every command opens read-only."""
    return os.environ.get("MEMFABRIC_READ_ONLY", "").lower() in ("1", "yes", "true")


@contextmanager
def quiet_fallback() -> Iterator[None]:
    """Silence ``open_fabric``'s read-only fallback warning: a command reports a role
    that may only read itself (a write is one ``error:`` line naming the privilege)."""
    logger = logging.getLogger("memfabric.adapters.bootstrap")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def open_for_command(dsn: str | None, data_dir: str | None, embedder: str | None = None, **kwargs: Any) -> Fabric:
    """``open_fabric`` for a command: read-only under ``$MEMFABRIC_READ_ONLY`` or for a
    role that may not write the log (issue 27: an auditor's ``recall`` works)."""
    if env_read_only():
        kwargs["read_only"] = True
    with quiet_fallback():
        return open_fabric(dsn, data_dir=data_dir, embedder=make_embedder(embedder), **kwargs)


def fail(exc: BaseException | str, code: int = 2, *, as_json: bool = False) -> NoReturn:
    """Print ``error: ...`` lines on stderr (with ``as_json`` one JSON object
    ``{"error": ..., "type": ...}``) and exit with ``code``."""
    lines = error_lines(exc)
    if as_json:
        kind = "Error" if isinstance(exc, str) else type(exc).__name__
        sys.stderr.write(json.dumps({"error": "; ".join(lines), "type": kind}) + "\n")
        sys.stderr.flush()
        raise typer.Exit(code=code)
    for line in lines:
        err_console.print(Text(f"error: {line}", style="red"))
    raise typer.Exit(code=code)
