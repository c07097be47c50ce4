"""The ``memfabric console`` command: a local web console for admins and auditors.

Registered by :mod:`memfabric.adapters.cli.app`; Starlette, Jinja2 and uvicorn (optional
extra ``memfabric[console]``) are imported only when the command runs.
"""

# No ``from __future__ import annotations``: typer evaluates the option annotations.
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Optional

import typer


def register(app: typer.Typer) -> None:
    """Add the ``console`` command to ``app``."""
    from memfabric.adapters.cli.common import HANDLED, DataDirOpt, DsnOpt, fail

    @app.command("console")
    def console_command(
        host: Annotated[str, typer.Option(metavar="HOST", help="Address to listen on (default loopback).")] = "127.0.0.1",
        port: Annotated[int, typer.Option(metavar="N", help="Port.")] = 8765,
        read_only: Annotated[bool, typer.Option(
            "--read-only/--actions", help="Read-only (the default): open the database read-only and offer no "
            "action. --actions: offer rebuild and verify on the projections page when the role may write.")] = True,
        token: Annotated[Optional[str], typer.Option(  # noqa: UP045 - typer needs Optional
            metavar="TOKEN", help="Access token (default $MEMFABRIC_CONSOLE_TOKEN); required off loopback.")] = None,
        dsn: DsnOpt = None,
        data_dir: DataDirOpt = None,
    ) -> None:
        """Serve a web console: scopes and their notes, a note's lineage, the log with its integrity, projections.

        Open http://127.0.0.1:8765/ in a browser. Read-only by default (it never writes a note); with \
--actions (and a role that may write the log) the projections page offers rebuild and verify."""
        try:
            from memfabric.adapters.console import ConsoleSettings, check_settings, serve
        except ImportError:
            fail("console: its packages are not installed; pip install 'memfabric[console]'")
        try:
            settings = check_settings(ConsoleSettings(host=host, port=port, token=token, read_only=read_only))
            with console_fabric(dsn, data_dir, read_only=read_only) as fabric:
                typer.echo(f"memfabric console on http://{host}:{port}/"
                           + (" (read-only)" if read_only or fabric.read_only else ""), err=True)
                serve(fabric, settings)
        except (*HANDLED, ValueError) as exc:
            fail(exc)


@contextmanager
def console_fabric(dsn: Optional[str], data_dir: Optional[str], *, read_only: bool) -> Iterator[Any]:  # noqa: UP045
    """The console's open fabric: its recorded embedder (search embeds the query), no
    catch-up on open (a stopped projection can still be inspected), read-only when asked
    or when the role cannot write the log (``open_fabric(read_only=True)``)."""
    from memfabric.adapters.bootstrap import open_fabric
    from memfabric.adapters.cli.fabric import can_write
    from memfabric.adapters.postgres.embedded import resolve_dsn

    url, embedded = resolve_dsn(dsn, data_dir, read=True)
    try:
        with open_fabric(url, catch_up=False, read_only=read_only or not can_write(url)) as fabric:
            yield fabric
    finally:
        if embedded is not None:
            embedded.close()
