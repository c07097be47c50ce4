"""The ``memfabric mcp`` command: serve one scope's memory tools over MCP.

Registered by :mod:`memfabric.adapters.cli.app`; the ``mcp`` SDK (optional extra
``memfabric[mcp]``) is imported only when the command runs, so the core never
depends on it.
"""

# No ``from __future__ import annotations``: typer evaluates the option annotations,
# which name types imported inside ``register``.
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    """Add the ``mcp`` command to ``app``."""
    from memfabric.adapters.cli.common import (
        HANDLED,
        DataDirOpt,
        DsnOpt,
        ResourceOpt,
        TenantOpt,
        ThreadOpt,
        fail,
    )
    from memfabric.adapters.cli.common import open_for_command as _open

    @app.command("mcp")
    def mcp_command(
        tenant: TenantOpt,
        resource: ResourceOpt = None,
        thread: ThreadOpt = None,
        root: Annotated[Optional[str], typer.Option(  # noqa: UP045 - typer needs Optional
            metavar="DIR", help="Directory of the memory files (without it only blocks work).")] = None,
        transport: Annotated[str, typer.Option(metavar="KIND", help="stdio or http.")] = "stdio",
        host: Annotated[str, typer.Option(metavar="HOST", help="HTTP address (default loopback).")] = "127.0.0.1",
        port: Annotated[int, typer.Option(metavar="N", help="HTTP port.")] = 8765,
        token: Annotated[Optional[str], typer.Option(  # noqa: UP045
            metavar="TOKEN", help="Bearer token for HTTP (default $MEMFABRIC_MCP_TOKEN); required off loopback. "
            "Visible to every local user in the process list: prefer $MEMFABRIC_MCP_TOKEN or --token-file.")] = None,
        token_file: Annotated[Optional[str], typer.Option(  # noqa: UP045
            "--token-file", metavar="FILE", help="Read the bearer token from FILE (one line).")] = None,
        max_file_bytes: Annotated[int, typer.Option(
            "--max-file-bytes", metavar="N", help="Largest memory file in bytes (at most 1 MiB).")] = 50 * 1024,
        principal: Annotated[Optional[str], typer.Option(  # noqa: UP045
            "--principal", metavar="ID", help="Serve as this principal: every call checked against its "
            "memory profile and recorded in the access log (issue 33).")] = None,
        dsn: DsnOpt = None,
        data_dir: DataDirOpt = None,
        as_json: Annotated[bool, typer.Option(
            "--json", help="Errors as one JSON object on stderr (the protocol is JSON-RPC anyway).")] = False,
    ) -> None:
        """Serve the memory tools of one scope over MCP (stdio or Streamable HTTP).

        Give the HTTP bearer token as $MEMFABRIC_MCP_TOKEN or in a file (--token-file): a --token \
on the command line is readable by every local user."""
        try:
            from memfabric.adapters.mcp_server import read_token_file, serve
        except ImportError:
            fail("mcp: the MCP SDK is not installed; pip install 'memfabric[mcp]'", as_json=as_json)
        if token is not None and token_file is not None:
            fail("token: give --token or --token-file, not both")
        if token is not None:
            typer.echo("warning: --token is readable by every local user (/proc/PID/cmdline); "
                       "use $MEMFABRIC_MCP_TOKEN or --token-file", err=True)
        try:
            token = read_token_file(token_file) if token_file is not None else token
            with _open(dsn, data_dir) as fabric:
                serve(fabric, tenant, resource, thread, root=root, transport=transport,
                      host=host, port=port, token=token, max_file_bytes=max_file_bytes,
                      principal=principal)
        except (*HANDLED, ValueError) as exc:
            fail(exc, as_json=as_json)
