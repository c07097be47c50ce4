"""HTTP transport guards of the MCP server (pure: no database, no socket)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from memfabric.adapters.mcp_server import bearer_guard, is_loopback, serve


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        assert is_loopback(host)
    for host in ("0.0.0.0", "192.168.1.4", "example.com", "::"):
        assert not is_loopback(host)


def test_non_loopback_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMFABRIC_MCP_TOKEN", raising=False)
    with pytest.raises(ValueError, match="token"):
        serve(object(), "acme", transport="http", host="0.0.0.0")
    with pytest.raises(ValueError, match="transport"):
        serve(object(), "acme", transport="carrier-pigeon")


async def _request(app: Any, headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": "/mcp", "headers": headers}, receive, send)
    return sent


def test_bearer_guard() -> None:
    reached: list[bool] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        reached.append(True)
        await send({"type": "http.response.start", "status": 200, "headers": []})

    guarded = bearer_guard(inner, "s3cret")
    for headers in ([], [(b"authorization", b"Bearer wrong")], [(b"authorization", b"s3cret")]):
        sent = anyio.run(_request, guarded, headers)
        assert sent[0]["status"] == 401 and not reached
    sent = anyio.run(_request, guarded, [(b"authorization", b"Bearer s3cret")])
    assert sent[0]["status"] == 200 and reached == [True]
    open_app = bearer_guard(inner, None)
    assert anyio.run(_request, open_app, [])[0]["status"] == 200


def test_http_app_requires_the_token() -> None:
    from mcp.server.lowlevel import Server
    from memfabric.adapters.mcp_server import http_app
    from starlette.testclient import TestClient

    app = http_app(Server("memfabric"), "127.0.0.1", 8799, "tok")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    hdrs = {"accept": "application/json, text/event-stream", "host": "127.0.0.1:8799"}
    with TestClient(app, base_url="http://127.0.0.1:8799") as client:
        assert client.post("/mcp", json=init, headers=hdrs).status_code == 401
        ok = client.post("/mcp", json=init, headers={**hdrs, "authorization": "Bearer tok"})
        assert ok.status_code == 200, ok.text
        evil = client.post("/mcp", json=init, headers={
            **hdrs, "authorization": "Bearer tok", "host": "evil.example:8799"})
        assert evil.status_code in (403, 421)  # DNS-rebinding protection on loopback
