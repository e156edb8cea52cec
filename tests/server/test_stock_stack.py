"""The server is a plain Starlette app on stock uvicorn: routes, middleware and HTTP parsing
are the framework's, and the engine stays pure."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from server_helpers import Server, pod, review
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.testclient import TestClient

from webhook.server.app import Guard, Settings, build_app

PACKAGE = Path(__file__).resolve().parents[2] / "webhook"


def test_a_middleware_sees_every_route(certs_dir: Path) -> None:
    guard = Guard(Settings(cert=str(certs_dir / "tls.crt"), key=str(certs_dir / "tls.key"),
                           policies=None, config=None))
    app = build_app(guard)
    seen: list[str] = []

    async def record(request, call_next):  # type: ignore[no-untyped-def]
        seen.append(request.url.path)
        return await call_next(request)

    app.add_middleware(BaseHTTPMiddleware, dispatch=record)
    with TestClient(app) as client:
        assert client.post("/validate", json=review(pod())).status_code == 200
        assert client.post("/mutate", json=review(pod())).status_code == 200
        assert client.get("/healthz").status_code == 200
    assert seen == ["/validate", "/mutate", "/healthz"]


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    """A health check and a review sent in one write, as a pipelining client would."""
    body = json.dumps(review(pod())).encode()
    requests = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    with server.tls(timeout=10) as sock:
        sock.sendall(requests)
        data = b""
        while data.count(b"HTTP/1.1 200") < 2 or not data.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    first, second = data.split(b"HTTP/1.1 200")[1:3]
    assert first.rstrip().endswith(b"ok")
    assert b'"allowed":true' in second


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_module_reaches_into_server_library_internals() -> None:
    for path in PACKAGE.rglob("*.py"):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] in ("uvicorn", "h11", "httptools"):
                assert "protocols" not in parts, (path, name)
                assert not any(part.startswith("_") for part in parts), (path, name)


def test_the_engine_imports_nothing_from_the_server_or_the_cli() -> None:
    for path in (PACKAGE / "engine").rglob("*.py"):
        for name in _imports(path):
            assert not name.startswith(("webhook.server", "webhook.cli", "webhook.testing",
                                        "uvicorn", "starlette")), (path, name)
