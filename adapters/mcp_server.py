"""An MCP server for one memfabric scope (``memfabric mcp``), on the official ``mcp`` SDK.

It serves the five memory tools of :mod:`memfabric.adapters.tools` and three read-only
tools, ``memory_history`` and ``memory_lineage`` of a note and ``memory_entities``
(resolve a name or identifier to the scope's entities, or read one; issue 32), over
stdio (default) or Streamable HTTP. Tools are listed under their provider-safe names (``memory_view``,
``memory_read``, ``memory_insert``, ``memory_recall``, ``memory_forget``; MCP hosts
hand tool names on to model APIs that refuse dots); a call may use either form
(``memory.insert`` works too).

The server has its own session, attached to its one scope for its lifetime and
detached when it stops; it never serves another scope. Over HTTP it listens on
``127.0.0.1`` by default, with DNS-rebinding protection; bound to any other address it
refuses to start without a bearer token (``$MEMFABRIC_MCP_TOKEN``, ``--token-file`` or
``--token``), and when a token is set every request must carry ``Authorization: Bearer
<token>`` (the scheme in any case, RFC 9110). A ``--token`` on the command line is
readable by every local user (``/proc/PID/cmdline``, ``ps``): prefer the environment
variable or a file only its owner reads.

Requires the optional extra: ``pip install 'memfabric[mcp]'``.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.server.lowlevel import Server
from memfabric.adapters.tools import MemoryTools, ToolDefinition, tool_error
from memfabric.domain.attach import Attachment
from memfabric.domain.errors import FabricError, SettingsError
from memfabric.domain.notes import Notes
from pydantic import ValidationError

__all__ = ["McpSession", "build_server", "is_loopback", "serve"]

log = logging.getLogger("memfabric.mcp")

TOKEN_ENV = "MEMFABRIC_MCP_TOKEN"
ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class McpSession:
    """The MCP server's own session (``id`` is ``mcp-<random hex>``)."""

    id: str


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _annotations(d: ToolDefinition) -> types.ToolAnnotations:
    return types.ToolAnnotations(
        title=d.name, readOnlyHint=d.read_only,
        destructiveHint=(d.name == "memory.forget") if not d.read_only else None,
        idempotentHint=True if d.read_only else None, openWorldHint=False,
    )


def build_server(notes: Notes, tools: MemoryTools, session: object) -> Server[Any, Any]:
    """The low-level MCP server: ``tools/list`` and ``tools/call`` over ``tools``,
    every call made as ``session``. A refused call comes back as a tool result with
    ``isError`` and :func:`~memfabric.adapters.tools.tool_error`'s JSON."""
    server: Server[Any, Any] = Server(
        "memfabric",
        instructions=(
            f"Memory of scope {notes.scope.key}. memory_recall searches it; memory_insert "
            "appends to a working block or a memory file; memory_view and memory_read "
            "browse the memory files; memory_forget erases a note or block; memory_entities "
            "resolves a name, alias or identifier to the people and things memory knows."
        ),
    )
    listed = [*tools.definitions, *tools.read_only_definitions]

    @server.list_tools()  # type: ignore[untyped-decorator,no-untyped-call]
    async def list_tools() -> list[types.Tool]:
        return [types.Tool(name=d.provider_name, description=d.description,
                           inputSchema=d.input_schema, annotations=_annotations(d))
                for d in listed]

    # Arguments are validated by the tools' pydantic models (whose errors never echo
    # the input), not by the SDK's jsonschema pass (whose messages would).
    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            result = await anyio.to_thread.run_sync(
                lambda: tools.call(name, arguments, session=session))
        except (FabricError, ValidationError) as exc:
            err = tool_error(exc, arguments)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=json.dumps(err))],
                structuredContent=err, isError=True)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result))],
            structuredContent=result, isError=False)

    return server


@contextlib.contextmanager
def _attached(notes: Notes) -> Any:
    session = McpSession(id=f"mcp-{uuid.uuid4().hex[:16]}")
    att: Attachment = notes.attach(session)
    try:
        yield session
    finally:
        att.detach()


def serve(
    fabric: Any, tenant: str, resource: str | None = None, thread: str | None = None, *,
    root: str | None = None, transport: str = "stdio", host: str = "127.0.0.1",
    port: int = 8765, token: str | None = None, max_file_bytes: int = 50 * 1024,
    principal: str | None = None,
) -> None:
    """Serve one scope of an open ``fabric`` until the client disconnects (stdio) or the
    process is stopped (HTTP). ``SettingsError`` (a ``ValueError``) for a bad transport, or for HTTP on a
    non-loopback ``host`` without a token. ``principal`` (issue 33): every tool call goes
    through ``notes.as_principal(principal)`` (checked, recorded in the access log)."""
    if transport not in ("stdio", "http"):
        raise SettingsError("transport: must be stdio or http")
    token = token or os.environ.get(TOKEN_ENV) or None
    if transport == "http" and not is_loopback(host) and not token:
        raise SettingsError(f"token: listening on {host} needs ${TOKEN_ENV}, --token-file or --token")
    notes: Notes = fabric.scope(tenant, resource, thread)
    if principal is not None:
        notes = notes.as_principal(principal)
    tools = notes.tools(root, max_file_bytes=max_file_bytes)
    with _attached(notes) as session:
        server = build_server(notes, tools, session)
        if transport == "stdio":
            anyio.run(_run_stdio, server)
        else:
            _run_http(server, host, port, token)


async def _run_stdio(server: Server[Any, Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The bearer token stored in the file ``path`` (``--token-file``): its content
    with surrounding whitespace (a final newline) stripped. ``SettingsError`` when the
    file cannot be read, is empty, or the token holds whitespace or control characters."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read(4097).strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"token-file: cannot read {os.fspath(path)!r}: {exc}") from None
    if not token or len(token) > 4096 or any(c.isspace() or not c.isprintable() for c in token):
        raise SettingsError(f"token-file: {os.fspath(path)!r} must hold one token (1-4096 printable "
                            "characters, no spaces)")
    return token


def bearer_credentials(header: bytes) -> bytes | None:
    """The credentials of an ``Authorization`` header of the ``Bearer`` scheme, else
    ``None``. RFC 9110 section 11.1: the scheme name is case-insensitive (``bearer``,
    ``BEARER``) and one or more spaces separate it from the token."""
    scheme, sep, rest = header.partition(b" ")
    if not sep or scheme.lower() != b"bearer":
        return None
    return rest.lstrip(b" ")


def bearer_guard(app: ASGIApp, token: str | None) -> ASGIApp:
    """ASGI middleware: with a ``token``, answer 401 unless the request carries
    ``Authorization: Bearer <token>`` (scheme in any case, constant-time compare of the
    token)."""
    expected = token.encode() if token else None

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if expected is not None and scope.get("type") == "http":
            got = bearer_credentials(dict(scope.get("headers") or []).get(b"authorization", b""))
            if got is None or not hmac.compare_digest(got, expected):
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="memfabric"')]})
                await send({"type": "http.response.body",
                            "body": b'{"error": "missing or wrong bearer token"}'})
                return
        await app(scope, receive, send)

    return guarded


def http_app(server: Server[Any, Any], host: str, port: int, token: str | None) -> Any:
    """The Starlette app serving Streamable HTTP on ``/mcp``."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    security = (TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"],
        allowed_origins=[f"http://127.0.0.1:{port}", f"http://localhost:{port}",
                         f"http://[::1]:{port}"],
    ) if is_loopback(host) else TransportSecuritySettings(enable_dns_rebinding_protection=False))
    manager = StreamableHTTPSessionManager(app=server, security_settings=security)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=_Asgi(bearer_guard(manager.handle_request, token)))],
                     lifespan=lifespan)


class _Asgi:
    """A raw ASGI endpoint for a starlette ``Route`` (a class instance, not a function,
    so starlette passes ``scope, receive, send`` through)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def _run_http(server: Server[Any, Any], host: str, port: int, token: str | None) -> None:
    import uvicorn

    uvicorn.run(http_app(server, host, port, token), host=host, port=port, log_level="warning")
